"""The training images TensorBoard shows, alike in every engine: train_input/image/0, /1 and /2.

The first SHOWN images of a training batch as the network gets them, after --augment,
--random_erasing, mixup and CutMix (trainer/data/), un-normalized from [-1, 1]
(common/image_ops.py) to uint8 pixels: a float image would be stretched by the summary op to
fill [0, 255], undoing what the brightness and contrast ops did. One TF1 image summary (a tag
per image in TensorBoard's Images tab) at every save_summary_steps: the Estimator engine's
model_fn adds it off TPU for its SummarySaverHook; the Keras engine's train function
(trainer/keras/train.py) and the JAX engine's loop (trainer/jax/train.py) write it at the steps
of their scalars (trainer/run/training_log.py). The report (trainer/report/) shows the newest.

    .venv/bin/python -m pytest tests/trainer/test_input_images.py tests/trainer/test_training_output.py
"""
import re
import warnings

import tensorflow as tf

from common import image_ops

NAME = "train_input"
SHOWN = 3  # images a summary step shows, the batch's first: TensorBoard names them NAME/image/<i>
TAG = re.compile(rf"{NAME}/image/(\d+)")


def shown_pixels(images):
    """uint8 [min(B, SHOWN), S, S, 3] of a training batch's images, float [B, S, S, 3] in [-1, 1]."""
    first = tf.cast(images[:SHOWN], tf.float32)
    pixels = (first - image_ops.NORMALIZE_OFFSET) * (1.0 / image_ops.NORMALIZE_SCALE)  # [0, 255]
    return tf.cast(tf.round(tf.clip_by_value(pixels, 0.0, 255.0)), tf.uint8)


def image_summary(images):
    """The serialized TF1 Summary of a batch's first images (in graph mode also added to the
    SUMMARIES collection, which TPUEstimator's SummarySaverHook writes)."""
    with warnings.catch_warnings():  # TF2's note that it does not forward the TF1 op to a TF2 writer
        warnings.filterwarnings("ignore", "Cannot activate TF2 compatibility", UserWarning)
        return tf.compat.v1.summary.image(NAME, shown_pixels(images), max_outputs=SHOWN)


# ImageSummary has no eager kernel (its bad_color attr): eager callers (the JAX loop) run it in a graph.
image_summary_in_graph = tf.function(image_summary)


def write_images(writer, images, step):
    """The image summary of a training batch at step, into writer (a tf.summary writer). Made
    before writer is the default: a TF1 summary op made under a default writer would try to
    write itself too (TF2's compatibility for TF1 summaries)."""
    summary = image_summary_in_graph(images)
    with writer.as_default():
        return tf.summary.experimental.write_raw_pb(summary, step=step)


def shown_index(tag):
    """The image's place in its batch (0..SHOWN-1) for a tag this module writes; None otherwise."""
    match = TAG.fullmatch(tag)
    return int(match[1]) if match else None
