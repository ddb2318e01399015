"""--mode continuous_eval beside a real trainer with --keep_checkpoint_max 2, both engines: a
checkpoint deleted under the evaluation (before it starts, in the middle of the Keras restore,
after it, before its export) is skipped for the newest, said in one line, and the job ends with
its records in step order up to the final step.

The trainer is a real subprocess (python -m tests.trainer.paused_task, the trainer with one
pause): it waits after checkpoint 40 until the evaluator, run in this process with the same
pause patched in (undone after the test), holds a checkpoint (<= 40) at the chosen moment; the
evaluator waits there until the trainer, training on, has deleted it: the race is lost every
time, not now and then.

    .venv/bin/python -m pytest tests/trainer/test_eval_beside_trainer.py
"""
import os
import re
import subprocess

import pytest

from common import signature
from tests.conftest import write_dataset
from tests.engines import in_keras_env, needs_estimator, needs_jax
from tests.trainer import paused_task
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import start, user_env
from trainer import task
from trainer.run import early_stopping, eval_records

pytestmark = [pytest.mark.process, pytest.mark.trains]

TRAIN_STEPS = 100  # checkpoints every 20 steps, two kept: 80 written, 40 and older are gone


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """Read only: each test's trainer and evaluator read it."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


@pytest.fixture
def pause_until_deleted(monkeypatch):
    """paused_task.pause_until_deleted for this process's evaluator; the functions it patches
    are restored after the test (the worker's next tests evaluate unpaused)."""
    from trainer.keras import evaluate
    from trainer.run import evaluations, variable_names
    for module, name in ((evaluations, "evaluate"), (evaluations, "export_model"),
                         (variable_names, "variables_by_name"), (evaluate, "run_eval_pass")):
        monkeypatch.setattr(module, name, getattr(module, name))
    return paused_task.pause_until_deleted


@pytest.mark.parametrize("engine, moment", [
    pytest.param("estimator", "evaluation_start", marks=needs_estimator),
    pytest.param("estimator", "export", marks=needs_estimator),
    pytest.param("keras", "keras_restore", marks=in_keras_env),
    pytest.param("keras", "eval_pass", marks=in_keras_env),
    pytest.param("jax", "evaluation_start", marks=needs_jax),
])
def test_a_checkpoint_deleted_under_the_evaluation_is_skipped_for_the_newest(
        tiny_dataset, pause_until_deleted, tmp_path, capsys, engine, moment):
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=out,
                        train_steps=TRAIN_STEPS, steps_per_eval=TRAIN_STEPS, save_checkpoints_steps=20,
                        log_step_count_steps=1000, engine=engine))
    trainer_log = tmp_path / "trainer.log"
    flag = tmp_path / "evaluator_holds_a_checkpoint"
    with open(trainer_log, "w") as log:
        trainer = start("tests.trainer.paused_task", f"after_checkpoint:40:{flag}", *argv,
                        "--mode=train", "--keep_checkpoint_max=2", stdout=log, stderr=subprocess.STDOUT,
                        env=user_env(TF_CPP_MIN_LOG_LEVEL=3))
    try:
        pause_until_deleted(moment, str(flag))
        capsys.readouterr()
        task.main(argv + ["--mode=continuous_eval", "--eval_timeout_secs=120"])
        assert trainer.wait(timeout=240) == 0, trainer_log.read_text()[-3000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
    log = capsys.readouterr().err
    paused = re.search(rf"{paused_task.MARK} (model\.ckpt-(\d+)) deleted at {moment}; going on", log)
    assert paused, log[-3000:]  # the trainer deleted it while the evaluator held it
    name, step = paused[1], int(paused[2])
    assert re.search(rf"checkpoint \S*{re.escape(name)} was deleted during its evaluation "
                     rf"\(keep_checkpoint_max\); skipped for the newest", log), log[-3000:]
    steps = [r["global_step"] for r in eval_records.read_eval_results(out)]
    assert steps == sorted(set(steps)) and steps[-1] == TRAIN_STEPS and step not in steps, steps
    best = early_stopping.best_record(eval_records.read_eval_results(out), "accuracy")
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    assert os.listdir(best_base) == [str(best["global_step"])]
