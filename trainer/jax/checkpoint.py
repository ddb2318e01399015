"""The JAX engine's checkpoints: OUT/model.ckpt-<step>, the Keras engine's format, written by TensorFlow.

A TrainState is mirrored in tf.Variables and written by a tf.train.CheckpointManager, so
the run room checks, repairs, lists and evaluates a JAX run's checkpoints as it does the
other engines' (trainer/run/checkpoints.py), and names are shared: the network's weights
by their tf-keras names under `network` (the moving averages as NAME + EMA_SUFFIX), as the
Keras engine's checkpoints hold them: Keras 3 names a few variables otherwise (a depthwise
kernel "kernel", not "depthwise_kernel"; a layer of a nested block under the block's name; a
weight made without a name "variable_N", which tf-keras names by the attribute holding it), so
each is named as tf-keras names it, from its layer (tf_keras_names; tests/trainer/jax/
test_jax_nets.py holds the names equal to the tf-keras twin's for every network the JAX engine
trains), with no second network built. Hence the export reads a JAX checkpoint into the
network's tf-keras twin by name (trainer/jax/export.py), and warm start reads any engine's
checkpoint into the JAX network (trainer/run/warm_start.py). What only JAX has: the Keras 3
optimizer's variables under `jax_optimizer` and dropout's seed state under `jax_rng`.

    .venv-jax/bin/python -m trainer.run.checkpoints OUT
"""
import types

import jax
import keras
import numpy as np
import tensorflow as tf

from trainer.jax.model import TrainState
from trainer.objective.averages import EMA_SUFFIX
from trainer.run import checkpoints, variable_names, warm_start


def host_value(array):
    """A replicated jax.Array's value as NumPy (this process's copy: every process holds it)."""
    return np.asarray(array.addressable_data(0)) if isinstance(array, jax.Array) else np.asarray(array)


def nested_layers(model):
    """Every layer of model (Keras 3), those of its nested blocks (models themselves) included."""
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from nested_layers(layer)


def tf_keras_names(network):
    """{id(variable): its name as tf-keras names it} for every weight of network (Keras 3):
    OWNER/WEIGHT, the layer that holds it (not the blocks around it) and the weight's own name,
    "depthwise_kernel" for a depthwise kernel, the attribute's name for an unnamed weight."""
    layers = {layer.name: layer for layer in nested_layers(network)}
    names = {}
    for variable in network.weights:
        owner = layers[variable.path.split("/")[-2]]
        weight = variable.name
        if isinstance(owner, keras.layers.DepthwiseConv2D) and weight == "kernel":
            weight = "depthwise_kernel"
        elif weight.startswith("variable"):  # add_weight without a name
            weight = next(key for key, value in vars(owner).items() if value is variable)
        names[id(variable)] = f"{owner.name}/{weight}"
    return names


class CheckpointMirror:
    """tf.Variables holding a TrainState of model (trainer/jax/model.py JaxModel), by name."""

    def __init__(self, model, params, names, team):
        """names: tf_keras_names' {id(variable): name} of the network's weights; team: the run's
        processes (trainer/jax/processes.py), whose writer alone saves."""
        self.model, self.team = model, team
        state = model.initial_state()
        network = model.network
        groups = {variable_names.NETWORK: {}, "jax_optimizer": {}, "jax_rng": {}}
        self.places = []  # (list name, index, tf.Variable) for every array of a TrainState

        def mirror(group, name, list_name, index, value):
            if name in groups[group]:
                raise ValueError(f"model={params['model']!r}: variable name {name!r} repeats")
            groups[group][name] = tf.Variable(host_value(value), trainable=False)
            self.places.append((list_name, index, groups[group][name]))
        for i, v in enumerate(network.trainable_variables):
            mirror(variable_names.NETWORK, names[id(v)], "trainable", i, state.trainable[i])
        for i, v in enumerate(network.non_trainable_variables):
            is_weight = id(v) in names  # else dropout's seed state
            mirror(variable_names.NETWORK if is_weight else "jax_rng", names[id(v)] if is_weight else v.path,
                   "non_trainable", i, state.non_trainable[i])
        for i, v in enumerate(model.optimizer.variables):
            mirror("jax_optimizer", v.path, "optimizer", i, state.optimizer[i])
        for j, (list_name, i) in enumerate(model.averaged):
            source = getattr(network, f"{list_name}_variables")[i]
            mirror(variable_names.NETWORK, names[id(source)] + EMA_SUFFIX, "averages", j, state.averages[j])
        self.checkpoint = tf.train.Checkpoint(**groups)
        self.manager = tf.train.CheckpointManager(self.checkpoint, params["output_dir"],
                                                  max_to_keep=params["keep_checkpoint_max"],
                                                  checkpoint_name=checkpoints.CHECKPOINT_NAME)

    def save(self, state, step):
        """Writes model.ckpt-<step> of state: process 0 alone on a multi-host slice, and every
        process returns once it is whole (a failed save fails on all)."""
        for list_name, index, variable in self.places:
            variable.assign(host_value(getattr(state, list_name)[index]))
        self.team.from_writer(f"save {step}", lambda: self.manager.save(checkpoint_number=step))

    def restore(self, prefix, like):
        """The TrainState in the checkpoint at prefix, each array placed as like's (a TrainState)."""
        self.checkpoint.read(prefix).assert_existing_objects_matched()
        lists = {name: list(getattr(like, name)) for name in TrainState._fields}
        for list_name, index, variable in self.places:
            target = lists[list_name][index]
            lists[list_name][index] = jax.device_put(variable.numpy().astype(target.dtype), target.sharding)
        return TrainState(**lists)


def restore_latest(mirror, state, output_dir):
    """(state, step): the newest checkpoint of output_dir (checked by the driver), or state at 0."""
    prefix, step = checkpoints.latest_checkpoint(output_dir)
    if prefix is None:
        return state, 0
    if not any(key.startswith("jax_optimizer/") for key, _ in tf.train.list_variables(prefix)):
        raise checkpoints.CheckpointError(
            f"checkpoint {prefix} was not written by the JAX engine: resume it with the engine "
            f"that wrote it (its params.json names it), or use a new --output_dir")
    return mirror.restore(prefix, state), step


def warm_start_network(network, params, names):
    """A fresh run's network starts from --warm_start_from, any engine's checkpoint whose names
    fit (trainer/run/warm_start.py's checks, each variable by its tf-keras name: names);
    returns {key in the source: variable}."""
    if not params["warm_start_from"] or not warm_start.is_fresh(params):
        return {}
    checkpoint = warm_start.source_checkpoint(params)
    named = [types.SimpleNamespace(path=names[id(v)], shape=v.shape, variable=v) for v in network.weights]
    mapping = warm_start.assignment_map(checkpoint, named, params)
    reader = tf.train.load_checkpoint(checkpoint)
    for key, place in mapping.items():
        place.variable.assign(reader.get_tensor(key))
    return {key: place.variable for key, place in mapping.items()}
