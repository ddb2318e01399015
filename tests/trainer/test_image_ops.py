"""Image ops: static shapes, value range, determinism, and eager == tf.data.

    .venv/bin/python -m pytest tests/trainer/test_image_ops.py
"""
import numpy as np
import pytest
import tensorflow as tf

from common import image_ops

SIZE = 40


def run_eagerly_and_in_tf_data(op, image_bytes):
    """big_vision style: the same op on the same bytes, eagerly and inside tf.data."""
    eager = op(tf.constant(image_bytes)).numpy()
    dataset = tf.data.Dataset.from_tensors(tf.constant(image_bytes)).map(op)
    assert dataset.element_spec.shape == tf.TensorShape([SIZE, SIZE, 3])  # static in graph
    (graph,) = [x.numpy() for x in dataset]
    return eager, graph


def eval_op(image_bytes):
    return image_ops.preprocess_for_eval(image_bytes, SIZE)


def train_op(min_crop_area=1.0, random_flip=False):
    return lambda image_bytes: image_ops.preprocess_for_train(
        image_bytes, SIZE, min_crop_area=min_crop_area, random_flip=random_flip)


@pytest.mark.parametrize("height,width", [(32, 32), (48, 30), (30, 64)])
def test_eval_is_the_same_eagerly_and_in_tf_data(make_jpeg, height, width):
    eager, graph = run_eagerly_and_in_tf_data(eval_op, make_jpeg(height, width, seed=3))
    assert eager.shape == (SIZE, SIZE, 3) and eager.dtype == np.float32
    np.testing.assert_array_equal(eager, graph)
    assert -1.0 <= eager.min() < eager.max() <= 1.0


def test_train_without_crop_or_flip_equals_eval_eagerly_and_in_tf_data(make_jpeg):
    """On a square image, min_crop_area=1 leaves only decode+resize: no hidden augmentation."""
    jpeg = make_jpeg(32, 32, seed=4)
    eager, graph = run_eagerly_and_in_tf_data(train_op(), jpeg)
    np.testing.assert_array_equal(eager, eval_op(tf.constant(jpeg)).numpy())
    np.testing.assert_array_equal(graph, eager)


def test_train_flip_only_mirrors(make_jpeg):
    jpeg = make_jpeg(32, 32, seed=5)
    reference = eval_op(tf.constant(jpeg)).numpy()
    outputs = [train_op(random_flip=True)(tf.constant(jpeg)).numpy() for _ in range(12)]
    flipped = [np.array_equal(out, reference[:, ::-1]) for out in outputs]
    same = [np.array_equal(out, reference) for out in outputs]
    assert all(f or s for f, s in zip(flipped, same))
    assert any(flipped) and any(same)  # p(fail) = 2 * 2**-12


def test_train_crop_is_random_and_differs_from_eval(make_jpeg):
    jpeg = tf.constant(make_jpeg(64, 64, seed=6))
    reference = eval_op(jpeg).numpy()
    outputs = [train_op(min_crop_area=0.3)(jpeg).numpy() for _ in range(6)]
    assert all(out.shape == (SIZE, SIZE, 3) for out in outputs)
    assert sum(not np.array_equal(out, reference) for out in outputs) >= 5
    assert len({out.tobytes() for out in outputs}) >= 4


@pytest.mark.parametrize("mode,fmt", [("L", "JPEG"), ("L", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG")])
def test_eval_accepts_grayscale_and_png(make_jpeg, mode, fmt):
    image_bytes = make_jpeg(30, 50, seed=7, mode=mode, fmt=fmt)
    eager, graph = run_eagerly_and_in_tf_data(eval_op, image_bytes)
    np.testing.assert_array_equal(eager, graph)
    if mode == "L":  # grayscale becomes three equal channels
        np.testing.assert_array_equal(eager[..., 0], eager[..., 2])


def test_eval_of_png_matches_eval_of_the_same_pixels():
    pixels = np.random.default_rng(0).integers(0, 256, size=(36, 24, 3), dtype=np.uint8)
    png = tf.io.encode_png(pixels)
    image = eval_op(png).numpy()
    expected = tf.image.resize(pixels[6:30], [SIZE, SIZE]).numpy() / 127.5 - 1.0
    np.testing.assert_allclose(image, expected, atol=1e-5)


def test_normalize_image_maps_0_255_to_minus_1_1():
    out = image_ops.normalize_image(tf.constant([0, 127.5, 255.0])).numpy()
    np.testing.assert_allclose(out, [-1.0, 0.0, 1.0])


def test_corrupt_bytes_raise():
    with pytest.raises(tf.errors.InvalidArgumentError):
        eval_op(tf.constant(b"not an image"))


@pytest.mark.parametrize("min_crop_area", [0.08, 0.5, 0.85])
def test_crop_windows_stay_inside_and_cover_the_asked_area(min_crop_area):
    heights = tf.constant([32, 480, 300, 7] * 500)
    widths = tf.constant([32, 640, 200, 9] * 500)
    y, x, h, w = np.moveaxis(
        image_ops.sample_crop_windows(heights, widths, min_crop_area).numpy(), 1, 0)
    heights, widths = heights.numpy(), widths.numpy()
    assert (y >= 0).all() and (x >= 0).all() and (h >= 1).all() and (w >= 1).all()
    assert (y + h <= heights).all() and (x + w <= widths).all()
    big = heights > 100  # rounding dominates on tiny images
    fraction = (h * w / (heights * widths))[big]
    assert fraction.min() >= min_crop_area * 0.97 and fraction.max() <= 1.0
    assert fraction.mean() == pytest.approx((1 + min_crop_area) / 2, abs=0.05)
    assert len(set(zip(y, x, h, w))) > 500  # random windows and positions (of 2,000)


def test_crop_windows_with_min_area_1_are_the_whole_image():
    heights, widths = tf.constant([32, 480, 300] * 50), tf.constant([32, 640, 200] * 50)
    windows = image_ops.sample_crop_windows(heights, widths, 1.0).numpy()
    expected = np.stack([np.zeros(150), np.zeros(150), heights, widths], axis=1)
    np.testing.assert_array_equal(windows, expected)


@pytest.mark.parametrize("min_crop_area", [0.08, 0.85])
def test_seeded_crop_windows_and_flips_repeat_with_their_seed_only(min_crop_area):
    heights, widths = tf.constant([32, 480, 300] * 20), tf.constant([32, 640, 200] * 20)
    images = tf.reshape(tf.range(60 * 2 * 3 * 3, dtype=tf.float32), [60, 2, 3, 3])

    def draw(seed):
        seed = tf.constant(seed, tf.int64)
        return (image_ops.sample_crop_windows(heights, widths, min_crop_area, seed).numpy(),
                image_ops.flip_and_normalize_batch(images, True, seed).numpy())
    windows, flipped = draw([1, 2])
    again_windows, again_flipped = draw([1, 2])
    np.testing.assert_array_equal(again_windows, windows)
    np.testing.assert_array_equal(again_flipped, flipped)
    other_windows, other_flipped = draw([1, 3])
    assert (other_windows != windows).any(axis=1).sum() > 30  # of 60 windows
    assert not np.array_equal(other_flipped, flipped)
    unseeded = [image_ops.sample_crop_windows(heights, widths, min_crop_area).numpy() for _ in range(2)]
    assert not np.array_equal(*unseeded)


# Every format the serving decoder reads, as other tools write them into TFRecords:
# grayscale and RGBA become 3 channels, as they do at serving time.
OTHER_FORMATS = [("L", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("RGB", "GIF"), ("RGB", "BMP"),
                 ("L", "JPEG")] + ([("RGB", "WEBP")] if image_ops.READS_WEBP else [])


@pytest.mark.parametrize("mode,fmt", OTHER_FORMATS)
def test_train_accepts_every_format_serving_reads(make_jpeg, mode, fmt):
    """The training crop of a PNG/GIF/BMP is the serving decoder's pixels inside the window,
    eagerly and in tf.data, alone and in a batch beside a JPEG (the batch path picks per image)."""
    image_bytes = make_jpeg(30, 50, seed=8, mode=mode, fmt=fmt)
    window = tf.constant([3, 5, 20, 30])
    pixels = image_ops.decode_image(image_bytes)[3:23, 5:35]
    expected = tf.image.resize(pixels, [SIZE, SIZE]).numpy()
    eager, graph = run_eagerly_and_in_tf_data(
        lambda one: image_ops.decode_crop_and_resize(one, window, SIZE), image_bytes)
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(graph, expected)
    jpeg = make_jpeg(30, 50, seed=9)
    mixed = image_ops.decode_crop_and_resize_batch(
        tf.constant([jpeg, image_bytes]), tf.stack([window, window]), SIZE).numpy()
    np.testing.assert_array_equal(mixed[1], expected)
    only_jpeg = image_ops.decode_crop_and_resize_batch(tf.constant([jpeg]), window[tf.newaxis], SIZE)
    np.testing.assert_array_equal(mixed[0], only_jpeg[0].numpy())
    assert image_ops.preprocess_for_train(tf.constant(image_bytes), SIZE, min_crop_area=0.5,
                                          random_flip=True).shape == (SIZE, SIZE, 3)


@pytest.mark.parametrize("image_bytes", [b"", b"BM", b"not an image", b"\x89PNx" + b"0" * 20,
                                         b"II*\x00" + b"0" * 20, b"RIFF0000WEBX" + b"0" * 20])
def test_is_decodable_format_refuses_what_decode_image_refuses(image_bytes):
    """Short, junk and unread formats (TIFF, a RIFF that is not WebP): the format check says no,
    and so does the serving decoder; a 2-byte b"BM" passes the check but fails to decode."""
    is_format = bool(image_ops.is_decodable_format(tf.constant(image_bytes)))
    assert is_format == (image_bytes == b"BM")
    with pytest.raises(tf.errors.InvalidArgumentError):
        image_ops.decode_image(image_bytes)


@pytest.mark.parametrize("mode,fmt", OTHER_FORMATS)
def test_is_decodable_format_accepts_what_decode_image_reads(make_jpeg, mode, fmt):
    batch = tf.constant([make_jpeg(12, 10, seed=1, mode=mode, fmt=fmt), b"junk"])
    np.testing.assert_array_equal(image_ops.is_decodable_format(batch).numpy(), [True, False])
    assert image_ops.decode_image(batch[0]).shape == (12, 10, 3)
