"""The Keras engine's predict_fn for --mode predict: model.predict on the checkpoint's weights.

trainer/run/predictions.py reads the inputs, checks every image and writes the
records (the same as for the Estimator engine); here the usable images go through the
evaluation image path (common/image_ops.preprocess_for_eval) in batches of
predict_batch_size (the last one topped up with blank images, their rows dropped), and
the network holds the checkpoint's weights, its moving averages when kept, as
evaluation and export read them.

    .venv/bin/python -m trainer.task --engine keras --mode predict --output_dir OUT \\
        --predict_input images.csv
"""
import tensorflow as tf

from common import image_ops
from trainer.keras import checkpoint as checkpoint_lib


def make_dataset(jpegs, params):
    """Whole batches of predict_batch_size eval-path images (static shapes, as a TPU compiles
    them): the last one topped up with blank images, whose rows are dropped after."""
    size, batch = params["image_size"], params["predict_batch_size"]
    images = tf.data.Dataset.from_tensor_slices(tf.constant(list(jpegs), tf.string)).map(
        lambda jpeg: image_ops.preprocess_for_eval(jpeg, size),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    blanks = -len(jpegs) % batch
    images = images.concatenate(tf.data.Dataset.from_tensors(tf.zeros([size, size, 3])).repeat(blanks))
    return images.batch(batch, drop_remainder=True)


def predict_chunks(model, params, jpeg_chunks, checkpoint_path):
    """Per chunk of jpeg_chunks, in order: float32 [len(chunk), num_classes], each image once
    (None for an empty chunk); the checkpoint's weights are loaded once for the run."""
    use_averages = bool(params["moving_average_decay"])
    with checkpoint_lib.weights_of(model.network, checkpoint_path, use_averages):
        for jpegs in jpeg_chunks:
            yield predict_probabilities(model, params, jpegs) if jpegs else None


def predict_probabilities(model, params, jpegs):
    """float32 [len(jpegs), num_classes]: each image once, in input order."""
    logits = model.predict(make_dataset(jpegs, params), verbose=0)[:len(jpegs)]
    return tf.nn.softmax(tf.cast(logits, tf.float32)).numpy()
