"""SIGTERM, as a preempted TPU VM or a stopped Vertex AI / GKE job sends it: the step reached is
saved, one line names it, exit code 143, and the same command resumes from it and finishes.

A real process (python -m trainer.task) and a real SIGTERM, each engine; checkpoints sparse
(STEPS), so what the signal saves is not an older grid checkpoint. The
signal leaves files only, so the run again that resumes runs in the test's process.

    .venv/bin/python -m pytest tests/trainer/test_preemption.py
    .venv-keras/bin/python -m pytest tests/trainer/test_preemption.py
"""
import logging
import os
import re
import signal

import pytest

from tests.conftest import write_dataset
from tests.engines import needs_estimator, needs_jax
from tests.trainer import run_checks
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import start_trainer, wait_until_it_catches
from trainer import chain, task
from trainer.run import checkpoints, eval_records

pytestmark = [pytest.mark.process, pytest.mark.trains]
# {engine: (--train_steps, --save_checkpoints_steps)}: one grid checkpoint before the last step.
# The signal comes at the first progress line, a second into training: the Estimator engine had
# trained all of 300 tiny steps by then once its rounds started faster (a fresh clone's CI,
# a8a2361), so it runs 1,200; the others are far from 300 then, and their resume trains the rest
# in this process (1,200 steps: the JAX engine's test took 73 s instead of about 20).
STEPS = {"estimator": (1200, 800), "keras": (300, 200), "jax": (300, 200)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """tiny_dataset's sizes, written once: the runs only read it."""
    return write_dataset(tmp_path_factory.mktemp("preempted") / "data", {"train": 24, "eval": 11}, size=20)


def preemptible_argv(dataset, output_dir, engine):
    # iterations_per_loop 7: calls end off the grid, so the step SIGTERM saves is one of its own.
    train_steps, every = STEPS[engine]
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{dataset}/train-*", eval_data_path=f"{dataset}/eval-*",
                        output_dir=output_dir, train_steps=train_steps, steps_per_eval=train_steps,
                        save_checkpoints_steps=every, iterations_per_loop=7, progress_seconds=1,
                        engine=engine))


def terminate_once_training(process):
    """SIGTERM as soon as the first progress line shows training under way; returns stderr."""
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("step "):
            process.send_signal(signal.SIGTERM)
            break
    _, rest = process.communicate(timeout=120)
    return "".join(seen) + rest


def checkpoint_steps(output_dir):
    return sorted(int(name[len("model.ckpt-"):-len(".index")]) for name in os.listdir(output_dir)
                  if re.fullmatch(r"model\.ckpt-\d+\.index", name))


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), "keras",
                                    pytest.param("jax", marks=needs_jax)])
def test_sigterm_saves_the_step_reached_and_the_same_command_resumes(dataset, tmp_path, engine, caplog):
    output_dir = str(tmp_path / "out")
    argv = preemptible_argv(dataset, output_dir, engine)
    train_steps, every = STEPS[engine]
    process = start_trainer(*argv)
    stderr = terminate_once_training(process)
    _, step = checkpoints.latest_checkpoint(output_dir)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("terminated")]
    assert stopped == [f"terminated (SIGTERM): {output_dir} holds checkpoints up to step {step:,}; "
                       f"the same command resumes from there"], stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == stopped[0]
    assert 0 < step < train_steps and step % every, f"step {step}: not saved by the signal"
    assert step in checkpoint_steps(output_dir)
    assert not os.path.exists(os.path.join(output_dir, "export"))
    assert run_checks.training_images(output_dir), "the command wrote no train_input images"

    with caplog.at_level(logging.INFO):  # the same command again: its engine's run, as task.main runs it
        task.load_engine(engine)(chain.parse_params(argv))
    assert f"Resuming from step {step} of {train_steps}" in caplog.messages
    assert checkpoints.latest_checkpoint(output_dir)[1] == train_steps
    if engine != "estimator":  # the checkpoints after the signal's fall on the grid again
        assert [s for s in checkpoint_steps(output_dir) if s > step] == [
            s for s in (every, train_steps) if s > step]
    assert os.path.isdir(os.path.join(output_dir, "export", "image_classifier", str(train_steps)))
    # The signal's checkpoint lies between round ends: trained on, not evaluated (rounds.py), so
    # the evaluations are an uninterrupted run's.
    assert [r["global_step"] for r in eval_records.read_eval_results(output_dir)] == [train_steps]


def test_sigterm_in_the_first_second_is_one_line_and_nothing_is_written(dataset, tmp_path):
    """Before the run's own handler (TensorFlow still loading), SIGTERM used to end it with no line."""
    output_dir = tmp_path / "out"
    process = start_trainer(*preemptible_argv(dataset, str(output_dir), "keras"))
    wait_until_it_catches(process, signal.SIGTERM)  # the flags parsed; TensorFlow's import takes seconds more
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines() == [
        "terminated (SIGTERM): stopped before the run began; nothing was written: run the same command again"]
    assert not output_dir.exists()
