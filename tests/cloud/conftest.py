"""Fixtures for the cloud tests: the trainer's tiny dataset and flags (tests/trainer/conftest.py).

    .venv/bin/python -m pytest tests/cloud
"""
from tests.trainer.conftest import tiny_argv, tiny_dataset, tiny_params  # noqa: F401  (pytest fixtures)
