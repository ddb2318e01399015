"""Checks of a finished run shared by both engines' tests, without the Estimator engine: the
Keras engine's tests run where tensorflow-estimator is not installed (make test-keras).

    .venv/bin/python -m pytest tests/trainer/test_estimator_engine.py tests/trainer/test_keras_engine.py
"""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from common import record_schema, signature
from trainer import task
from trainer.run import checkpoints, eval_records, input_images


def served_predictions(export_dir, signature_name, jpegs, keys=None):
    loaded = tf.saved_model.load(export_dir)
    assert set(loaded.signatures) == set(signature.SIGNATURES)
    inputs = {signature.INPUT_IMAGE_BYTES: tf.constant(jpegs)}
    if keys is not None:
        inputs[signature.INPUT_KEY] = tf.constant(keys)
    return {k: v.numpy() for k, v in loaded.signatures[signature_name](**inputs).items()}


def summary_tags(directory):
    """Tags of the scalar summaries in a directory's TensorBoard event files."""
    tags = set()
    for path in tf.io.gfile.glob(f"{directory}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def training_images(output_dir):
    """{step: uint8 [3, S, S, 3]} of the train_input/image/0..2 summaries in output_dir's event
    files (trainer/run/input_images.py)."""
    found = {}
    for path in tf.io.gfile.glob(f"{output_dir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                index = input_images.shown_index(value.tag)
                if index is not None and value.HasField("image"):
                    found.setdefault(event.step, {})[index] = tf.io.decode_png(
                        value.image.encoded_image_string).numpy()
    return {step: np.stack([shown[i] for i in sorted(shown)]) for step, shown in found.items()}


def read_eval_split(params):
    """(jpegs, labels) of every eval record."""
    jpegs, labels = [], []
    for path in sorted(tf.io.gfile.glob(params["eval_data_path"])):
        for record in tf.compat.v1.io.tf_record_iterator(path):
            example = record_schema.decode_example_proto(record)
            jpegs.append(example[record_schema.ENCODED])
            labels.append(example[record_schema.LABEL])
    return jpegs, np.array(labels)


def check_eval_counts_every_example_once(params, export_dir):
    """11 eval examples in batches of 8: the 5 padding rows must not change the accuracy."""
    jpegs, labels = read_eval_split(params)
    assert len(jpegs) == params["num_eval_examples"] == 11
    served = served_predictions(export_dir, signature.SIGNATURE_DEFAULT, jpegs)
    accuracy = np.mean(served[signature.OUTPUT_CLASS_IDS] == labels)
    assert eval_records.read_eval_results(params["output_dir"])[-1]["accuracy"] == pytest.approx(accuracy)


def check_rerun_changes_nothing(params, argv):
    """The same command after the run finished: no training, no new eval or export, no error."""
    out = params["output_dir"]
    before = (checkpoints.latest_checkpoint(out), eval_records.read_eval_results(out), sorted(os.listdir(out)))
    assert task.main(argv) == os.path.join(out, "export", "image_classifier", "4")
    assert (checkpoints.latest_checkpoint(out), eval_records.read_eval_results(out), sorted(os.listdir(out))) == before


def read_eval_events(eval_dir):
    """{tag: {step: value}}: images as decoded uint8 arrays, scalars as floats."""
    tags = {}
    for path in glob.glob(f"{eval_dir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "images":
                    png = tf.make_ndarray(value.tensor)[2]
                    tags.setdefault(value.tag, {})[event.step] = tf.io.decode_png(png).numpy()
                elif value.HasField("tensor") and value.tag.startswith("per_class"):
                    tags.setdefault(value.tag, {})[event.step] = tf.make_ndarray(value.tensor)
    return tags
