"""--seed for both engines: the process's global seeds and deterministic kernels, set before either builds a layer.

Called by the driver before it makes the engine (trainer/run/driver.py), and by a worker of
a parameter-server cluster (trainer/estimator/cluster.py).

    .venv/bin/python -m trainer.task ... --seed 1     # the same weights from the same data
"""
import random

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as tf_config


def seed_process(params):
    """--seed for both engines, before either builds a layer: Python's, NumPy's and TensorFlow's
    global seeds (Keras layers draw their initializers' seeds from Python's random, in the
    Estimator's graphs too) and deterministic kernels. The Estimator engine also gives each
    graph it builds the seed (RunConfig), and each training stream derives its own
    (trainer/data/input.py).

    Unseeded (0), whatever an earlier seeded run in this process set is undone: fresh global
    seeds and op determinism off (left on, TensorFlow refuses every unseeded random op)."""
    if not params["seed"]:
        unseed_process()
        return
    tf.keras.utils.set_random_seed(params["seed"])
    # Ops that may add in a varying order (GPU kernels above all) take a fixed order; on CPU it
    # costs little (docs/migration.md#measured-differences).
    tf.config.experimental.enable_op_determinism()


def unseed_process():
    """Global seeds from the OS again and op determinism off, as in a fresh process."""
    random.seed()
    np.random.seed()
    tf.random.set_seed(None)
    # TensorFlow exports enable_op_determinism only; its counterpart lives beside it (2.15-2.20).
    tf_config.disable_op_determinism()
