"""Batch prediction with TPUEstimator.predict: the Estimator engine's predict_fn for --mode predict.

trainer/run/predictions.py reads the inputs, checks every image and writes the
records; here the usable images are classified with ONE TPUEstimator.predict call per run,
whose input streams every chunk (trainer/estimator/predict_feed.py), through the
evaluation image path (common/image_ops.preprocess_for_eval). Batches have static
shapes: each chunk is padded with index -1 rows, which are dropped, so every
image gets exactly one row.

    .venv/bin/python -m trainer.task --mode predict --output_dir work/demo/run \\
        --predict_input work/demo/images/eval.csv [--predict_format csv] [--use_tpu ...]
"""
import numpy as np
import tensorflow as tf

from common import image_ops, signature
from trainer.data import input as input_lib
from trainer.estimator.predict_feed import ChunkFeed, ChunkRows

INDEX_KEY = "index"  # int32 [B] feature and prediction: input position, -1 for padding


def padded_count(num_images, params):
    """Rows each input_fn invocation yields after padding: whole steps, the same on every host."""
    num_shards, _ = input_lib.input_shard(params)
    step = params["batch_size"] * input_lib.batches_per_step(params)
    return input_lib.padded_shard_size(num_images, num_shards, step)


def make_host_rows(feed, params):
    """generator() -> per chunk, this host's (jpegs, indices): its share of the chunk's images,
    padded with index -1 rows to padded_count of the chunk, the same count on every host, so
    every host runs the same steps for each chunk and every image is classified once."""
    num_shards, shard_index = input_lib.input_shard(params)

    def generator():
        number = 0
        while (chunk := feed.take(number, num_shards)) is not None:
            start, jpegs = chunk
            mine = range(shard_index, len(jpegs), num_shards)
            padding = padded_count(len(jpegs), params) - len(mine)
            yield (np.array([jpegs[i] for i in mine] + [b""] * padding, dtype=object),
                   np.array([start + i for i in mine] + [-1] * padding, dtype=np.int32))
            number += 1
    return generator


def make_predict_input_fn(jpegs_or_feed):
    """input_fn(params) -> batches of {"image", "index"}, padded with index -1 rows.

    jpegs_or_feed: checked image bytes (every one decodes), or a ChunkFeed of chunks of
    them streamed through one input. On a multi-host TPU each host feeds its own share
    of each chunk (make_host_rows). drop_remainder=True only makes the static batch shape
    the TPU needs: the padding made each chunk's count whole.
    """
    def input_fn(params):
        feed = jpegs_or_feed if isinstance(jpegs_or_feed, ChunkFeed) else ChunkFeed([jpegs_or_feed])
        image_size = params["image_size"]
        blank = tf.zeros([image_size, image_size, 3], tf.float32)
        dataset = tf.data.Dataset.from_generator(make_host_rows(feed, params), output_signature=(
            tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32))).unbatch()
        dataset = dataset.map(lambda jpeg, index: {
            "image": tf.cond(index >= 0, lambda: image_ops.preprocess_for_eval(jpeg, image_size),
                             lambda: blank), INDEX_KEY: index},
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return batch_for_model_fn(dataset, params)
    return input_fn


def batch_for_model_fn(dataset, params):
    """Whole batches of rows (the padding made each count whole), in the layout model_fn expects."""
    dataset = dataset.batch(params["batch_size"], drop_remainder=True)
    if params["use_bfloat16"] or params["transpose_input"]:
        finalize = input_lib.finalize_batch(params)
        dataset = dataset.map(lambda batch: finalize(batch, None)[0])
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_constant_input_fn(jpegs):
    """input_fn(params) -> batches of {"image", "index"} of one chunk held as graph constants,
    padded with index -1 rows: the input for a TPU (use_tpu), whose input pipeline may run on
    a TPU host without Python (a TPU Node, as AI Platform Training attaches), where the
    streamed input's generator cannot run.

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
        return batch_for_model_fn(dataset, params)
    return input_fn


def predict_with_estimator(estimator, jpeg_chunks, checkpoint_path, is_streamed=True):
    """Per chunk of jpeg_chunks, in order: float32 [len(chunk), num_classes], each image once
    (None for an empty chunk). One estimator.predict call streams every chunk: a call's
    graph, session and checkpoint restore are paid once per run, not once per chunk.
    is_streamed=False (use_tpu): one call per chunk, its images as graph constants."""
    if not is_streamed:
        yield from (predict_chunk(estimator, jpegs, checkpoint_path) for jpegs in jpeg_chunks)
        return
    feed = ChunkFeed(jpeg_chunks)
    rows = ChunkRows(feed.sizes)
    for prediction in estimator.predict(make_predict_input_fn(feed), checkpoint_path=checkpoint_path):
        index = int(prediction[INDEX_KEY])
        if index >= 0:  # -1: a padding row
            yield from rows.add(index, prediction[signature.OUTPUT_PROBABILITIES])
    feed.raise_error()
    yield from rows.finished()
    rows.check_complete()


def predict_chunk(estimator, jpegs, checkpoint_path):
    """float32 [len(jpegs), num_classes] of one chunk through its own predict call (None if empty)."""
    if not jpegs:
        return None
    rows = {}
    for prediction in estimator.predict(make_constant_input_fn(jpegs), checkpoint_path=checkpoint_path):
        index = int(prediction[INDEX_KEY])
        if index >= 0:  # -1: a padding row
            rows[index] = prediction[signature.OUTPUT_PROBABILITIES]
    if sorted(rows) != list(range(len(jpegs))):
        raise RuntimeError(f"predict returned {len(rows)} of {len(jpegs)} images")
    return np.stack([rows[i] for i in range(len(jpegs))])
