"""Batch prediction with TPUEstimator.predict: the Estimator engine's predict_fn for --mode predict.

trainer/run/predictions.py reads the inputs, checks every image and writes the
records; here the usable images are classified with TPUEstimator.predict and the
evaluation image path (common/image_ops.preprocess_for_eval). Batches have static
shapes: the last one is padded with index -1 rows, which are dropped, so every
image gets exactly one row.

    .venv/bin/python -m trainer.task --mode predict --output_dir work/demo/run \\
        --predict_input work/demo/images/eval.csv [--predict_format csv] [--use_tpu ...]
"""
import numpy as np
import tensorflow as tf

from common import image_ops, signature
from trainer.data import input as input_lib

INDEX_KEY = "index"  # int32 [B] feature and prediction: input position, -1 for padding


def padded_count(num_images, params):
    """Rows each input_fn invocation yields after padding: whole steps, the same on every host."""
    num_shards, _ = input_lib.input_shard(params)
    step = params["batch_size"] * input_lib.batches_per_step(params)
    return input_lib.padded_shard_size(num_images, num_shards, step)


def make_predict_input_fn(jpegs):
    """input_fn(params) -> batches of {"image", "index"}, padded with index -1 rows.

    jpegs: checked image bytes (every one decodes). On a multi-host TPU each
    host feeds its own share (input_lib.input_shard), padded to the same number
    of steps, so every image is classified once. drop_remainder=True only makes
    the static batch shape the TPU needs: the padding made the count whole.
    """
    def input_fn(params):
        image_size = params["image_size"]
        num_shards, shard_index = input_lib.input_shard(params)
        real = tf.data.Dataset.from_tensor_slices(
            (tf.constant(list(jpegs), tf.string), tf.range(len(jpegs), dtype=tf.int32)))
        real = real.shard(num_shards, shard_index).map(lambda jpeg, index: {
            "image": image_ops.preprocess_for_eval(jpeg, image_size), INDEX_KEY: index},
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        pad = {"image": tf.zeros([image_size, image_size, 3], tf.float32),
               INDEX_KEY: tf.constant(-1, tf.int32)}
        padding = padded_count(len(jpegs), params) - len(range(shard_index, len(jpegs), num_shards))
        dataset = real.concatenate(tf.data.Dataset.from_tensors(pad).repeat(padding))
        dataset = dataset.batch(params["batch_size"], drop_remainder=True)
        if params["use_bfloat16"] or params["transpose_input"]:
            finalize = input_lib.finalize_batch(params)  # the layout model_fn expects
            dataset = dataset.map(lambda batch: finalize(batch, None)[0])
        return dataset.prefetch(tf.data.AUTOTUNE)
    return input_fn


def predict_with_estimator(estimator, jpegs, checkpoint_path):
    """float32 [len(jpegs), num_classes]: each real row once, in input order."""
    if not jpegs:
        return None
    rows = {}
    for prediction in estimator.predict(make_predict_input_fn(jpegs),
                                        checkpoint_path=checkpoint_path):
        index = int(prediction[INDEX_KEY])
        if index >= 0:  # -1: a padding row
            rows[index] = prediction[signature.OUTPUT_PROBABILITIES]
    if sorted(rows) != list(range(len(jpegs))):
        raise RuntimeError(f"predict returned {len(rows)} of {len(jpegs)} images")
    return np.stack([rows[i] for i in range(len(jpegs))])
