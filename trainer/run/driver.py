"""What every trainer command does before and around its engine: check, lock, write params.json, run the mode.

Both engines (trainer/estimator/, trainer/keras/) keep one run-directory contract
because they share this driver: before anything is written the data is checked
against metadata.json (trainer/data/data_checks.py), the checkpoints against what they
claim (trainer/run/checkpoints.py) and the TPU is looked up; then the output
directory's lock is taken (trainer/run/output_lock.py; not for predict, which writes
elsewhere, nor for continuous_eval, which runs beside the trainer that holds it), the
engine is made (a Keras TPU starts), OUT/params.json is written and the mode runs.
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
import random
import typing

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from trainer import chain
from trainer.cloud import tpu
from trainer.data import data_checks
from trainer.nets import warm_start
from trainer.run import checkpoints, modes, output_lock
from trainer.run import engine as engine_seam


def run(params, make_engine: typing.Callable[[dict], engine_seam.Engine]):
    """Runs params["mode"] with the engine make_engine(params) makes; returns what the mode produced."""
    mode = modes.of(params)
    if not mode.checks_run_dir:  # predict: only the checkpoint it reads, when not an export
        if not params["predict_export_dir"]:
            check_checkpoints(params, mode, repair=False)
        return run_mode(params, make_engine)
    data_checks.check_before_run(params)
    is_beside_trainer = not mode.holds_lock
    # Read only: nothing, not even the lock, is written yet. A lost state's fallback is said
    # once, by the check under the lock (a job beside the trainer has only this one).
    step = check_checkpoints(params, mode, repair=False, say=is_beside_trainer)
    if mode.trains:
        warm_start.check_source(params, step)  # a damaged source: the resume's one line
    if params["use_tpu"]:
        tpu.check_tpu(params)  # no TPU named, none here, no such TPU: one line, nothing written
    with contextlib.nullcontext() if is_beside_trainer else output_lock.hold_output_dir(params["output_dir"]):
        if not is_beside_trainer:
            check_checkpoints(params, mode, repair=True)  # again under the lock, which may have waited
        try:
            return run_mode(params, make_engine)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            named = data_checks.explain(err, params)
            if named is None:
                raise
            raise named from None


def check_checkpoints(params, mode, repair, say=True):
    """The output dir's checkpoints checked (trainer/run/checkpoints.py) before anything is written;
    the modes that read a checkpoint refuse in one line when there is none. Returns the step
    a run resumes from (0: none)."""
    prefix, step = checkpoints.check_run_state(params["output_dir"], repair=repair, say=say)
    if prefix is None and mode.needs_checkpoint:
        raise checkpoints.CheckpointError(
            f"output_dir={params['output_dir']!r} has no checkpoint to {params['mode']}: train "
            f"first (--mode train_and_eval), or pass the --output_dir of a training run")
    return step


def seed_process(params):
    """--seed for both engines, before either builds a layer: Python's, NumPy's and TensorFlow's
    global seeds (Keras layers draw their initializers' seeds from Python's random, in the
    Estimator's graphs too) and deterministic kernels. The Estimator engine also gives each
    graph it builds the seed (RunConfig), and each training stream derives its own
    (trainer/data/input.py).

    Unseeded (0), whatever an earlier seeded run in this process set is undone: fresh global
    seeds and op determinism off (left on, TensorFlow refuses every unseeded random op)."""
    if not params["seed"]:
        unseed_process()
        return
    tf.keras.utils.set_random_seed(params["seed"])
    # Ops that may add in a varying order (GPU kernels above all) take a fixed order. On 2 CPU
    # cores the same seed gave the same weights without it too; it cost about 1% CPU time per
    # step and nothing in the input pipeline (2026-11-26, docs/migration.md#measured-differences).
    tf.config.experimental.enable_op_determinism()


def unseed_process():
    """Global seeds from the OS again and op determinism off, as in a fresh process."""
    random.seed()
    np.random.seed()
    tf.random.set_seed(None)
    # TensorFlow exports enable_op_determinism only; its counterpart lives beside it (2.15-2.20).
    tf_config.disable_op_determinism()


def run_mode(params, make_engine):
    """The mode's run function (trainer/run/modes.py) with the engine, after warm start,
    seeds and params.json."""
    logging.info("Resolved params:\n%s", json.dumps(params, indent=2, sort_keys=True))
    mode = modes.of(params)
    if mode.trains:
        # Before params.json and before the engine builds its network: a missing or mismatched
        # source stops here with nothing written; a Keras weights file is converted to the
        # checkpoint both engines warm start from; a resumed run ignores it.
        warm_start.prepare(params, checkpoints.latest_checkpoint(params["output_dir"])[1])
    seed_process(params)
    # Made before params.json: a TPU that is found but does not start (the Keras engine starts
    # it here) leaves no params.json asking the next run for it.
    engine = make_engine(params)
    if mode.writes_params:
        chain.write_params(params)
    return mode.runs(engine, params)

