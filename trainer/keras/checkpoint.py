"""The Keras engine's checkpoints: OUT/model.ckpt-<step>, written by a tf.train.CheckpointManager.

A CheckpointManager rather than Keras' BackupAndRestore: it writes checkpoints at the
steps this engine chooses (every save_checkpoints_steps, and at the end of each
training call) under the Estimator engine's names (model.ckpt-<step>, the `checkpoint`
state file, keep_checkpoint_max), so trainer/run/checkpoints.py checks and repairs a
Keras run exactly as an Estimator run, and a run resumes from the newest checkpoint
at exactly its step. BackupAndRestore keeps one backup of its own layout, made for
resuming an interrupted fit, not a series of checkpoints to evaluate and export.

What a checkpoint holds (tf.train.Checkpoint, object-based): the network's variables
by their names (trainer/run/variable_names.py; the moving averages as NAME + EMA_SUFFIX, as
in the Estimator engine's), the optimizers with their slots and step count.
Restoring the network reads names from a checkpoint of either engine.

    .venv/bin/python -m trainer.run.checkpoints OUT      # what OUT holds, either engine
"""
import contextlib

import tensorflow as tf

from trainer.objective.averages import EMA_SUFFIX
from trainer.run import checkpoints, variable_names


def make_checkpoint(model):
    """The tf.train.Checkpoint of a TrainingModel (trainer/keras/model.py)."""
    names = [variable_names.variable_name(v) for v in model.network.variables]
    if len(set(names)) != len(names):
        raise ValueError(f"model={model.settings['model']!r}: variable names repeat; the checkpoint "
                         f"keeps them by name")
    network = dict(zip(names, model.network.variables))
    if model.averages is not None:
        network.update(model.averages.by_name())
    parts = {variable_names.NETWORK: network, "optimizer": model.head_optimizer}
    if model.backbone_optimizer is not None:
        parts["backbone_optimizer"] = model.backbone_optimizer
    return tf.train.Checkpoint(**parts)


def make_manager(checkpoint, params):
    return tf.train.CheckpointManager(checkpoint, params["output_dir"],
                                      max_to_keep=params["keep_checkpoint_max"],
                                      checkpoint_name=checkpoints.CHECKPOINT_NAME)


def is_keras_checkpoint(prefix):
    """True for an object-based checkpoint (this engine's), False for the Estimator engine's."""
    return any(key == "_CHECKPOINTABLE_OBJECT_GRAPH" for key, _ in tf.train.list_variables(prefix))


def restore_latest(checkpoint, output_dir):
    """Restores the newest checkpoint of output_dir (checked by the driver); returns its step (0: none)."""
    prefix, step = checkpoints.latest_checkpoint(output_dir)
    if prefix is None:
        return 0
    if not is_keras_checkpoint(prefix):
        raise checkpoints.CheckpointError(
            f"checkpoint {prefix} was written by the Estimator engine: resume it with "
            f"--engine estimator, or use a new --output_dir")
    checkpoint.read(prefix).assert_existing_objects_matched()
    return step


@contextlib.contextmanager
def weights_of(network, prefix, use_averages):
    """The network holds the checkpoint's weights (read_network) inside the block; its own after."""
    own = [variable.numpy() for variable in network.variables]
    read_network(network, prefix, use_averages)
    try:
        yield network
    finally:
        for variable, value in zip(network.variables, own):
            variable.assign(value)


def read_network(network, prefix, use_averages):
    """Assigns the network's variables from the checkpoint at prefix (either engine's); with
    use_averages, a variable's moving average in its place when the checkpoint has one."""
    stored = variable_names.variables_by_name(prefix)
    reader = tf.train.load_checkpoint(prefix)
    for variable in network.variables:
        name = variable_names.variable_name(variable)
        source = name + EMA_SUFFIX if use_averages and name + EMA_SUFFIX in stored else name
        if source not in stored:
            raise checkpoints.CheckpointError(f"checkpoint {prefix} has no variable {source!r}")
        variable.assign(reader.get_tensor(stored[source][0]))
