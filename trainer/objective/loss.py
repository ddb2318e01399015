"""The training loss of both engines: weighted cross entropy (label smoothing optional) plus L2 weight decay.

The L2 term is --weight_decay's meaning for momentum and adam; with adamw the decay is
decoupled (a step of the optimizer, trainer/estimator/optimizers.py and trainer/keras/model.py)
and the loss has no L2 term. Either way only the kernels decay (is_decayed), never
biases, batch-norm or layer-norm variables or ConvNeXt's layer scales.

The mean is over the rows whose weight is not 0 (TF1's SUM_BY_NONZERO_WEIGHTS), so
a batch padded with zero-weight rows (trainer/data/input.py) is not diluted by its
padding. On several cores or replicas each computes the loss of its own share and
the gradients are averaged (the Estimator engine's CrossShardOptimizer; the Keras
engine divides by the replica count before the optimizer sums them).

    .venv/bin/python -m pytest tests/trainer/test_model_fn.py -k loss
"""
import tensorflow as tf

# adamw decays the weights in its step, and the loss then has no L2 term: the settings' rule, which
# also says which settings the loss is made with (table.settings_in_the_loss) before TensorFlow loads.
from trainer.settings.table import is_decoupled


def per_example_cross_entropy(labels, logits, num_classes, label_smoothing=0.0):
    """float32 [B]. labels: int [B] class ids, or float32 [B, C] shares (mixup/CutMix's,
    trainer/data/mix.py). With label_smoothing s the target is (1 - s) x the one-hot or the
    shares, plus s/C everywhere: for shares, the same as timm's smoothing of each one-hot
    before mixing, since mixing is linear. Int labels without smoothing take the sparse form
    (no [B, C] one-hot tensor)."""
    logits = tf.cast(logits, tf.float32)
    if labels.shape.rank == 2:
        return tf.nn.softmax_cross_entropy_with_logits(
            labels * (1.0 - label_smoothing) + label_smoothing / num_classes, logits)
    if label_smoothing:
        targets = tf.one_hot(labels, num_classes) * (1.0 - label_smoothing) + label_smoothing / num_classes
        return tf.nn.softmax_cross_entropy_with_logits(targets, logits)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def weighted_mean(values, weights):
    """sum(values * weights) / (rows with a weight); 0 for a batch of padding only."""
    weights = tf.cast(weights, tf.float32)
    present = tf.cast(tf.math.count_nonzero(weights), tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), present)


def cross_entropy(labels, logits, weights, params):
    """The data term: weighted mean cross entropy with params["label_smoothing"]."""
    return weighted_mean(per_example_cross_entropy(
        labels, logits, params["num_classes"], params["label_smoothing"]), weights)


def is_decayed(variable):
    """True for a kernel (dense, conv, depthwise conv): the variables weight decay shrinks."""
    return "kernel" in variable.name


def weight_decay(network, params):
    """params["weight_decay"] x the L2 of the network's trainable kernels (tf.nn.l2_loss: half the
    sum of squares), the reference ResNet's term; 0 with a decoupled decay (adamw)."""
    kernels = [v for v in network.trainable_variables if is_decayed(v)]
    if not kernels or is_decoupled(params):
        return tf.constant(0.0)
    return params["weight_decay"] * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in kernels])


def compute_loss(labels, logits, weights, network, params):
    """(total loss, data term): cross_entropy + weight_decay, both float32 scalars."""
    data = cross_entropy(labels, logits, weights, params)
    return data + weight_decay(network, params), data
