"""The image ops of RandAugment and AutoAugment: uint8 [H, W, 3] in, uint8 [H, W, 3] out, same static shape.

Each op computes what tensorflow/models' official/vision/ops/augment.py computes (itself
PIL's ImageOps/ImageEnhance in TensorFlow), written here with core TensorFlow ops only;
where an op departs from it, its docstring says how and why. The policies that pick the
ops and turn a magnitude into their arguments: trainer/data/augment.py.

    .venv/bin/python -m pytest tests/trainer/test_augment_ops.py
"""
import math

import tensorflow as tf

# What a geometric op fills the pixels it moves in from outside the image with: mid-gray, as
# the AutoAugment paper's code and timm do (the reference's transforms reflect the image there).
FILL = 128
# PIL's SMOOTH filter, the blur Sharpness blends away from.
# Why select(mask, a, b) below is b + mask * (a - b) in uint8 (exact: the arithmetic wraps
# modulo 256) and not tf.where: SelectV2 on an image cost as much as decoding it, the
# arithmetic a quarter of that (docs/benchmarks.md, "Measured figures behind choices in the code").
SMOOTH_KERNEL = ((1.0, 1.0, 1.0), (1.0, 5.0, 1.0), (1.0, 1.0, 1.0))


def to_uint8(values):
    """float values clipped to [0, 255] and truncated to uint8: one fused ClipByValue (what
    tf.saturate_cast emits) where clip_by_value emits Minimum and Maximum, a pass more."""
    return tf.saturate_cast(values, tf.uint8)


def select(mask, image1, image2):
    """image1 where mask (bool, broadcast to the image), else image2; uint8 images."""
    return image2 + tf.cast(mask, tf.uint8) * (image1 - image2)


def blend(image1, image2, factor):
    """image1 + factor * (image2 - image1), clipped to [0, 255] and truncated to uint8 (PIL's
    ImageEnhance): factor 0 gives image1, 1 gives image2, above 1 extrapolates past image2."""
    image1, image2 = tf.cast(image1, tf.float32), tf.cast(image2, tf.float32)
    return to_uint8(image1 + factor * (image2 - image1))


def invert(image):
    """255 - each pixel."""
    return 255 - image


def posterize(image, bits):
    """Keeps the `bits` high bits of each value (int 0..8; 0 makes the image black)."""
    shift = tf.cast(8 - bits, tf.uint8)
    return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def solarize(image, threshold):
    """Inverts every value at or above threshold (a Python int 0..256; 256 changes nothing).
    Compared in uint8, without a cast of the image (the cast cost as much as the op)."""
    if threshold > 255:
        return image
    return select(image >= tf.constant(threshold, tf.uint8), 255 - image, image)


def solarize_add(image, addition, threshold=128):
    """Adds `addition` (a Python int 0..255), saturating at 255, to every value below threshold.
    min(x, 255 - a) + a is that sum in uint8, without a cast of the image."""
    added = tf.minimum(image, tf.constant(255 - addition, tf.uint8)) + tf.constant(addition, tf.uint8)
    return select(image < tf.constant(threshold, tf.uint8), added, image)


def grayscale(image):
    """The image's luma (tf.image.rgb_to_grayscale), in all three channels."""
    return tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))


def color(image, factor):
    """Saturation: blends from the grayscale image (factor 0) to the image (1) and past it."""
    return blend(grayscale(image), image, factor)


def brightness(image, factor):
    """Blends from black (factor 0) to the image (1) and past it."""
    return blend(tf.zeros_like(image), image, factor)


def contrast(image, factor):
    """Blends from a flat image of the luma's mean to the image (1) and past it.

    The mean is the grayscale image's rounded mean pixel, as PIL's ImageEnhance.Contrast
    takes it; the reference's is the pixel count / 256 (its histogram's sum, not its mean)."""
    mean = tf.round(tf.reduce_mean(tf.cast(tf.image.rgb_to_grayscale(image), tf.float32)))
    return blend(tf.fill(tf.shape(image), tf.cast(mean, tf.uint8)), image, factor)


def sharpness(image, factor):
    """Blends from the SMOOTH-filtered image (border pixels kept) to the image and past it."""
    kernel = tf.tile(tf.constant(SMOOTH_KERNEL)[:, :, tf.newaxis, tf.newaxis] / 13.0, [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(tf.cast(image, tf.float32)[tf.newaxis], kernel,
                                    [1, 1, 1, 1], padding="VALID")[0]
    smooth = to_uint8(smooth)
    inner = tf.pad(tf.ones_like(smooth, tf.bool), [[1, 1], [1, 1], [0, 0]])
    return blend(select(inner, tf.pad(smooth, [[1, 1], [1, 1], [0, 0]]), image), image, factor)


def autocontrast(image):
    """Stretches each channel so that its darkest value becomes 0 and its brightest 255 (a flat
    channel is left as it is). The extremes are taken in uint8 over [pixels, 3], cheaper than
    over the float image's axes [0, 1]."""
    pixels = tf.reshape(image, [-1, image.shape[-1]])
    low = tf.cast(tf.reduce_min(pixels, axis=0), tf.float32)
    high = tf.cast(tf.reduce_max(pixels, axis=0), tf.float32)
    is_flat = high <= low  # such a channel: offset 0, scale 1, so its values stay
    scale = tf.where(is_flat, 1.0, 255.0 / tf.maximum(high - low, 1.0))
    offset = tf.where(is_flat, 0.0, -low * scale)
    # x * scale + offset, not (x - low) * scale: the reference's float steps, whose rounding
    # differs by one in a few pixels (tests/trainer/test_augment_golden.py).
    return to_uint8(tf.cast(image, tf.float32) * scale + offset)


def equalize_channel(channel):
    """PIL's ImageOps.equalize of one uint8 [H, W] channel, by its lookup table."""
    values = tf.cast(channel, tf.int32)
    histogram = tf.math.bincount(tf.reshape(values, [-1]), minlength=256, maxlength=256)
    # The count of the brightest value present is left out of the step, as in PIL.
    step = (tf.reduce_sum(histogram) - tf.gather(histogram, tf.reduce_max(values))) // 255
    lut = (tf.cumsum(histogram) + step // 2) // tf.maximum(step, 1)
    lut = tf.clip_by_value(tf.concat([[0], lut[:-1]], 0), 0, 255)
    lut = tf.where(step > 0, lut, tf.range(256))  # step 0: PIL leaves the channel as it is
    return tf.gather(tf.cast(lut, tf.uint8), values)


def equalize(image):
    """Spreads each channel's histogram evenly over 0..255 (PIL's ImageOps.equalize)."""
    return tf.stack([equalize_channel(image[:, :, c]) for c in range(3)], axis=-1)


def transform(image, matrix):
    """The image through a projective transform (8 floats: output pixel (x, y) takes the input's
    at (a0 x + a1 y + a2, b0 x + b1 y + b2)), nearest pixel, FILL outside."""
    height, width = image.shape[0], image.shape[1]
    output_shape = [height, width] if height and width else tf.shape(image)[:2]
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[tf.newaxis], transforms=tf.cast(tf.reshape(matrix, [1, 8]), tf.float32),
        output_shape=output_shape, fill_value=float(FILL), interpolation="NEAREST",
        fill_mode="CONSTANT")[0]


def rotate(image, degrees):
    """Rotates the image about its centre by degrees (positive: counter-clockwise, as PIL's)."""
    radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    height = tf.cast(tf.shape(image)[0], tf.float32) - 1.0
    width = tf.cast(tf.shape(image)[1], tf.float32) - 1.0
    cos, sin = tf.cos(radians), tf.sin(radians)
    x_offset = (width - (cos * width - sin * height)) / 2.0
    y_offset = (height - (sin * width + cos * height)) / 2.0
    return transform(image, tf.stack([cos, -sin, x_offset, sin, cos, y_offset, 0.0, 0.0]))


def shear_x(image, level):
    """Output pixel (x, y) takes the input's at (x + level * y, y)."""
    return transform(image, tf.stack([1.0, level, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]))


def shear_y(image, level):
    """Output pixel (x, y) takes the input's at (x, y + level * x)."""
    return transform(image, tf.stack([1.0, 0.0, 0.0, level, 1.0, 0.0, 0.0, 0.0]))


def translate_x(image, pixels):
    """Moves the content `pixels` to the left (negative: to the right)."""
    return shift(image, pixels, axis=1)


def translate_y(image, pixels):
    """Moves the content `pixels` up (negative: down)."""
    return shift(image, pixels, axis=0)


def shift(image, pixels, axis):
    """What transform() gives for a translation along axis, by slice and pad instead (the
    transform's per-pixel work cost twice as much): output index i takes the input's at
    i + pixels rounded half away from zero, FILL where that is outside the image. That
    rounding makes a source index in (-0.5, 0) 0, but -0.5 itself -1: a negative tie fills
    one more line."""
    size = image.shape[axis]
    pixels = tf.cast(pixels, tf.float32)
    offset = tf.cast(tf.floor(pixels + 0.5), tf.int32)
    is_negative_tie = (pixels < 0.0) & (tf.floor(pixels + 0.5) == pixels + 0.5)
    before = tf.clip_by_value(tf.cast(is_negative_tie, tf.int32) - offset, 0, size)
    after = tf.clip_by_value(offset, 0, size)
    kept = tf.maximum(size - before - after, 0)
    begin, length, paddings = [0, 0, 0], [-1, -1, -1], [[0, 0], [0, 0], [0, 0]]
    # An empty slice (kept 0) may start anywhere in [0, size].
    begin[axis] = tf.clip_by_value(before + offset, 0, size)
    length[axis], paddings[axis] = kept, [before, size - before - kept]
    moved = tf.pad(tf.slice(image, tf.stack(begin), tf.stack(length)), tf.stack(paddings),
                   constant_values=FILL)
    return tf.ensure_shape(moved, image.shape)


def cutout(image, half_size, center):
    """Fills the square of rows [cy - half_size, cy + half_size) and the same columns around
    center (int32 [2]: cy, cx), clipped to the image, with FILL."""
    rows = tf.range(tf.shape(image)[0])[:, tf.newaxis]
    cols = tf.range(tf.shape(image)[1])[tf.newaxis, :]
    inside = ((rows >= center[0] - half_size) & (rows < center[0] + half_size)
              & (cols >= center[1] - half_size) & (cols < center[1] + half_size))
    return select(inside[:, :, tf.newaxis], tf.constant(FILL, image.dtype), image)
