"""The learning rate of both engines: a linear warm-up to the batch-scaled rate, then cosine or step decay.

The scaled rate is learning_rate * train_batch_size / learning_rate_batch_size
(Goyal et al. 2017, the rule the TPU references follow), whatever the number of
cores or replicas the global batch is split across. TensorFlow ops only, so the
Estimator engine calls it on its global_step tensor in graph mode and the Keras
engine on its optimizer's step inside a tf.function.

    .venv/bin/python -m trainer.objective.schedule 1500     # the default rate at a few steps
"""
import math
import sys

import tensorflow as tf

# lr_schedule "step": the reference ResNet's x0.1 at epochs 30, 60 and 80 of 90,
# here as fractions of train_steps.
STEP_DECAY_FRACTIONS = (30 / 90, 60 / 90, 80 / 90)
STEP_DECAY_FACTOR = 0.1
# Adam's epsilon in every engine: tf.compat.v1.train.AdamOptimizer's, which the Estimator engine
# uses (Keras' own default is 1e-7).
TF1_ADAM_EPSILON = 1e-8


def peak_learning_rate(params):
    """learning_rate scaled linearly from learning_rate_batch_size to train_batch_size."""
    return params["learning_rate"] * params["train_batch_size"] / params["learning_rate_batch_size"]


def learning_rate_schedule(global_step, params):
    """float32 scalar: linear warm-up (from 0, the reference ResNet's) over warmup_steps to the
    batch-scaled rate, then params["lr_schedule"]'s decay."""
    peak = peak_learning_rate(params)
    step = tf.cast(global_step, tf.float32)
    warmup = float(params["warmup_steps"])
    decay = {"cosine": cosine_decay, "step": step_decay}[params["lr_schedule"]]
    decayed = decay(peak, step, params)
    if params["warmup_steps"] == 0:
        return decayed
    return tf.where(step < warmup, peak * step / warmup, decayed)


def cosine_decay(peak, step, params):
    """peak at the end of the warmup, falling along a half cosine to 0 at train_steps."""
    warmup = float(params["warmup_steps"])
    decay_steps = float(max(params["train_steps"] - params["warmup_steps"], 1))
    progress = tf.clip_by_value((step - warmup) / decay_steps, 0.0, 1.0)
    return peak * 0.5 * (1.0 + tf.cos(math.pi * progress))


def step_decay(peak, step, params):
    """peak, times STEP_DECAY_FACTOR at each of STEP_DECAY_FRACTIONS of train_steps."""
    passed = tf.add_n([tf.cast(step >= fraction * params["train_steps"], tf.float32)
                       for fraction in STEP_DECAY_FRACTIONS])
    return peak * tf.pow(STEP_DECAY_FACTOR, passed)


def main(argv):
    from trainer.settings import table
    params = dict(table.DEFAULTS, train_steps=int(argv[1]))
    for step in (0, params["warmup_steps"], params["train_steps"] // 2, params["train_steps"]):
        print(f"step {step}: {float(learning_rate_schedule(step, params)):.6f}")


if __name__ == "__main__":
    main(sys.argv)
