"""A JAX run over two processes, as two hosts of a slice run it (trainer/jax/processes.py): the user's
command twice on this machine, joined by jax.distributed through gloo. One run directory, written
by process 0 alone: process 1 sees OUT read-only (a read-only bind mount in a mount namespace of
its own, where unshare can make one) and still ends with exit 0; the same two commands with a
longer --train_steps resume both processes at the same step.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_two_hosts.py
"""
import json
import os
import signal
import subprocess

import numpy as np
import pytest

from common import signature
from tests.conftest import free_port, write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.run_checks import read_eval_split, served_predictions
from tests.user_commands import REPO_ROOT, command, user_env
from trainer.run import checkpoints, eval_records, trainer_lock

pytestmark = pytest.mark.process
# Process 1's view of OUT: a read-only bind mount in its own user and mount namespace.
READ_ONLY_VIEW = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                  'mount --bind -o ro "$0" "$0" && exec "$@"']


def can_view_read_only(path):
    """True when this machine lets a process see path read-only (unprivileged namespaces)."""
    probe = subprocess.run([*READ_ONLY_VIEW, str(path), "sh", "-c", f'! touch "{path}/probe"'],
                           capture_output=True)
    return probe.returncode == 0 and not (path / "probe").exists()


def run_two_processes(argv, out, is_read_only):
    """[(returncode, stdout, stderr, pid)] of process 0 and process 1 of the run, finished."""
    return finish(start_two_processes(argv, out, is_read_only))


def finish(started):
    outputs = [p.communicate(timeout=300) for p in started]
    return [(p.returncode, *output, p.pid) for p, output in zip(started, outputs)]


def start_two_processes(argv, out, is_read_only):
    """[Popen] of process 0 and process 1 of the run, each the user's command with the three
    JAX_* variables; process 1 through the read-only view of out. JAX's compilation cache beside
    out: a second run compiles nothing the first compiled."""
    port = free_port()
    started = []
    for index in range(2):
        env = user_env(JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES=2, JAX_PROCESS_ID=index,
                       JAX_COMPILATION_CACHE_DIR=out.parent / "jax_cache",
                       JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0)
        argv_of = command("trainer.task", *argv)
        if index and is_read_only:
            argv_of = [*READ_ONLY_VIEW, str(out), *argv_of]
        started.append(subprocess.Popen(argv_of, cwd=REPO_ROOT, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return started


def check_exits(finished):
    for index, (returncode, _, stderr, _) in enumerate(finished):
        assert returncode == 0, f"process {index}:\n{stderr[-3000:]}"


def test_a_refusal_of_process_0_alone_is_every_processs_line(tmp_path):
    """OUT locked by another trainer: only process 0 takes the lock, and process 1 ends with its
    line and exit code 2 too, instead of waiting for it."""
    data = write_dataset(tmp_path / "data", {"train": 16, "eval": 8}, size=16)
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine="jax"))
    with trainer_lock.hold_output_dir(str(out)):
        finished = run_two_processes(argv, out, is_read_only=False)
    lines = [stderr.strip().splitlines()[-1] for _, _, stderr, _ in finished]
    assert [returncode for returncode, *_ in finished] == [2, 2], lines
    assert lines[0] == lines[1] and "is in use by another trainer" in lines[0], lines
    assert sorted(os.listdir(out)) == [trainer_lock.LOCK_FILE]


def test_two_processes_keep_one_run_directory_and_resume_at_the_same_step(tmp_path):
    data = write_dataset(tmp_path / "data", {"train": 24, "eval": 11}, size=20)
    out = tmp_path / "out"
    out.mkdir()  # to be seen read-only by process 1 from the start
    flags = dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                 output_dir=out, engine="jax")
    is_read_only = can_view_read_only(out)
    first = run_two_processes(as_argv(dict(flags, train_steps=2)), out, is_read_only)
    check_exits(first)
    (_, _, writer_log, writer_pid), (_, _, reader_log, _) = first
    assert "eval at step 2" in writer_log and "eval at step" not in reader_log  # process 0 records
    assert [line for line in reader_log.splitlines() if line.startswith("step 2/2")], reader_log[-2000:]
    # The same commands with a longer schedule: both resume from step 2, train to 4 and evaluate.
    again = run_two_processes(as_argv(flags), out, is_read_only)
    check_exits(again)
    for _, _, log, _ in again:
        assert "Resuming from step 2 of 4" in log and "step 4/4" in log, log[-2000:]
    assert [step for step, _ in checkpoints.list_checkpoints(str(out))] == [2, 4]
    assert [r["global_step"] for r in eval_records.read_eval_results(str(out))] == [2, 4]  # once each
    assert json.loads((out / "params.json").read_text())["train_steps"] == 4
    assert sorted(os.listdir(out / "export" / "image_classifier")) == ["2", "4"]
    # Every TensorBoard file is a process 0's (its pid is in the name).
    writers = {writer_pid, again[0][3]}
    events = list(out.rglob("events.out.tfevents.*"))
    assert events and all(any(f".{pid}." in path.name for pid in writers) for path in events), events
    jpegs, _ = read_eval_split({"eval_data_path": f"{data}/eval-*"})
    served = served_predictions(str(out / "export" / "image_classifier" / "4"), signature.SIGNATURE_DEFAULT, jpegs)
    probabilities = served[signature.OUTPUT_PROBABILITIES]
    assert probabilities.shape == (11, 3) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_sigterm_to_one_process_stops_both_at_the_same_saved_step(tmp_path):
    """SIGTERM reaches process 1 alone: after the training call under way both agree to stop,
    process 0 saves the step, and both end with exit code 143 and the line naming it."""
    data = write_dataset(tmp_path / "data", {"train": 24, "eval": 11}, size=20)
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine="jax", train_steps=100000, steps_per_eval=100000,
                        save_checkpoints_steps=1000, iterations_per_loop=7, progress_seconds=1))
    started = start_two_processes(argv, out, is_read_only=False)
    seen = []
    for line in started[1].stderr:  # process 1's first progress line: training under way
        seen.append(line)
        if line.startswith("step "):
            started[1].send_signal(signal.SIGTERM)
            break
    finished = finish(started)
    _, step = checkpoints.latest_checkpoint(str(out))
    line = (f"terminated (SIGTERM): {out} holds checkpoints up to step {step:,}; the same command "
            f"resumes from there")
    for index, (returncode, _, stderr, _) in enumerate(finished):
        assert returncode == 143, f"process {index}:\n{''.join(seen)}{stderr[-3000:]}"
        assert stderr.strip().splitlines()[-1] == line, f"process {index}:\n{stderr[-3000:]}"
    assert 0 < step < 1000 and step % 7 == 0  # a call's end, saved for the signal
