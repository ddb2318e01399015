"""kill -9 between two evaluations, then the same command again: it resumes from the last
checkpoint, trains to --train_steps, exports, and evaluates where an uninterrupted run does
(multiples of --steps_per_eval, and --train_steps), both engines.

The kill is a real SIGKILL of the real command; tests/trainer/paused_task.py holds the run right
after checkpoint 75 is written, so the kill lands between the evaluations of 50 and 100 however
fast the steps are. The kill leaves files only (checkpoints, eval records, the lock of a dead
process), so the second run, which reads nothing else, runs in the test's process.

    .venv/bin/python -m pytest tests/trainer/test_interrupted_schedule.py
    .venv-keras/bin/python -m pytest tests/trainer/test_interrupted_schedule.py
"""
import logging
import os
import re
import signal
import subprocess
import time

import pytest

from tests.conftest import write_dataset
from tests.engines import KERAS, needs_estimator, needs_jax
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.paused_task import MARK
from tests.user_commands import start
from trainer import chain, task
from trainer.run import checkpoints, eval_records

pytestmark = [pytest.mark.process, pytest.mark.trains]
TRAIN_STEPS = 150
SCHEDULE = {"train_steps": TRAIN_STEPS, "steps_per_eval": 50, "save_checkpoints_steps": 25,
            "log_step_count_steps": 1000}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """tiny_dataset's sizes, written once: the runs only read it."""
    return write_dataset(tmp_path_factory.mktemp("interrupted") / "data", {"train": 24, "eval": 11}, size=20)


def run_argv(dataset, output_dir, engine):
    return as_argv(dict(TINY_FLAGS, **SCHEDULE, train_data_path=f"{dataset}/train-*",
                        eval_data_path=f"{dataset}/eval-*", output_dir=output_dir, engine=engine))


def kill_when_paused(process, log_path, timeout=180):
    deadline = time.monotonic() + timeout
    while f"{MARK} checkpoint 75 written" not in log_path.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()


def killed_at_checkpoint_75(argv, log_path):
    """The command, paused after checkpoint 75 (tests/trainer/paused_task.py), then kill -9."""
    with open(log_path, "w") as log:
        paused = start("tests.trainer.paused_task", "after_checkpoint:75", *argv, stdout=log,
                       stderr=subprocess.STDOUT)
    try:
        kill_when_paused(paused, log_path)
    finally:
        if paused.poll() is None:
            paused.kill()


def evaluated_steps(output_dir):
    return [record["global_step"] for record in eval_records.read_eval_results(output_dir)]


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), KERAS,
                                    pytest.param("jax", marks=needs_jax)])
def test_a_run_killed_between_evaluations_resumes_and_evaluates_where_an_uninterrupted_run_does(
        dataset, tmp_path, engine, caplog):
    output_dir = tmp_path / "run"
    argv = run_argv(dataset, output_dir, engine)
    killed_at_checkpoint_75(argv, tmp_path / "killed.log")
    assert checkpoints.latest_checkpoint(str(output_dir))[1] == 75  # mid-training
    assert evaluated_steps(output_dir) == [50]  # killed between the evaluations of 50 and 100
    assert not (output_dir / "export").exists()

    with caplog.at_level(logging.INFO):  # the same command again: its engine's run, as task.main runs it
        task.load_engine(engine)(chain.parse_params(argv))
    assert f"Resuming from step 75 of {TRAIN_STEPS}" in caplog.messages
    # Throughput is reported (tests/trainer/test_cli_output.py: the line shows in quiet mode).
    assert any(re.fullmatch(rf"step {TRAIN_STEPS}/{TRAIN_STEPS}  loss [\d.]+  [\d,]+ examples/s.*", m)
               for m in caplog.messages), caplog.messages
    assert checkpoints.latest_checkpoint(str(output_dir))[1] == TRAIN_STEPS
    # Checkpoint 75 lies between two evaluations of the schedule: trained on, not evaluated, as
    # in a run never interrupted (whose evaluations at multiples of --steps_per_eval
    # tests/trainer/test_estimator_engine.py and test_keras_engine.py check): not [50, 75, 125, 150].
    assert evaluated_steps(output_dir) == [50, 100, 150]
    assert os.path.isdir(output_dir / "export" / "image_classifier" / str(TRAIN_STEPS))
