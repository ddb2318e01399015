"""--mode continuous_eval: an evaluation job that watches OUT and evaluates each new checkpoint, with either engine.

The TPU pattern (tensorflow/tpu ResNet's --mode=eval with checkpoints_iterator): the
TPU job trains (--mode train: no evaluations of its own), and a CPU machine evaluates
every checkpoint as it appears, so the TPU never waits for an evaluation:

    .venv/bin/python -m trainer.task --mode train ... --output_dir OUT            # the trainer
    .venv/bin/python -m trainer.task --mode continuous_eval --output_dir OUT \\
        --eval_data_path 'DIR/eval-*' [--eval_timeout_secs 3600]                 # beside it

Each checkpoint is evaluated once and recorded in OUT/eval_results.jsonl; the best one
is exported to OUT/best_export/ (trainer/run/evaluations.py, which also makes it safe beside a
--mode train_and_eval trainer: a step either of them recorded is not recorded again). It
exits once the trainer's final step (train_steps of OUT/params.json) is evaluated, once
the trainer stopped early (OUT/early_stopping.json), or after --eval_timeout_secs
without a new checkpoint. It takes no trainer lock and never writes OUT/params.json:
both belong to the trainer. It checks instead that params.json describes the same
model as its own flags before it restores a checkpoint. A step-0 checkpoint (the
untrained initial weights) is not evaluated. A trainer that outpaces this job deletes
checkpoints it has not reached (--keep_checkpoint_max): one deleted before or while it is
read, evaluated or exported is skipped for the newest, with one line, and nothing of it is
recorded (tests/trainer/test_eval_beside_trainer.py races a real trainer at each moment).
"""
import logging
import os
import time

import tensorflow as tf

from trainer.run import params_file
from trainer.run import checkpoints, eval_records, evaluations, rounds

POLL_SECS = 2  # how often the iterator wakes up to check the exit conditions
_LOGGER = logging.getLogger(__name__)  # the lines a person reads (shown in quiet mode)
# What reading a checkpoint deleted under it raises, by engine and moment: the Estimator's
# Saver.restore a ValueError ("not a valid checkpoint"), a reader NotFoundError or another
# OpError, the Keras engine's restore a CheckpointError, a short read an IndexError or OSError.
GONE_ERRORS = (tf.errors.OpError, ValueError, OSError, IndexError, checkpoints.CheckpointError)


def final_step(params):
    """The trainer's train_steps (OUT/params.json, re-read: it may start after this job)."""
    return params_file.read_saved_params(params["output_dir"]).get("train_steps", params["train_steps"])


def is_finished(params):
    """True once the final step is recorded or the trainer stopped early."""
    output_dir = params["output_dir"]
    if tf.io.gfile.exists(os.path.join(output_dir, rounds.EARLY_STOPPING_FILE)):
        return True
    return any(step >= final_step(params) for step in eval_records.evaluated_steps(output_dir))


def make_timeout_fn(params, last_new):
    """timeout_fn for checkpoints_iterator: True (stop waiting) when finished or idle too long.

    last_new: a one-item list holding the time.monotonic() of the last new checkpoint.
    """
    def timeout_fn():
        idle = time.monotonic() - last_new[0]
        if idle >= params["eval_timeout_secs"]:
            _LOGGER.info("no new checkpoint in %s for %d s (eval_timeout_secs); exiting",
                         params["output_dir"], params["eval_timeout_secs"])
            return True
        return is_finished(params)
    return timeout_fn


def evaluate_checkpoint(engine, params, checkpoint_path):
    """The record of one checkpoint; None if skipped (step 0, evaluated, or deleted meanwhile)."""
    try:
        step = checkpoints.step_of(checkpoint_path)
    except tf.errors.NotFoundError:  # keep_checkpoint_max removed it before we got to it
        _LOGGER.info("checkpoint %s was deleted before its evaluation; skipped", checkpoint_path)
        return None
    if step == 0 or step in eval_records.evaluated_steps(params["output_dir"]):
        return None
    params_file.check_same_run(params_file.read_saved_params(params["output_dir"]), params)
    try:
        return evaluations.evaluate_and_record(engine, params, checkpoint_path)
    except GONE_ERRORS:
        if tf.io.gfile.exists(checkpoint_path + ".index"):
            raise  # the checkpoint is there: a real failure
        # A trainer ahead of this job deleted it (keep_checkpoint_max) while it was being read,
        # evaluated or exported: nothing was recorded; the iterator yields the newest next.
        _LOGGER.info("checkpoint %s was deleted during its evaluation (keep_checkpoint_max); "
                     "skipped for the newest", checkpoint_path)
        return None


def run_continuous_eval(engine, params):
    """Evaluates checkpoints of params["output_dir"] as they appear; returns the records written."""
    records, last_new = [], [time.monotonic()]
    _LOGGER.info("waiting for checkpoints in %s (final step %d, timeout %d s)",
                 params["output_dir"], final_step(params), params["eval_timeout_secs"])
    for checkpoint_path in tf.train.checkpoints_iterator(
            params["output_dir"], timeout=POLL_SECS, timeout_fn=make_timeout_fn(params, last_new)):
        last_new[0] = time.monotonic()
        record = evaluate_checkpoint(engine, params, checkpoint_path)
        if record is not None:
            records.append(record)
        if is_finished(params):
            break
    _LOGGER.info("continuous evaluation done: %d checkpoints evaluated", len(records))
    return records
