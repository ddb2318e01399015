"""The JAX environment's two locks: the CPU one (.venv-jax) and the TPU one a v5e/v5p/v6e/TPU7x
VM installs, the same everything but jax[tpu]'s libtpu; the packages it shares with the Keras
environment at that environment's versions; and trainer/cloud/jax_tpu.py's check of the pair.

    .venv/bin/python -m pytest tests/cloud/test_jax_tpu_lock.py
"""
import pathlib
import re

import pytest

from tests.cloud.test_tpu_lock import fake_distributions, pins
from tests.user_commands import run, user_env
from trainer.cloud import jax_tpu

ROOT = pathlib.Path(__file__).resolve().parents[2]
JAX_LOCK, JAX_TPU_LOCK = ROOT / "requirements-jax.lock", ROOT / jax_tpu.JAX_TPU_LOCK
KERAS_LOCK = ROOT / "requirements-keras.lock"


def test_the_tpu_lock_is_the_cpu_lock_plus_the_libtpu_jax_pins():
    cpu, tpu = pins(JAX_LOCK), pins(JAX_TPU_LOCK)
    assert {name: v for name, v in tpu.items() if name != "libtpu"} == cpu
    assert tpu["libtpu"].startswith(jax_tpu.LIBTPU_FOR_JAX[cpu["jax"]] + ".")
    assert cpu["jaxlib"] == cpu["jax"]  # jax[tpu] pins jaxlib to its own version


def test_no_estimator_and_tensorflow_only_as_its_cpu_build():
    cpu = pins(JAX_LOCK)
    assert "tensorflow-estimator" not in cpu and "tensorflow" not in cpu and "tensorflow-tpu" not in cpu
    assert cpu["tensorflow-cpu"] == pins(KERAS_LOCK)["tensorflow"]  # one TensorFlow for both new engines


def test_what_it_shares_with_the_keras_environment_has_that_environment_s_version():
    jax_env, keras_env = pins(JAX_LOCK), pins(KERAS_LOCK)
    differing = {name: (v, keras_env[name]) for name, v in jax_env.items()
                 if name in keras_env and keras_env[name] != v}
    assert differing == {}


@pytest.mark.parametrize("path", [JAX_LOCK, JAX_TPU_LOCK], ids=["cpu", "tpu"])
def test_every_file_is_pinned_by_hash(path):
    text = path.read_text()
    for name in pins(path):
        block = re.search(rf"^{re.escape(name)}==[\w.]+ \\\n((?:    --hash=sha256:[0-9a-f]{{64}}.*\n)+)", text, re.M)
        assert block, f"{name} has no sha256 in {path.name}"


@pytest.mark.parametrize("jax_version, libtpu, problem", [
    ("0.10.2", None, None),  # the CPU build
    ("0.10.2", "0.0.42.1", None),
    ("0.10.2", "0.0.43", "jax 0.10.2 runs with libtpu 0.0.42.* (requirements-jax-tpu.lock), but libtpu 0.0.43 is installed"),
    ("0.10.2", "0.0.420", "but libtpu 0.0.420 is installed"),
])
def test_the_pair_check(jax_version, libtpu, problem):
    found = jax_tpu.pair_problem(jax_version, libtpu)
    assert (found is None) if problem is None else (problem in found)


def test_where_jax_runs_is_said_for_a_person():
    assert jax_tpu.describe_devices("cpu", 1, "cpu") == "no TPU here, so JAX runs on CPU (1 device)"
    assert jax_tpu.describe_devices("tpu", 4, "TPU v6 lite") == "JAX runs on 4 TPU devices (TPU v6 lite)"


@pytest.mark.process
def test_a_libtpu_jax_was_not_built_with_is_one_line_and_exit_code_2(tmp_path):
    fakes = fake_distributions(tmp_path / "dists", jax="0.10.2", libtpu="0.0.51")
    done = run("trainer.cloud.jax_tpu", env=user_env(PYTHONPATH=fakes), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: jax 0.10.2 runs with libtpu 0.0.42.* (requirements-jax-tpu.lock), but libtpu 0.0.51 is "
        "installed: install the lock (pip install --no-deps --require-hashes -r requirements-jax-tpu.lock)"]
