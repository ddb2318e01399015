"""What this process does in a parameter-server cluster described by TF_CONFIG.

Estimator's own CPU/GPU distribution: every task runs the same command, and
TF_CONFIG (set by AI Platform, or by `gcloud ai-platform local train
--distributed`) names its role:

  chief (or master)  starts its tf.distribute.Server, runs estimator_engine.run (trainer/run/driver.py: train
                     rounds, evaluate, export), then tells every ps it is done.
  worker             starts its server, trains to train_steps, tells every ps.
  ps                 serves variables until the chief and every worker said done,
                     then exits (a plain estimator.train on a ps raises
                     "Train has been called wrong configuration").
  evaluator          nothing to do: the chief evaluates; logs that and exits.

The "done" message is one token per trainer in a FIFOQueue that lives on each
ps (shared_name DONE_QUEUE): it needs no file and nothing left behind. With no
ps in the cluster (a local run, a single-node job, TPU) estimator_engine.run runs as before.

    gcloud ai-platform local train --module-name trainer.task --package-path trainer \\
        --job-dir OUT --distributed --parameter-server-count 1 --worker-count 1 \\
        -- --train_data_path 'DIR/train-*' --eval_data_path 'DIR/eval-*'
"""
import logging
import time

import tensorflow as tf

from trainer.data import input as input_lib
from trainer.estimator import engine as estimator_engine
from trainer.run import checkpoints, seeds
from trainer.settings import table
from trainer.cloud.tf_config import (CHIEF_TYPES, TRAINER_TYPES, ClusterError, is_ps_cluster,
                               read_tf_config, task_of)

_LOGGER = logging.getLogger(__name__)  # role lines of a cluster job: shown in quiet mode

DONE_QUEUE = "trainer_done"  # shared_name of the done-token queue on each ps
SIGNAL_TIMEOUT_SECS = 60  # a trainer gives up telling a ps that is gone after this long
CHIEF_WAIT_SECS = 600  # then a worker starts anyway and waits in Estimator's own loop


def num_trainers(cluster):
    """Tasks that send a done token: the chief (or master) and every worker."""
    return sum(len(cluster.get(task_type, [])) for task_type in TRAINER_TYPES)


def start_server(tf_config):
    """Starts this task's tf.distribute.Server (Estimator's _start_std_server does the same)."""
    task_type, index = task_of(tf_config)
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    _LOGGER.info("Starting the %s/%d server of cluster %s", task_type, index, cluster.as_dict())
    try:
        return tf.distribute.Server(cluster, job_name=task_type, task_index=index,
                                    config=tf.compat.v1.ConfigProto(log_device_placement=False))
    except tf.errors.UnknownError as err:  # gRPC's bind failed: the other tasks would wait for it
        if "Could not start gRPC server" not in str(err):
            raise
        raise ClusterError(f"{task_type}/{index} cannot listen on {cluster.task_address(task_type, index)} "
                           f"(TF_CONFIG's cluster): another process holds that port, or the address is "
                           f"not this machine's; free the port or give the job other ports "
                           f"(gcloud ai-platform local train --start-port)") from None


def make_done_queue(ps_index, capacity):
    """The done-token queue on /job:ps/task:<ps_index>, shared by name across the cluster."""
    with tf.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(capacity, tf.int32, shapes=[], shared_name=DONE_QUEUE,
                                  name=f"{DONE_QUEUE}_{ps_index}")


def serve_until_done(server, tf_config):
    """On a ps: blocks until every trainer put its done token in this ps's queue."""
    _, index = task_of(tf_config)
    expected = num_trainers(tf_config["cluster"])
    # Only this ps's own device: the ps must not wait for trainers to come up.
    session_config = tf.compat.v1.ConfigProto(device_filters=[f"/job:ps/task:{index}"])
    with tf.Graph().as_default():
        dequeue = make_done_queue(index, capacity=expected).dequeue_many(expected)
        with tf.compat.v1.Session(server.target, config=session_config) as session:
            _LOGGER.info("ps/%d serving until %d trainers are done", index, expected)
            session.run(dequeue)
    _LOGGER.info("ps/%d: every trainer is done; exiting", index)


def signal_done(server, tf_config):
    """From a trainer: one done token into the queue of every ps."""
    cluster = tf_config["cluster"]
    capacity = num_trainers(cluster)
    task_type, index = task_of(tf_config)
    session_config = tf.compat.v1.ConfigProto(
        device_filters=["/job:ps", f"/job:{task_type}/task:{index}"],
        operation_timeout_in_ms=SIGNAL_TIMEOUT_SECS * 1000)  # a dead ps must not hang a trainer
    with tf.Graph().as_default():
        enqueues = [make_done_queue(i, capacity).enqueue(1) for i in range(len(cluster["ps"]))]
        with tf.compat.v1.Session(server.target, config=session_config) as session:
            session.run(enqueues)
    _LOGGER.info("%s/%d told %d ps it is done", task_type, index, len(enqueues))


class StepCounterHook(tf.estimator.SessionRunHook):
    """Counts the training steps this process ran (the global step counts every task's)."""

    def __init__(self):
        self.steps = 0

    def after_run(self, run_context, run_values):
        self.steps += 1


def wait_for_chief(output_dir, timeout_secs=CHIEF_WAIT_SECS):
    """Waits until the chief's first checkpoint exists, i.e. it has initialized the variables;
    returns the global step of the latest checkpoint then (0 when the wait timed out).

    A worker that starts first would otherwise find them uninitialized and sleep
    30 s (SessionManager's recovery wait) before it looks again.
    """
    deadline = time.monotonic() + timeout_secs
    while tf.train.latest_checkpoint(output_dir) is None and time.monotonic() < deadline:
        time.sleep(1)
    return checkpoints.latest_checkpoint(output_dir).step


def train_worker(params, index=0, name="worker"):
    """On worker index: trains to train_steps with the chief; the chief checkpoints and evaluates."""
    start_step = wait_for_chief(params["output_dir"])
    seeds.seed_process(params)
    estimator = estimator_engine.make_estimator(params)
    # A seeded worker reads its own order, not the chief's (stream 0) nor another worker's.
    train_input_fn = input_lib.make_input_fn(
        params["train_data_path"], tf.estimator.ModeKeys.TRAIN,
        seed=input_lib.train_seed(params["seed"], start_step, stream=1 + index))
    counter = StepCounterHook()
    estimator.train(train_input_fn, max_steps=params["train_steps"], hooks=[counter])
    _LOGGER.info("%s ran %d training steps", name, counter.steps)
    return counter.steps


def run_trainer(params, tf_config):
    """Chief or worker: serve, do the role's work, then tell the ps (also after a failure)."""
    task_type, index = task_of(tf_config)
    server = start_server(tf_config)
    try:
        if task_type in CHIEF_TYPES:
            return estimator_engine.run(params)
        if table.mode_reads(params).trains:  # train: a separate eval job evaluates
            train_worker(params, index, f"{task_type}/{index}")
        return None
    finally:
        signal_done(server, tf_config)


def run(params, environ=None):
    """Runs this process's role of TF_CONFIG; without a ps cluster, estimator_engine.run(params)."""
    tf_config = read_tf_config(environ)
    if not is_ps_cluster(tf_config):
        return estimator_engine.run(params)
    task_type, index = task_of(tf_config)
    if params["use_tpu"]:
        raise ClusterError(f"use_tpu=True with a parameter-server cluster in TF_CONFIG "
                           f"(task {task_type}/{index}): a TPU job runs as one task")
    if task_type == "ps":
        return serve_until_done(start_server(tf_config), tf_config)
    if task_type == "evaluator":
        _LOGGER.warning("evaluator/%d has nothing to do: the chief evaluates and exports", index)
        return None
    if task_type not in TRAINER_TYPES:
        raise ClusterError(f"TF_CONFIG task type {task_type!r} is not one of "
                           f"{list(TRAINER_TYPES) + ['ps', 'evaluator']}")
    return run_trainer(params, tf_config)
