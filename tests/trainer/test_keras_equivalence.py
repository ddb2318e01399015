"""Both engines on the same weights: the same eval metrics to 1e-6; replicas change nothing.

A network's weights (random, batch-norm statistics included, and different moving
averages) are written as each engine's checkpoint; each engine evaluates its own on the
same 11 eval images in batches of 8 (5 padding rows). Every metric of the record agrees
to 1e-6 and the confusion matrices are equal. Then, in a process with two logical
CPUs, the Keras engine under a two-replica MirroredStrategy evaluates the same weights
to the same metrics and, on a network without batch norm (each replica normalizes over its
own share, as each TPU core does), takes the same training step as one replica: the global
batch split across replicas, the loss divided by their count, the gradients summed. And
one training batch with mixup/CutMix's soft labels gives both engines the same training loss.

    .venv/bin/python -m pytest tests/trainer/test_keras_equivalence.py
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.engines import needs_estimator
from trainer.objective import metrics
from trainer.objective.averages import EMA_SUFFIX
from trainer.run import variable_names, warm_start

STEP = 7
TOLERANCE = 1e-6


def random_values(named, seed):
    """{name: value} for {name: variable}: variances positive, everything else small and random.

    By checkpoint name, not variable.name: a moving average's shadow is an unnamed tf.Variable
    (trainer/keras/model.py), and only its name NAME + EMA_SUFFIX says it averages a
    moving_variance. A negative variance makes batch norm's rsqrt NaN, which a ReLU after it
    propagates on one CPU and turns into 0 on another (oneDNN's fused batch norm + ReLU)."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, variable in named.items():
        value = rng.normal(0.0, 0.3, variable.shape.as_list())
        if "moving_variance" in name:
            value = np.abs(value) + 0.5
        values[name] = value.astype(variable.dtype.as_numpy_dtype)
    return values


def write_both_checkpoints(params, keras_dir, estimator_dir):
    """The same weights (and averages) as a Keras engine and an Estimator engine checkpoint."""
    from trainer.keras import engine as keras_engine
    engine = keras_engine.KerasEngine(dict(params, output_dir=keras_dir))
    network = engine.model.network
    targets = {variable_names.variable_name(v): v for v in network.variables}
    named = random_values(targets, seed=1)
    if engine.model.averages is not None:
        shadows = engine.model.averages.by_name()
        named.update(random_values(shadows, seed=2))
        targets.update(shadows)
    for name, variable in targets.items():
        variable.assign(named[name])
    engine.model.step.assign(STEP)
    keras_prefix = engine.manager.save(checkpoint_number=STEP)
    variables = [tf.Variable(value, name=name) for name, value in named.items()]
    variables.append(tf.Variable(np.int64(STEP), name="global_step"))
    warm_start.write_checkpoint(variables, os.path.join(estimator_dir, f"model.ckpt-{STEP}"))
    tf.compat.v1.train.update_checkpoint_state(estimator_dir, f"model.ckpt-{STEP}")
    return engine, keras_prefix, os.path.join(estimator_dir, f"model.ckpt-{STEP}")


@pytest.mark.parametrize("overrides", [
    {"model": "small_cnn"},
    {"model": "resnet", "resnet_depth": 8, "resnet_width": 4, "moving_average_decay": 0.9,
     "label_smoothing": 0.1},
], ids=["small_cnn", "resnet_averaged_smoothed"])
@needs_estimator
def test_both_engines_report_the_same_metrics_on_the_same_weights(tiny_params, tmp_path, overrides):
    from trainer.estimator import engine as estimator_engine
    params = dict(tiny_params, **overrides)
    keras, keras_prefix, estimator_prefix = write_both_checkpoints(
        params, str(tmp_path / "keras"), str(tmp_path / "estimator"))
    by_keras = keras.evaluate(keras_prefix)
    by_estimator = estimator_engine.EstimatorEngine(dict(params, output_dir=str(tmp_path / "estimator"))).evaluate(
        estimator_prefix)
    np.testing.assert_array_equal(by_keras.pop(metrics.CONFUSION_MATRIX_METRIC),
                                  by_estimator.pop(metrics.CONFUSION_MATRIX_METRIC))
    assert np.isfinite(list(by_keras.values())).all(), by_keras  # valid weights: no NaN to agree on
    assert by_keras["accuracy"] not in (0.0, 1.0)  # the weights make a real mix of hits and misses
    assert set(by_estimator) - {"global_step"} == set(by_keras)
    for name, value in by_keras.items():
        assert abs(value - float(by_estimator[name])) <= TOLERANCE, (name, value, by_estimator[name])


def build_plain_cnn(num_classes, image_size, dtype, **_):
    """conv, mean, dense: a network whose step does not depend on how the batch is split."""
    images = tf.keras.Input([image_size, image_size, 3], name="images")
    features = tf.keras.layers.Conv2D(4, 3, activation="relu", name="conv")(images)
    pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(features)
    return tf.keras.Model(images, tf.keras.layers.Dense(num_classes, name="logits")(pooled))


def register_plain_cnn():
    from trainer import nets
    from trainer.settings import table
    table.NETWORKS["plain_cnn"] = table.Network(())
    nets.BUILDERS["plain_cnn"] = build_plain_cnn


REPLICAS_SCRIPT = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tests.trainer.test_keras_equivalence import register_plain_cnn
from trainer.data import input as input_lib
from trainer.keras import engine as keras_engine, strategy as strategy_lib
register_plain_cnn()
params, prefix = json.loads(sys.argv[1]), sys.argv[2]
input_fn = input_lib.make_input_fn(params["train_data_path"], input_lib.TRAIN)
batch = next(iter(input_fn(dict(params, batch_size=params["train_batch_size"]))))  # one batch for both

def run(strategy, output_dir):
    strategy_lib.make_strategy = lambda params: strategy
    engine = keras_engine.KerasEngine(dict(params, output_dir=output_dir))
    record = engine.evaluate(prefix)
    record.pop("confusion_matrix_counts")
    from trainer.keras import checkpoint
    checkpoint.read_network(engine.model.network, prefix, use_averages=False)
    before = {v.name: v.numpy() for v in engine.model.network.trainable_variables}
    iterator = iter(engine.strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch).repeat()))
    engine.train_function(iterator, tf.constant(1, tf.int64))
    after = {v.name: v.numpy().tolist() for v in engine.model.network.trainable_variables}
    step = max(float(abs(v.numpy() - before[v.name]).max()) for v in engine.model.network.trainable_variables)
    return record, after, step, strategy.num_replicas_in_sync

one = run(tf.distribute.get_strategy(), sys.argv[3] + "/one")
two = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), sys.argv[3] + "/two")
print(json.dumps([one, two]))
"""


@pytest.mark.trains
def test_two_replicas_evaluate_and_train_as_one(tiny_params, tmp_path, repo_root, monkeypatch):
    from trainer import nets
    from trainer.settings import table
    monkeypatch.setitem(table.NETWORKS, "plain_cnn", table.Network(()))
    monkeypatch.setitem(nets.BUILDERS, "plain_cnn", build_plain_cnn)
    params = dict(tiny_params, engine="keras", model="plain_cnn", warmup_steps=0, learning_rate=0.5,
                  optimizer="momentum", momentum=0.0)
    _, keras_prefix, _ = write_both_checkpoints(params, str(tmp_path / "keras"), str(tmp_path / "estimator"))
    result = subprocess.run([sys.executable, "-c", REPLICAS_SCRIPT, json.dumps(params), keras_prefix,
                             str(tmp_path)], cwd=repo_root, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    (record_1, after_1, step_1, replicas_1), (record_2, after_2, _, replicas_2) = json.loads(
        result.stdout.strip().splitlines()[-1])
    assert (replicas_1, replicas_2) == (1, 2)
    for name, value in record_1.items():
        assert abs(value - record_2[name]) <= TOLERANCE, (name, value, record_2[name])
    # plain SGD moved the weights (largest change 0.0008-0.007 in 13 runs in .venv-keras: random
    # weights and data), far beyond the 1e-6 at which the two steps are compared ...
    assert step_1 > 1e-4
    for name, value in after_1.items():  # ... and both took the same step (a sum, not a mean: twice it)
        np.testing.assert_allclose(after_2[name], value, rtol=0, atol=1e-6, err_msg=name)


@needs_estimator
def test_both_engines_take_the_same_training_loss_on_mixed_labels(tiny_params):
    """One training batch (fixed images, mixup/CutMix's soft labels, a zero-weight row) on
    the same weights: model_fn's TRAIN loss equals the Keras train step's, L2 term and label
    smoothing included (batch norm on the batch's statistics in both, no dropout)."""
    from tests.trainer.test_model_fn import call_model_fn
    from trainer.keras import engine as keras_engine
    params = dict(tiny_params, model="small_cnn", dropout_rate=0.0, label_smoothing=0.1,
                  weight_decay=0.01, mixup_alpha=0.2, cutmix_alpha=1.0)
    rng = np.random.default_rng(3)
    size, classes = params["image_size"], params["num_classes"]
    images = rng.uniform(-1, 1, [6, size, size, 3]).astype(np.float32)
    labels = rng.dirichlet(np.ones(classes), 6).astype(np.float32)
    weights = np.array([1, 1, 1, 1, 1, 0], np.float32)
    network = keras_engine.KerasEngine(params).model
    named = random_values({variable_names.variable_name(v): v for v in network.network.variables}, seed=1)
    for variable in network.network.variables:
        variable.assign(named[variable_names.variable_name(variable)])
    by_keras = network.train_step(({"image": tf.constant(images), "weight": tf.constant(weights)},
                                   tf.constant(labels)))
    spec, session = call_model_fn(params, tf.estimator.ModeKeys.TRAIN, images, labels, weights)
    with spec.loss.graph.as_default():
        assigned = [v for v in tf.compat.v1.global_variables() if v.op.name in named]
        assert len(assigned) == len(named)
        for variable in assigned:
            variable.load(named[variable.op.name], session)
    by_estimator = session.run(spec.loss)
    assert float(by_keras["loss"]) > 1.0  # far from 0: a factor between the engines would show
    assert abs(float(by_keras["loss"]) - by_estimator) <= 1e-5, (float(by_keras["loss"]), by_estimator)
