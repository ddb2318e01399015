"""How checkpoints of either engine name the network's variables, and how to read them back by name.

The Estimator engine's checkpoints hold variables by graph name ("dense/kernel"); the
Keras engine's are object-based (tf.train.Checkpoint) and keep the network's variables
by the same names under NETWORK, escaped as tf.train.Checkpoint escapes a dependency
name ("network/dense.Skernel/.ATTRIBUTES/VARIABLE_VALUE"). variables_by_name reads
either the same way: warm start (trainer/run/warm_start.py) and the Keras engine's
restore and export (trainer/keras/checkpoint.py).

    .venv/bin/python -c "from trainer.run import variable_names as v; print(v.network_key('dense/kernel'))"
"""
import re

import tensorflow as tf

NETWORK = "network"
OBJECT_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"  # tf.train.Checkpoint's suffix of a variable's key


def variable_name(variable):
    """A variable's name without the ':0' ('dense/kernel'); Keras 3 keeps it as .path."""
    return getattr(variable, "path", None) or variable.name.split(":")[0]


def escape_name(name):
    """tf.train.Checkpoint's escaping of a dependency name ('.' -> '..', '/' -> '.S')."""
    return name.replace(".", "..").replace("/", ".S")


def unescape_name(escaped):
    """A dependency name as tf.train.Checkpoint escaped it, unescaped (escape_name undone)."""
    return re.sub(r"\.(.)", lambda m: "/" if m[1] == "S" else m[1], escaped)


def network_key(name):
    """The key of network variable `name` in a checkpoint of the Keras engine."""
    return f"{NETWORK}/{escape_name(name)}{OBJECT_VALUE}"


def variables_by_name(prefix):
    """{variable name: (key in the checkpoint, shape)} of a checkpoint of either engine."""
    found = {}
    for key, shape in tf.train.list_variables(prefix):
        if key.endswith(OBJECT_VALUE):
            if not key.startswith(NETWORK + "/"):
                continue  # the Keras engine's optimizer and step: not the network's
            found[unescape_name(key[len(NETWORK) + 1:-len(OBJECT_VALUE)])] = (key, shape)
        elif key != "_CHECKPOINTABLE_OBJECT_GRAPH":
            found[key] = (key, shape)
    return found
