"""Image preprocessing: the one module training, evaluation and serving all use.

Training gets a random crop (and, only if asked, a flip); evaluation and
serving share one deterministic path (center square crop + resize), so a
served model sees exactly what it was evaluated on. Every function takes a
scalar tf.string of encoded image bytes and returns a float32
[image_size, image_size, 3] tensor with a static shape, in graph mode
(tf.data, Estimator, SavedModel) and eagerly. Training reads every format
the serving decoder (decode_image) reads: JPEGs by their crop window only, any
other format whole, then cropped (decode_and_crop).

    python -m common.image_ops IMAGE.jpg 64     # print the eval output stats
"""
import math
import sys

import tensorflow as tf

# Aspect ratios (width / height) the training crop may take. The usual
# Inception range: wide enough to vary the shape, narrow enough that a digit
# is not squashed beyond recognition once resized to a square.
CROP_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)

# The first bytes by which tf.io.decode_image tells the formats it reads (its DecodeImage
# kernel classifies each input by them; anything else is "Unknown image file format").
# One list per format, so that training refuses exactly what serving would.
IMAGE_MAGIC = {"JPEG": (b"\xff\xd8\xff",), "PNG": (b"\x89PNG\r\n\x1a\n",),
               "GIF": (b"GIF8",), "BMP": (b"BM",)}
# TensorFlow 2.20's decode_image also reads WebP (RIFF, 4 size bytes, WEBP); 2.15's does not.
READS_WEBP = hasattr(tf.io, "decode_webp")
WEBP_RIFF, WEBP_TAG = b"RIFF", b"WEBP"
MAGIC_BYTES = 12  # enough for the longest signature (WebP's tag ends at byte 12)

# Normalization: x * NORMALIZE_SCALE + NORMALIZE_OFFSET maps [0, 255] onto [-1, 1].
NORMALIZE_SCALE = 1.0 / 127.5
NORMALIZE_OFFSET = -1.0
RESIZE_METHOD = "bilinear"  # tf.image.resize: half-pixel centers, no antialiasing


def normalize_image(image):
    """Maps pixel values in [0, 255] to float32 in [-1, 1] (x / 127.5 - 1).

    No per-channel ImageNet mean/std: the networks here are trained from
    scratch, and a symmetric range is what the TPU reference nets expect.
    image: [..., 3] of any real dtype in [0, 255].
    """
    return tf.cast(image, tf.float32) * NORMALIZE_SCALE + NORMALIZE_OFFSET


def _resize(image, image_size):
    """[h, w, 3] uint8 -> [image_size, image_size, 3] float32 in [0, 255], static shape."""
    # Python ints as the size make the output shape static; no ensure_shape
    # op, which would cost a per-image op in tf.data.
    return tf.image.resize(image, [image_size, image_size], method=RESIZE_METHOD)


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


def image_formats():
    """The names of the formats decode_image (and so serving) reads, in this TensorFlow."""
    return tuple(IMAGE_MAGIC) + (("WebP",) if READS_WEBP else ())


def is_decodable_format(image_bytes):
    """bool, the shape of image_bytes (tf.string, any shape): True where the bytes start as
    an image format decode_image reads (image_formats()).

    A few vectorized string ops on a batch, no decoding: the training input runs it per
    batch to name a record that holds no image before any decode op fails without a name.
    """
    # Padded: substr past the end of a short string is an error, not an empty string.
    head = tf.strings.join([tf.strings.substr(image_bytes, 0, MAGIC_BYTES), b"\0" * MAGIC_BYTES])
    found = [tf.equal(tf.strings.substr(head, 0, len(magic)), magic)
             for signatures in IMAGE_MAGIC.values() for magic in signatures]
    if READS_WEBP:
        found.append(tf.logical_and(tf.equal(tf.strings.substr(head, 0, 4), WEBP_RIFF),
                                    tf.equal(tf.strings.substr(head, 8, 4), WEBP_TAG)))
    return tf.reduce_any(tf.stack(found, axis=-1), axis=-1)


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


def describe_eval_preprocessing(image_size):
    """preprocess_for_eval in words and numbers, for a model that runs without it (a TFLite
    model takes its output; trainer/export/tflite_files.py writes this beside it)."""
    return {
        "decode": "decode_image, channels=3: RGB (grayscale repeated, alpha dropped, a GIF's "
                  f"first frame); formats {', '.join(image_formats())}",
        "crop": "the largest centered square (the full shorter side, nothing cut from it)",
        "resize": {"height": image_size, "width": image_size, "method": RESIZE_METHOD,
                   "half_pixel_centers": True, "antialias": False,
                   "as": "tf.image.resize(image, [size, size], method='bilinear')"},
        "normalize": {"scale": NORMALIZE_SCALE, "offset": NORMALIZE_OFFSET,
                      "as": "x * scale + offset on the resized RGB values in [0, 255]"},
        "value_range": [-1.0, 1.0], "channel_order": "RGB", "layout": "NHWC",
        "dtype": "float32",
    }


def preprocess_batch_for_eval(image_bytes, image_size, parallel_iterations=10):
    """preprocess_for_eval on each of [n] encoded images -> float32 [n, S, S, 3].

    The one batched form shared by the eval input_fn and the serving export.
    """
    return tf.map_fn(
        lambda one_image: preprocess_for_eval(one_image, image_size), image_bytes,
        fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32),
        parallel_iterations=parallel_iterations)


def stateless_seeds(seed, count):
    """count independent int [2] seeds of stateless random ops, split from seed.

    seed: int [2]; the same seed gives the same draws, in whatever order a parallel
    tf.data map runs its calls (stateful random ops do not). None: a random seed.
    """
    if seed is None:
        seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
    return tf.unstack(tf.random.experimental.stateless_split(seed, count))


def sample_crop_windows(heights, widths, min_crop_area, seed=None):
    """Random Inception-style crop windows, vectorized over a batch of image sizes.

    heights, widths: int [n], pixels. Each window covers a uniformly drawn
    fraction of the area in [min_crop_area, 1] with a log-uniform aspect ratio
    in CROP_ASPECT_RATIO_RANGE; a side that would overflow the image is clipped
    and the other grown to keep the area, so min_crop_area=1 is the whole image.
    seed: int [2] (stateless_seeds), or None for random windows.
    Returns int32 [n, 4] windows (y, x, h, w) inside each image.
    Drawn per batch, not per image: in tf.data each extra per-image op costs
    about as much as decoding a 32x32 JPEG.
    """
    heights = tf.cast(heights, tf.float32)
    widths = tf.cast(widths, tf.float32)
    n = tf.shape(heights)[0]
    area_seed, ratio_seed, y_seed, x_seed = stateless_seeds(seed, 4)
    area = tf.random.stateless_uniform([n], area_seed, min_crop_area, 1.0) * heights * widths
    low, high = CROP_ASPECT_RATIO_RANGE
    ratio = tf.exp(tf.random.stateless_uniform([n], ratio_seed, math.log(low), math.log(high)))  # w / h
    crop_w, crop_h = tf.sqrt(area * ratio), tf.sqrt(area / ratio)
    is_too_wide, is_too_tall = crop_w > widths, crop_h > heights
    crop_w, crop_h = (
        tf.where(is_too_wide, widths, tf.where(is_too_tall, area / heights, crop_w)),
        tf.where(is_too_wide, area / widths, tf.where(is_too_tall, heights, crop_h)))
    crop_h = tf.clip_by_value(tf.round(crop_h), 1.0, heights)
    crop_w = tf.clip_by_value(tf.round(crop_w), 1.0, widths)
    y = tf.floor(tf.random.stateless_uniform([n], y_seed) * (heights - crop_h + 1.0))
    x = tf.floor(tf.random.stateless_uniform([n], x_seed) * (widths - crop_w + 1.0))
    return tf.cast(tf.stack([y, x, crop_h, crop_w], axis=1), tf.int32)


def decode_and_crop(image_bytes, window):
    """uint8 [h, w, 3]: the pixels inside window (int32 [4]: y, x, h, w) of an image in any
    format decode_image reads.

    A JPEG (what this project's preprocessing writes) decodes only the window's pixels,
    the fast path; any other format (a PNG, GIF, BMP written by another tool) is decoded
    whole by the serving decoder, then cropped, so training reads what serving reads.
    """
    def crop(image):
        return tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], 3]))
    return tf.cond(tf.io.is_jpeg(image_bytes),
                   lambda: tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3),
                   lambda: crop(decode_image(image_bytes)))


def image_shape(image_bytes):
    """int32 [3] (h, w, channels) of an image: from the header alone for a JPEG."""
    return tf.cond(tf.io.is_jpeg(image_bytes),
                   lambda: tf.image.extract_jpeg_shape(image_bytes),
                   lambda: tf.shape(tf.io.decode_image(image_bytes, expand_animations=False)))


def decode_crop_and_resize(image_bytes, window, image_size):
    """The per-image half of training preprocessing; see preprocess_for_train.

    Decodes the pixels inside window (int32 [4]: y, x, h, w; decode_and_crop).
    Returns float32 [image_size, image_size, 3] in [0, 255], not yet normalized.
    """
    return _resize(decode_and_crop(image_bytes, window), image_size)


def decode_crop_and_resize_batch(image_bytes, windows, image_size, parallel_iterations=10):
    """decode_crop_and_resize of each of [n] images and int32 [n, 4] windows ->
    float32 [n, image_size, image_size, 3] in [0, 255].

    A batch of JPEGs only (this project's records) takes decode_and_crop_jpeg directly;
    a batch holding any other format takes decode_and_crop, which picks per image. One
    choice per batch, not per image: a tf.cond per image cost about 8% more CPU per 32x32
    JPEG in bench/bench_input.py (digits); one per batch cost nothing measurable.
    """
    spec = tf.TensorSpec([image_size, image_size, 3], tf.float32)

    def decode_each(decode):
        return tf.map_fn(lambda args: _resize(decode(args[0], args[1]), image_size),
                         (image_bytes, windows), fn_output_signature=spec,
                         parallel_iterations=parallel_iterations)
    return tf.cond(
        tf.reduce_all(tf.io.is_jpeg(image_bytes)),
        lambda: decode_each(lambda one, window: tf.image.decode_and_crop_jpeg(one, window, channels=3)),
        lambda: decode_each(decode_and_crop))


def flip_and_normalize_batch(images, random_flip, seed=None):
    """The batch half of training preprocessing: optional per-image flip, then normalize.

    Vectorized over the batch, so the input pipeline pays a few ops per batch
    instead of per image. images: [B, S, S, 3] in [0, 255]. seed: int [2]
    (stateless_seeds), or None for random flips.
    """
    if random_flip:
        flip_seed, = stateless_seeds(seed, 1)
        is_flipped = tf.random.stateless_uniform([tf.shape(images)[0], 1, 1, 1], flip_seed) < 0.5
        images = tf.where(is_flipped, tf.reverse(images, axis=[2]), images)
    return normalize_image(images)


def preprocess_for_train(image_bytes, image_size, *, min_crop_area, random_flip):
    """Random crop (decoding only the crop window), resize, optional flip, normalize.

    image_bytes: scalar tf.string holding an image decode_image reads: this project's
      records hold JPEGs, whose pixels outside the window are not decoded; other tools'
      may hold PNGs (decode_and_crop).
    min_crop_area: the crop covers at least this fraction of the image area,
      in (0, 1]; 1.0 disables cropping for square images.
    random_flip: mirror left-right with probability 1/2. Off for digits and
      text, which are not mirror invariant.
    Returns float32 [image_size, image_size, 3]. trainer/data/input.py runs the same
    three steps, with the windows and the flip+normalize drawn per batch.
    """
    shape = image_shape(image_bytes)  # [h, w, channels]
    window = sample_crop_windows(shape[:1], shape[1:2], min_crop_area)[0]
    image = decode_crop_and_resize(image_bytes, window, image_size)
    return flip_and_normalize_batch(image[tf.newaxis], random_flip)[0]


def main(argv):
    path, image_size = argv[1], int(argv[2])
    image = preprocess_for_eval(tf.io.read_file(path), image_size)
    print(path, image.shape, image.dtype,
          f"min={float(tf.reduce_min(image)):.3f} max={float(tf.reduce_max(image)):.3f}")


if __name__ == "__main__":
    main(sys.argv)
