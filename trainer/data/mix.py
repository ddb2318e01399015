"""Mixup and CutMix of a training batch, and the soft labels they make (--mixup_alpha, --cutmix_alpha).

Runs in the host's input pipeline on a whole batch (trainer/data/input.py batches with
drop_remainder first, so every shape is static), after the per-image augmentation:

  images  float32 [B, S, S, 3] in [-1, 1] -> the same, each image mixed with its partner
  labels  int32 [B]                       -> float32 [B, C], each row's shares summing to 1

As in tensorflow/models' official/vision/ops/augment.py (MixupAndCutmix, after timm):
image i's partner is image B-1-i (the batch reversed); each image draws its own
lambda ~ Beta(alpha, alpha), the share of itself it keeps; with both on, a batch is
CutMix with probability --mixup_switch_prob, else mixup. Mixup blends the pixels and
the labels by lambda. CutMix pastes the partner's pixels into a box of side
sqrt(1 - lambda) x the image side, centred uniformly (clipped at the edges), and lambda
becomes the share of pixels the image kept, the box clipped (timm's correct_lam; the
reference uses the box before clipping). Label smoothing is not applied here: the loss
applies it to whatever target it gets (trainer/objective/loss.py), which for a mixed
target equals timm's smoothing of each one-hot before mixing.

    .venv/bin/python -m pytest tests/trainer/test_mix.py
"""
import tensorflow as tf

from common import image_ops
from trainer.data.augment import setting


def is_mixing(params):
    """True when the training labels are soft [B, C] rows (mixup or CutMix on)."""
    return bool(setting(params, "mixup_alpha") or setting(params, "cutmix_alpha"))


def sample_beta(alpha, shape, seed):
    """float32 Beta(alpha, alpha) draws: X / (X + Y) of two Gamma(alpha) draws."""
    x_seed, y_seed = image_ops.stateless_seeds(seed, 2)
    x = tf.random.stateless_gamma(shape, x_seed, alpha)
    y = tf.random.stateless_gamma(shape, y_seed, alpha)
    return x / (x + y)


def mixup(images, alpha, seed):
    """(images blended with their partners by lambda, lambda float32 [B])."""
    lam = sample_beta(alpha, [images.shape[0]], seed)
    shares = lam[:, tf.newaxis, tf.newaxis, tf.newaxis]
    return shares * images + (1.0 - shares) * tf.reverse(images, [0]), lam


def cutmix_boxes(lam, height, width, seed):
    """bool [B, H, W]: the box of each image that takes its partner's pixels."""
    ratio = tf.sqrt(1.0 - lam)
    half_h = tf.cast(ratio * height, tf.int32) // 2
    half_w = tf.cast(ratio * width, tf.int32) // 2
    y_seed, x_seed = image_ops.stateless_seeds(seed, 2)
    center_y = tf.random.stateless_uniform(lam.shape, y_seed, 0, height, tf.int32)
    center_x = tf.random.stateless_uniform(lam.shape, x_seed, 0, width, tf.int32)
    rows = tf.range(height)[tf.newaxis, :, tf.newaxis]
    cols = tf.range(width)[tf.newaxis, tf.newaxis, :]

    def between(index, center, half):
        return (index >= (center - half)[:, None, None]) & (index < (center + half)[:, None, None])
    return between(rows, center_y, half_h) & between(cols, center_x, half_w)


def cutmix(images, alpha, seed):
    """(images with their partners' box pasted in, lambda float32 [B]: the share of pixels kept)."""
    beta_seed, box_seed = image_ops.stateless_seeds(seed, 2)
    height, width = images.shape[1], images.shape[2]
    boxes = cutmix_boxes(sample_beta(alpha, [images.shape[0]], beta_seed), height, width, box_seed)
    mixed = tf.where(boxes[..., tf.newaxis], tf.reverse(images, [0]), images)
    kept = 1.0 - tf.reduce_mean(tf.cast(boxes, tf.float32), axis=[1, 2])
    return mixed, kept


def mix_labels(labels, lam, num_classes):
    """float32 [B, C]: lambda of each image's one-hot label plus 1 - lambda of its partner's."""
    one_hot = tf.one_hot(labels, num_classes)
    return lam[:, tf.newaxis] * one_hot + (1.0 - lam[:, tf.newaxis]) * tf.reverse(one_hot, [0])


def mix_batch(images, labels, params, seed):
    """(images, labels) of a training batch, mixed when --mixup_alpha or --cutmix_alpha is on;
    unchanged (int labels) otherwise. seed: int [2]."""
    if not is_mixing(params):
        return images, labels
    mixup_alpha = float(setting(params, "mixup_alpha"))
    cutmix_alpha = float(setting(params, "cutmix_alpha"))
    switch_seed, mix_seed = image_ops.stateless_seeds(seed, 2)
    if mixup_alpha and cutmix_alpha:
        is_cutmix = tf.random.stateless_uniform([], switch_seed) < float(setting(params, "mixup_switch_prob"))
        images, lam = tf.cond(is_cutmix, lambda: cutmix(images, cutmix_alpha, mix_seed),
                              lambda: mixup(images, mixup_alpha, mix_seed))
    elif cutmix_alpha:
        images, lam = cutmix(images, cutmix_alpha, mix_seed)
    else:
        images, lam = mixup(images, mixup_alpha, mix_seed)
    return images, mix_labels(labels, lam, int(params["num_classes"]))
