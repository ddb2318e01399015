"""The distribution strategy of the Keras engine: TPUStrategy on a TPU, the default strategy elsewhere.

Made from the Estimator engine's TPU settings: --tpu (a name, a grpc:// address, or
'local' on a TPU VM), --tpu_zone and --gcp_project give the cluster resolver
(trainer/cloud/tpu.py); then the steps of TensorFlow's TPU guide: connect to the
cluster (a remote TPU only: a TPU VM's own chips need no connection), initialize the
TPU system, TPUStrategy. --train_batch_size and --eval_batch_size stay global: the
strategy splits each batch across its replicas, so each must divide by their count.
--num_cores is TPUEstimator's shard count; here the TPU says how many replicas it has.
A TPU that was found but does not start (busy, unhealthy) is one line too: the driver
makes the engine before it writes params.json (trainer/run/driver.py).

    .venv/bin/python -m trainer.task --engine keras --use_tpu --tpu local ...   # on a TPU VM
"""
import logging

import tensorflow as tf

from trainer.cloud import tpu
from trainer.settings import checks

_LOGGER = logging.getLogger(__name__)


def make_strategy(params):
    """TPUStrategy when use_tpu, else the default strategy (one replica: CPU or one GPU)."""
    if not params["use_tpu"]:
        return tf.distribute.get_strategy()
    resolver = tpu.resolve_tpu(params)
    try:
        if not tpu.is_local(params):
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except (tf.errors.OpError, RuntimeError) as err:  # found, yet it does not start (busy, unhealthy)
        message = (getattr(err, "message", None) or str(err)).strip().splitlines()
        raise tpu.TpuNotFound(f"use_tpu: the TPU {resolver.master() or tpu.LOCAL!r} did not start: "
                              f"{message[0][:200] if message else type(err).__name__}; "
                              f"{tpu.NO_TPU_FIX}") from None
    check_replicas(params, strategy.num_replicas_in_sync)
    return strategy


def check_replicas(params, replicas):
    """ConfigError unless every global batch splits evenly across the replicas."""
    for key in ("train_batch_size", "eval_batch_size"):
        if params[key] % replicas:
            raise checks.ConfigError(f"{key}={params[key]} must be divisible by the {replicas} "
                                     f"replicas of the TPU: each gets an equal share")
    if params["use_tpu"] and params["num_cores"] != replicas:
        _LOGGER.warning("num_cores=%d is TPUEstimator's; the Keras engine uses the TPU's %d "
                        "replicas", params["num_cores"], replicas)
