"""Which trainer engines this environment can run: .venv has both; .venv-keras (TensorFlow 2.20,
make test-keras) has no tensorflow-estimator, so a test that needs the Estimator engine is
skipped there, saying why, instead of failing.

    .venv-keras/bin/python -m pytest tests/trainer/test_keras_engine.py   # its Estimator test skipped
"""
import importlib.util

import pytest

HAS_ESTIMATOR = importlib.util.find_spec("tensorflow_estimator") is not None

needs_estimator = pytest.mark.skipif(
    not HAS_ESTIMATOR, reason="needs tensorflow-estimator (TensorFlow <= 2.15): runs in .venv (make test), "
                              "not in .venv-keras")
