"""SIGTERM, as a preempted TPU VM or a stopped Vertex AI / GKE job sends it: the step reached is
saved, one line names it, exit code 143, and the same command resumes from it and finishes.

Real subprocesses (python -m trainer.task), both engines; checkpoints sparse
(--save_checkpoints_steps 200), so what the signal saves is not an older grid checkpoint.

    .venv/bin/python -m pytest tests/trainer/test_preemption.py
"""
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.engines import needs_estimator
from trainer.run import checkpoints, eval_records

TRAIN_STEPS = 300
EVERY = 200  # --save_checkpoints_steps: one grid checkpoint (200) before TRAIN_STEPS


def preemptible_argv(tiny_argv, engine):
    argv = [a for a in tiny_argv if not a.startswith(
        ("--train_steps", "--steps_per_eval", "--save_checkpoints_steps"))]
    # iterations_per_loop 7: calls end off the grid, so the step SIGTERM saves is one of its own.
    return argv + [f"--train_steps={TRAIN_STEPS}", f"--steps_per_eval={TRAIN_STEPS}",
                   f"--save_checkpoints_steps={EVERY}", "--iterations_per_loop=7",
                   "--progress_seconds=1", f"--engine={engine}"]


def run_task(argv, repo_root, **popen_args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-m", "trainer.task", *argv], cwd=repo_root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_args)


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


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), "keras"])
def test_sigterm_saves_the_step_reached_and_the_same_command_resumes(tiny_argv, repo_root, engine):
    argv = preemptible_argv(tiny_argv, engine)
    output_dir = next(a.split("=", 1)[1] for a in argv if a.startswith("--output_dir"))
    stderr = terminate_once_training(run_task(argv, repo_root))
    _, step = checkpoints.latest_checkpoint(output_dir)
    assert "Traceback" not in stderr, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("terminated")]
    assert stopped == [f"terminated (SIGTERM): {output_dir} holds checkpoints up to step {step:,}; "
                       f"the same command resumes from there"], stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == stopped[0]
    assert 0 < step < TRAIN_STEPS and step % EVERY, f"step {step}: not saved by the signal"
    assert step in checkpoint_steps(output_dir)
    assert not os.path.exists(os.path.join(output_dir, "export"))

    rerun = run_task(argv, repo_root)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert f"Resuming from step {step} of {TRAIN_STEPS}" in err
    assert checkpoints.latest_checkpoint(output_dir)[1] == TRAIN_STEPS
    if engine == "keras":  # the checkpoints after the signal's fall on the grid again
        assert [s for s in checkpoint_steps(output_dir) if s > step] == [
            s for s in (EVERY, TRAIN_STEPS) if s > step]
    assert os.path.isdir(os.path.join(output_dir, "export", "image_classifier", str(TRAIN_STEPS)))
    # The signal's checkpoint lies between round ends: trained on, not evaluated (rounds.py), so
    # the evaluations are an uninterrupted run's.
    assert [r["global_step"] for r in eval_records.read_eval_results(output_dir)] == [TRAIN_STEPS]

