"""The Keras engine's model: a trainer/nets network inside a keras.Model whose train_step is the Estimator engine's step.

One optimizer step per batch, with what model_fn does in TRAIN mode, from the same
definitions (trainer/objective/): the weighted cross entropy (label smoothing) plus
L2 weight decay, the batch-scaled learning rate with its warm-up and decay, Adam
(epsilon 1e-8, TF1's), AdamW (decoupled weight decay) or Nesterov momentum, a second
optimizer for a backbone at learning_rate x backbone_learning_rate_multiplier (Adam's step
does not scale with its gradients), gradient clipping by global norm, and the moving
averages of the weights. Each replica computes the loss of its share of the global batch
and divides it by the replica count: the gradients are summed across replicas before the
clipping, so they are averaged as CrossShardOptimizer averages them.

    .venv/bin/python -m pytest tests/trainer/test_keras_engine.py
"""
import tensorflow as tf

from trainer import nets
from trainer.objective import averages, loss as loss_lib, metrics, schedule
from trainer.run import variable_names, warm_start

class LearningRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """trainer/objective/schedule.py's rate at the optimizer's step, times multiplier."""

    def __init__(self, params, multiplier=1.0):
        self.params, self.multiplier = params, multiplier

    def __call__(self, step):
        return schedule.learning_rate_schedule(step, self.params) * self.multiplier

    def get_config(self):
        return {"multiplier": self.multiplier}


def make_optimizer(params, variables, multiplier=1.0):
    """The Keras optimizer of one group of variables (the head's or a backbone's).

    adamw: Keras' AdamW, which takes learning_rate x weight_decay of each variable before the
    Adam update, as trainer/estimator/optimizer.py does; only kernels decay (is_decayed).
    """
    rate = LearningRate(params, multiplier)
    if params["optimizer"] == "momentum":
        return tf.keras.optimizers.SGD(rate, momentum=params["momentum"], nesterov=True)
    if params["optimizer"] == "adam":
        return tf.keras.optimizers.Adam(rate, epsilon=schedule.TF1_ADAM_EPSILON)
    optimizer = tf.keras.optimizers.AdamW(rate, weight_decay=params["weight_decay"],
                                          epsilon=schedule.TF1_ADAM_EPSILON)
    optimizer.exclude_from_weight_decay(var_list=[v for v in variables if not loss_lib.is_decayed(v)])
    return optimizer


def sum_over_replicas(gradients):
    """Each replica's gradients summed over the replicas (the identity on one): what the Keras
    optimizer would do inside apply_gradients, done first so that the clipping sees the sum."""
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)


class MovingAverages(tf.Module):
    """A shadow per averaged variable (trainer/objective/averages.py), starting at its value now."""

    def __init__(self, network, params):
        super().__init__()
        self.decay = params["moving_average_decay"]
        self.sources = averages.averaged_variables(network, params)
        # ONLY_FIRST_REPLICA: every replica holds the same weights after a step; one writes.
        self.shadows = [tf.Variable(v.read_value(), trainable=False,
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                        for v in self.sources]

    def update(self, step):
        decay = averages.decay_at(self.decay, step)
        for shadow, source in zip(self.shadows, self.sources):
            shadow.assign_sub((1.0 - decay) * (shadow - tf.cast(source, shadow.dtype)))

    def by_name(self):
        """{NAME + EMA_SUFFIX: shadow}, as the Estimator engine's checkpoints name them."""
        return {variable_names.variable_name(source) + averages.EMA_SUFFIX: shadow
                for source, shadow in zip(self.sources, self.shadows)}


def split_by_backbone(network):
    """(head variables, backbone variables or None): None when the network has no trainable
    backbone, as the Estimator engine decides when to use a second optimizer."""
    backbone = nets.backbone_of(network)
    if backbone is None or not backbone.trainable_variables:
        return network.trainable_variables, None
    in_backbone = {v.ref() for v in backbone.trainable_variables}
    head = [v for v in network.trainable_variables if v.ref() not in in_backbone]
    return head, [v for v in network.trainable_variables if v.ref() in in_backbone]


def warm_start_network(network, params):
    """A fresh run's network starts from --warm_start_from (trainer/run/warm_start.py: the same
    sources and checks as the Estimator engine's); returns {key in the source: variable}."""
    if not params["warm_start_from"] or not warm_start.is_fresh(params):
        return {}
    checkpoint = warm_start.source_checkpoint(params)
    mapping = warm_start.assignment_map(checkpoint, network.variables, params)
    reader = tf.train.load_checkpoint(checkpoint)
    for key, variable in mapping.items():
        variable.assign(reader.get_tensor(key))
    return mapping


class TrainingModel(tf.keras.Model):
    """The network, its optimizers and moving averages; trainer/keras/train.py runs train_step
    (as model.fit would: the Keras API for one training step)."""

    def __init__(self, network, params, replicas):
        super().__init__()
        self.network = network
        self.settings = dict(params)
        self.replicas = replicas
        head, backbone = split_by_backbone(network)
        self.head_optimizer = make_optimizer(params, head)
        self.backbone_optimizer = None
        if backbone is not None:
            self.backbone_optimizer = make_optimizer(params, backbone,
                                                     params["backbone_learning_rate_multiplier"])
        self.averages = MovingAverages(network, params) if params["moving_average_decay"] else None

    @property
    def step(self):
        """The global step: the head optimizer's count of applied steps (int64 variable)."""
        return self.head_optimizer.iterations

    def build_optimizers(self):
        """Their slot variables now, so that a checkpoint restores them at once."""
        head, backbone = split_by_backbone(self.network)
        self.head_optimizer.build(head)
        if self.backbone_optimizer is not None:
            self.backbone_optimizer.build(backbone)

    def call(self, images, training=False):
        return self.network(images, training=training)

    def train_step(self, data):
        features, labels = data
        step = tf.identity(self.step)  # before this step's update: the rate's step, as in model_fn
        with tf.GradientTape() as tape:
            logits = self.network(features["image"], training=True)
            total, cross_entropy = loss_lib.compute_loss(
                labels, logits, features["weight"], self.network, self.settings)
            scaled = total / self.replicas  # the optimizer sums replicas' gradients: their mean
        self.apply_step(tape.gradient(scaled, self.network.trainable_variables))
        if self.averages is not None:
            self.averages.update(self.step)
        return {"loss": total, "cross_entropy": cross_entropy,
                "train_accuracy": metrics.batch_accuracy(labels, logits, features["weight"]),
                "learning_rate": schedule.learning_rate_schedule(step, self.settings)}

    def apply_step(self, gradients):
        """This replica's gradients summed over the replicas, clipped to gradient_clip_norm (all
        together), then the head's (or every) variable by the head optimizer, a backbone's by its own."""
        pairs = [(g, v) for g, v in zip(gradients, self.network.trainable_variables) if g is not None]
        summed = sum_over_replicas([g for g, _ in pairs])
        if self.settings["gradient_clip_norm"]:
            summed, _ = tf.clip_by_global_norm(summed, self.settings["gradient_clip_norm"])
        pairs = list(zip(summed, [v for _, v in pairs]))
        if self.backbone_optimizer is None:
            self.head_optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
            return
        _, backbone = split_by_backbone(self.network)
        in_backbone = {v.ref() for v in backbone}
        self.head_optimizer.apply_gradients([(g, v) for g, v in pairs if v.ref() not in in_backbone],
                                            skip_gradients_aggregation=True)
        self.backbone_optimizer.apply_gradients([(g, v) for g, v in pairs if v.ref() in in_backbone],
                                                skip_gradients_aggregation=True)


def build_training_model(params, strategy):
    """The TrainingModel, its variables made under strategy's scope (trainer/keras/train.py runs it)."""
    # Fresh layer names: the variables are named as in every other process and as the Estimator
    # engine's graph names them, since checkpoints (and warm start across engines) go by name.
    tf.keras.backend.clear_session()
    with strategy.scope():
        network = nets.build_from_params(params)
        warm_start_network(network, params)  # before the moving averages copy the initial values
        model = TrainingModel(network, params, strategy.num_replicas_in_sync)
        model.build_optimizers()
    return model
