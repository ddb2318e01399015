"""`gcloud ai-platform local train` runs trainer.task as the service would, as a ps cluster.

gcloud passes --job-dir and sets TF_CONFIG exactly like AI Platform; its local
Python is the project's venv (through local_python_for_gcloud), set in gcloud's environment
(CLOUDSDK_ML_ENGINE_LOCAL_PYTHON, with a private CLOUDSDK_CONFIG: never the user's). Each run
is a process group of its own: after it, no process of the group may remain (leftovers are
killed, then the test fails). The single-process run is tests/cloud/test_hptuning_local_train.py's.

    .venv/bin/python -m pytest tests/cloud/test_gcloud_local_train.py
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tests.conftest import free_port_range, write_dataset
from tests.user_commands import REPO_ROOT, user_env
from trainer.export import contract

GCLOUD = shutil.which("gcloud")
pytestmark = [pytest.mark.skipif(GCLOUD is None, reason="gcloud (Google Cloud SDK) is not installed"),
              pytest.mark.process]
# gcloud start-up is ~18 s, each trainer process ~10 s more on 2 shared cores. Under pytest.ini's
# 300 s per test: a hung run fails here, its output shown, instead of pytest-timeout ending the
# worker (a fresh clone's make test of 2227dc1 lost its worker so, and waited on).
TIMEOUT_SECS = 200
# A seconds-long run: tiny model, 2 train/eval rounds.
TINY_FLAGS = {
    "image_size": 16, "cnn_filters": "4,8", "dense_units": 16, "train_batch_size": 8,
    "eval_batch_size": 8, "warmup_steps": 1, "log_step_count_steps": 10, "save_summary_steps": 10,
    "num_warmup_images": 2, "shuffle_buffer": 16,
}


# Before each process it starts, gcloud asks its local Python for TensorFlow's version (`python -c
# PROBE`, a whole `import tensorflow`) to name the primary task chief or master: twice for one
# process, eight times (one after another) for a 1-ps 1-worker cluster, most of such a test's
# time. The local Python the tests give gcloud answers that question with the version this very
# interpreter has imported (the same answer, at once) and runs everything else with it.
PROBE = "import tensorflow as tf; print(tf.version.VERSION)"


def local_python_for_gcloud(path, before_exec=""):
    """Writes the shell script gcloud is given as its local Python (path); before_exec: shell
    lines run before every other call (the trial's TF_CONFIG in the hyperparameter test)."""
    path.write_text(f"""#!/bin/sh
if [ "$1" = "-c" ] && [ "$2" = "{PROBE}" ]; then echo "{tf.version.VERSION}"; exit 0; fi
{before_exec}exec "{sys.executable}" "$@"
""")
    path.chmod(0o755)
    return path


def gcloud_env(tmp_dir, before_exec="", **extra):
    """gcloud's environment: a private config dir, no prompts, no TF_CONFIG of ours, and
    ml_engine/local_python (local_python_for_gcloud, in tmp_dir) as a property set in the
    environment, which spares a `gcloud config set` (a gcloud start-up) per test."""
    local_python = local_python_for_gcloud(tmp_dir / "local_python", before_exec)
    return user_env(drop=("TF_CONFIG",), CLOUDSDK_CONFIG=tmp_dir / "gcloud_config",
                    CLOUDSDK_CORE_DISABLE_PROMPTS=1, CLOUDSDK_CORE_DISABLE_USAGE_REPORTING=1,
                    CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK=1,
                    CLOUDSDK_ML_ENGINE_LOCAL_PYTHON=local_python, **extra)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("gcloud") / "data", {"train": 32, "eval": 11}, size=20)


def group_members(pgid):
    """Pids of live (non-zombie) processes in process group pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(int(entry))
    return members


def run_gcloud(args, env, timeout=TIMEOUT_SECS):
    """Runs gcloud in its own process group; returns (returncode, output, leftover pids)."""
    # gcloud is not a Python module of ours: tests/user_commands.py cannot start it.
    proc = subprocess.Popen([GCLOUD] + args, cwd=REPO_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"gcloud {' '.join(args[:4])} ran over {timeout} s; output tail:\n{output[-4000:]}")
    time.sleep(1)  # children gcloud killed at exit need a moment to go
    leftovers = group_members(proc.pid)
    if leftovers:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, output, leftovers


def train_args(dataset, job_dir, train_steps, steps_per_eval):
    flags = dict(TINY_FLAGS, train_steps=train_steps, steps_per_eval=steps_per_eval,
                 save_checkpoints_steps=steps_per_eval,
                 train_data_path=f"{dataset}/train-*", eval_data_path=f"{dataset}/eval-*")
    return (["ai-platform", "local", "train", "--module-name", "trainer.task",
             "--package-path", "trainer", "--job-dir", str(job_dir)]
            + ["--"] + [f"--{key}={value}" for key, value in flags.items()])


def check_outputs(job_dir, train_steps, output):
    """The run trained to train_steps, evaluated each round and exported a servable model."""
    export_dir = job_dir / "export" / "image_classifier"
    versions = sorted(os.listdir(export_dir)) if export_dir.is_dir() else []
    assert versions and int(versions[-1]) >= train_steps, f"no export; output tail:\n{output[-4000:]}"
    contract.check_export(str(export_dir / versions[-1]))
    records = [json.loads(line) for line in (job_dir / "eval_results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and records[-1]["global_step"] >= train_steps
    assert 0.0 <= records[-1]["accuracy"] <= 1.0
    assert json.loads((job_dir / "params.json").read_text())["output_dir"] == str(job_dir)


def test_distributed_local_train_runs_every_role_and_ends(dataset, tmp_path):
    job_dir = tmp_path / "job"
    cluster_flags = ["--distributed", "--parameter-server-count", "1", "--worker-count", "1",
                     "--start-port", str(free_port_range(3))]
    args = train_args(dataset, job_dir, 60, 30)
    args[3:3] = cluster_flags  # after "ai-platform local train", before the trainer's flags
    code, output, leftovers = run_gcloud(args, gcloud_env(tmp_path))
    assert code == 0, output[-4000:]
    assert leftovers == [], f"processes left running: {leftovers}"
    check_outputs(job_dir, 60, output)
    worker_steps = re.search(r"worker/0 ran (\d+) training steps", output)
    assert worker_steps and int(worker_steps.group(1)) > 0, output[-4000:]
    assert "ps/0: every trainer is done; exiting" in output
    assert "chief/0 told 1 ps it is done" in output and "worker/0 told 1 ps it is done" in output
