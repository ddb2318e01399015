"""Pods: one host, one share. Two worker processes under MultiWorkerMirroredStrategy, each
reading only its half of the files through the Keras engine's own input and train functions;
and the trainer command refusing a TF_CONFIG of several trainers with --engine keras.

MultiWorkerMirroredStrategy is the one multi-host strategy that runs on CPU: each worker
stands in for a host of a TPU pod, whose TPUStrategy calls the same dataset_fn once per
host (trainer/keras/input_context.py). The four training files each hold one label, so the
labels a worker trained on name the files it read. Its evaluation pass counts each eval
record once across both workers, both stopping after the same number of steps.

The trainer itself is one client (its lock, params.json, checkpoints and exports): a TF_CONFIG
of several chief/worker tasks, which used to train as one machine each, is refused in one line
(the command once, before TensorFlow loads; each kind of cluster through the engine's check
in the test's process); a single task (gcloud local train's) trains as before, in the test's
process.

    .venv-keras/bin/python -m pytest tests/trainer/test_keras_pod.py
"""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import free_ports, write_dataset
from tests.engines import in_keras_env
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import REPO_ROOT, error_lines, run_trainer, user_env
from trainer import chain
from trainer.cloud.tf_config import ClusterError

pytestmark = in_keras_env

FILES = ("f0", "f1", "f2", "f3")  # record i is in file i % 4 and has label i % 4: a label names its file
RECORDS_PER_FILE = 8
NUM_EVAL = 11  # 6 records for one worker, 5 for the other: both pad to the same 2 steps
TRAIN_BATCH = 8  # global: 4 a worker
CALLS = (1, 3)  # train function calls of 1 and 3 steps: 16 examples a worker, its two files once
TIMEOUT = 120  # seconds: a worker waiting on a collective its peer never joins fails the test

WORKER_SCRIPT = r"""
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # from TF_CONFIG, before any other op
from trainer.data import input as input_lib
from trainer.keras import evaluate, model as model_lib, train
params, calls = json.loads(sys.argv[1]), json.loads(sys.argv[2])
input_fn_calls = []  # [mode, batch_size, the context's deployment] of each input_fn call here
make_input_fn = input_lib.make_input_fn

def recording_make_input_fn(file_pattern, mode, **kwargs):
    input_fn = make_input_fn(file_pattern, mode, **kwargs)

    def recorded_input_fn(params):
        context = params.get("context")
        deployment = context and list(context.current_input_fn_deployment())
        input_fn_calls.append([mode, params["batch_size"], deployment])
        return input_fn(params)
    return recorded_input_fn

input_lib.make_input_fn = recording_make_input_fn
model = model_lib.build_training_model(params, strategy)
seen = tf.Variable(tf.zeros([params["num_classes"]], tf.int64))  # this worker's labels, by class
batches = tf.Variable(tf.zeros([0], tf.int32), shape=[None])  # its replica's batch sizes, in order
engine_train_step = model.train_step

def counting_train_step(batch):
    labels = batch[1]
    seen.assign_add(tf.math.bincount(labels, minlength=params["num_classes"], dtype=tf.int64))
    batches.assign(tf.concat([batches, tf.shape(labels)[:1]], 0))
    return engine_train_step(batch)

model.train_step = counting_train_step
train_function = train.make_train_function(model, strategy)
with strategy.scope():
    iterator = train.make_train_iterator(params, strategy, start_step=0)
for steps in calls:
    logs = train_function(iterator, tf.constant(steps, tf.int64))
eval_step = evaluate.make_eval_step(model.network, strategy, params)
_, confusion = evaluate.run_eval_pass(eval_step, evaluate.make_eval_dataset(params, strategy), params)
print(json.dumps({"input_fn_calls": input_fn_calls, "seen": seen.numpy().tolist(),
                  "batches": batches.numpy().tolist(), "step": int(model.step.numpy()),
                  "replicas": strategy.num_replicas_in_sync, "loss": float(logs["loss"]),
                  "eval_labels": confusion.sum(axis=1).tolist()}))
"""


@pytest.fixture
def pod_params(write_tfrecord_dataset, tmp_path):
    data = write_tfrecord_dataset({"train": len(FILES) * RECORDS_PER_FILE, "eval": NUM_EVAL},
                                  labels=FILES, size=20, shards=len(FILES))
    return chain.parse_params(as_argv(dict(
        TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
        output_dir=tmp_path / "out", engine="keras", train_batch_size=TRAIN_BATCH,
        seed=1)))  # seeded: ordered reads, the same stream each time


def wait_for(processes):
    """{name: (return code, stdout, stderr)} once every process has exited; any still running
    after TIMEOUT (a worker waiting on a collective its peer never joins) is killed."""
    try:
        outputs = {name: process.communicate(timeout=TIMEOUT) for name, process in processes.items()}
    finally:
        for process in processes.values():
            process.kill()
    return {name: (processes[name].returncode, *output) for name, output in outputs.items()}


def start_worker(params, cluster, index):
    """WORKER_SCRIPT as worker `index` of cluster (a `python -c` program: tests/user_commands.py
    starts modules only); TensorFlow's C++ lines quieted, as nothing in the script quiets them."""
    env = user_env(TF_CPP_MIN_LOG_LEVEL=2, CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
    return subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, json.dumps(params), json.dumps(CALLS)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_workers(params):
    """Each worker's JSON report, once both have exited."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    results = wait_for({i: start_worker(params, cluster, i) for i in range(2)})
    for i, (returncode, _, stderr) in results.items():
        assert returncode == 0, f"worker {i}:\n{stderr[-3000:]}"
    return [json.loads(results[i][1].strip().splitlines()[-1]) for i in range(2)]


@pytest.mark.process
@pytest.mark.timeout(2 * TIMEOUT)
def test_each_worker_trains_on_its_half_of_the_files_and_evaluates_its_share(pod_params):
    first, second = run_workers(pod_params)
    steps = sum(CALLS)
    assert first["replicas"] == second["replicas"] == 2
    assert first["step"] == second["step"] == steps  # both finished every step, together
    # Each worker called input.py's input_fn once per mode, as a host of TPUEstimator's
    # PER_HOST_V2 input: the per-replica batch, and its own (index, count, replicas) to shard by.
    for index, report in enumerate((first, second)):
        assert report["input_fn_calls"] == [[mode, TRAIN_BATCH // 2, [None, index, 2, 1]]
                                            for mode in ("train", "eval")]
    # Input pipeline i reads files i and i + 2 (input.py shards the sorted files), each once:
    # 16 examples a worker in 4 steps of 4, its two files' 8 records each, no other file's.
    # (experimental_distribute_dataset's auto-sharding splits these 4 files alike, with the
    # input_fn called with the global batch; the calls above and the eval counts tell them apart.)
    assert first["seen"] == [RECORDS_PER_FILE, 0, RECORDS_PER_FILE, 0]
    assert second["seen"] == [0, RECORDS_PER_FILE, 0, RECORDS_PER_FILE]
    # Every step, each replica's batch is half of --train_batch_size: together, the global batch.
    assert first["batches"] == second["batches"] == [TRAIN_BATCH // 2] * steps
    assert np.isfinite(first["loss"]) and first["loss"] == second["loss"]  # the mean over both
    # The eval pass counts each of the 11 records once across the workers (record i has label
    # i % 4), the padding none; both workers get the same all-reduced sums.
    assert first["eval_labels"] == second["eval_labels"] == [3, 3, 3, 2]


# No process listens at these addresses: the Keras engine never connects to a TF_CONFIG cluster.
REFUSED = {
    "two_workers": ({"cluster": {"worker": ["host0:2222", "host1:2222"]},
                     "task": {"type": "worker", "index": 1}},
                    "--engine keras with 2 chief/worker tasks in TF_CONFIG (task worker/1): the Keras "
                    "engine runs as one client; on a TPU pod start it on one host (worker 0) with "
                    "--use_tpu --tpu NAME (TPUStrategy then feeds each host its share); multi-worker "
                    "CPU/GPU training is not supported"),
    "chief_and_worker": ({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"]},
                          "task": {"type": "chief", "index": 0}},
                         "--engine keras with 2 chief/worker tasks in TF_CONFIG (task chief/0)"),
    "parameter_server": ({"cluster": {"chief": ["host0:2222"], "ps": ["host1:2222"]},
                          "task": {"type": "chief", "index": 0}},
                         "--engine keras with a parameter-server cluster in TF_CONFIG (task chief/0)"),
}


@pytest.fixture(scope="module")
def shared_dataset(tmp_path_factory):
    """tiny_dataset's sizes, written once: the runs and refusals below only read it."""
    return write_dataset(tmp_path_factory.mktemp("pod") / "data", {"train": 24, "eval": 11}, size=20)


def keras_argv(dataset, output_dir, **flags):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{dataset}/train-*", eval_data_path=f"{dataset}/eval-*",
                        output_dir=output_dir, engine="keras", **flags))


@pytest.mark.process
def test_a_cluster_of_several_trainers_is_refused_in_one_line_by_the_command(shared_dataset, tmp_path):
    """A multi-worker TF_CONFIG used to run a whole training on each task, as if alone (only a
    parameter-server cluster was refused). Refused before TensorFlow loads: a tensorflow that
    cannot be imported is all the command finds."""
    config, expected = REFUSED["two_workers"]
    result = run_trainer(*keras_argv(shared_dataset, tmp_path / "out"),
                         env=user_env(without_tensorflow=True, TF_CONFIG=json.dumps(config)))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(error_lines(result)) == 1 and expected in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_cluster_of_several_trainers_is_refused_before_anything_is_written(
        name, shared_dataset, tmp_path, monkeypatch):
    """The engine's check, in this process: the refusal above, for each kind of cluster."""
    from trainer import task
    config, expected = REFUSED[name]
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    params = chain.parse_params(keras_argv(shared_dataset, tmp_path / "out"))
    with pytest.raises(ClusterError, match=re.escape(expected)):
        task.load_engine("keras")(params)
    assert not (tmp_path / "out").exists()


@pytest.mark.trains
@pytest.mark.parametrize("config", [{"task": {"type": "chief"}},
                                    {"cluster": {"chief": ["host0:2222"]}, "task": {"type": "chief", "index": 0}}],
                         ids=["gcloud", "one_chief"])
def test_a_single_task_tf_config_trains_as_one_machine(config, shared_dataset, tmp_path, monkeypatch):
    """gcloud ai-platform local train's TF_CONFIG (a chief, no cluster), and a cluster of one chief."""
    from trainer import task
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    task.load_engine("keras")(chain.parse_params(keras_argv(shared_dataset, tmp_path / "out", mode="train",
                                                            train_steps=2)))
    assert (tmp_path / "out" / "model.ckpt-2.index").exists()
