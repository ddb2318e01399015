"""bench/bench_jax_train.py end to end at its smallest: the table, the goal line and the kernel notes.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_bench_jax_train.py
"""
import re

import pytest

from tests.user_commands import run, user_env

pytestmark = [pytest.mark.process, pytest.mark.trains]


def test_the_benchmark_compares_both_engines_and_times_the_kernels():
    # XLA's optimisation passes on, as a user's benchmark runs (tests/conftest.py turns them off):
    # it times thirty calls of each kernel's gradient, and unoptimised they took this test 88 s, not 40.
    result = run("bench.bench_jax_train", "--models", "small_cnn", "--rounds", "1", "--steps", "2",
                 "--examples", "64", env=user_env(drop=("XLA_FLAGS",)))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"\| small_cnn \| 32 +\| 64 +\| [\d.]+ +\| [\d.]+ +\| [\d.]+x", out), out
    assert "goal: small_cnn: JAX engine / Keras engine, steps/s >= 1.00x" in out
    kernels = re.findall(r"kernel: (.+), gradient at batch 64: XLA:CPU [\d.]+ ms, TensorFlow [\d.]+ ms", out)
    assert kernels == ["conv 32px 3->32", "max pool 32px x32", "conv 16px 32->64", "max pool 16px x64"], out
