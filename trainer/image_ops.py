"""Image preprocessing: the one module training, evaluation and serving all use.

Training gets a random crop (and, only if asked, a flip); evaluation and
serving share one deterministic path (center square crop + resize), so a
served model sees exactly what it was evaluated on. Every function takes a
scalar tf.string of encoded image bytes and returns a float32
[image_size, image_size, 3] tensor with a static shape, in graph mode
(tf.data, Estimator, SavedModel) and eagerly.

    python -m trainer.image_ops IMAGE.jpg 64     # print the eval output stats
"""
import sys

import tensorflow as tf

# Aspect ratios (width / height) the training crop may take. The usual
# Inception range: wide enough to vary the shape, narrow enough that a digit
# is not squashed beyond recognition once resized to a square.
CROP_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
# Tries before the sampler falls back to the whole image.
CROP_MAX_ATTEMPTS = 10


def normalize_image(image):
    """Maps pixel values in [0, 255] to float32 in [-1, 1] (x / 127.5 - 1).

    No per-channel ImageNet mean/std: the networks here are trained from
    scratch, and a symmetric range is what the TPU reference nets expect.
    image: [..., 3] of any real dtype in [0, 255].
    """
    return tf.cast(image, tf.float32) * (1.0 / 127.5) - 1.0


def _resize(image, image_size):
    """[h, w, 3] uint8 -> [image_size, image_size, 3] float32 in [0, 255], static shape."""
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return tf.ensure_shape(image, [image_size, image_size, 3])


def _center_square(shape):
    """The largest centered square inside an image of shape [h, w, ...] as (y, x, side)."""
    height, width = shape[0], shape[1]
    side = tf.minimum(height, width)
    return (height - side) // 2, (width - side) // 2, side


def decode_image(image_bytes):
    """Decodes JPEG, PNG, GIF (first frame) or BMP bytes to uint8 [h, w, 3].

    tf.io.decode_image rather than decode_jpeg: serving requests come from
    users, and decode_image is the op documented to accept every common
    format. channels=3 turns grayscale into RGB and drops an alpha channel;
    expand_animations=False keeps the rank at 3 (a GIF gives its first frame).
    """
    return tf.io.decode_image(image_bytes, channels=3, expand_animations=False)


def preprocess_for_eval(image_bytes, image_size):
    """Deterministic: center square crop of the whole image, resize, normalize.

    The crop keeps the full shorter side (no ImageNet-style 87.5% crop), so a
    small centered digit is never cut. Used by evaluation and by serving.
    image_bytes: scalar tf.string. Returns float32 [image_size, image_size, 3].
    """
    image = decode_image(image_bytes)
    y, x, side = _center_square(tf.shape(image))
    image = tf.image.crop_to_bounding_box(image, y, x, side, side)
    return normalize_image(_resize(image, image_size))


def _sample_crop_window(image_bytes, min_crop_area):
    """A random crop window [y, x, h, w] covering min_crop_area..1 of the JPEG's area."""
    shape = tf.image.extract_jpeg_shape(image_bytes)
    whole_image = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, shape=[1, 1, 4])
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape,
        bounding_boxes=whole_image,
        min_object_covered=min_crop_area,
        aspect_ratio_range=CROP_ASPECT_RATIO_RANGE,
        area_range=(min_crop_area, 1.0),
        max_attempts=CROP_MAX_ATTEMPTS,
        use_image_if_no_bounding_boxes=True)
    return tf.concat([begin[:2], size[:2]], axis=0)


def random_crop_and_resize(image_bytes, image_size, min_crop_area):
    """The per-image half of training preprocessing; see preprocess_for_train.

    Returns float32 [image_size, image_size, 3] in [0, 255], not yet normalized.
    """
    window = _sample_crop_window(image_bytes, min_crop_area)
    image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
    return _resize(image, image_size)


def flip_and_normalize_batch(images, random_flip):
    """The batch half of training preprocessing: optional per-image flip, then normalize.

    Vectorized over the batch, so the input pipeline pays a few ops per batch
    instead of per image. images: [B, S, S, 3] in [0, 255].
    """
    if random_flip:
        is_flipped = tf.random.uniform([tf.shape(images)[0], 1, 1, 1]) < 0.5
        images = tf.where(is_flipped, tf.reverse(images, axis=[2]), images)
    return normalize_image(images)


def preprocess_for_train(image_bytes, image_size, *, min_crop_area, random_flip):
    """Random crop (decoding only the crop window), resize, optional flip, normalize.

    image_bytes: scalar tf.string holding a JPEG (the TFRecord schema
      guarantees JPEG; decode_and_crop_jpeg skips decoding pixels outside the
      window).
    min_crop_area: the crop covers at least this fraction of the image area,
      in (0, 1]; 1.0 disables cropping for square images.
    random_flip: mirror left-right with probability 1/2. Off for digits and
      text, which are not mirror invariant.
    Returns float32 [image_size, image_size, 3]. trainer/input.py runs the two
    halves separately (per image, then per batch); this composes the same two.
    """
    image = random_crop_and_resize(image_bytes, image_size, min_crop_area)
    return flip_and_normalize_batch(image[tf.newaxis], random_flip)[0]


def main(argv):
    path, image_size = argv[1], int(argv[2])
    image = preprocess_for_eval(tf.io.read_file(path), image_size)
    print(path, image.shape, image.dtype,
          f"min={float(tf.reduce_min(image)):.3f} max={float(tf.reduce_max(image)):.3f}")


if __name__ == "__main__":
    main(sys.argv)
