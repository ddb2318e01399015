"""Training augmentation per image: --augment randaugment|autoaugment and --random_erasing.

The training input (trainer/data/input.py) decodes, crops and resizes a batch, then:

  apply_policy     float32 [B, S, S, 3] in [0, 255] -> the same, each image through
                   RandAugment or AutoAugment (uint8 ops of trainer/data/augment_ops.py)
  (flip and normalize, common/image_ops.py)
  erase            float32 [B, S, S, 3] in [-1, 1] -> the same, a random rectangle of noise in
                   each image with probability --random_erasing

then mixup/CutMix mix the batch (trainer/data/mix.py). Evaluation and serving never come
here. Every draw is a stateless op of the batch's seed, so a seeded run repeats and a
parallel map gives the same images whatever order it runs in; every shape stays static.

How a magnitude (0..10) becomes each op's argument, the ops RandAugment draws from, and
AutoAugment's ImageNet policy (v0) are those of tensorflow/models'
official/vision/ops/augment.py; translations and cutout are given there in pixels of a
224-pixel image and here as the same fractions of the image side (timm's translate_pct),
so that a 32-pixel digit is not moved by 100 pixels.

    .venv/bin/python -m trainer.data.augment IMAGE.jpg randaugment   # writes IMAGE.augmented.png
"""
import math
import os
import sys

from common import console
from common.user_errors import UserError
from trainer.settings import table

MISSING_IMAGE = "{} does not exist; pass an image file"


def read_args(argv=None):
    """The command's IMAGE and POLICY, judged before TensorFlow loads: --help, a missing
    argument and a local IMAGE that does not exist answer at once (one line, exit 2)."""
    parser = console.ArgumentParser(prog="python -m trainer.data.augment",
                                    description="Write IMAGE.augmented.png: IMAGE through an --augment policy.")
    parser.add_argument("image", help="a JPEG, PNG, GIF or BMP file")
    parser.add_argument("policy", choices=table.AUGMENT_POLICIES, help="the --augment policy")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if "://" not in args.image and not os.path.exists(args.image):  # gs://: main asks TensorFlow
        console.exit_with_error(MISSING_IMAGE.format(args.image))
    return args


if __name__ == "__main__":  # the command: TensorFlow's start-up lines off (-v shows them)
    console.quiet_unless_verbose()
    ARGS = read_args()

import tensorflow as tf  # noqa: E402

from common import image_ops  # noqa: E402
from trainer.data import augment_ops as ops  # noqa: E402

MAX_LEVEL = 10.0
# Of the image side, at magnitude 10: 100/224 px (RandAugment's translate_const) and
# 40/224 px (its cutout_const) in the reference, 0.45 in timm.
TRANSLATE_FRACTION = 0.45
CUTOUT_FRACTION = 40.0 / 224.0
# The ops RandAugment draws from, in the reference's order (each equally likely, and one more
# draw that changes nothing).
RANDAUGMENT_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                   "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
                   "TranslateX", "TranslateY", "Cutout", "SolarizeAdd")
# AutoAugment's ImageNet policy (the paper's, the reference's policy_v0): one of these
# sub-policies per image, each (op, probability, magnitude) applied in turn.
AUTOAUGMENT_V0 = (
    (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)), (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
    (("Color", 0.4, 1), ("Rotate", 0.6, 8)), (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
    (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)), (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
    (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)), (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
    (("Color", 0.6, 1), ("Equalize", 1.0, 2)), (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
    (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)), (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
    (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)), (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
    (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)), (("Rotate", 1.0, 7), ("TranslateY", 0.8, 9)),
    (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)), (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
    (("Color", 1.0, 0), ("Rotate", 0.6, 2)), (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
    (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)), (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
    (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)), (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
    (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
)
# Random erasing's rectangle (the reference's and timm's defaults): its share of the image
# area, its aspect ratio (height / width, log-uniform) and the draws until one fits.
ERASE_AREA = (0.02, 1.0 / 3.0)
ERASE_ASPECT = (0.3, 1.0 / 0.3)
ERASE_TRIALS = 10


def setting(params, key):
    """params[key], or the table's default where params were built by hand (bench/)."""
    return params.get(key, table.DEFAULTS[key])


def op_arguments(name, level, sign, side):
    """The argument of op `name` at magnitude `level` (a float, 0..10): the reference's
    level_to_arg; None for the ops that take none.

    sign: +1.0 or -1.0, drawn per use (rotations, shears and translations go either way).
    side: the image side in pixels (translations and cutout scale with it)."""
    fraction = level / MAX_LEVEL
    return {
        "Rotate": sign * fraction * 30.0,
        "Posterize": int(fraction * 4), "Solarize": int(fraction * 256),
        "SolarizeAdd": int(fraction * 110),
        "Color": fraction * 1.8 + 0.1, "Contrast": fraction * 1.8 + 0.1,
        "Brightness": fraction * 1.8 + 0.1, "Sharpness": fraction * 1.8 + 0.1,
        "ShearX": sign * fraction * 0.3, "ShearY": sign * fraction * 0.3,
        "TranslateX": sign * fraction * TRANSLATE_FRACTION * side,
        "TranslateY": sign * fraction * TRANSLATE_FRACTION * side,
        "Cutout": int(fraction * CUTOUT_FRACTION * side),
    }.get(name)


def apply_op(name, image, level, seed):
    """image (uint8 [S, S, 3]) through op `name` at magnitude `level`; seed: int [2] for the
    op's sign and (Cutout) its centre."""
    sign_seed, center_seed = image_ops.stateless_seeds(seed, 2)
    sign = tf.where(tf.random.stateless_uniform([], sign_seed) < 0.5, -1.0, 1.0)
    side = image.shape[0]
    argument = op_arguments(name, level, sign, side)
    if name == "Cutout":
        center = tf.random.stateless_uniform([2], center_seed, 0, side, tf.int32)
        return ops.cutout(image, argument, center)
    function = {"AutoContrast": ops.autocontrast, "Equalize": ops.equalize, "Invert": ops.invert,
                "Rotate": ops.rotate, "Posterize": ops.posterize, "Solarize": ops.solarize,
                "SolarizeAdd": ops.solarize_add, "Color": ops.color, "Contrast": ops.contrast,
                "Brightness": ops.brightness, "Sharpness": ops.sharpness, "ShearX": ops.shear_x,
                "ShearY": ops.shear_y, "TranslateX": ops.translate_x,
                "TranslateY": ops.translate_y}[name]
    return function(image) if argument is None else function(image, argument)


def randaugment(image, seed, num_ops, magnitude):
    """num_ops ops in turn, each drawn uniformly from RANDAUGMENT_OPS or none (the reference's
    extra draw), all at one magnitude. image: uint8 [S, S, 3]; seed: int [2]."""
    for layer_seed in image_ops.stateless_seeds(seed, num_ops):
        choice_seed, op_seed = image_ops.stateless_seeds(layer_seed, 2)
        choice = tf.random.stateless_uniform([], choice_seed, 0, len(RANDAUGMENT_OPS) + 1, tf.int32)
        branches = [lambda name=name, image=image: apply_op(name, image, magnitude, op_seed)
                    for name in RANDAUGMENT_OPS] + [lambda image=image: image]
        image = tf.switch_case(choice, branches)
    return image


def autoaugment(image, seed):
    """One of AUTOAUGMENT_V0's sub-policies, drawn uniformly; each of its ops applied with its
    probability. image: uint8 [S, S, 3]; seed: int [2]."""
    choice_seed, ops_seed = image_ops.stateless_seeds(seed, 2)
    choice = tf.random.stateless_uniform([], choice_seed, 0, len(AUTOAUGMENT_V0), tf.int32)
    return tf.switch_case(choice, [lambda policy=policy: apply_sub_policy(image, policy, ops_seed)
                                   for policy in AUTOAUGMENT_V0])


def apply_sub_policy(image, policy, seed):
    """Each (op, probability, magnitude) of policy in turn, each applied with its probability."""
    for (name, probability, level), op_seed in zip(policy, image_ops.stateless_seeds(seed, len(policy))):
        apply_seed, arg_seed = image_ops.stateless_seeds(op_seed, 2)
        is_applied = tf.random.stateless_uniform([], apply_seed) < probability
        image = tf.cond(is_applied, lambda name=name, level=level, image=image, arg_seed=arg_seed:
                        apply_op(name, image, float(level), arg_seed), lambda image=image: image)
    return image


def make_policy(params):
    """policy(image uint8 [S, S, 3], seed int [2]) -> uint8 [S, S, 3], or None when --augment none."""
    name = setting(params, "augment")
    if name == "randaugment":
        num_ops = int(setting(params, "randaugment_num_ops"))
        magnitude = float(setting(params, "randaugment_magnitude"))
        return lambda image, seed: randaugment(image, seed, num_ops, magnitude)
    if name == "autoaugment":
        return autoaugment
    return None


def apply_policy(images, params, seed, parallel_iterations=16):
    """images (float32 [B, S, S, 3] in [0, 255]) each through the --augment policy, as uint8
    (the ops' type, as in the reference); unchanged when --augment none. seed: int [2]."""
    policy = make_policy(params)
    if policy is None:
        return images
    image_seeds = tf.random.experimental.stateless_split(seed, images.shape[0] or tf.shape(images)[0])
    pixels = ops.to_uint8(images)
    augmented = tf.map_fn(lambda args: policy(args[0], args[1]), (pixels, image_seeds),
                          fn_output_signature=tf.TensorSpec(images.shape[1:], tf.uint8),
                          parallel_iterations=parallel_iterations)
    return tf.cast(augmented, tf.float32)


def erase(images, probability, seed):
    """With probability each, one rectangle of each image (float32 [B, S, S, 3] in [-1, 1])
    replaced by per-pixel normal noise clipped to [-1, 1]; the rest unchanged.

    The rectangle: an area share in ERASE_AREA and a log-uniform aspect in ERASE_ASPECT, the
    first of ERASE_TRIALS draws that fits; placed uniformly inside the image (timm's; the
    reference may let it overhang the top and left edges). An image none fits is left."""
    if not probability:
        return images
    batch, height, width = images.shape[0], images.shape[1], images.shape[2]
    apply_seed, area_seed, aspect_seed, top_seed, left_seed, noise_seed = image_ops.stateless_seeds(seed, 6)
    area = tf.random.stateless_uniform([batch, ERASE_TRIALS], area_seed, *ERASE_AREA) * height * width
    aspect = tf.exp(tf.random.stateless_uniform([batch, ERASE_TRIALS], aspect_seed,
                                                math.log(ERASE_ASPECT[0]), math.log(ERASE_ASPECT[1])))
    box_h, box_w = tf.round(tf.sqrt(area * aspect)), tf.round(tf.sqrt(area / aspect))
    fits = (box_h < height) & (box_w < width)
    first = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)  # 0 when none fits
    box_h, box_w = tf.gather(box_h, first, batch_dims=1), tf.gather(box_w, first, batch_dims=1)
    is_erased = tf.reduce_any(fits, axis=1) & (tf.random.stateless_uniform([batch], apply_seed) < probability)
    top = tf.floor(tf.random.stateless_uniform([batch], top_seed) * (height - box_h + 1.0))
    left = tf.floor(tf.random.stateless_uniform([batch], left_seed) * (width - box_w + 1.0))
    rows = tf.range(height, dtype=tf.float32)[tf.newaxis, :, tf.newaxis]
    cols = tf.range(width, dtype=tf.float32)[tf.newaxis, tf.newaxis, :]
    inside = ((rows >= top[:, None, None]) & (rows < (top + box_h)[:, None, None])
              & (cols >= left[:, None, None]) & (cols < (left + box_w)[:, None, None])
              & is_erased[:, None, None])
    noise = tf.clip_by_value(tf.random.stateless_normal(tf.shape(images), noise_seed), -1.0, 1.0)
    return tf.where(inside[..., tf.newaxis], noise, images)


def main(args):
    """One image through a policy (read_args' args), written beside it as IMAGE.augmented.png
    (a look at what --augment does); a missing or undecodable image is one line, exit code 2."""
    def augment_file():
        if not tf.io.gfile.exists(args.image):
            raise UserError(MISSING_IMAGE.format(args.image))
        try:
            image = tf.io.decode_image(tf.io.read_file(args.image), channels=3, expand_animations=False)
        except tf.errors.InvalidArgumentError:
            raise UserError(f"{args.image} is not an image TensorFlow decodes (JPEG, PNG, GIF, BMP)") from None
        policy = make_policy({"augment": args.policy})
        out = policy(image, tf.constant([1, 2], tf.int64)) if policy else image
        written = args.image.rsplit(".", 1)[0] + ".augmented.png"
        tf.io.write_file(written, tf.io.encode_png(out))
        return written
    print(f"wrote {console.exit_on_user_error(augment_file)}", flush=True)


if __name__ == "__main__":
    main(ARGS)
