"""TF_CONFIG, the cluster description AI Platform and `gcloud ai-platform local train` set.

Read only here, so estimator/engine.py (session config) and cluster.py (roles) agree on it,
and the Keras engine's refusal of a cluster (check_cluster) is judged before TensorFlow loads.

    TF_CONFIG='{"cluster": {"chief": ["localhost:2222"], "ps": ["localhost:2223"]},
                "task": {"type": "chief", "index": 0}}' .venv/bin/python -m trainer.cloud.tf_config
"""
import json
import os

from common.user_errors import UserError

CHIEF_TYPES = ("chief", "master")  # "master" is the TF 1.x name of the chief
TRAINER_TYPES = CHIEF_TYPES + ("worker",)


class ClusterError(UserError):
    """TF_CONFIG describes a cluster or a task this trainer cannot run."""


def read_tf_config(environ=None):
    """TF_CONFIG as a dict ({} when unset or empty)."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG") or "{}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ClusterError(f"TF_CONFIG={text[:200]!r} is not JSON ({err})") from None


def task_of(tf_config):
    """(task type, task index) of this process; (None, 0) when TF_CONFIG names none."""
    task = tf_config.get("task") or {}
    return task.get("type"), int(task.get("index") or 0)


def is_ps_cluster(tf_config):
    """True when the cluster has a parameter server: Estimator's between-graph training."""
    return bool((tf_config.get("cluster") or {}).get("ps"))


def count_trainer_tasks(tf_config):
    """The chief, master and worker tasks of TF_CONFIG's cluster: the processes that train."""
    cluster = tf_config.get("cluster") or {}
    return sum(len(cluster.get(task_type) or ()) for task_type in TRAINER_TYPES)


def check_cluster():
    """ClusterError for a TF_CONFIG of several training processes (a parameter-server or a
    multi-worker cluster): the Keras engine, like the run directory it keeps (lock, params.json,
    checkpoints, exports), is one client. A single task (gcloud local train's) runs as one.
    No TensorFlow: trainer/task.py's check_engine asks it before TensorFlow loads, and again as
    it loads the engine."""
    config = read_tf_config()
    task_type, index = task_of(config)
    if is_ps_cluster(config):
        raise ClusterError(f"--engine keras with a parameter-server cluster in TF_CONFIG "
                           f"(task {task_type}/{index}): the Keras engine runs as one task "
                           f"(one TPU host or one machine); use --engine estimator")
    trainers = count_trainer_tasks(config)
    if trainers > 1:
        raise ClusterError(
            f"--engine keras with {trainers} chief/worker tasks in TF_CONFIG (task {task_type}/{index}): "
            f"the Keras engine runs as one client; on a TPU pod start it on one host (worker 0) with "
            f"--use_tpu --tpu NAME (TPUStrategy then feeds each host its share); multi-worker "
            f"CPU/GPU training is not supported")


def device_filters(tf_config):
    """The tasks a trainer's sessions may talk to: the ps and itself (None for other roles).

    Without them a session waits for every task of the cluster, so a worker
    hangs once the chief has finished and exited. Estimator's RunConfig sets
    the same filters, but TPUEstimator's RunConfig turns them off.
    """
    task_type, index = task_of(tf_config)
    if task_type in CHIEF_TYPES:
        return ["/job:ps", f"/job:{task_type}"]
    if task_type == "worker":
        return ["/job:ps", f"/job:worker/task:{index}"]
    return None


def make_session_config(tf_config):
    """RunConfig session_config for a trainer of a ps cluster; None (the default) otherwise."""
    filters = device_filters(tf_config) if is_ps_cluster(tf_config) else None
    if filters is None:
        return None
    import tensorflow as tf  # here only: hptuning reads TF_CONFIG through this module before TensorFlow loads
    from tensorflow.core.protobuf import rewriter_config_pb2
    rewrite_options = rewriter_config_pb2.RewriterConfig(
        meta_optimizer_iterations=rewriter_config_pb2.RewriterConfig.ONE)  # TPU RunConfig's default
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True, device_filters=filters,
        graph_options=tf.compat.v1.GraphOptions(rewrite_options=rewrite_options))


if __name__ == "__main__":
    config = read_tf_config()
    print(json.dumps({"task": task_of(config), "is_ps_cluster": is_ps_cluster(config),
                      "trainer_tasks": count_trainer_tasks(config),
                      "device_filters": device_filters(config)}))
