"""Warm start: a fresh run starts from another run's checkpoint or a Keras weights file.

The backbone's variables equal the source's at step 0 and the classifier is fresh;
a mismatched source stops the command before training with one line; a resumed
run ignores the source and says so. The sources: the session's finished 3-class run
(tests/trainer/conftest.py tiny_run_of) and a 10-class step-0 checkpoint made once per module.

    .venv/bin/python -m pytest tests/trainer/test_warm_start.py
"""
import logging
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.fine_tune_helpers import write_backbone_weights
from trainer import nets, task
from trainer import chain
from trainer.estimator import engine as estimator_engine, model
from trainer.run import params_file, warm_start

ModeKeys = tf.estimator.ModeKeys
DIGITS = tuple(str(i) for i in range(10))


def run_argv(data, out, **flags):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                        eval_data_path=f"{data}/eval-*", output_dir=out, **flags))


def refusal(argv, capsys):
    """(exit code, last stderr line) of trainer.task refusing argv, in this process."""
    with pytest.raises(SystemExit) as exit_:
        task.main(list(map(str, argv)))
    lines = capsys.readouterr().err.strip().splitlines()
    return exit_.value.code, lines[-1] if lines else ""


def initial_values(params):
    """{variable name: value} of model_fn's TRAIN graph after initialization: step 0."""
    with tf.Graph().as_default() as graph:
        size = params["image_size"]
        features = {"image": tf.zeros([2, size, size, 3]), "weight": tf.ones([2])}
        model.model_fn(features, tf.zeros([2], tf.int32), ModeKeys.TRAIN, params)
        variables = [v for v in graph.get_collection("variables") if "/Adam" not in v.name]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(variables)
    return {v.name.split(":")[0]: value for v, value in zip(variables, values)}


@pytest.fixture(scope="module")
def five_class_data(tmp_path_factory):
    """Read only: every test's new run trains on it."""
    return write_dataset(tmp_path_factory.mktemp("five") / "data", {"train": 16, "eval": 6},
                         labels=DIGITS[5:], size=20)


@pytest.fixture(scope="module")
def ten_class_checkpoint(five_class_data, tmp_path_factory):
    """An output directory holding a 10-class small_cnn's step-0 checkpoint and params.json:
    what the mismatch tests need of a source, without training one. Read only."""
    out = tmp_path_factory.mktemp("ten") / "ten_classes"
    params = dict(chain.parse_params(run_argv(five_class_data, out)), labels=list(DIGITS),
                  num_classes=10)
    with tf.Graph().as_default() as graph:
        features = {"image": tf.zeros([2, 16, 16, 3]), "weight": tf.ones([2])}
        model.model_fn(features, tf.zeros([2], tf.int32), ModeKeys.TRAIN, params)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, str(out / "model.ckpt"), global_step=0)
    params_file.write_params(params)
    return out


@pytest.mark.trains
def test_a_five_class_run_starts_from_a_three_class_run_and_exports(tiny_run_of, five_class_data, tmp_path):
    _, three_class_run = tiny_run_of("estimator")  # trained: its batch-norm statistics moved
    out = tmp_path / "five_classes"
    argv = run_argv(five_class_data, out, warm_start_from=three_class_run)
    params = chain.parse_params(argv)
    warm_start.prepare(params, 0)
    source = tf.train.latest_checkpoint(str(three_class_run))
    start = initial_values(params)
    for name in ("conv0/kernel", "bn1/moving_mean", "bn1/moving_variance", "dense/kernel"):
        np.testing.assert_array_equal(start[name], tf.train.load_variable(source, name))
    assert start["logits/kernel"].shape == (16, 5)  # fresh: the source's is [16, 3]
    assert not start["logits/bias"].any()
    task.main(argv)
    assert list((out / "export" / "image_classifier").iterdir())[0].name == "4"


@pytest.mark.trains
def test_a_resumed_run_ignores_warm_start_and_says_so(ten_class_checkpoint, copy_of_tiny_run, caplog):
    data, out = copy_of_tiny_run("estimator")  # finished at step 4
    trained = tf.train.load_variable(tf.train.latest_checkpoint(str(out)), "conv0/kernel")
    params = chain.parse_params(run_argv(data, out, train_steps=6, warm_start_from=ten_class_checkpoint))
    with caplog.at_level(logging.INFO):
        estimator_engine.run(params)
    assert f"warm_start_from='{ten_class_checkpoint}' ignored: output_dir already has checkpoints " \
           f"(step 4)" in caplog.text
    # Resumed from its own step-4 weights: model_fn's graph gets no warm-start restores.
    assert model.init_from_source(None, params) == {}
    assert tf.train.latest_checkpoint(str(out)).endswith("-6")
    final = tf.train.load_variable(tf.train.latest_checkpoint(str(out)), "conv0/kernel")
    source = tf.train.load_variable(str(ten_class_checkpoint / "model.ckpt-0"), "conv0/kernel")
    assert 0 < np.abs(final - trained).max() < np.abs(final - source).max()


@pytest.mark.parametrize("flags, message", [
    ({"model": "resnet", "resnet_depth": 8, "resnet_width": 4},
     "was trained with model='small_cnn', this run is model='resnet'"),
    ({"dense_units": 8}, "does not fit model='small_cnn' (checkpoint "),
    ({"warm_start_exclude": ""},
     "2 with another shape (logits/kernel [16, 10] vs [16, 5]; logits/bias [10] vs [5])"),
])
def test_a_mismatched_source_fails_before_training_in_one_line(
        ten_class_checkpoint, five_class_data, tmp_path, capsys, flags, message):
    out = tmp_path / "five_classes"
    code, line = refusal(run_argv(five_class_data, out, warm_start_from=ten_class_checkpoint,
                                  **flags), capsys)
    assert code == 2 and line.startswith("error: warm_start_from=") and message in line
    assert tf.train.latest_checkpoint(str(out)) is None  # nothing trained
    assert not out.exists()  # nor params.json written, nor the lock: checked before both


def test_a_checkpoint_prefix_of_another_network_names_the_missing_variables(
        ten_class_checkpoint, five_class_data, tmp_path, capsys):
    prefix = tf.train.latest_checkpoint(str(ten_class_checkpoint))
    code, line = refusal(run_argv(five_class_data, tmp_path / "out", warm_start_from=prefix,
                                  model="resnet", resnet_depth=8, resnet_width=4), capsys)
    assert code == 2
    assert re.search(r"does not fit model='resnet' .*: \d+ variable\(s\) missing \(stem_conv/kernel, ",
                     line), line


def test_a_missing_source_is_named(five_class_data, tmp_path, capsys):
    code, line = refusal(run_argv(five_class_data, tmp_path / "out",
                                  warm_start_from=tmp_path / "nope"), capsys)
    assert (code, line) == (2, f"error: warm_start_from='{tmp_path}/nope' is neither an output "
                               f"directory, a checkpoint prefix (no {tmp_path}/nope.index) nor a "
                               f"Keras .h5 weights file")
    assert not (tmp_path / "out").exists()  # no params.json, no lock: checked before both


@pytest.mark.parametrize("suffix", [".h5", ".weights.h5"])
def test_keras_weights_warm_start_the_backbone(five_class_data, tmp_path, suffix):
    """A keras.applications weights file (include_top=False, as published) -> the backbone's
    variables at step 0, batch-norm statistics included; the head stays fresh."""
    path = tmp_path / f"mobilenet_v2_no_top{suffix}"
    weights = write_backbone_weights("mobilenet_v2", 32, path)
    params = chain.parse_params(run_argv(five_class_data, tmp_path / "out", model="mobilenet_v2",
                                          image_size=32, warm_start_from=path))
    checkpoint = warm_start.prepare(params, 0)
    assert checkpoint == str(tmp_path / "out" / "warm_start" / "keras_weights")
    if suffix == ".h5":  # through model_fn's own call, in a graph (model_fn's names)
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            network = nets.build_from_params(params)
            assert len(model.init_from_source(network, params)) == len(network.variables) - 2
            session.run(tf.compat.v1.global_variables_initializer())
            start = dict(zip([v.name.split(":")[0] for v in network.variables],
                             session.run(network.variables)))
    else:  # the converted checkpoint itself
        start = {name: tf.train.load_variable(checkpoint, name)
                 for name, _ in tf.train.list_variables(checkpoint)}
    for name in ("Conv1/kernel", "bn_Conv1/moving_mean", "block_16_project_BN/moving_variance",
                 "Conv_1_bn/gamma"):
        np.testing.assert_array_equal(start[name], weights[name + ":0"])
    if suffix == ".h5":
        assert not start["logits/bias"].any() and start["logits/kernel"].shape == (1280, 5)


def test_a_keras_weights_file_of_another_network_is_refused(five_class_data, tmp_path, capsys):
    path = tmp_path / "other.h5"
    other = tf.keras.Sequential([tf.keras.Input([8]), tf.keras.layers.Dense(2, name="dense")])
    other.save_weights(str(path))
    code, line = refusal(run_argv(five_class_data, tmp_path / "out", model="mobilenet_v2",
                                  image_size=32, warm_start_from=path), capsys)
    assert code == 2
    assert line.startswith(f"error: warm_start_from='{path}' is not a weights file of "
                           f"model='mobilenet_v2''s backbone (include_top=False, image_size=32): ")


def test_keras_weights_of_convnext_load_into_its_own_input_conversion(five_class_data, tmp_path):
    """A file as keras.applications writes it (its own preprocessing layers in, no pooling) fits
    this project's convnext_tiny (preprocessing off, pooled, then the file's last layer norm)."""
    path = tmp_path / "convnext_tiny_notop.h5"
    weights = write_backbone_weights("convnext_tiny", 32, path)
    params = chain.parse_params(run_argv(five_class_data, tmp_path / "out", model="convnext_tiny",
                                         image_size=32, warm_start_from=path))
    checkpoint = warm_start.prepare(params, 0)
    start = {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)}
    for name in ("convnext_tiny_stem_conv/kernel", "convnext_tiny_stage_3_block_2_layer_scale/gamma",
                 "layer_normalization/beta"):
        np.testing.assert_array_equal(start[name], weights[name + ":0"])


def test_a_keras_weights_file_of_another_new_backbone_is_one_line_and_nothing_is_written(
        five_class_data, tmp_path, capsys):
    path = tmp_path / "efficientnetv2_b0_notop.h5"
    write_backbone_weights("efficientnetv2_b0", 32, path)
    out = tmp_path / "out"
    code, line = refusal(run_argv(five_class_data, out, model="convnext_tiny", image_size=32,
                                  warm_start_from=path), capsys)
    assert code == 2
    assert line.startswith(f"error: warm_start_from='{path}' is not a weights file of "
                           f"model='convnext_tiny''s backbone (include_top=False, image_size=32): ")
    assert not out.exists()  # checked before the lock and params.json
