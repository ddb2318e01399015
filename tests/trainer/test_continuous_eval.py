"""--mode continuous_eval beside a trainer running in another process on the same output_dir;
its refusal of another model's checkpoint on a copy of the session's finished run
(tests/trainer/conftest.py tiny_run_of).

    .venv/bin/python -m pytest tests/trainer/test_continuous_eval.py
"""
import json
import os
import subprocess
import time

import pytest

from common import signature
from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import start_trainer, user_env
from trainer import chain
from trainer.estimator import engine as estimator_engine
from trainer.run import checkpoints, continuous_eval, early_stopping, eval_records, trainer_lock
from trainer.settings import checks, table


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """This module's runs only read it: written once (tests/trainer/conftest.py's is per test)."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


@pytest.mark.process
@pytest.mark.trains
def test_evaluates_each_checkpoint_of_a_running_trainer_once(tiny_dataset, tmp_path):
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=out,
                        train_steps=6, keep_checkpoint_max=5))
    trainer = start_trainer(*argv, "--mode=train", stderr=subprocess.STDOUT,
                            env=user_env(TF_CPP_MIN_LOG_LEVEL=3))
    try:
        evaluator = chain.parse_params(argv + ["--mode=continuous_eval", "--eval_timeout_secs=240"])
        records = estimator_engine.run(evaluator)  # returns once the trainer's final step is evaluated
        holder = (out / trainer_lock.LOCK_FILE).read_text()
    finally:
        output, _ = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, output[-3000:]
    assert holder.startswith(f"pid {trainer.pid} ")  # the trainer held OUT while we evaluated
    steps = [record["global_step"] for record in records]
    assert steps == sorted(set(steps)) and steps[-1] == 6 and 0 not in steps
    assert [r["global_step"] for r in eval_records.read_eval_results(out)] == steps  # each once, only ours
    best = early_stopping.best_record(records, "accuracy")  # of equals, the lower loss, then the first
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    assert os.listdir(best_base) == [str(best["global_step"])]
    assert json.loads((out / table.PARAMS_FILE).read_text())["mode"] == "train"  # the trainer's
    assert estimator_engine.run(evaluator) == []  # the final step is evaluated: nothing to wait for


@pytest.mark.trains  # the continuous_eval mode, with nothing to evaluate
def test_exits_after_the_timeout_without_a_checkpoint(tiny_argv, tmp_path):
    params = chain.parse_params(tiny_argv + ["--mode=continuous_eval", "--eval_timeout_secs=1"])
    start = time.monotonic()
    assert estimator_engine.run(params) == []
    assert time.monotonic() - start < 1 + 2 * continuous_eval.POLL_SECS + 5
    assert not (tmp_path / "out" / table.PARAMS_FILE).exists()  # params.json is a trainer's


@pytest.mark.trains
@pytest.mark.parametrize("flags, reason", [
    ({"mode": "continuous_eval"}, None),
    ({"mode": "continuous_eval", "cnn_filters": "8,16"}, "cnn_filters [4, 8] -> [8, 16]"),
])
def test_a_checkpoint_of_another_model_is_refused(copy_of_tiny_run, tiny_run_of, flags, reason, tmp_path):
    """The evaluator started first (no params.json yet), then the trainer wrote its checkpoint."""
    data, _ = tiny_run_of("estimator")
    out = tmp_path / "run"  # where copy_of_tiny_run puts the trainer's finished run
    evaluator = chain.parse_params(as_argv(dict(
        TINY_FLAGS, eval_data_path=f"{data}/eval-*", output_dir=out, **flags)))
    assert not out.exists()
    copy_of_tiny_run("estimator")
    checkpoint, _ = checkpoints.latest_checkpoint(str(out))
    if reason is None:  # already evaluated by the trainer: skipped
        assert continuous_eval.evaluate_checkpoint(None, evaluator, checkpoint) is None
        return
    os.remove(out / eval_records.RESULTS_FILE)
    with pytest.raises(checks.ConfigError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        continuous_eval.evaluate_checkpoint(None, evaluator, checkpoint)
