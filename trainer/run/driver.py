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
made by make_engine(params) once those checks have passed.

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
from trainer.run.engine import Engine


def run(params, make_engine: typing.Callable[[dict], Engine]):
    """Runs params["mode"] with the engine make_engine(params) makes; returns what the mode produced.
    The run directory's checkpoint state is read here (under the lock when the mode takes it)
    and passed down to what decides on it: warm start, the rounds, the mode's checkpoint."""
    mode, output_dir = modes.of(params), params["output_dir"]
    needed_by = params["mode"] if mode.needs_checkpoint else None  # refused without a checkpoint
    if mode.checks_run_dir:
        data_checks.check_before_run(params)
        # Read only: nothing, not even the lock, is written yet. A lost state's fallback is said
        # once, by the check under the lock (a job beside the trainer has only this one).
        state = checkpoints.checked_state(output_dir, repair=False, say=not mode.holds_lock,
                                          needed_by=needed_by)
        if mode.trains:
            warm_start.check_source(params, state.step)  # a damaged source: the resume's one line
        if params["use_tpu"]:
            tpu.check_tpu(params)  # no TPU named, none here, no such TPU: one line, nothing written
    else:  # predict: only the checkpoint it reads, when not an export
        is_from_checkpoint = not params["predict_export_dir"]
        state = checkpoints.checked_state(output_dir, repair=False, say=is_from_checkpoint,
                                          needed_by=needed_by if is_from_checkpoint else None)
    with trainer_lock.hold_output_dir(output_dir) if mode.holds_lock else contextlib.nullcontext():
        if mode.holds_lock:  # again under the lock, which may have waited
            state = checkpoints.checked_state(output_dir, repair=True, needed_by=needed_by)
        try:
            return run_mode(params, mode, state, make_engine)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            named = data_checks.explain(err, params) if mode.checks_run_dir else None
            if named is None:
                raise
            raise named from None


def run_mode(params, mode, state, make_engine):
    """The mode's run function (trainer/run/modes.py) with the engine and the checkpoint state,
    after warm start, seeds and params.json."""
    logging.info("Resolved params:\n%s", json.dumps(params, indent=2, sort_keys=True))
    if mode.trains:
        # Before params.json and before the engine builds its network: a missing or mismatched
        # source stops here with nothing written; a Keras weights file is converted to the
        # checkpoint both engines warm start from; a resumed run ignores it.
        warm_start.prepare(params, state.step)
    seeds.seed_process(params)
    # Made before params.json: a TPU that is found but does not start (the Keras engine starts
    # it here) leaves no params.json asking the next run for it.
    engine = make_engine(params)
    if mode.writes_params:  # a resume's changed recipe settings said in one line, and kept
        params_file.write_params(params, params_file.record_recipe_changes(params, state))
    return mode.runs(engine, params, state)
