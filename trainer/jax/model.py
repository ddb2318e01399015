"""The JAX engine's model: a trainer/nets network built with Keras 3, its optimizer, and a pure train step.

The network is the one trainer/nets builds for every engine, here as a Keras 3 model; the
step is a function of a TrainState (the network's variables, the optimizer's, the moving
averages) that jax.jit compiles once per run: Keras' stateless_call for the forward pass,
jax.value_and_grad for the gradients, the optimizer's stateless_apply for the update. What
it optimizes is trainer/objective's, in jax.numpy (trainer/jax/objective.py): the weighted
cross entropy with label smoothing plus L2 weight decay, the batch-scaled learning rate with
its warm-up and decay, Adam (epsilon 1e-8, TF1's), AdamW (decoupled decay, kernels only) or
Nesterov momentum, clipping by global norm, and the moving averages of the weights
(min(decay, (1 + n) / (10 + n)) at step n). The batch is the global one, spread over the
devices by its sharding (trainer/jax/data.py): the loss is its mean, as CrossShardOptimizer's
average of the shards' gradients gives it.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_engine.py
"""
import typing

import jax
import jax.numpy as jnp
import keras

from trainer import nets
from trainer.jax import objective
from trainer.objective import loss as loss_lib, schedule

class TrainState(typing.NamedTuple):
    """Everything a step changes, as JAX arrays (a pytree: jax.jit takes and returns it)."""
    trainable: list
    non_trainable: list  # batch-norm statistics and dropout's seed state
    optimizer: list      # the optimizer's step count and slots
    averages: list       # a shadow per averaged variable; [] without --moving_average_decay


class LearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """trainer/objective/schedule.py's rate at the optimizer's step."""

    def __init__(self, params):
        self.params = params

    def __call__(self, step):
        return objective.learning_rate(step, self.params)

    def get_config(self):
        return {}


def make_optimizer(params, network):
    """The Keras 3 optimizer of params["optimizer"], clipping by global norm when asked."""
    rate, clip = LearningRate(params), params["gradient_clip_norm"] or None
    if params["optimizer"] == "momentum":
        return keras.optimizers.SGD(rate, momentum=params["momentum"], nesterov=True, global_clipnorm=clip)
    if params["optimizer"] == "adam":
        return keras.optimizers.Adam(rate, epsilon=schedule.TF1_ADAM_EPSILON, global_clipnorm=clip)
    optimizer = keras.optimizers.AdamW(rate, weight_decay=params["weight_decay"],
                                       epsilon=schedule.TF1_ADAM_EPSILON, global_clipnorm=clip)
    optimizer.exclude_from_weight_decay(
        var_list=[v for v in network.trainable_variables if not loss_lib.is_decayed(v)])
    return optimizer


def averaged_places(network, params):
    """[(list name, index)] of the variables the moving averages cover (averages.py's rule)."""
    places = [("trainable", i) for i in range(len(network.trainable_variables))]
    if not params["freeze_backbone"]:
        places += [("non_trainable", i) for i, v in enumerate(network.non_trainable_variables)
                   if "moving_mean" in v.path or "moving_variance" in v.path]
    return places


class JaxModel:
    """The Keras 3 network and its optimizer; train_step and logits are pure functions of a TrainState."""

    def __init__(self, params):
        self.params = params
        self.network = nets.build_from_params(params, keras=keras)
        self.optimizer = make_optimizer(params, self.network)
        self.optimizer.build(self.network.trainable_variables)
        self.step_index = next(i for i, v in enumerate(self.optimizer.variables)
                               if v is self.optimizer.iterations)
        self.decayed = [i for i, v in enumerate(self.network.trainable_variables) if loss_lib.is_decayed(v)]
        self.averaged = averaged_places(self.network, params) if params["moving_average_decay"] else []

    def initial_state(self):
        """The state of the Keras variables' values now (fresh, or as restored)."""
        trainable = [v.value for v in self.network.trainable_variables]
        non_trainable = [v.value for v in self.network.non_trainable_variables]
        state = TrainState(trainable, non_trainable, [v.value for v in self.optimizer.variables], [])
        return state._replace(averages=[jnp.array(getattr(state, name)[i]) for name, i in self.averaged])

    def step_of(self, state):
        return int(state.optimizer[self.step_index])

    def loss(self, trainable, non_trainable, images, labels, weights):
        """(total loss, (cross entropy, logits, non_trainable after the forward pass))."""
        logits, non_trainable = self.network.stateless_call(trainable, non_trainable, images, training=True)
        cross_entropy = objective.weighted_mean(objective.per_example_cross_entropy(
            labels, logits, self.params["num_classes"], self.params["label_smoothing"]), weights)
        total = cross_entropy + objective.weight_decay([trainable[i] for i in self.decayed], self.params)
        return total, (cross_entropy, logits, non_trainable)

    def train_step(self, state, images, labels, weights):
        """(the state after one optimizer step on the batch, {name: scalar} of the step)."""
        step = state.optimizer[self.step_index]
        (total, (cross_entropy, logits, non_trainable)), gradients = jax.value_and_grad(
            self.loss, has_aux=True)(state.trainable, state.non_trainable, images, labels, weights)
        trainable, optimizer = self.optimizer.stateless_apply(state.optimizer, gradients, state.trainable)
        state = TrainState(trainable, non_trainable, optimizer, state.averages)
        logs = {"loss": total, "cross_entropy": cross_entropy,
                "train_accuracy": objective.batch_accuracy(labels, logits, weights),
                "learning_rate": objective.learning_rate(step, self.params)}
        return state._replace(averages=self.updated_averages(state, step + 1)), logs

    def updated_averages(self, state, step):
        """Each shadow moved toward its variable by 1 - decay (averages.decay_at's decay at step)."""
        if not self.averaged:
            return []
        decay = objective.average_decay(self.params["moving_average_decay"], step)
        return [shadow - (1.0 - decay) * (shadow - getattr(state, name)[i].astype(shadow.dtype))
                for shadow, (name, i) in zip(state.averages, self.averaged)]

    def logits(self, state, images, use_averages=False):
        """float32 [B, C] logits in inference mode, of the weights or their moving averages."""
        trainable, non_trainable = self.inference_weights(state, use_averages)
        logits, _ = self.network.stateless_call(trainable, non_trainable, images, training=False)
        return logits.astype(jnp.float32)

    def inference_weights(self, state, use_averages):
        """(trainable, non_trainable) with each averaged variable's shadow in its place when asked."""
        trainable, non_trainable = list(state.trainable), list(state.non_trainable)
        if use_averages:
            lists = {"trainable": trainable, "non_trainable": non_trainable}
            for shadow, (name, i) in zip(state.averages, self.averaged):
                lists[name][i] = shadow
        return trainable, non_trainable

