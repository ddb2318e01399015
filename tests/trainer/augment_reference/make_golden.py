"""Writes golden.npz: tensorflow/models' augment ops on a 20x20 crop of a sample photo.

tests/trainer/test_augment_golden.py holds trainer/data/augment_ops.py to these pixels. The
reference is official/vision/ops/augment.py of the tf-models-official 2.15.0 wheel, which
imports only tensorflow and numpy, so it runs in .venv without the wheel's other dependencies
(its package __init__ files import gin and more, so the script loads that one file by path):

    .venv/bin/python -m pip download tf-models-official==2.15.0 --no-deps -d /tmp/tfm
    unzip -q /tmp/tfm/tf_models_official-2.15.0-py2.py3-none-any.whl \
        official/vision/ops/augment.py -d /tmp/tfm
    .venv/bin/python tests/trainer/augment_reference/make_golden.py \
        /tmp/tfm/official/vision/ops/augment.py

The fixture keeps the input image too, so the test needs neither the wheel nor a JPEG decoder.
Geometric ops are stored twice: as the reference runs them (its transform reflects the image
at the border) and with that transform's fill_mode set to "constant", the convention this
project follows (the pixels moved in from outside become the replace value, 128).
"""
import importlib.util
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_sample_image


def load_reference(path):
    """The module at path (the wheel's augment.py), without importing its package."""
    spec = importlib.util.spec_from_file_location("reference_augment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = load_reference(sys.argv[1]) if __name__ == "__main__" else None
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.npz")
REPLACE = [128] * 3
# (op name, arguments): each the reference's function of the same name.
ARGUMENTS = {
    "invert": [()], "autocontrast": [()], "equalize": [()],
    "posterize": [(1,), (2,), (4,)], "solarize": [(26,), (128,), (230,)],
    "solarize_add": [(22,), (66,), (110,)],
    "color": [(0.1,), (0.82,), (1.9,)], "contrast": [(0.1,), (0.82,), (1.9,)],
    "brightness": [(0.1,), (0.82,), (1.9,)], "sharpness": [(0.1,), (0.82,), (1.9,)],
    "rotate": [(12.0,), (-27.0,), (90.0,)], "shear_x": [(0.09,), (-0.3,)],
    "shear_y": [(0.21,), (-0.12,)], "translate_x": [(5.4,), (-10.8,), (-2.5,)],
    "translate_y": [(3.0,), (-6.48,), (2.5,)],
}
GEOMETRIC = {"rotate": "wrapped_rotate", "shear_x": "shear_x", "shear_y": "shear_y",
             "translate_x": "translate_x", "translate_y": "translate_y"}
# cutout: (pad_size, center_y, center_x); the reference draws the centre, its _fill_rectangle
# fills around a given one.
CUTOUTS = [(4, 10, 6), (7, 0, 19), (2, 19, 12)]
LEVELS = [0.0, 1.0, 3.0, 5.0, 7.0, 10.0]
LEVEL_OPS = ["Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color", "Contrast", "Brightness",
             "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout"]


def photo():
    """uint8 [20, 20, 3]: a crop of scikit-learn's china.jpg (roof, sky and leaves)."""
    return load_sample_image("china.jpg")[100:120, 300:320].copy()


def reference_op(name, image, args):
    if name in GEOMETRIC:
        return getattr(ref, GEOMETRIC[name])(image, *args, REPLACE)
    return getattr(ref, name)(image, *args)


def constant_fill(name, image, args):
    """The reference's geometric op with its transform filling with zeros, so unwrap puts the
    replace value where the image moved in from outside (every transform of the module goes
    through _apply_transform_to_images; its callers pass fill_mode="reflect" explicitly)."""
    original = ref._apply_transform_to_images
    ref._apply_transform_to_images = (
        lambda *args, **kwargs: original(*args, **{**kwargs, "fill_mode": "constant"}))
    try:
        return reference_op(name, image, args)
    finally:
        ref._apply_transform_to_images = original


def level_arguments():
    """[op, level]: the magnitude of the reference's level_to_arg (the sign it draws dropped)
    with RandAugment's constants, cutout 40 and translate 100 pixels of a 224-pixel image."""
    table = ref.level_to_arg(cutout_const=40.0, translate_const=100.0)
    return np.array([[abs(float(table[name](level)[0])) for level in LEVELS]
                     for name in LEVEL_OPS], np.float64)


def main():
    image = tf.constant(photo())
    golden = {"image": image.numpy()}
    for name, calls in ARGUMENTS.items():
        for index, args in enumerate(calls):
            golden[f"{name}/{index}"] = reference_op(name, image, args).numpy()
            if name in GEOMETRIC:
                golden[f"{name}/{index}/constant"] = constant_fill(name, image, args).numpy()
    for index, (pad, cy, cx) in enumerate(CUTOUTS):
        golden[f"cutout/{index}"] = ref._fill_rectangle(image, cx, cy, pad, pad, REPLACE).numpy()
    golden["level_to_arg"] = level_arguments()
    golden["levels"] = np.array(LEVELS)
    golden["level_ops"] = np.array(LEVEL_OPS)
    golden["randaugment_ops"] = np.array(ref.RandAugment().available_ops)
    policy = ref.AutoAugment.policy_v0()
    golden["policy_v0_ops"] = np.array([[op for op, _, _ in sub] for sub in policy])
    golden["policy_v0_numbers"] = np.array([[(p, m) for _, p, m in sub] for sub in policy])
    np.savez_compressed(OUT, **golden)
    print(f"{OUT}: {len(golden)} arrays, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
