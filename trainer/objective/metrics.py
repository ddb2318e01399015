"""Eval metric names and the weighted sums they are made of.

The Estimator engine computes them with tf.compat.v1.metrics inside metric_fn
(trainer/estimator/model.py); the Keras and JAX engines add up batch_sums over the eval set
(results_of_batches; trainer/keras/evaluate.py, trainer/jax/evaluate.py). Both count every eval image
once with weight 1 and each zero-weight padding row not at all; the test that runs
both engines on the same weights holds them to 1e-6 (tests/trainer/test_keras_equivalence.py).

    .venv/bin/python -m pytest tests/trainer/test_keras_equivalence.py
"""
import numpy as np
import tensorflow as tf

from trainer.objective import loss as loss_lib

# The eval metric whose value is the [C, C] confusion matrix: drawn for TensorBoard
# (trainer/run/eval_pictures.py), never put in eval_results.jsonl. Not the image's
# tag: Estimator also writes this value, as a tensor summary, and TensorBoard keeps
# the first kind it sees for a tag, which would hide the image.
CONFUSION_MATRIX_METRIC = "confusion_matrix_counts"


def effective_top_k(num_classes, top_k):
    """k for the top-k metric: below the class count (top-C accuracy is always 1), or None."""
    k = min(top_k, num_classes - 1)
    return k if k >= 2 else None


def top_k_name(k):
    return f"top_{k}_accuracy"


def batch_accuracy(labels, logits, weights):
    """Weighted accuracy of one batch (a scalar for TensorBoard's train_accuracy). Soft labels
    (float32 [B, C], a mixed training batch) count as their largest share's class."""
    if labels.shape.rank == 2:
        labels = tf.argmax(labels, axis=1, output_type=tf.int32)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32),
                               tf.cast(labels, tf.int32)), tf.float32)
    return tf.reduce_sum(correct * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def batch_sums(labels, logits, weights, num_classes, k):
    """{name: float32 tensor} of one batch, each a weighted sum: rows, hits, cross entropy,
    top-k hits (when k) and the [C, C] confusion matrix (row = true class)."""
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    predictions = tf.argmax(logits, axis=1, output_type=tf.int32)
    sums = {
        "weight": tf.reduce_sum(weights),
        "correct": tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32) * weights),
        "cross_entropy": tf.reduce_sum(
            loss_lib.per_example_cross_entropy(labels, logits, num_classes) * weights),
        "confusion": tf.math.confusion_matrix(labels, predictions, num_classes, weights=weights,
                                              dtype=tf.float32),
    }
    if k:
        sums["top_k"] = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, k), tf.float32) * weights)
    return sums


def metrics_from_sums(sums, k):
    """The eval metrics (Python floats) of sums added up over the eval set (float64)."""
    total = max(float(sums["weight"]), 1.0)
    confusion = np.asarray(sums["confusion"], np.float64)
    rows = confusion.sum(axis=1)
    # tf.compat.v1.metrics.mean_per_class_accuracy's: a class without images counts 0.
    per_class = np.divide(np.diag(confusion), rows, out=np.zeros_like(rows), where=rows > 0)
    metrics = {"accuracy": float(sums["correct"]) / total,
               "mean_per_class_accuracy": float(per_class.mean()),
               "cross_entropy": float(sums["cross_entropy"]) / total}
    if k:
        metrics[top_k_name(k)] = float(sums["top_k"]) / total
    return metrics


def results_of_batches(batch_sums_of_each, k):
    """(metrics, the float64 [C, C] confusion matrix) of one pass: batch_sums_of_each yields each
    batch's {name: float64} sums (batch_sums' plus "loss_sum" and "present", the smoothed loss
    and the rows with a weight). "loss" is the Estimator's: the mean over batches of each
    batch's mean loss (a batch of padding only counts 0)."""
    totals, batch_losses = {}, []
    for sums in batch_sums_of_each:
        for name, value in sums.items():
            totals[name] = totals.get(name, 0.0) + value
        batch_losses.append(sums["loss_sum"] / sums["present"] if sums["present"] else 0.0)
    results = metrics_from_sums(totals, k)
    results["loss"] = float(np.mean(batch_losses))
    return results, totals["confusion"]
