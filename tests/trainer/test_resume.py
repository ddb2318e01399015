"""Ctrl-C in the middle of training: the step reached is saved, one line names it, exit code 130.

A real process (trainer.task with Python's own Ctrl-C handler) and a real SIGINT, with the Keras
engine: the engine whose training call crashed once when the interrupt landed inside TensorFlow's
own Python. The Estimator engine stops on the same handler (common/console.py's on_stop_signal
and deferring_termination, which estimator/engine.py's training call holds): its stop, save and line are
tests/trainer/test_preemption.py's SIGTERM test. kill -9 and the run again that resumes are
tests/trainer/test_interrupted_schedule.py's, both engines.

    .venv/bin/python -m pytest tests/trainer/test_resume.py
    .venv-keras/bin/python -m pytest tests/trainer/test_resume.py
"""
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import REPO_ROOT, user_env
from trainer.run import checkpoints

# trainer.task with Python's own Ctrl-C handler, whatever the test worker's SIGINT disposition
# (an ignored signal is inherited through exec). A `python -c` program: tests/user_commands.py
# starts modules only.
WITH_CTRL_C = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
               " sys.argv[0] = 'trainer.task'; runpy.run_module('trainer.task', run_name='__main__')")


def checkpoint_step(output_dir):
    path = tf.train.latest_checkpoint(output_dir)
    return checkpoints.step_of(path) if path else 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """tiny_dataset's sizes, written once: the run only reads it."""
    return write_dataset(tmp_path_factory.mktemp("ctrl_c") / "data", {"train": 24, "eval": 11}, size=20)


def start_with_ctrl_c(argv):
    return subprocess.Popen([sys.executable, "-c", WITH_CTRL_C, *argv], cwd=REPO_ROOT, env=user_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.process
def test_ctrl_c_mid_training_is_one_line_naming_the_step_to_resume_from(dataset, tmp_path):
    """Ctrl-C saves the step training reached, then one line naming it and exit code 130."""
    output_dir = str(tmp_path / "out")
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{dataset}/train-*", eval_data_path=f"{dataset}/eval-*",
                        output_dir=output_dir, train_steps=100000, steps_per_eval=100000,
                        save_checkpoints_steps=20, log_step_count_steps=100000, engine="keras"))
    process = start_with_ctrl_c(argv)
    deadline = time.time() + 120
    while checkpoint_step(output_dir) == 0 and process.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    seen = checkpoint_step(output_dir)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    step = checkpoint_step(output_dir)
    assert process.returncode == 130, stderr[-3000:]
    assert 0 < step < 100000 and "Traceback" not in stderr, stderr[-3000:]
    # As on SIGTERM, the training call under way ended and the step it reached was saved: the
    # interrupt never landed inside TensorFlow's own Python (it crashed the Keras engine there once).
    # The Keras engine saves `seen` between calls, so it reached a later step.
    assert step > seen > 0
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted (Ctrl-C): {output_dir} holds checkpoints up to step {step:,}; the same "
        f"command resumes from there")
    assert not os.path.exists(os.path.join(output_dir, "export"))
