"""The Estimator engine's optimizer step: TF1 optimizers, a second one for a backbone, gradient
clipping by global norm and AdamW's decoupled weight decay.

One tf.compat.v1.train.Optimizer (TrainingStep) takes every trainable variable's gradient, so
that CrossShardOptimizer around it sums the gradients of all TPU cores first and the global
norm is then that of the whole summed step (--gradient_clip_norm), head and backbone together.
It then applies each group of variables with its own TF1 optimizer: the head (or every
variable) at the scheduled learning rate, a backbone at learning_rate x
backbone_learning_rate_multiplier. A second optimizer rather than scaled gradients: Adam's
step does not scale with its gradients.

--optimizer adamw is Adam with Loshchilov & Hutter's decoupled weight decay, done as Keras'
AdamW and Model Garden's AdamWeightDecay do it: before the Adam update each decayed variable
(a kernel: trainer/objective/loss.py is_decayed) loses learning_rate x weight_decay of its
value, at its group's learning rate; the loss then carries no L2 term. The Keras engine's
tf.keras.optimizers.AdamW takes the same step (tests/trainer/test_optimizers.py).

    .venv/bin/python -m pytest tests/trainer/test_optimizers.py
"""
import tensorflow as tf

from trainer.objective import loss as loss_lib


def make_base_optimizer(learning_rate, params):
    """The TF1 optimizer of one group: Nesterov momentum, or Adam (adam and adamw)."""
    if params["optimizer"] == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(learning_rate, params["momentum"], use_nesterov=True)
    return tf.compat.v1.train.AdamOptimizer(learning_rate)


class TrainingStep(tf.compat.v1.train.Optimizer):
    """Clips all gradients together, then applies each group with its own optimizer.

    groups: [(optimizer, learning_rate, variables)], the first also counts global_step; a
    variable in no later group belongs to the first. No variables of its own: the checkpoints
    hold the groups' optimizers' slots under the names they always had.
    """

    def __init__(self, groups, params):
        super().__init__(use_locking=False, name="TrainingStep")
        self.groups = groups
        self.clip_norm = params["gradient_clip_norm"]
        self.decay = params["weight_decay"] if loss_lib.is_decoupled(params) else 0.0

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if self.clip_norm:
            clipped, _ = tf.clip_by_global_norm([g for g, _ in pairs], self.clip_norm)
            pairs = list(zip(clipped, [v for _, v in pairs]))
        later = {v.ref() for _, _, variables in self.groups[1:] for v in variables}
        updates = []
        for index, (optimizer, learning_rate, variables) in enumerate(self.groups):
            if index:
                members = {v.ref() for v in variables}
                group = [(g, v) for g, v in pairs if v.ref() in members]
            else:
                group = [(g, v) for g, v in pairs if v.ref() not in later]
            updates.append(self.apply_group(optimizer, learning_rate, group, pairs,
                                            global_step if index == 0 else None))
        return tf.group(updates, name=name)

    def apply_group(self, optimizer, learning_rate, group, pairs, global_step):
        """The decoupled decay (adamw), then the group's optimizer, as Keras' AdamW orders them."""
        decays = []
        if self.decay:
            # After every gradient: in a TF1 graph nothing else orders the decay after the
            # forward pass's reads of the variables.
            with tf.control_dependencies([g for g, _ in pairs]):
                decays = [v.assign_sub(tf.cast(learning_rate * self.decay, v.dtype) * v)
                          for _, v in group if loss_lib.is_decayed(v)]
        with tf.control_dependencies(decays):
            return optimizer.apply_gradients(group, global_step)


def make_training_step(learning_rate, backbone, params):
    """The optimizer minimize() runs: a TrainingStep, in CrossShardOptimizer on a TPU (which
    averages the cores' gradients: their sum of losses divided by the core count).

    backbone: the backbone's trainable variables (their own optimizer), or None or [] for none.
    """
    groups = [(make_base_optimizer(learning_rate, params), learning_rate, [])]
    if backbone:
        backbone_rate = learning_rate * params["backbone_learning_rate_multiplier"]
        groups.append((make_base_optimizer(backbone_rate, params), backbone_rate, backbone))
    optimizer = TrainingStep(groups, params)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    return optimizer
