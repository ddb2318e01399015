"""Complete, weighted evaluation: every eval image counted once, each padding row weighted 0.

The eval pipeline (trainer/data/input.py) pads the last batch with zero-weight rows and
runs ceil(N / eval_batch_size) steps of eval_batch_size examples: each input pipeline
(host) feeds its replicas per-replica batches of its share of the records
(trainer/keras/input_context.py). Each replica returns weighted sums
(trainer/objective/metrics.py batch_sums), summed across replicas and then, in float64,
over the steps: accuracy, top-k, mean per-class accuracy and cross entropy are ratios of
those sums, so padding counts for nothing. "loss" is the Estimator's: the mean over
batches of the training loss (label smoothing and weight decay included). The
checkpoint's weights (its moving averages, when kept) are read into the network for the
pass and the training weights put back after it. Scalars go to TensorBoard under
OUT/eval, as Estimator writes them.

    .venv/bin/python -m trainer.task --engine keras --mode evaluate --output_dir OUT
"""
import numpy as np
import tensorflow as tf

from trainer.data import input as input_lib
from trainer.keras import checkpoint as checkpoint_lib, input_context
from trainer.objective import loss as loss_lib, metrics
from trainer.run import checkpoints, eval_pictures


def make_eval_dataset(params, strategy):
    """One pass over the eval set, eval_batch_size examples a step: each input pipeline
    (host) reads its share of the records, padded to the same number of steps as every
    other's (trainer/data/input.py make_eval_dataset), so all stop together."""
    input_fn = input_lib.make_input_fn(params["eval_data_path"], input_lib.EVAL,
                                       num_examples=params["num_eval_examples"])
    return input_context.distribute_input_fn(strategy, input_fn, params, params["eval_batch_size"])


def make_eval_step(network, strategy, params):
    """A tf.function: one distributed eval batch -> {name: sum over its replicas}."""
    k = metrics.effective_top_k(params["num_classes"], params["top_k"])

    def replica_sums(features, labels):
        logits = network(features["image"], training=False)
        weights = features["weight"]
        sums = metrics.batch_sums(labels, logits, weights, params["num_classes"], k)
        smoothed = loss_lib.per_example_cross_entropy(labels, logits, params["num_classes"],
                                                      params["label_smoothing"])
        sums["loss_sum"] = tf.reduce_sum(smoothed * weights)
        sums["present"] = tf.cast(tf.math.count_nonzero(weights), tf.float32)
        return sums

    @tf.function
    def eval_step(features, labels):
        per_replica = strategy.run(replica_sums, args=(features, labels))
        return {name: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                for name, value in per_replica.items()}
    return eval_step


def run_eval_pass(eval_step, dataset, params):
    """(metrics, the float64 [C, C] confusion matrix) of one pass over the eval set."""
    sums_of_each = ({name: value.numpy().astype(np.float64) for name, value in eval_step(features, labels).items()}
                    for features, labels in dataset)
    return metrics.results_of_batches(sums_of_each, metrics.effective_top_k(params["num_classes"], params["top_k"]))


def evaluate(network, eval_step, dataset, eval_dir, params, checkpoint_path):
    """The eval metrics of checkpoint_path read into network, one pass of eval_step
    (make_eval_step's) over dataset (make_eval_dataset's), with CONFUSION_MATRIX_METRIC;
    scalars to eval_dir (OUT/eval)."""
    use_averages = bool(params["moving_average_decay"])
    # The step before the restore: beside a trainer, keep_checkpoint_max may delete the files
    # once they are read, and nothing after the restore may need them again.
    step = checkpoints.step_of(checkpoint_path)
    with checkpoint_lib.weights_of(network, checkpoint_path, use_averages) as network:
        results, matrix = run_eval_pass(eval_step, dataset, params)
        results["loss"] += float(loss_lib.weight_decay(network, params))
    eval_pictures.write_eval_scalars(eval_dir, step, results)
    results[metrics.CONFUSION_MATRIX_METRIC] = matrix
    return results

