"""Every engine implements trainer/run/engine.py's Engine: every member, with its parameters.

    .venv/bin/python -m pytest tests/trainer/test_engine_protocol.py
    .venv-jax/bin/python -m pytest tests/trainer/test_engine_protocol.py -k jax
"""
import importlib
import inspect

import pytest

from tests.engines import HAS_ESTIMATOR, HAS_JAX
from trainer.run.engine import ONE_PROCESS, Engine, Processes

ENGINES = [("trainer.keras.engine", "KerasEngine")] + (
    [("trainer.estimator.engine", "EstimatorEngine")] if HAS_ESTIMATOR else []) + (
    [("trainer.jax.engine", "JaxEngine")] if HAS_JAX else [])
METHODS = ("train", "evaluate", "export", "predict")


def parameters(function):
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("module, name", ENGINES)
def test_each_engine_is_an_engine_with_every_method_and_its_parameters(module, name):
    engine_class = getattr(importlib.import_module(module), name)
    assert Engine in engine_class.__mro__  # named as its base: a reader can jump to it
    for method in METHODS:
        assert method in vars(engine_class), f"{name} does not define {method}"
        assert parameters(getattr(engine_class, method)) == parameters(getattr(Engine, method))
    assert "self.eval_dir = " in inspect.getsource(engine_class.__init__)
    assert engine_class.processes is ONE_PROCESS  # the protocol's, unless __init__ sets its run's (JAX)


def test_one_process_writes_and_its_answer_is_its_own():
    assert isinstance(ONE_PROCESS, Processes) and ONE_PROCESS.is_writer
    assert ONE_PROCESS.from_writer("save 2", lambda: "OUT/model.ckpt-2") == "OUT/model.ckpt-2"
    def refuse():
        raise ValueError("refused")
    with pytest.raises(ValueError, match="refused"):
        ONE_PROCESS.from_writer("lock", refuse)


def test_a_class_missing_a_method_is_not_an_engine():
    class NoPredict:
        eval_dir = "OUT/eval"

        def train(self, max_steps): ...
        def evaluate(self, checkpoint_path): ...
        def export(self, checkpoint_path, staging_base): ...

    assert not isinstance(NoPredict(), Engine)
