"""The JAX engine (trainer/jax/): the run directory's contract, its export against the JAX model,
one compilation per run, warm start across engines, and the refusals.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_engine.py
"""
import glob
import json
import os

import jax
import numpy as np
import pytest
import tensorflow as tf

from common import image_ops, signature
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.run_checks import (check_eval_counts_every_example_once, check_rerun_changes_nothing,
                                      read_eval_split, served_predictions, summary_tags,
                                      training_images)
from tests.user_commands import run, run_trainer
from trainer import chain, task
from trainer.jax import engine as jax_engine, export as jax_export
from trainer.keras import checkpoint as keras_checkpoint
from trainer.run import checkpoints, eval_records, variable_names

pytestmark = pytest.mark.trains


@pytest.fixture(scope="module")
def jax_run(tiny_run_of):
    """(data, OUT, params) of the session's finished TINY_FLAGS run of the JAX engine."""
    data, out = tiny_run_of("jax")
    return data, out, chain.parse_params(run_argv(data, out))


def run_argv(data, out, **flags):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine="jax", **flags))


def test_a_jax_run_keeps_the_run_directory_contract(jax_run):
    data, out, params = jax_run
    assert json.loads((out / "params.json").read_text())["engine"] == "jax"
    assert [step for step, _ in checkpoints.list_checkpoints(str(out))] == [2, 4]  # every save_checkpoints_steps
    assert [r["global_step"] for r in eval_records.read_eval_results(str(out))] == [2, 4]  # every steps_per_eval
    assert {"loss", "learning_rate", "train_accuracy", "global_step/sec"} <= summary_tags(out)
    images = training_images(out)  # the input images, at the scalars' steps as the Keras engine's
    assert sorted(images) == [2, 4] and {shown.shape for shown in images.values()} == {(3, 16, 16, 3)}
    assert {"accuracy", "loss", "cross_entropy"} <= summary_tags(out / "eval")
    export_dir = str(out / "export" / "image_classifier" / "4")
    check_eval_counts_every_example_once(dict(params, num_eval_examples=11), export_dir)
    assert os.path.isdir(out / "best_export" / "image_classifier")
    check_rerun_changes_nothing(params, run_argv(data, out))


def jax_probabilities(params, jpegs):
    """The JAX model's softmax on the newest checkpoint of params' run, through the eval image path."""
    engine = jax_engine.JaxEngine(dict(params, mode="evaluate"))
    images = np.stack([image_ops.preprocess_for_eval(jpeg, params["image_size"]).numpy() for jpeg in jpegs])
    return np.asarray(jax.nn.softmax(engine.logits(engine.state, images, False)))


def test_the_tf_keras_twin_and_the_export_answer_as_the_jax_model(jax_run):
    """The weights move between Keras 3 and tf-keras by layer order and name: the twin's outputs
    and the served probabilities are the JAX network's to 1e-5."""
    _, out, params = jax_run
    jpegs, _ = read_eval_split(params)
    expected = jax_probabilities(params, jpegs)
    prefix, _ = checkpoints.latest_checkpoint(str(out))
    twin = jax_export.build_twin(params)
    with keras_checkpoint.weights_of(twin, prefix, use_averages=False):
        images = np.stack([image_ops.preprocess_for_eval(jpeg, params["image_size"]).numpy() for jpeg in jpegs])
        twin_probabilities = tf.nn.softmax(twin(images, training=False)).numpy()
    assert np.abs(twin_probabilities - expected).max() <= 1e-5
    served = served_predictions(str(out / "export" / "image_classifier" / "4"), signature.SIGNATURE_DEFAULT, jpegs)
    assert np.abs(served[signature.OUTPUT_PROBABILITIES] - expected).max() <= 1e-5


def test_the_train_step_compiles_once_across_calls_and_rounds(jax_run, tmp_path):
    """3 rounds of calls of 1 and 2 steps (iterations_per_loop 2, checkpoints every 3): one
    compilation of the step, whatever the call or the round."""
    data, _, _ = jax_run
    params = chain.parse_params(run_argv(data, tmp_path / "out", train_steps=9, iterations_per_loop=2,
                                         save_checkpoints_steps=3))
    engine = jax_engine.JaxEngine(params)
    for max_steps in (3, 6, 9):
        assert engine.train(max_steps) == max_steps
    assert engine.train_step._cache_size() == 1
    assert [step for step, _ in checkpoints.list_checkpoints(str(tmp_path / "out"))] == [3, 6, 9]


@pytest.mark.process
def test_another_engine_on_a_jax_run_is_refused_in_one_line(copy_of_tiny_run):
    data, out = copy_of_tiny_run("jax")
    result = run_trainer(*run_argv(data, out)[:-1], "--engine=keras")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "engine" in line and "'jax'" in line, line


@pytest.mark.process
def test_a_tf_keras_only_network_is_refused_before_anything_is_written(jax_run, tmp_path):
    data, _, _ = jax_run
    result = run_trainer(*run_argv(data, tmp_path / "out"), "--model=hub", f"--hub_module={tmp_path}",
                         "--image_size=32")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model='hub' (flag --model) is built with tf.keras only; engine='jax' (flag --engine) "
        "trains convnext_tiny, efficientnet_b0, efficientnetv2_b0, efficientnetv2_s, mobilenet_v2, resnet, "
        "resnet50, small_cnn: use --engine keras for it")
    assert not (tmp_path / "out").exists()


def test_warm_start_from_a_keras_engine_checkpoint(jax_run, tiny_run_of, tmp_path):
    """The Keras engine's run (TF 2.20 in this environment) warm-starts the JAX network by name:
    every variable but the excluded head holds the source's value."""
    data, _, _ = jax_run
    _, keras_out = tiny_run_of("keras")
    params = chain.parse_params(run_argv(data, tmp_path / "out", warm_start_from=keras_out))
    engine = jax_engine.JaxEngine(params)
    reader = tf.train.load_checkpoint(checkpoints.latest_checkpoint(str(keras_out))[0])
    names = {v.path: np.asarray(v.value) for v in engine.model.network.weights}
    started = [name for name in names if not name.startswith("logits")]
    assert started and all(np.array_equal(names[name], reader.get_tensor(variable_names.network_key(name)))
                           for name in started)


def read_records(folder):
    """{uri: record} of the prediction records (JSON lines) in folder."""
    return {record["uri"]: record for path in glob.glob(str(folder / "predictions-*.jsonl"))
            for record in map(json.loads, open(path))}


@pytest.mark.process
def test_tflite_predict_and_batch_prediction_take_a_jax_run(jax_run, tmp_path):
    """trainer.export_tflite converts the run's checkpoint through its tf-keras twin's export;
    --mode predict classifies every image once with the JAX network, and serving.batch_predict
    (Beam's RunInference) the same images with the run's export, to the same probabilities."""
    data, out, params = jax_run
    result = run("trainer.export_tflite", "--output_dir", out, "--tflite_dir", tmp_path / "tflite",
                                "--calibration_images", 4)
    assert result.returncode == 0, result.stderr[-3000:]
    check = json.loads((tmp_path / "tflite" / "tflite_check.json").read_text())
    assert check and (tmp_path / "tflite" / "model.tflite").exists()
    jpegs, _ = read_eval_split(params)
    images = tmp_path / "images"
    images.mkdir()
    for i, jpeg in enumerate(jpegs):
        (images / f"{i}.jpg").write_bytes(jpeg)
    predicted = run_trainer(*run_argv(data, out), "--mode=predict", f"--predict_input={images}",
                            f"--predict_output_dir={tmp_path / 'predictions'}")
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    by_jax = read_records(tmp_path / "predictions")
    assert len(by_jax) == len(jpegs) and all("error" not in record for record in by_jax.values())
    batch = run("serving.batch_predict", "--input_images", images, "--model_dir",
                out / "export" / "image_classifier" / "4", "--output", tmp_path / "batch" / "predictions")
    assert batch.returncode == 0, batch.stderr[-3000:]
    by_export = read_records(tmp_path / "batch")
    assert sorted(by_export) == sorted(by_jax)
    for uri, record in by_jax.items():
        assert by_export[uri]["class"] == record["class"]
        assert abs(by_export[uri]["top_k"][0]["probability"] - record["top_k"][0]["probability"]) <= 1e-5
