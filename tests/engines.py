"""Which trainer engines this environment can run: .venv has two; .venv-keras (TensorFlow 2.20,
make test-keras) has no tensorflow-estimator, so a test that needs the Estimator engine is
skipped there, saying why, instead of failing.

    .venv-keras/bin/python -m pytest tests/trainer/test_keras_engine.py   # its Estimator test skipped
"""
import importlib.util
import os

import pytest

HAS_ESTIMATOR = importlib.util.find_spec("tensorflow_estimator") is not None

needs_estimator = pytest.mark.skipif(
    not HAS_ESTIMATOR, reason="needs tensorflow-estimator (TensorFlow <= 2.15): runs in .venv (make test), "
                              "not in .venv-keras")

# The JAX engine runs where Keras 3 runs on JAX: .venv-jax (make test-jax), whose .pth sets
# KERAS_BACKEND=jax. Elsewhere a test of it is skipped, saying why.
HAS_JAX = (importlib.util.find_spec("jax") is not None and importlib.util.find_spec("keras") is not None
           and os.environ.get("KERAS_BACKEND") == "jax")

needs_jax = pytest.mark.skipif(
    not HAS_JAX, reason="needs JAX and Keras 3 (KERAS_BACKEND=jax): runs in .venv-jax (make test-jax)")

# The Keras engine's own behaviours (its loop, SIGTERM's resume line aside, its refusals, its
# outputs) run where the engine is meant to run: .venv-keras (make test-keras, TensorFlow 2.20).
# .venv keeps the Keras tests that hold the engine to the Estimator's (test_keras_equivalence,
# test_keras_export), SIGTERM's (test_preemption) and the import checks: docs/development.md.
in_keras_env = pytest.mark.skipif(
    HAS_ESTIMATOR, reason="the Keras engine's own behaviour: runs in .venv-keras (make test-keras)")
KERAS = pytest.param("keras", marks=in_keras_env)
