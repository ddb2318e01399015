"""RandAugment's and AutoAugment's ops, the two policies and random erasing (trainer/data/augment*.py).

The reference, tensorflow/models' official/vision/ops/augment.py, does not lock here
(docs/training.md#augmentation), so no test imports it. Where each op's formula follows it:
blend/color/brightness/sharpness = its blend of the grayscale, black and SMOOTH-filtered
images; posterize/solarize/solarize_add/invert/autocontrast/equalize = its functions of the
same names (PIL's ImageOps); rotate/shear/translate = its projective transforms, nearest
pixel; cutout = its square of side 2 x pad_size; the magnitude -> argument map = its
level_to_arg; RandAugment = N ops drawn uniformly from its 16 plus one draw of none;
AutoAugment = its policy_v0. Departures, each in the op's docstring: contrast blends from
the luma's true mean (the reference takes pixel count / 256), geometric ops fill with gray
128 (the reference reflects the image), translations and cutout are fractions of the side.
test_augment_golden.py holds every op to the tf-models-official 2.15.0 wheel's outputs on
a sample photo, kept in a golden file (tests/trainer/augment_reference/): identical pixels,
the departures aside, which differ only as said.

Here the deterministic ops are held to pixels computed by hand; every op runs on a real
JPEG decoded in the test, eagerly and inside tf.data (big_vision: the two differ more than
one expects), keeping shape, dtype and range; the policies repeat under a seed.

    .venv/bin/python -m pytest tests/trainer/test_augment_ops.py
"""
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import encode_image, pattern_image
from trainer.data import augment, augment_ops as ops

SEED = tf.constant([7, 11], tf.int64)


@pytest.fixture(scope="module")
def photo():
    """uint8 [48, 48, 3]: a JPEG made and decoded here."""
    return tf.io.decode_jpeg(encode_image(pattern_image(48, 48, seed=3)), channels=3)


def grid(values):
    """uint8 [h, w, 3] with the same values in every channel."""
    return tf.constant(np.repeat(np.asarray(values, np.uint8)[..., None], 3, axis=-1))


def channel(image):
    return image.numpy()[..., 0].tolist()


@pytest.mark.parametrize("op, values, expected", [
    (ops.invert, [[0, 200, 255]], [[255, 55, 0]]),
    (lambda image: ops.posterize(image, 2), [[200, 63, 255]], [[192, 0, 192]]),
    (lambda image: ops.solarize(image, 128), [[100, 200, 128]], [[100, 55, 127]]),
    (lambda image: ops.solarize_add(image, 40), [[100, 250, 120]], [[140, 250, 160]]),
    (lambda image: ops.brightness(image, 0.5), [[200, 51, 0]], [[100, 25, 0]]),
    (lambda image: ops.brightness(image, 2.0), [[200, 51, 0]], [[255, 102, 0]]),
    (ops.autocontrast, [[50, 100, 150]], [[0, 127, 255]]),
    (lambda image: ops.sharpness(image, 0.0), [[0, 0, 0], [0, 255, 0], [0, 0, 0]],
     [[0, 0, 0], [0, 98, 0], [0, 0, 0]]),  # the centre becomes 5 x 255 / 13
    (lambda image: ops.rotate(image, 90.0), [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
     [[2, 5, 8], [1, 4, 7], [0, 3, 6]]),  # counter-clockwise
    (lambda image: ops.shear_x(image, 1.0), [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
     [[0, 1, 2], [4, 5, 128], [8, 128, 128]]),  # row y moves y pixels left
    (lambda image: ops.shear_y(image, 1.0), [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
     [[0, 4, 8], [3, 7, 128], [6, 128, 128]]),
    (lambda image: ops.translate_x(image, 1.0), [[0, 1, 2], [3, 4, 5]], [[1, 2, 128], [4, 5, 128]]),
    (lambda image: ops.translate_y(image, -1.0), [[0, 1, 2], [3, 4, 5]], [[128, 128, 128], [0, 1, 2]]),
    (lambda image: ops.cutout(image, 1, tf.constant([1, 1])), [[9] * 3] * 3,
     [[128, 128, 9], [128, 128, 9], [9, 9, 9]]),
])
def test_each_deterministic_op_gives_the_pixels_computed_by_hand(op, values, expected):
    out = op(grid(values))
    assert out.dtype == tf.uint8 and out.shape == grid(values).shape
    assert channel(out) == expected


def test_equalize_spreads_a_two_valued_channel_to_black_and_white():
    """512 pixels, half 10 and half 20: PIL's step (512 - 256) // 255 = 1, so the lookup table is
    the cumulative count shifted by one: 10 -> 0, 20 -> 256, clipped to 255."""
    values = np.array([10, 20] * 256).reshape(16, 32)
    assert set(np.unique(ops.equalize(grid(values)).numpy())) == {0, 255}
    assert channel(ops.equalize(grid(values)))[0][:2] == [0, 255]


def test_equalize_leaves_an_image_with_too_few_pixels_alone():
    values = [[0, 0], [128, 255]]  # step (4 - 1) // 255 = 0: PIL returns the image
    assert channel(ops.equalize(grid(values))) == values


@pytest.mark.parametrize("factor", [0.0, 1.0])
def test_color_and_contrast_blend_from_their_degenerate_images(photo, factor):
    if factor == 1.0:  # the image itself
        assert np.array_equal(ops.color(photo, 1.0), photo)
        assert np.array_equal(ops.contrast(photo, 1.0), photo)
        return
    gray = ops.color(photo, 0.0).numpy()
    assert np.array_equal(gray[..., 0], gray[..., 1]) and np.array_equal(gray[..., 1], gray[..., 2])
    flat = ops.contrast(photo, 0.0).numpy()
    assert len(np.unique(flat)) == 1
    luma = tf.image.rgb_to_grayscale(photo).numpy().mean()
    assert abs(int(flat[0, 0, 0]) - luma) <= 0.5


def run_in_tf_data(function, *tensors):
    """function applied inside a tf.data map (graph mode), its one output."""
    dataset = tf.data.Dataset.from_tensors(tensors).map(function)
    assert dataset.element_spec.shape.is_fully_defined(), dataset.element_spec
    return next(iter(dataset))


@pytest.mark.parametrize("name", augment.RANDAUGMENT_OPS)
def test_every_op_keeps_shape_type_and_range_eagerly_and_in_tf_data(photo, name):
    eager = augment.apply_op(name, photo, 9.0, SEED)
    in_graph = run_in_tf_data(lambda image, seed: augment.apply_op(name, image, 9.0, seed), photo, SEED)
    assert eager.shape == photo.shape and eager.dtype == tf.uint8
    assert np.array_equal(eager, in_graph)
    if name != "Posterize":  # at magnitude 9 it keeps 3 bits of 8: always a change
        return
    assert not np.array_equal(eager, photo)


@pytest.mark.parametrize("params", [
    {"augment": "randaugment", "randaugment_num_ops": 2, "randaugment_magnitude": 9.0},
    {"augment": "autoaugment"},
])
def test_a_policy_repeats_under_its_seed_and_differs_across_seeds(photo, params):
    batch = tf.cast(tf.stack([photo] * 6), tf.float32)
    # One map traced once, three seeds (each op ran eagerly above; tracing a policy's branches
    # again for each call would cost seconds).
    seeds = tf.stack([SEED, SEED, tf.constant([8, 11], tf.int64)])
    dataset = tf.data.Dataset.from_tensor_slices(seeds).map(
        lambda seed: augment.apply_policy(batch, params, seed))
    assert dataset.element_spec.shape == batch.shape
    first, again, other = list(dataset)
    assert first.shape == batch.shape and first.dtype == tf.float32
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    assert 0.0 <= float(tf.reduce_min(first)) and float(tf.reduce_max(first)) <= 255.0
    # Each image draws its own ops: the six copies of one photo do not all come out alike.
    assert len({first[i].numpy().tobytes() for i in range(6)}) > 1


def test_no_policy_leaves_the_batch_as_it_is(photo):
    batch = tf.cast(tf.stack([photo] * 2), tf.float32) + 0.5  # not even rounded to uint8
    assert augment.apply_policy(batch, {"augment": "none"}, SEED) is batch


def test_random_erasing_replaces_one_rectangle_of_noise_in_range(photo):
    batch = tf.cast(tf.stack([photo] * 16), tf.float32) / 127.5 - 1.0
    erased = augment.erase(batch, 1.0, SEED)
    again = run_in_tf_data(lambda images, seed: augment.erase(images, 1.0, seed), batch, SEED)
    assert np.array_equal(erased, again)
    assert -1.0 <= float(tf.reduce_min(erased)) and float(tf.reduce_max(erased)) <= 1.0
    changed = np.any(erased.numpy() != batch.numpy(), axis=-1)  # [B, H, W]
    shares = changed.mean(axis=(1, 2))
    assert np.all(shares <= augment.ERASE_AREA[1] + 0.02) and np.all(shares >= 0.01)
    for mask in changed:  # one rectangle: its bounding box is all changed (up to noise = pixel)
        rows, cols = np.nonzero(mask)
        box = mask[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
        assert box.mean() > 0.95
    assert augment.erase(batch, 0.0, SEED) is batch
