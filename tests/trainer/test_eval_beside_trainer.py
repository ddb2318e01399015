"""--mode continuous_eval beside a real trainer with --keep_checkpoint_max 2, both engines: a
checkpoint deleted under the evaluation (before it starts, in the middle of the Keras restore,
after it, before its export) is skipped for the newest, said at -v, and the job exits 0 with
its records in step order up to the final step.

Both jobs are real subprocesses (python -m trainer.task, tests/trainer/paused_task.py): the
trainer waits after checkpoint 40 until the evaluator holds a checkpoint (<= 40) at the chosen
moment, and the evaluator waits there until the trainer, training on, has deleted it: the race
is lost every time, not now and then.

    .venv/bin/python -m pytest tests/trainer/test_eval_beside_trainer.py
"""
import os
import re
import subprocess
import sys

import pytest

from common import signature
from tests.engines import needs_estimator
from tests.trainer.paused_task import MARK
from trainer.run import early_stopping, eval_records

TRAIN_STEPS = 100  # checkpoints every 20 steps, two kept: 80 written, 40 and older are gone


def start(args, log_path, repo_root):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=repo_root, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("engine, moment", [
    pytest.param("estimator", "evaluation_start", marks=needs_estimator),
    pytest.param("estimator", "export", marks=needs_estimator),
    ("keras", "keras_restore"),
    ("keras", "eval_pass"),
])
def test_a_checkpoint_deleted_under_the_evaluation_is_skipped_for_the_newest(
        tiny_argv, repo_root, tmp_path, engine, moment):
    argv = [a for a in tiny_argv if not a.startswith(("--train_steps", "--steps_per_eval",
                                                      "--save_checkpoints_steps"))]
    argv += [f"--train_steps={TRAIN_STEPS}", f"--steps_per_eval={TRAIN_STEPS}",
             "--save_checkpoints_steps=20", "--log_step_count_steps=1000", f"--engine={engine}"]
    out = tmp_path / "out"
    evaluator_log, trainer_log = tmp_path / "evaluator.log", tmp_path / "trainer.log"
    flag = tmp_path / "evaluator_holds_a_checkpoint"
    evaluator = start(["tests.trainer.paused_task", f"until_deleted:{moment}:{flag}", *argv,
                       "--mode=continuous_eval", "--eval_timeout_secs=120", "-v"],
                      evaluator_log, repo_root)
    # Started together: the trainer waits at checkpoint 40 for the evaluator anyway.
    trainer = start(["tests.trainer.paused_task", f"after_checkpoint:40:{flag}", *argv,
                     "--mode=train", "--keep_checkpoint_max=2"], trainer_log, repo_root)
    try:
        assert trainer.wait(timeout=240) == 0, trainer_log.read_text()[-3000:]
        assert evaluator.wait(timeout=240) == 0, evaluator_log.read_text()[-3000:]
    finally:
        for process in (evaluator, trainer):
            if process.poll() is None:
                process.kill()
    log = evaluator_log.read_text()
    paused = re.search(rf"{MARK} (model\.ckpt-(\d+)) deleted at {moment}; going on", log)
    assert paused, log[-3000:]  # the trainer deleted it while the evaluator held it
    name, step = paused[1], int(paused[2])
    assert re.search(rf"checkpoint \S*{re.escape(name)} was deleted during its evaluation "
                     rf"\(keep_checkpoint_max\); skipped for the newest", log), log[-3000:]
    assert "Traceback" not in log
    steps = [r["global_step"] for r in eval_records.read_eval_results(out)]
    assert steps == sorted(set(steps)) and steps[-1] == TRAIN_STEPS and step not in steps, steps
    best = early_stopping.best_record(eval_records.read_eval_results(out), "accuracy")
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    assert os.listdir(best_base) == [str(best["global_step"])]
