"""trainer/jax/objective.py against trainer/objective/ (TensorFlow, the definitions) on the same inputs.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_objective.py
"""
import numpy as np
import pytest
import tensorflow as tf

from trainer.jax import objective
from trainer.objective import averages, loss as loss_lib, metrics, schedule
from trainer.settings import table



@pytest.mark.parametrize("lr_schedule, warmup_steps", [("cosine", 10), ("step", 0), ("step", 25)])
def test_the_learning_rate_is_the_schedules_at_every_step(lr_schedule, warmup_steps):
    params = dict(table.DEFAULTS, lr_schedule=lr_schedule, warmup_steps=warmup_steps, train_steps=90,
                  train_batch_size=64)
    steps = [0, 1, 5, 9, 10, 11, 29, 30, 31, 59, 60, 61, 80, 89, 90, 120]
    expected = [float(schedule.learning_rate_schedule(step, params)) for step in steps]
    np.testing.assert_allclose([float(objective.learning_rate(step, params)) for step in steps],
                               expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("soft", [False, True])
def test_the_cross_entropy_and_its_weighted_mean_are_the_losss(smoothing, soft):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)).astype(np.float32) * 3
    labels = rng.dirichlet(np.ones(4), 6).astype(np.float32) if soft else rng.integers(0, 4, 6).astype(np.int32)
    weights = np.array([1, 1, 0, 1, 0, 1], np.float32)  # padding rows weigh 0
    tf_values = loss_lib.per_example_cross_entropy(tf.constant(labels), tf.constant(logits), 4, smoothing)
    jax_values = objective.per_example_cross_entropy(labels, logits, 4, smoothing)
    np.testing.assert_allclose(np.asarray(jax_values), tf_values.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(objective.weighted_mean(jax_values, weights)),
                               float(loss_lib.weighted_mean(tf_values, weights)), rtol=1e-5)
    assert float(objective.weighted_mean(jax_values, np.zeros(6, np.float32))) == 0.0
    np.testing.assert_allclose(float(objective.batch_accuracy(labels, logits, weights)),
                               float(metrics.batch_accuracy(tf.constant(labels), tf.constant(logits),
                                                            tf.constant(weights))), rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["momentum", "adamw"])
def test_weight_decay_is_the_losss_l2_term(optimizer):
    kernels = [np.random.default_rng(i).normal(size=(3, 5)).astype(np.float32) for i in range(2)]
    params = dict(table.DEFAULTS, optimizer=optimizer, weight_decay=1e-3)
    network = type("Network", (), {"trainable_variables": [tf.Variable(k, name="kernel") for k in kernels]})
    np.testing.assert_allclose(float(objective.weight_decay(kernels, params)),
                               float(loss_lib.weight_decay(network, params)), rtol=1e-6)


def test_the_moving_average_decay_is_the_averages():
    for step in (0, 1, 10, 1000, 10 ** 6):
        assert float(objective.average_decay(0.999, step)) == pytest.approx(
            float(averages.decay_at(0.999, step)), rel=1e-7)
