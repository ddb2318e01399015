"""A real trainer export: its signatures as saved_model_cli shows them, and train/serve consistency.

Trains a tiny small_cnn for 2 steps with `trainer.task` on a dataset made by the
write_tfrecord_dataset fixture, then classifies the same JPEGs four ways: (a) the
trainer's evaluation input path + model_fn on the checkpoint (Estimator.predict),
(b) the SavedModel loaded in-process, (c) the stand-in over REST, (d) over gRPC.

    .venv/bin/python -m pytest tests/serving/test_real_export.py
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from common import signature

from serving.standin import server
from serving.grpc_client import GrpcClient
from serving.rest_client import RestClient
from tests.engines import needs_estimator

pytestmark = [pytest.mark.trains]

TOLERANCE = 1e-5  # the bound on probabilities across the four paths
TINY_HPARAMS = "cnn_filters: [4]\ndense_units: 8\n"


def train_tiny_model(data_dir, out_dir, config_path):
    """Runs the trainer's entry point for 2 steps; returns the export version directory."""
    from trainer import task
    config_path.write_text(TINY_HPARAMS)
    export_dir = task.main([
        "--config", str(config_path), "--output_dir", str(out_dir),
        "--train_data_path", str(data_dir / "train-*"), "--eval_data_path", str(data_dir / "eval-*"),
        "--train_steps", "2", "--steps_per_eval", "2", "--train_batch_size", "8",
        "--eval_batch_size", "6", "--image_size", "16"])
    return export_dir.decode() if isinstance(export_dir, bytes) else export_dir


def start_saved_model_cli(export_dir):
    """`saved_model_cli show --all` in the background (it imports TF: ~10 s we overlap)."""
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    return subprocess.Popen([cli, "show", "--all", "--dir", export_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def check_saved_model_cli_output(text):
    """Exactly the contract's signatures, inputs and outputs; no TPU ops in the graph."""
    names = re.findall(r"signature_def\['([^']+)'\]", text)
    assert sorted(names) == sorted(signature.SIGNATURES), names
    blocks = dict(zip(names, re.split(r"signature_def\['[^']+'\]:", text)[1:]))
    for name, block in blocks.items():
        inputs = sorted(re.findall(r"inputs\['([^']+)'\]", block))
        outputs = sorted(re.findall(r"outputs\['([^']+)'\]", block))
        keyed = name == signature.SIGNATURE_KEYED
        assert inputs == sorted(["image_bytes"] + (["key"] if keyed else [])), (name, inputs)
        assert outputs == sorted(["class_ids", "classes", "probabilities"] + (["key"] if keyed else []))
        assert "Method name is: tensorflow/serving/predict" in block
    ops = re.search(r"contains the following ops: \{(.*)\}", text).group(1)
    assert not [op for op in ops.split(", ") if "TPU" in op.upper()], ops


def predict_with_estimator(out_dir, jpegs, record_path):
    """(a) Probabilities from the trainer's eval input path and model_fn on the checkpoint."""
    from common import record_schema
    from trainer import chain
    from trainer.data import input as input_lib
    from trainer.estimator import engine as estimator_engine
    from trainer.run import checkpoints
    with tf.io.TFRecordWriter(str(record_path)) as writer:
        for i, jpeg in enumerate(jpegs):
            height, width = tf.image.extract_jpeg_shape(jpeg).numpy()[:2]
            writer.write(record_schema.make_example(jpeg, int(height), int(width), 0, "a", f"{i}.jpg"))
    params = chain.resolve({"output_dir": str(out_dir)})
    checkpoint, _ = checkpoints.latest_checkpoint(str(out_dir))
    predictions = estimator_engine.make_estimator(params).predict(
        input_lib.make_input_fn(str(record_path), tf.estimator.ModeKeys.PREDICT),
        checkpoint_path=checkpoint)
    rows = [p[signature.OUTPUT_PROBABILITIES] for _, p in zip(jpegs, predictions)]  # drop padding
    return np.stack(rows)


def predict_in_process(export_dir, jpegs):
    """(b) Probabilities from the SavedModel's serving_default, loaded in this process."""
    loaded = tf.saved_model.load(export_dir)
    outputs = loaded.signatures[signature.SIGNATURE_DEFAULT](image_bytes=tf.constant(jpegs))
    return outputs[signature.OUTPUT_PROBABILITIES].numpy()


def predict_over_servers(export_dir, jpegs):
    """(c, d) Probabilities from the stand-in over REST and over gRPC, one image per request."""
    running = server.start_server("image_classifier", os.path.dirname(export_dir))
    clients = [RestClient(f"http://127.0.0.1:{running.rest_port}", "image_classifier"),
               GrpcClient(f"127.0.0.1:{running.grpc_port}", "image_classifier")]
    try:
        for client in clients:  # the keyed signature passes keys through, over both transports
            keyed = client.predict(jpegs, signature.SIGNATURE_KEYED, keys=["k1", "k2", "k3", "k4"])
            assert [k.decode() if isinstance(k, bytes) else k for k in keyed["key"]] == \
                ["k1", "k2", "k3", "k4"]
        return [np.concatenate([c.predict([j])[signature.OUTPUT_PROBABILITIES] for j in jpegs])
                for c in clients]
    finally:
        for client in clients:
            client.close()
        running.stop()


@needs_estimator  # the Estimator engine's own predictions are the reference
def test_trainer_export_matches_contract_and_serves_consistently(
        write_tfrecord_dataset, make_jpeg, tmp_path):
    data_dir = write_tfrecord_dataset({"train": 24, "eval": 6}, size=24, shards=1)
    export_dir = train_tiny_model(data_dir, tmp_path / "out", tmp_path / "tiny.yaml")
    cli = start_saved_model_cli(export_dir)
    jpegs = [make_jpeg(24, 24, seed=1), make_jpeg(20, 37, seed=2), make_jpeg(40, 16, seed=3),
             make_jpeg(24, 24, seed=4, mode="L")]  # grayscale: decoded to 3 channels everywhere
    paths = {"estimator": predict_with_estimator(tmp_path / "out", jpegs, tmp_path / "probe.tfrecord"),
             "saved_model": predict_in_process(export_dir, jpegs)}
    paths["rest"], paths["grpc"] = predict_over_servers(export_dir, jpegs)
    for name, probabilities in paths.items():
        assert probabilities.shape == (len(jpegs), 3), name
        np.testing.assert_allclose(probabilities, paths["estimator"], rtol=0, atol=TOLERANCE,
                                   err_msg=f"{name} disagrees with the trainer's eval path")
    assert np.ptp(paths["saved_model"], axis=0).max() > 0  # different images, different outputs
    check_saved_model_cli_output(cli.communicate(timeout=120)[0])
