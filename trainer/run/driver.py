"""What every trainer command does before and around its engine: check, lock, write params.json, run the mode.

Both engines (trainer/estimator/, trainer/keras/) keep one run-directory contract
because they share this driver: before anything is written the data is checked
against metadata.json (trainer/data/data_checks.py), the checkpoints against what they
claim (trainer/run/checkpoints.py) and the TPU is looked up; then the output
directory's lock is taken (trainer/run/trainer_lock.py; not for predict, which writes
elsewhere, nor for continuous_eval, which runs beside the trainer that holds it), the
engine is made (a Keras TPU starts), OUT/params.json is written (a resume's changed recipe
settings said and recorded in it: trainer/run/params_file.py) and the mode runs.
Which of these a mode needs, and the function that runs it, is its row of
trainer/run/modes.py, read once here.
A warm-start source is checked for damage before the lock, as the run's own checkpoints are. A data error during the run ends as one
DatasetError naming the file.

An engine (trainer/run/engine.py's Engine: train, evaluate, export, predict, eval_dir) is
made by make_engine(params) once those checks have passed. A run of several processes (the JAX
engine on a multi-host slice: its Processes) checks on every process, reading OUT only, so a
refusal found there is every process's; the writer alone then takes the lock, repairs the
checkpoint state, converts a warm-start source and writes params.json, and the others wait for
its answer (a refusal under the lock included) before they make their engine.

    .venv/bin/python -m trainer.task --output_dir OUT --mode evaluate [--engine keras]
"""
import contextlib
import json
import logging
import typing

import tensorflow as tf

from trainer.cloud import tpu
from trainer.data import data_checks
from trainer.run import checkpoints, modes, trainer_lock, params_file, seeds, warm_start
from trainer.run.engine import ONE_PROCESS, Engine, Processes


def run(params, make_engine: typing.Callable[[dict], Engine], processes: Processes = ONE_PROCESS):
    """Runs params["mode"] with the engine make_engine(params) makes; returns what the mode produced.
    The run directory's checkpoint state is read here (under the lock when the mode takes it)
    and passed down to what decides on it: warm start, the rounds, the mode's checkpoint.
    processes: the run's processes, of which the writer alone takes the lock."""
    mode = modes.of(params)
    state = check_before_lock(params, mode)  # on every process: each refuses alike
    with contextlib.ExitStack() as held:
        state = processes.from_writer("lock", lambda: lock_and_read_state(params, mode, state, held))
        try:
            return run_mode(params, mode, state, make_engine, processes)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            named = data_checks.explain(err, params) if mode.checks_run_dir else None
            if named is None:
                raise
            raise named from None


def lock_and_read_state(params, mode, state, held):
    """The state to run from: read again under OUT's lock (entered into held, an ExitStack) when
    the mode takes it, since the lock may have waited; else the state read before it."""
    if not mode.holds_lock:
        return state
    held.enter_context(trainer_lock.hold_output_dir(params["output_dir"]))
    return read_state(params, mode, is_locked=True)


def check_before_lock(params, mode):
    """Everything checked before the lock, with nothing written: the data, the checkpoint state
    (read only), a warm-start source and the TPU (predict: its checkpoint only). The state."""
    if mode.checks_run_dir:
        data_checks.check_before_run(params)
    state = read_state(params, mode, is_locked=False)
    if mode.trains:
        warm_start.check_source(params, state.step)  # a damaged source: the resume's one line
    if mode.checks_run_dir and params["use_tpu"]:
        tpu.check_tpu(params)  # no TPU named, none here, no such TPU: one line, nothing written
    return state


def read_state(params, mode, is_locked):
    """The checkpoint state as the mode reads it. Before the lock only read, not even the lock
    written; a lost state's fallback is then said by the read under the lock (by this one for a
    mode without the lock: a job beside the trainer, predict). Under the lock, repaired. predict
    from an export reads no checkpoint: none is needed, nothing is said."""
    reads_checkpoint = mode.checks_run_dir or not params["predict_export_dir"]
    needed_by = params["mode"] if mode.needs_checkpoint and reads_checkpoint else None
    return checkpoints.checked_state(
        params["output_dir"], repair=is_locked, needed_by=needed_by,
        say=is_locked or (reads_checkpoint and not mode.holds_lock))


def run_mode(params, mode, state, make_engine, processes=ONE_PROCESS):
    """The mode's run function (trainer/run/modes.py) with the engine and the checkpoint state,
    after warm start, seeds and params.json (the writer's)."""
    logging.info("Resolved params:\n%s", json.dumps(params, indent=2, sort_keys=True))
    if mode.trains:
        # Before params.json and before the engine builds its network: a missing or mismatched
        # source stops here with nothing written; a Keras weights file is converted to the
        # checkpoint both engines warm start from; a resumed run ignores it.
        processes.from_writer("warm start", lambda: warm_start.prepare(params, state.step))
    seeds.seed_process(params)
    # Made before params.json: a TPU that is found but does not start (the Keras engine starts
    # it here) leaves no params.json asking the next run for it.
    engine = make_engine(params)
    if mode.writes_params and processes.is_writer:  # a resume's changed recipe settings said in one line, and kept
        params_file.write_params(params, params_file.record_recipe_changes(params, state))
    return mode.runs(engine, params, state)
