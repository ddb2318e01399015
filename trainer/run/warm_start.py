"""Warm start: a fresh run begins from another run's weights or a Keras weights file.

--warm_start_from PATH is one of
  * an output directory of this project (its latest checkpoint) or a checkpoint
    prefix (OUT/model.ckpt-1500); with an exponential moving average in the
    source, the averaged weights (the ones that run evaluated and exported);
  * a Keras weights file (.h5 or .weights.h5) for the chosen keras.applications
    backbone with include_top=False, e.g. the ImageNet weights keras.applications
    publishes, downloaded by the user. prepare() loads it into the backbone of a
    throwaway network and writes OUT/warm_start/keras_weights, a TF checkpoint with
    the variable names model_fn gives them, and warm starts from that.

Variables whose names match --warm_start_exclude (default the classifier,
"^logits/": its shape is the class count) keep their fresh initial values,
so a 10-class checkpoint starts a 5-class run. Nothing else is optional: a
variable the source lacks, or has with another shape, stops the run before
training with one line naming it. Only a fresh output directory is warm
started; a run that resumes continues from its own checkpoint and says so. A damaged
source checkpoint (its .index or .data cut short) is refused in one line before the
output directory's lock and params.json (check_source), as a resume from it would be.

Both engines read the same sources through assignment_map ({name in the source
checkpoint: variable}): a checkpoint of either engine (trainer/run/checkpoints.py
reads the Keras engine's by variable name), with the moving averages preferred. The
Estimator engine turns the map into init_from_checkpoint restores inside model_fn
(trainer/estimator/model.py init_from_source); the Keras engine assigns the values
to its network before the first step (trainer/keras/model.py).

    .venv/bin/python -m trainer.task ... --output_dir OUT5 --warm_start_from OUT10
    .venv/bin/python -m trainer.task ... --model resnet50 --image_size 224 \\
        --warm_start_from resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5
"""
import json
import logging
import os
import re

import tensorflow as tf

from trainer import nets
from trainer.objective.averages import EMA_SUFFIX
from trainer.run import checkpoints, variable_names
from trainer.settings import checks, table

CONVERTED_SUBDIR = "warm_start"     # under output_dir: the converted Keras weights
CONVERTED_NAME = "keras_weights"    # checkpoint prefix inside it


class WarmStartError(checks.ConfigError):
    """The warm-start source does not fit this run (another network, missing variables)."""


def is_keras_weights(path):
    """True for a Keras weights file (.h5, .weights.h5) rather than a TF checkpoint."""
    return path.endswith(".h5")


def converted_prefix(params):
    return os.path.join(params["output_dir"], CONVERTED_SUBDIR, CONVERTED_NAME)


def is_fresh(params):
    """True when output_dir has no checkpoint yet: the only time warm start applies."""
    return not checkpoints.list_checkpoints(params["output_dir"])  # by the files, not the state


def prepare(params, step):
    """Run by the driver before training: converts a Keras weights file at step 0 (a checkpoint
    source was checked by check_source before the lock), so that a mismatch fails before any
    step; says that a resumed run (step > 0) ignores it. Returns the checkpoint to warm start
    from, or None.
    """
    source = params["warm_start_from"]
    if not source:
        return None
    if step:
        logging.info("warm_start_from=%r ignored: output_dir already has checkpoints (step %d), "
                     "which this run continues from", source, step)
        return None
    if is_keras_weights(source):  # written from this network: its names and shapes fit
        checkpoint = convert_keras_weights(source, params)
    else:
        checkpoint = source_checkpoint(params)
    logging.info("Warm starting from %s (fresh variables: %r)", checkpoint,
                 params["warm_start_exclude"])
    return checkpoint


def check_source(params, step):
    """Before the output directory's lock and params.json: the checkpoint a fresh run (step 0)
    warm starts from exists, reads whole and fits this network (WarmStartError); damage is a
    CheckpointError with the message a resume from the same damage gets. A Keras weights
    file is loaded into a network in memory, so that a file of another network stops the
    run with nothing written; prepare converts it again under the lock (it writes the
    conversion), a network build more."""
    source = params["warm_start_from"]
    if not source or step:
        return
    if is_keras_weights(source):
        load_keras_weights(source, params)
        return
    prefix = source_checkpoint(params)
    match = checkpoints.CHECKPOINT_INDEX.match(os.path.basename(prefix) + ".index")
    checkpoints.check_restores(prefix, int(match[1]) if match else None,
                               checkpoints.list_checkpoints(os.path.dirname(prefix)),
                               purpose="warm start from")
    # Built eagerly after clear_session(): its variables are named as each engine names them
    # (model_fn in a fresh graph, the Keras engine after its own clear_session()).
    tf.keras.backend.clear_session()
    assignment_map(prefix, nets.build_from_params(params).variables, params)


def source_checkpoint(params):
    """The TF checkpoint prefix params["warm_start_from"] names; WarmStartError if there is none."""
    source = params["warm_start_from"]
    if is_keras_weights(source):
        prefix = converted_prefix(params)
        if not tf.io.gfile.exists(prefix + ".index"):
            raise WarmStartError(f"warm_start_from={source!r}: not converted yet; "
                                 f"warm_start.prepare(params, 0) writes {prefix} (trainer/run/driver.py runs it)")
        return prefix
    if tf.io.gfile.isdir(source):
        check_source_model(source, params)
        prefix = tf.train.latest_checkpoint(source)
        if prefix is None:
            raise WarmStartError(f"warm_start_from={source!r} holds no checkpoint")
        return prefix
    if not tf.io.gfile.exists(source + ".index"):
        raise WarmStartError(f"warm_start_from={source!r} is neither an output directory, a "
                             f"checkpoint prefix (no {source}.index) nor a Keras .h5 weights file")
    return source


def check_source_model(source_dir, params):
    """WarmStartError when the source run's params.json names another network."""
    path = os.path.join(source_dir, table.PARAMS_FILE)
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as f:
        model = json.load(f).get("model")
    if model and model != params["model"]:
        raise WarmStartError(f"warm_start_from={source_dir!r} was trained with model={model!r}, "
                             f"this run is model={params['model']!r}")


def assignment_map(checkpoint, variables, params):
    """{key in checkpoint: variable} for every variable not excluded; WarmStartError
    naming the variables the checkpoint lacks or holds with another shape."""
    exclude = re.compile(params["warm_start_exclude"]) if params["warm_start_exclude"] else None
    stored = variable_names.variables_by_name(checkpoint)  # {name: (key, shape)}, either engine's
    mapping, missing, reshaped = {}, [], []
    for variable in variables:
        name = variable_names.variable_name(variable)
        if exclude and exclude.search(name):
            continue
        source = name + EMA_SUFFIX if name + EMA_SUFFIX in stored else name
        if source not in stored:
            missing.append(name)
        elif list(stored[source][1]) != list(variable.shape):  # a Keras 3 variable's is a tuple
            reshaped.append(f"{name} {stored[source][1]} vs {list(variable.shape)}")
        else:
            mapping[stored[source][0]] = variable
    if missing or reshaped:
        raise WarmStartError(describe_mismatch(params, checkpoint, missing, reshaped))
    return mapping


def describe_mismatch(params, checkpoint, missing, reshaped):
    """One line: what the checkpoint lacks and which shapes differ (a few names of each)."""
    parts = []
    if missing:
        parts.append(f"{len(missing)} variable(s) missing ({', '.join(missing[:3])}"
                     f"{', ...' if len(missing) > 3 else ''})")
    if reshaped:
        parts.append(f"{len(reshaped)} with another shape ({'; '.join(reshaped[:3])}"
                     f"{'; ...' if len(reshaped) > 3 else ''})")
    return (f"warm_start_from={params['warm_start_from']!r} does not fit model={params['model']!r} "
            f"(checkpoint {checkpoint}): {' and '.join(parts)}. Warm start from the same network, "
            f"or widen --warm_start_exclude (now {params['warm_start_exclude']!r})")


def convert_keras_weights(path, params):
    """Writes the Keras weights file at path as a TF checkpoint of this run's network;
    returns its prefix. WarmStartError when the file does not fit the backbone.

    Loaded eagerly (Keras' .weights.h5 loader assigns eagerly) into a float32 build
    of the network made right after clear_session(): its variable names are then
    those of model_fn's graph build (each starts from a fresh set of layer names;
    model_fn's assignment_map names any variable the checkpoint then lacks).
    """
    network = load_keras_weights(path, params)
    return write_checkpoint(network.variables, converted_prefix(params))


def load_keras_weights(path, params):
    """The network (float32) with the Keras weights file at path in its backbone; WarmStartError
    when the file is missing or is not a weights file of this network's backbone."""
    if not nets.has_backbone(params["model"]) or params["model"] == "hub":
        raise WarmStartError(f"warm_start_from={path!r}: a Keras weights file is for the "
                             f"keras.applications networks, not model={params['model']!r}")
    if not tf.io.gfile.exists(path):
        raise WarmStartError(f"warm_start_from={path!r} does not exist")
    tf.keras.backend.clear_session()  # fresh layer names, as in the process that saved the file
    network = nets.build_from_params(dict(params, use_bfloat16=False))
    try:
        nets.load_backbone_weights(network, path)
    except (ValueError, KeyError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise WarmStartError(f"warm_start_from={path!r} is not a weights file of "
                             f"model={params['model']!r}'s backbone (include_top=False, "
                             f"image_size={params['image_size']}): {first_line}") from None
    return network


def write_checkpoint(variables, prefix):
    """Saves eager variables under their names with SaveV2, the op a TF1 Saver runs:
    a checkpoint that init_from_checkpoint and tf.train.list_variables read."""
    tf.io.gfile.makedirs(os.path.dirname(prefix))
    names = [variable_names.variable_name(v) for v in variables]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[v.read_value() for v in variables])
    return prefix
