"""Each JAX process its share of the records, each batch over the devices (trainer/jax/data.py,
processes.py): two real processes on this machine (jax.distributed on CPU, gloo), and a run
over two devices of one process.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_data.py
"""
import json
import os
import subprocess

import pytest

from tests.conftest import free_ports, write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import run_trainer, start, user_env
from trainer.jax import processes
from trainer.run import eval_records

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("jax_data") / "data", {"train": 24, "eval": 11}, size=20)


def test_two_processes_read_disjoint_halves_in_the_same_steps(data):
    (port,) = free_ports(1)
    started = [start("tests.trainer.jax.two_hosts", data, stdout=subprocess.PIPE,
                     env=user_env(JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                                  JAX_PROCESS_ID=str(index)))
               for index in range(2)]
    answers = []
    for process in started:
        stdout, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, stderr[-3000:]
        answers.append(json.loads(stdout.strip().splitlines()[-1]))
    first, second = answers
    assert [a["process"] for a in answers] == [0, 1] and first["processes"] == first["devices"] == 2
    assert first["host_batch"] == 4  # 8 a global step, half from each host
    assert first["train_files"] and second["train_files"]
    assert not set(first["train_files"]) & set(second["train_files"])  # one shard file each
    assert sorted(first["train_files"] + second["train_files"]) == sorted(str(p) for p in data.glob("train-*"))
    assert first["eval_steps"] == second["eval_steps"] == 2  # 11 images, 8 a step: both hosts stop together
    assert first["eval_rows"] == second["eval_rows"] == 11  # every eval image once, padding weighted 0
    assert first["global_shapes"] == [[8, 16, 16, 3]]
    assert first["shown_own_rows"] and second["shown_own_rows"]  # host_rows of a global array


@pytest.mark.trains
def test_a_run_over_two_devices_trains_and_counts_every_eval_image_once(data, tmp_path):
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine="jax"))
    env = user_env(XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2")
    result = run_trainer(*argv, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["global_step"] for r in eval_records.read_eval_results(str(out))] == [2, 4]
    refused = run_trainer(*argv[:-1], "--engine=jax", "--train_batch_size=7", f"--output_dir={tmp_path / 'odd'}",
                          env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: train_batch_size=7 must be divisible by the 2 JAX devices: each gets an equal share")


@pytest.mark.parametrize("variables, problem", [
    ({"JAX_NUM_PROCESSES": "2"}, "JAX_COORDINATOR_ADDRESS, JAX_PROCESS_ID not set beside JAX_NUM_PROCESSES"),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"}, "must be whole numbers"),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, "must be in 0..1"),
])
def test_incomplete_process_variables_are_named(variables, problem, monkeypatch):
    for name in processes.PROCESS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(processes.ProcessesError, match=problem):
        processes.named_processes()
