"""A run killed between two evaluations evaluates, once resumed by the same command, at the steps
an uninterrupted run evaluates (multiples of --steps_per_eval, and --train_steps), both engines.

The kill is a real SIGKILL of the real command; tests/trainer/paused_task.py holds the run right
after checkpoint 75 is written, so the kill lands between the evaluations of 50 and 100 however
fast the steps are.

    .venv/bin/python -m pytest tests/trainer/test_interrupted_schedule.py
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.engines import needs_estimator
from tests.trainer.paused_task import MARK
from trainer.run import checkpoints, eval_records

SCHEDULE = ["--train_steps=150", "--steps_per_eval=50", "--save_checkpoints_steps=25",
            "--log_step_count_steps=1000"]


def start(args, log_path, repo_root):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=repo_root, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def kill_when_paused(process, log_path, timeout=180):
    deadline = time.monotonic() + timeout
    while f"{MARK} checkpoint 75 written" not in log_path.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()


def evaluated_steps(output_dir):
    return [record["global_step"] for record in eval_records.read_eval_results(output_dir)]


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), "keras"])
def test_a_run_killed_between_evaluations_evaluates_where_an_uninterrupted_run_does(
        tiny_argv, repo_root, tmp_path, engine):
    argv = [a for a in tiny_argv if not a.startswith(("--train_steps", "--steps_per_eval",
                                                      "--save_checkpoints_steps", "--output_dir"))]
    argv += SCHEDULE + [f"--engine={engine}"]
    whole, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    uninterrupted = start(["trainer.task", *argv, f"--output_dir={whole}"], tmp_path / "whole.log",
                          repo_root)
    paused = start(["tests.trainer.paused_task", "after_checkpoint:75", *argv,
                    f"--output_dir={interrupted}"], tmp_path / "killed.log", repo_root)
    try:
        kill_when_paused(paused, tmp_path / "killed.log")
        assert uninterrupted.wait(timeout=300) == 0, (tmp_path / "whole.log").read_text()[-3000:]
    finally:
        for process in (paused, uninterrupted):
            if process.poll() is None:
                process.kill()
    assert checkpoints.latest_checkpoint(str(interrupted))[1] == 75
    assert evaluated_steps(interrupted) == [50]  # killed between the evaluations of 50 and 100

    resumed = start(["trainer.task", *argv, f"--output_dir={interrupted}"], tmp_path / "resumed.log",
                    repo_root)
    assert resumed.wait(timeout=300) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    assert "Resuming from step 75 of 150" in (tmp_path / "resumed.log").read_text()
    assert evaluated_steps(whole) == [50, 100, 150]
    assert evaluated_steps(interrupted) == evaluated_steps(whole)  # not [50, 75, 125, 150]
