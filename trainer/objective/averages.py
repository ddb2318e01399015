"""The exponential moving average of the weights (--moving_average_decay) both engines keep.

What it covers and how fast it moves are defined here once: the trained variables and
the batch-norm statistics training updates (the reference ResNet's choice), with
tf.train.ExponentialMovingAverage's decay min(decay, (1 + n) / (10 + n)) at step n, so
short runs and fresh heads are not dominated by their initial values. Evaluation,
prediction and export read the averages in place of the weights. In a checkpoint the
average of variable NAME is NAME + EMA_SUFFIX in both engines.

    .venv/bin/python -m pytest tests/trainer/test_keras_engine.py -k average
"""
import tensorflow as tf

EMA_SUFFIX = "/ExponentialMovingAverage"  # tf.train.ExponentialMovingAverage's default name


def averaged_variables(network, params):
    """The variables the moving average covers (a frozen backbone's statistics never change)."""
    variables = list(network.trainable_variables)
    if not params["freeze_backbone"]:
        variables += [v for v in network.non_trainable_variables
                      if "moving_mean" in v.name or "moving_variance" in v.name]
    return variables


def decay_at(decay, step):
    """The decay applied after step `step` (float32 scalar): tf.train.ExponentialMovingAverage's
    num_updates rule."""
    step = tf.cast(step, tf.float32)
    return tf.minimum(float(decay), (1.0 + step) / (10.0 + step))
