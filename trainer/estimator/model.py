"""model_fn for TPUEstimator: one function per mode, the same code on TPU and CPU/GPU.

params (trainer/settings/table.py) chooses the network (trainer/nets) and the
optimisation; TPUEstimator adds use_tpu, batch_size and context. Eval metrics are
weighted by features["weight"], so the zero-weight rows that pad eval to whole
batches (trainer/data/input.py) count for nothing.

The reference ResNet's training knobs: label_smoothing (training loss only
changes; the eval cross_entropy metric stays the plain one), lr_schedule
"cosine" or "step" after a linear warmup, moving_average_decay (an exponential
moving average of the weights, kept beside them and restored in their place for
evaluation, prediction and export). Networks with a backbone (trainer/nets)
train it at learning_rate x backbone_learning_rate_multiplier, or not at all
with freeze_backbone; a fresh run can start from another's weights (trainer/run/warm_start.py).
The loss, the learning rate, what the average covers and the serving outputs are
defined once for both engines (trainer/objective/, trainer/export/contract.py);
what is TPUEstimator's own stays here: the spec per mode, metric_fn, host_call and the
scaffold that restores the averages; the optimizer step (CrossShardOptimizer, gradient
clipping, AdamW) is trainer/estimator/optimizer.py's.

    .venv/bin/python -m pytest tests/trainer/test_model_fn.py
"""
import tensorflow as tf

from common import signature
from trainer import nets
from trainer.estimator import optimizer as optimizer_lib
from trainer.export import contract
from trainer.objective import averages, loss as loss_lib, metrics as metrics_lib, schedule
from trainer.objective.metrics import CONFUSION_MATRIX_METRIC, batch_accuracy, effective_top_k
from trainer.run import input_images, progress, warm_start

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


def model_fn(features, labels, mode, params):
    """Returns the TPUEstimatorSpec for mode (TRAIN, EVAL or PREDICT)."""
    images = untranspose_images(features["image"], params)
    # Built outside the TPU/XLA computation: the functional model's symbolic Input
    # is a Placeholder, which XLA cannot compile (xla_check found this).
    with tf.init_scope(), nets.fixed_learning_phase():
        network = nets.build_from_params(params)
    logits = network(images, training=mode == ModeKeys.TRAIN)  # [B, C] float32
    if mode == ModeKeys.PREDICT:
        return make_predict_spec(logits, features, params, make_ema_scaffold_fn(network, params))
    weights = features["weight"]  # [B] float32: 0.0 for eval padding rows
    loss = compute_loss(labels, logits, weights, network, params)
    if mode == ModeKeys.EVAL:
        metric_fn = make_metric_fn(params["num_classes"], params["top_k"])
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits, weights]),
                                scaffold_fn=make_ema_scaffold_fn(network, params))
    init_from_source(network, params)  # before the EMA copies the initial values
    accuracy = batch_accuracy(labels, logits, weights)
    return make_train_spec(loss, network, images, params, accuracy)


def init_from_source(network, params):
    """In model_fn (TRAIN): the network's variables start from the warm-start source, unless
    warm start is off or output_dir already has a checkpoint. Returns the map used.

    tf.compat.v1.train.init_from_checkpoint inside tf.init_scope(): the variables'
    initializers become restores from the source, created outside the TPU computation
    (restore ops cannot run on a TPU, the reason TPUEstimator's docs send
    init_from_checkpoint to the host), and the Estimator's own checkpoint restore still
    wins whenever output_dir has one.
    """
    if not params["warm_start_from"] or not warm_start.is_fresh(params):
        return {}
    checkpoint = warm_start.source_checkpoint(params)
    with tf.init_scope():  # restore ops outside the TPU/XLA computation, as the variables
        mapping = warm_start.assignment_map(checkpoint, network.variables, params)
        tf.compat.v1.train.init_from_checkpoint(checkpoint, mapping)
    return mapping


def add_input_summaries(images, accuracy, learning_rate):
    """Off TPU: the first training images as the network sees them (trainer/run/input_images.py,
    the other engines' too), plus training accuracy and learning rate."""
    input_images.image_summary(images)
    tf.compat.v1.summary.scalar("train_accuracy", accuracy)
    tf.compat.v1.summary.scalar("learning_rate", learning_rate)


def untranspose_images(images, params):
    """[B, S, S, 3] images; input_fn sends them batch-last [S, S, 3, B] when transpose_input."""
    if params["transpose_input"]:
        images = tf.transpose(images, [3, 0, 1, 2])
    return images


def compute_loss(labels, logits, weights, network, params):
    """trainer/objective/loss.py's loss; its data term also goes to the progress line's
    collection (trainer/run/progress.py), not to LOSSES, where Estimator.train puts the total."""
    total, cross_entropy = loss_lib.compute_loss(labels, logits, weights, network, params)
    tf.compat.v1.add_to_collection(progress.LOSS_COLLECTION, cross_entropy)
    return total


def make_metric_fn(num_classes, top_k):
    """metric_fn(labels, logits, weights) -> {name: (value, update_op)}; runs on the host on TPU."""
    k = effective_top_k(num_classes, top_k)

    def metric_fn(labels, logits, weights):
        predictions = tf.argmax(logits, axis=1, output_type=tf.int32)
        per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        metrics = {
            "accuracy": tf.compat.v1.metrics.accuracy(labels, predictions, weights=weights),
            "mean_per_class_accuracy": tf.compat.v1.metrics.mean_per_class_accuracy(
                labels, predictions, num_classes, weights=weights),
            # Estimator's own "loss" averages per-batch losses, so a padded last
            # batch counts as much as a full one; this one weights every example.
            "cross_entropy": tf.compat.v1.metrics.mean(per_example_loss, weights=weights),
        }
        if k:
            in_top_k = tf.cast(tf.math.in_top_k(labels, logits, k), tf.float32)
            metrics[metrics_lib.top_k_name(k)] = tf.compat.v1.metrics.mean(in_top_k, weights=weights)
        metrics[CONFUSION_MATRIX_METRIC] = streaming_confusion_matrix(
            labels, predictions, weights, num_classes)
        return metrics
    return metric_fn


def streaming_confusion_matrix(labels, predictions, weights, num_classes):
    """(value, update_op) of the weighted counts so far: float64 [C, C], row = true class,
    column = predicted class; a local metric variable, reset by each evaluation."""
    total = tf.compat.v1.Variable(
        tf.zeros([num_classes, num_classes], tf.float64), trainable=False, name="confusion_matrix",
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES])
    batch = tf.math.confusion_matrix(
        tf.reshape(labels, [-1]), tf.reshape(predictions, [-1]), num_classes,
        weights=tf.cast(tf.reshape(weights, [-1]), tf.float64), dtype=tf.float64)
    return tf.convert_to_tensor(total), total.assign_add(batch)


def minimize(loss, network, learning_rate, global_step, params):
    """One optimizer step (trainer/estimator/optimizer.py): gradients clipped together, a
    network's backbone at learning_rate x backbone_learning_rate_multiplier, AdamW's decay.

    Networks with a trainable backbone always get both optimizers, so their checkpoints
    have the same variables whatever the multiplier.
    """
    backbone = nets.backbone_of(network)
    backbone_variables = backbone.trainable_variables if backbone is not None else None
    optimizer = optimizer_lib.make_training_step(learning_rate, backbone_variables, params)
    return optimizer.minimize(loss, global_step, var_list=network.trainable_variables)


def make_ema_scaffold_fn(network, params):
    """scaffold_fn whose Saver restores the moving averages into the network's own
    variables (eval, predict, export), or None when moving_average_decay is 0."""
    if not params["moving_average_decay"]:
        return None
    ema = tf.compat.v1.train.ExponentialMovingAverage(params["moving_average_decay"])
    restore = ema.variables_to_restore(averages.averaged_variables(network, params))

    def scaffold_fn():
        return tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(restore, sharded=True))
    return scaffold_fn


def update_moving_averages(train_op, network, global_step, params):
    """train_op followed by the moving-average update (when moving_average_decay > 0).

    num_updates=global_step lowers the decay early on ((1 + n) / (10 + n)), so
    short runs and fresh heads are not dominated by their initial values.
    """
    if not params["moving_average_decay"]:
        return train_op
    ema = tf.compat.v1.train.ExponentialMovingAverage(
        params["moving_average_decay"], num_updates=global_step)
    with tf.control_dependencies([train_op]):
        return ema.apply(averages.averaged_variables(network, params))


def make_train_spec(loss, network, images, params, accuracy):
    """The TRAIN spec: one optimizer step that also updates batch-norm statistics."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    learning_rate = schedule.learning_rate_schedule(global_step, params)
    # Keras layers in graph mode keep their moving-average updates on the model,
    # not in tf.GraphKeys.UPDATE_OPS: without this, eval would use untrained BN stats.
    with tf.control_dependencies(network.get_updates_for(images)):
        train_op = minimize(loss, network, learning_rate, global_step, params)
    train_op = update_moving_averages(train_op, network, global_step, params)
    host_call = None
    if params["use_tpu"] and params["use_host_call"]:
        host_call = make_host_call(global_step, loss, learning_rate, accuracy, params)
    elif not params["use_tpu"]:
        add_input_summaries(images, accuracy, learning_rate)
    return TPUEstimatorSpec(ModeKeys.TRAIN, loss=loss, train_op=train_op, host_call=host_call)


def make_host_call(global_step, loss, learning_rate, accuracy, params):
    """(host_call_fn, tensors): TensorBoard summaries written on the TPU host.

    Summary ops cannot run on the TPU; host_call ships these tensors out each
    step. Each is reshaped to [1] because host_call concatenates along dim 0.
    """
    summary_dir = params["output_dir"]
    max_queue = params["iterations_per_loop"]

    def host_call_fn(global_step, loss, learning_rate, accuracy):
        step = global_step[0]
        writer = tf.compat.v2.summary.create_file_writer(summary_dir, max_queue=max_queue)
        with writer.as_default(), tf.compat.v2.summary.record_if(True):
            tf.compat.v2.summary.scalar("loss", loss[0], step=step)
            tf.compat.v2.summary.scalar("learning_rate", learning_rate[0], step=step)
            tf.compat.v2.summary.scalar("train_accuracy", accuracy[0], step=step)
            return tf.compat.v1.summary.all_v2_summary_ops()

    # Scalars only: an image per step through the outfeed would cost every TPU step.
    tensors = [tf.reshape(global_step, [1]), tf.reshape(loss, [1]), tf.reshape(learning_rate, [1]),
               tf.reshape(tf.cast(accuracy, tf.float32), [1])]
    return host_call_fn, tensors


def make_predict_spec(logits, features, params, scaffold_fn=None):
    """Probabilities, class ids and (off TPU) class names; export_outputs for serving.

    scaffold_fn: make_ema_scaffold_fn's, so that predictions and exports use the averaged weights.
    """
    predictions = contract.probabilities_and_ids(logits)  # float32 [B, C], int64 [B]
    if "index" in features:  # batch prediction (trainer/estimator/predict.py): -1 marks a padding row
        predictions["index"] = features["index"]                # [B] int32
    if params["use_tpu"]:  # strings cannot live on the TPU; the host maps ids to names
        return TPUEstimatorSpec(ModeKeys.PREDICT, predictions=predictions, scaffold_fn=scaffold_fn)
    predictions[signature.OUTPUT_CLASSES] = contract.class_names(
        predictions[signature.OUTPUT_CLASS_IDS], params["labels"])
    if signature.INPUT_KEY in features:
        predictions[signature.OUTPUT_KEY] = features[signature.INPUT_KEY]
    return TPUEstimatorSpec(ModeKeys.PREDICT, predictions=predictions, scaffold_fn=scaffold_fn,
                            export_outputs=make_export_outputs(predictions))


def make_export_outputs(predictions):
    """One PredictOutput per contract signature (trainer/export/contract.py); trainer/estimator/export.py
    picks the inputs of each."""
    return {name: tf.estimator.export.PredictOutput(outputs)
            for name, outputs in contract.signature_outputs(predictions).items()}
