"""Batch prediction with TPUEstimator.predict: `python -m trainer.task --mode predict`.

Reads a CSV of image URIs ('uri[,label]', the pipeline's format) or a TFRecord
glob (common/prediction_inputs.py), checks every image with serving's decoder in
Python first, then classifies the usable ones with TPUEstimator.predict and
the evaluation image path (common/image_ops.preprocess_for_eval). Batches
have static shapes: the last one is padded with index -1 rows, which are
dropped, so every input gets exactly one output record (an error record for
an unreadable or corrupt image). --predict_export_dir classifies with a named
export instead of the latest checkpoint of --output_dir.

    .venv/bin/python -m trainer.task --mode predict --output_dir work/demo/run \\
        --predict_input work/demo/images/eval.csv [--predict_format csv] [--use_tpu ...]
"""
import json
import logging
import os

import numpy as np
import tensorflow as tf

from common import export_predictor, prediction_inputs, prediction_records, signature
from common import image_ops
from trainer.data import input as input_lib
from common.chunks import split_into_chunks

INDEX_KEY = "index"  # int32 [B] feature and prediction: input position, -1 for padding
PREDICTIONS_SUBDIR = "predictions"


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


def load_predictor(params, checkpoint_path):
    """The named export (loaded once), or None to predict from checkpoint_path."""
    if params["predict_export_dir"]:
        export_dir, version = export_predictor.resolve_export_dir(params["predict_export_dir"])
        logging.getLogger(__name__).info("Predicting with version %s of %s", version,
                                         params["predict_export_dir"])
        return export_predictor.load_export(export_dir)
    if checkpoint_path is None:
        raise FileNotFoundError(f"output_dir={params['output_dir']!r} has no checkpoint to predict "
                                f"with; train first or pass --predict_export_dir")
    return None


def predict_probabilities(estimator, params, checkpoint_path, export, jpegs):
    """Probabilities and class names from the loaded export, or from the checkpoint."""
    if export is not None:
        probabilities = export_predictor.predict_in_batches(
            export, jpegs, params["predict_batch_size"])
        return probabilities, export.labels
    return predict_with_estimator(estimator, jpegs, checkpoint_path), params["labels"]


def make_records(images, probabilities, labels, top_k):
    """One record per input, in input order: a prediction or an error."""
    rows = iter(probabilities if probabilities is not None else [])
    records = []
    for image in images:
        if image.error:
            records.append(prediction_records.make_error_record(image.uri, *image.error,
                                                                label=image.label))
        else:
            records.append(prediction_records.make_prediction_record(
                image.uri, next(rows), labels, top_k, label=image.label))
    return records


def output_dir_of(params):
    return params["predict_output_dir"] or os.path.join(params["output_dir"], PREDICTIONS_SUBDIR)


def run_predict(estimator, params, checkpoint_path):
    """Classifies params["predict_input"]; writes the records; returns the summary dict.

    Images are read, checked and classified predict_chunk_images at a time:
    host memory and the graph (whose image constants must stay under 2 GB)
    hold one chunk, however long the input. Only the small records accumulate.
    """
    export = load_predictor(params, checkpoint_path)
    records = []
    images_in = prediction_inputs.read_inputs(params["predict_input"])
    for images in split_into_chunks(images_in, params["predict_chunk_images"]):
        jpegs = [image.jpeg for image in images if not image.error]
        logging.info("Predicting %d images (%d unusable; %d done) from %s", len(jpegs),
                     len(images) - len(jpegs), len(records),
                     params["predict_export_dir"] or checkpoint_path)
        probabilities, labels = predict_probabilities(estimator, params, checkpoint_path,
                                                      export, jpegs)
        records += make_records(images, probabilities, labels, params["top_k"])
    output_dir = output_dir_of(params)
    summary = prediction_records.write_records(
        records, output_dir, params["predict_format"], params["predict_records_per_shard"],
        class_names=export.labels if export is not None else params["labels"])
    summary["output_dir"] = output_dir
    logging.info("Prediction summary: %s", json.dumps(summary, sort_keys=True))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary
