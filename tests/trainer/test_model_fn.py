"""model_fn in each mode, its metrics, learning rate, TPU-only pieces, and the transpose round trip.

    .venv/bin/python -m pytest tests/trainer/test_model_fn.py
"""
import glob
import math

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2

from common import signature
from trainer.data import input as input_lib
from trainer.estimator import model
from trainer.objective import metrics, schedule

ModeKeys = tf.estimator.ModeKeys


def batch_arrays(params, batch_size=4, seed=0):
    rng = np.random.default_rng(seed)
    size = params["image_size"]
    images = rng.uniform(-1, 1, [batch_size, size, size, 3]).astype(np.float32)
    labels = (np.arange(batch_size) % params["num_classes"]).astype(np.int32)
    return images, labels


def call_model_fn(params, mode, images, labels, weights=None):
    """(spec, session): model_fn's spec in a fresh graph with initialized variables."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        weights = np.ones(len(labels), np.float32) if weights is None else weights
        features = {"image": tf.constant(images), "weight": tf.constant(weights)}
        spec = model.model_fn(features, tf.constant(labels), mode, dict(params, use_tpu=False))
        session = tf.compat.v1.Session(graph=graph)
        session.run([tf.compat.v1.global_variables_initializer(),
                     tf.compat.v1.local_variables_initializer()])
    return spec, session


@pytest.mark.parametrize("model_name", ["small_cnn", "resnet"])
def test_train_step_lowers_the_loss_and_updates_batch_norm(tiny_params, model_name):
    params = dict(tiny_params, model=model_name, resnet_depth=8, resnet_width=4,
                  learning_rate=0.5, warmup_steps=0, weight_decay=0.0)
    # Keras draws unseeded initial weights from Python's random state, which the tests
    # before this one move: seeded here, the weights are the same in any test order.
    tf.keras.utils.set_random_seed(0)
    spec, session = call_model_fn(params, ModeKeys.TRAIN, *batch_arrays(params))
    moving_means = [v for v in spec.train_op.graph.get_collection("variables") if "moving_mean" in v.name]
    assert moving_means and not any(session.run(moving_means)[0])
    losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(8)]
    assert losses[-1] < losses[0]
    # Keras keeps BN updates off tf.GraphKeys.UPDATE_OPS; model_fn must run them anyway.
    assert np.abs(session.run(moving_means[0])).sum() > 0
    assert session.run(tf.compat.v1.train.get_global_step(spec.train_op.graph)) == 8


def test_eval_spec_reports_weighted_metrics(tiny_params):
    images, labels = batch_arrays(tiny_params, batch_size=6)
    spec, session = call_model_fn(tiny_params, ModeKeys.EVAL, images, labels)
    metric_fn, tensors = spec.eval_metrics
    with spec.loss.graph.as_default():
        metrics = metric_fn(*tensors)
        session.run(tf.compat.v1.local_variables_initializer())
    assert sorted(metrics) == ["accuracy", "confusion_matrix_counts", "cross_entropy",
                               "mean_per_class_accuracy", "top_2_accuracy"]
    session.run([update for _, update in metrics.values()])
    values = session.run({name: value for name, (value, _) in metrics.items()})
    assert 0.0 <= values["accuracy"] <= values["top_2_accuracy"] <= 1.0
    assert values["cross_entropy"] > 0


def run_metric_fn(labels, logits, weights, num_classes=3, top_k=5):
    with tf.Graph().as_default():
        metrics = model.make_metric_fn(num_classes, top_k)(
            tf.constant(labels, tf.int32), tf.constant(logits, tf.float32),
            tf.constant(weights, tf.float32))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            session.run([update for _, update in metrics.values()])
            return session.run({name: value for name, (value, _) in metrics.items()})


def test_padding_rows_count_for_nothing():
    # Rows 0-2 are real (two right, one wrong); rows 3-4 are zero-weight padding, all wrong.
    logits = [[5, 0, 0], [0, 5, 0], [-1, 0, 5], [0, 9, 0], [0, 9, 0]]
    values = run_metric_fn([0, 1, 0, 0, 2], logits, [1, 1, 1, 0, 0])
    assert values["accuracy"] == pytest.approx(2 / 3)
    # Class 0: 1 of 2 right, class 1: 1 of 1, class 2: no real rows (counts 0, as TF does).
    assert values["mean_per_class_accuracy"] == pytest.approx((0.5 + 1 + 0) / 3)
    per_example = [math.log(math.exp(5) + 2) - 5] * 2 + [math.log(math.exp(-1) + 1 + math.exp(5)) + 1]
    assert values["cross_entropy"] == pytest.approx(np.mean(per_example), rel=1e-5)
    assert values["top_2_accuracy"] == pytest.approx(2 / 3)  # row 2: label 0 ranks third
    np.testing.assert_array_equal(values["confusion_matrix_counts"], [[1, 0, 1], [0, 1, 0], [0, 0, 0]])


@pytest.mark.parametrize("num_classes, top_k, expected", [(10, 5, 5), (3, 5, 2), (2, 5, None), (10, 1, None)])
def test_top_k_stays_below_the_class_count(num_classes, top_k, expected):
    assert metrics.effective_top_k(num_classes, top_k) == expected


def test_predict_spec_has_probabilities_ids_and_names(tiny_params):
    images, labels = batch_arrays(tiny_params)
    spec, session = call_model_fn(tiny_params, ModeKeys.PREDICT, images, labels)
    out = session.run(spec.predictions)
    assert out[signature.OUTPUT_PROBABILITIES].shape == (4, 3)
    np.testing.assert_allclose(out[signature.OUTPUT_PROBABILITIES].sum(axis=1), 1.0, rtol=1e-5)
    assert out[signature.OUTPUT_CLASS_IDS].dtype == np.int64
    names = [tiny_params["labels"][i].encode() for i in out[signature.OUTPUT_CLASS_IDS]]
    assert list(out[signature.OUTPUT_CLASSES]) == names
    assert set(spec.export_outputs) == {signature.SIGNATURE_DEFAULT, signature.SIGNATURE_PREDICT}


def test_learning_rate_scales_with_batch_warms_up_and_decays(tiny_params):
    params = dict(tiny_params, learning_rate=0.1, learning_rate_batch_size=256,
                  train_batch_size=1024, warmup_steps=10, train_steps=110)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        step = tf.compat.v1.placeholder(tf.int64, [])
        rate = schedule.learning_rate_schedule(step, params)
        values = {s: session.run(rate, {step: s}) for s in (0, 5, 10, 60, 110)}
    assert values[0] == 0.0
    assert values[5] == pytest.approx(0.2)      # half of the warmup to 0.1 * 1024 / 256
    assert values[10] == pytest.approx(0.4)     # the scaled peak
    assert values[60] == pytest.approx(0.2)     # cosine midpoint
    assert values[110] == pytest.approx(0.0, abs=1e-7)


def test_tpu_train_graph_uses_cross_shard_optimizer_and_host_call(tiny_params):
    images, labels = batch_arrays(tiny_params)
    with tf.Graph().as_default() as graph:
        features = {"image": tf.constant(images), "weight": tf.ones([4])}
        spec = model.model_fn(features, tf.constant(labels), ModeKeys.TRAIN,
                              dict(tiny_params, use_tpu=True))
    op_types = {op.type for op in graph.get_operations()}
    assert "CrossReplicaSum" in op_types  # gradients are averaged across TPU cores
    assert not {"ScalarSummary", "WriteScalarSummary"} & op_types  # summary ops cannot run on a TPU
    assert spec.host_call is not None
    without = dict(tiny_params, use_tpu=True, use_host_call=False)
    with tf.Graph().as_default():
        spec = model.model_fn({"image": tf.constant(images), "weight": tf.ones([4])},
                              tf.constant(labels), ModeKeys.TRAIN, without)
    assert spec.host_call is None


def test_host_call_writes_tensorboard_scalars(tiny_params, tmp_path):
    # iterations_per_loop=1: the writer's queue holds one step, so each step is flushed.
    params = dict(tiny_params, output_dir=str(tmp_path), iterations_per_loop=1)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        host_call_fn, tensors = model.make_host_call(
            tf.constant(7, tf.int64), tf.constant(1.5), tf.constant(0.25), tf.constant(0.75), params)
        ops = host_call_fn(*tensors)
        # What TPUEstimator's host-call hook runs around the step (tpu_estimator.py).
        init_ops = summary_ops_v2.summary_writer_initializer_op()
        flush_ops = [summary_ops_v2.legacy_raw_flush(writer=op.inputs[0]) for op in init_ops]
        session.run(init_ops)
        session.run(ops)
        session.run(flush_ops)
    tags = {}
    for path in glob.glob(f"{tmp_path}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags[value.tag] = (event.step, float(tf.make_ndarray(value.tensor)))
    assert tags == {"loss": (7, 1.5), "learning_rate": (7, 0.25), "train_accuracy": (7, 0.75)}


@pytest.mark.trains
def test_cpu_training_writes_input_images_and_training_accuracy(tiny_argv):
    """Off TPU: TensorBoard gets the first training images ([0, 1], 3 of them) and accuracy."""
    from trainer import chain
    from trainer.estimator import engine as estimator_engine
    params = chain.parse_params(tiny_argv + ["--train_steps=2", "--steps_per_eval=2",
                                              "--save_summary_steps=1"])
    estimator_engine.run(params)
    images, scalars = [], set()
    for path in glob.glob(f"{params['output_dir']}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("image"):
                    images.append((value.tag, value.image.height, value.image.width))
                else:
                    scalars.add(value.tag)
    assert images and {tag.split("/")[0] for tag, _, _ in images} == {"train_input"}
    assert all((h, w) == (params["image_size"],) * 2 for _, h, w in images)
    assert {"train_accuracy", "learning_rate"} <= scalars


def input_batch(params, data_dir):
    """One eval batch from the real input_fn, as numpy."""
    input_fn = input_lib.make_input_fn(f"{data_dir}/eval-*", ModeKeys.EVAL, num_examples=11)
    features, labels = next(iter(input_fn(dict(params, batch_size=4))))
    return features["image"].numpy(), labels.numpy()


def test_transpose_round_trip_gives_identical_predictions(tiny_params, tiny_dataset, tmp_path):
    """input_fn sends [S, S, 3, B] when transpose_input; model_fn must transpose it back."""
    results = {}
    checkpoint = str(tmp_path / "ckpt")
    for transpose in (False, True):
        params = dict(tiny_params, transpose_input=transpose)
        images, labels = input_batch(params, tiny_dataset)
        assert images.shape == ((16, 16, 3, 4) if transpose else (4, 16, 16, 3))
        spec, session = call_model_fn(params, ModeKeys.PREDICT, images, labels)
        with session.graph.as_default():
            saver = tf.compat.v1.train.Saver()
            if transpose:
                saver.restore(session, checkpoint)
            else:
                saver.save(session, checkpoint)
        results[transpose] = session.run(spec.predictions[signature.OUTPUT_PROBABILITIES])
    np.testing.assert_array_equal(results[False], results[True])
    assert results[False].std() > 0  # distinct images, distinct predictions


def test_step_schedule_drops_tenfold_at_30_60_80_of_90(tiny_params):
    params = dict(tiny_params, lr_schedule="step", learning_rate=0.1, learning_rate_batch_size=256,
                  train_batch_size=256, warmup_steps=10, train_steps=90)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        step = tf.compat.v1.placeholder(tf.int64, [])
        rate = schedule.learning_rate_schedule(step, params)
        values = [session.run(rate, {step: s}) for s in (5, 10, 29, 30, 59, 60, 80, 89)]
    np.testing.assert_allclose(values, [0.05, 0.1, 0.1, 0.01, 0.01, 0.001, 1e-4, 1e-4], rtol=1e-5)


def test_label_smoothing_spreads_the_target(tiny_params):
    """Target (1 - s) on the label plus s / C everywhere, the reference ResNet's smoothing."""
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]], np.float32)
    labels, s = np.array([0, 1], np.int32), 0.1
    params = dict(tiny_params, label_smoothing=s, weight_decay=0.0)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        network = model.nets.build_from_params(params)
        loss = session.run(model.compute_loss(tf.constant(labels), tf.constant(logits),
                                              tf.ones([2]), network, params))
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    target = np.eye(3)[labels] * (1 - s) + s / 3
    assert loss == pytest.approx(-(target * log_softmax).sum(axis=1).mean(), rel=1e-5)


def test_moving_average_is_what_eval_restores(tiny_params, tmp_path):
    """Training keeps an EMA beside each weight; EVAL's scaffold restores it in their place."""
    params = dict(tiny_params, moving_average_decay=0.5, learning_rate=0.5, warmup_steps=0)
    spec, session = call_model_fn(params, ModeKeys.TRAIN, *batch_arrays(params))
    for _ in range(3):
        session.run(spec.train_op)
    with session.graph.as_default():
        path = tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    raw = tf.train.load_variable(path, "conv0/kernel")
    average = tf.train.load_variable(path, "conv0/kernel/ExponentialMovingAverage")
    assert 0 < np.abs(raw - average).max()
    eval_spec, eval_session = call_model_fn(params, ModeKeys.EVAL, *batch_arrays(params))
    with eval_session.graph.as_default():
        eval_spec.scaffold_fn().saver.restore(eval_session, path)
        kernel = [v for v in tf.compat.v1.global_variables() if v.name == "conv0/kernel:0"][0]
    np.testing.assert_array_equal(eval_session.run(kernel), average)
    assert call_model_fn(tiny_params, ModeKeys.EVAL, *batch_arrays(params))[0].scaffold_fn is None


def hub_step_changes(params, steps=1):
    """(backbone variables' {name: (before, after)}, head's) over `steps` TRAIN steps of model_fn."""
    spec, session = call_model_fn(params, ModeKeys.TRAIN, *batch_arrays(params))
    variables = [v for v in spec.train_op.graph.get_collection("variables")
                 if v.name.startswith(("hub_", "logits/")) and "/Adam" not in v.name]
    before = session.run(variables)
    for _ in range(steps):
        session.run(spec.train_op)
    after = session.run(variables)
    changes = {v.name.split(":")[0]: (b, a) for v, b, a in zip(variables, before, after)}
    head = {name: change for name, change in changes.items() if name.startswith("logits/")}
    return {name: c for name, c in changes.items() if name not in head}, head


@pytest.fixture
def hub_params(tiny_params, tmp_path):
    from tests.trainer.fine_tune_helpers import write_hub_module
    module_values = write_hub_module(tmp_path / "module")
    return dict(tiny_params, model="hub", hub_module=str(tmp_path / "module"), dropout_rate=0.0,
                warmup_steps=0, learning_rate=0.01, learning_rate_batch_size=8,
                train_batch_size=8), module_values


def test_hub_backbone_starts_from_the_module_and_trains_at_its_multiplier(hub_params):
    """Adam's first step moves every weight by ~the learning rate: 0.01 in the head,
    0.01 x 0.1 in the backbone (a second optimizer: scaled gradients would not do it)."""
    params, module_values = hub_params
    backbone, head = hub_step_changes(dict(params, backbone_learning_rate_multiplier=0.1))
    np.testing.assert_array_equal(backbone["hub_conv/kernel"][0], module_values["hub_conv/kernel:0"])
    step = lambda changes: max(np.abs(a - b).max() for b, a in changes.values())  # noqa: E731
    assert step(head) == pytest.approx(0.01, rel=1e-3)
    assert step({k: v for k, v in backbone.items() if "moving" not in k}) == pytest.approx(1e-3, rel=1e-3)
    before, after = backbone["hub_bn/moving_mean"]  # the module's batch norm ran in training mode
    assert np.abs(after - before).max() > 0


def test_frozen_hub_backbone_does_not_change(hub_params):
    params, module_values = hub_params
    backbone, head = hub_step_changes(dict(params, freeze_backbone=True), steps=2)
    assert sorted(backbone) == ["hub_bn/beta", "hub_bn/gamma", "hub_bn/moving_mean",
                                "hub_bn/moving_variance", "hub_conv/bias", "hub_conv/kernel"]
    for before, after in backbone.values():  # weights and batch-norm statistics alike
        np.testing.assert_array_equal(before, after)
    assert all(np.abs(after - before).max() > 0 for before, after in head.values())
