"""The training objective of trainer/objective/, in jax.numpy: what the JAX engine's step differentiates.

Each function here is the JAX form of the TensorFlow one named in its docstring, which
stays the definition; tests/trainer/jax/test_jax_objective.py holds each pair equal on the
same inputs (label smoothing, soft labels, zero-weight rows, both schedules, warm-up).
Evaluation needs no twin: the JAX engine computes logits and trainer/objective/metrics.py
sums them on the host.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_objective.py
"""
import math

import jax
import jax.numpy as jnp

from trainer.objective import loss as loss_lib, schedule


def learning_rate(step, params):
    """schedule.learning_rate_schedule: linear warm-up to the batch-scaled rate, then the decay."""
    peak = schedule.peak_learning_rate(params)
    step = jnp.asarray(step, jnp.float32)
    warmup = float(params["warmup_steps"])
    if params["lr_schedule"] == "cosine":
        decay_steps = float(max(params["train_steps"] - params["warmup_steps"], 1))
        progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
        decayed = peak * 0.5 * (1.0 + jnp.cos(math.pi * progress))
    else:
        passed = sum((step >= fraction * params["train_steps"]).astype(jnp.float32)
                     for fraction in schedule.STEP_DECAY_FRACTIONS)
        decayed = peak * jnp.power(schedule.STEP_DECAY_FACTOR, passed)
    if params["warmup_steps"] == 0:
        return decayed
    return jnp.where(step < warmup, peak * step / warmup, decayed)


def per_example_cross_entropy(labels, logits, num_classes, label_smoothing=0.0):
    """loss.per_example_cross_entropy: float32 [B]; labels int [B] or float32 [B, C] shares."""
    logits = logits.astype(jnp.float32)
    targets = labels if labels.ndim == 2 else jax.nn.one_hot(labels, num_classes)
    targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
    return -jnp.sum(targets * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def weighted_mean(values, weights):
    """loss.weighted_mean: sum(values x weights) over the rows with a weight; 0 for padding only."""
    present = jnp.sum(weights != 0).astype(jnp.float32)
    return jnp.where(present > 0, jnp.sum(values * weights) / jnp.maximum(present, 1.0), 0.0)


def weight_decay(kernels, params):
    """loss.weight_decay of the decayed kernels' values (half the sum of squares, x weight_decay);
    0 with adamw, whose decay is the optimizer's."""
    if not kernels or loss_lib.is_decoupled(params):
        return jnp.float32(0.0)
    return params["weight_decay"] * sum(0.5 * jnp.sum(jnp.square(k.astype(jnp.float32))) for k in kernels)


def batch_accuracy(labels, logits, weights):
    """metrics.batch_accuracy: weighted accuracy; soft labels count as their largest share."""
    if labels.ndim == 2:
        labels = jnp.argmax(labels, axis=1)
    correct = (jnp.argmax(logits, axis=1) == labels.astype(jnp.int32)).astype(jnp.float32)
    return jnp.sum(correct * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def average_decay(decay, step):
    """averages.decay_at: min(decay, (1 + n) / (10 + n)) at step n."""
    step = jnp.asarray(step, jnp.float32)
    return jnp.minimum(float(decay), (1.0 + step) / (10.0 + step))
