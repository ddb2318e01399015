"""The JAX engine's evaluation: logits on the devices, the other engines' weighted sums on the host.

One pass over the eval set as the other engines make it (trainer/data/input.py: each
process its share, padded with zero-weight rows to the same number of steps); the
network runs under jax.jit on the checkpoint's weights (its moving averages, when kept),
and each batch's logits come back to the host, where trainer/objective/metrics.py and
loss.py (TensorFlow, on [B, C] arrays) sum them exactly as the Keras engine's eval step
does: the metrics, the confusion matrix and the Estimator's "loss" are the same
definitions, not a JAX copy. Every process of a multi-host slice runs the pass on its share and
gathers every host's rows (process_allgather), so all hold the same metrics; process 0 writes
the scalars to TensorBoard under OUT/eval.

    .venv-jax/bin/python -m trainer.task --engine jax --mode evaluate --output_dir OUT
"""
import numpy as np
import tensorflow as tf
from jax.experimental import multihost_utils

from trainer.data import input as input_lib
from trainer.jax import data, objective
from trainer.objective import loss as loss_lib, metrics
from trainer.run import eval_pictures


def make_eval_dataset(params):
    """This process's share of one pass over the eval set, eval_batch_size examples a global step."""
    input_fn = input_lib.make_input_fn(params["eval_data_path"], input_lib.EVAL,
                                       num_examples=params["num_eval_examples"])
    return input_fn(data.host_params(params, params["eval_batch_size"]))


def batch_sums(logits, labels, weights, params):
    """{name: float64} weighted sums of one batch: metrics.batch_sums and the smoothed loss's."""
    k = metrics.effective_top_k(params["num_classes"], params["top_k"])
    logits, labels, weights = tf.constant(logits), tf.constant(labels), tf.constant(weights, tf.float32)
    sums = metrics.batch_sums(labels, logits, weights, params["num_classes"], k)
    smoothed = loss_lib.per_example_cross_entropy(labels, logits, params["num_classes"], params["label_smoothing"])
    sums["loss_sum"] = tf.reduce_sum(smoothed * weights)
    sums["present"] = tf.cast(tf.math.count_nonzero(weights), tf.float32)
    return {name: value.numpy().astype(np.float64) for name, value in sums.items()}


def run_eval_pass(logits_fn, state, dataset, sharding, params):
    """(metrics, the float64 [C, C] confusion matrix) of one pass; logits_fn(state, images)."""
    def sums_of_each():
        for images, labels, weights in data.global_batches(dataset, sharding):
            logits, labels, weights = (np.asarray(multihost_utils.process_allgather(x, tiled=True))
                                       for x in (logits_fn(state, images), labels, weights))
            yield batch_sums(logits, labels, weights, params)
    return metrics.results_of_batches(sums_of_each(), metrics.effective_top_k(params["num_classes"], params["top_k"]))


def evaluate(engine, checkpoint_path, step):
    """The eval metrics of the checkpoint at checkpoint_path (step), with CONFUSION_MATRIX_METRIC;
    scalars to engine.eval_dir."""
    params = engine.params
    state = engine.mirror.restore(checkpoint_path, engine.state)
    use_averages = bool(params["moving_average_decay"])
    results, matrix = run_eval_pass(lambda s, images: engine.logits(s, images, use_averages),
                                    state, engine.eval_dataset(), engine.sharding, params)
    trainable, _ = engine.model.inference_weights(state, use_averages)
    kernels = [trainable[i] for i in engine.model.decayed]
    results["loss"] += float(objective.weight_decay(kernels, params))
    if engine.processes.is_writer:
        eval_pictures.write_eval_scalars(engine.eval_dir, step, results)
    results[metrics.CONFUSION_MATRIX_METRIC] = matrix
    return results
