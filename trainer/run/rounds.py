"""Training rounds, for either engine: train steps_per_eval steps, evaluate, record, stop early, export.

Each round reads the global step from the latest checkpoint in output_dir, trains to the
next multiple of steps_per_eval (or train_steps, when sooner), evaluates, exports when the eval metric
(--early_stopping_metric) is the best so far and appends the results to
OUT/eval_results.jsonl (trainer/run/evaluations.py); with --early_stopping_patience it
stops when they stop improving. Killed at any point (kill -9 included), the same
command resumes from the last checkpoint and evaluates at the same steps as a run
that was never interrupted (a checkpoint between two evaluations is trained on, not
evaluated: an extra evaluation could change the best export and early stopping's
count); run again after it finished, it trains nothing and exports nothing new. The engine (trainer/run/engine.py's Engine) trains,
evaluates and exports; this module is the contract of the run directory both keep.

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT [--engine keras]
"""
import json
import logging
import os

import tensorflow as tf

from common import atomic_write
from trainer.run import checkpoints, early_stopping, eval_records, evaluations, hparams_view

EARLY_STOPPING_FILE = "early_stopping.json"  # why a run stopped early; removed when it trains on
_LOGGER = logging.getLogger(__name__)  # the lines a person reads (shown in quiet mode)


def check_progress(before, after, params):
    """The new global step; raises if training stopped without advancing it.

    A training call returns quietly when its input ends at once (e.g. no records):
    without this the loop would retrain from the same step forever.
    """
    if after is None or after <= (before or 0):
        raise RuntimeError(
            f"training did not advance past global step {before}: the training input "
            f"{params['train_data_path']!r} yielded no full batch of "
            f"train_batch_size={params['train_batch_size']}")
    return after


def train_and_evaluate(engine, params, state, *, evaluates):
    """Trains to train_steps with an evaluation every steps_per_eval; returns the export path.

    A round-end checkpoint without an eval record (the run was killed before or during
    its evaluation) is evaluated first, so eval_results.jsonl and the best export never
    miss an evaluation of the schedule; one between two round ends (killed mid-training)
    is not (is_round_end). With early_stopping_patience,
    the loop ends once that many evaluations in a row did not improve on the best
    (stop_early). Without `evaluates` (mode train, trainer/run/modes.py) it trains in the
    same rounds without evaluating (a continuous_eval job does). state: the CheckpointState the
    run starts from (the driver's); each round's training then says where it got. Of several
    processes (engine.processes) every one trains and evaluates; the writer alone records,
    exports and decides from OUT's records, and the others take its answers.
    """
    output_dir, processes = params["output_dir"], engine.processes
    step = state.step
    if step:
        _LOGGER.info("Resuming from step %d of %d", step, params["train_steps"])
    processes.from_writer("begin", lambda: begin_run(params, step))
    while True:
        is_end, round_end = is_round_end(step, params), next_round_end(step, params)
        if evaluates and step and is_end and not processes.from_writer(
                f"evaluated {step}", lambda: step in eval_records.evaluated_steps(output_dir)):
            evaluations.evaluate_and_record(engine, params, state.prefix)
        if step >= params["train_steps"]:
            return evaluations.export_latest(engine, params, state)
        stopped = evaluates and processes.from_writer(f"stop early {step}", lambda: stop_early(engine, params, state))
        if stopped:
            return stopped
        engine.train(round_end)
        state = checkpoints.latest_checkpoint(output_dir)  # where this round's training got
        step = check_progress(step, state.step, params)


def begin_run(params, step):
    """What a run writes as it begins: a resume sets aside the records past its step (of
    checkpoints now gone); a fresh run writes TensorBoard's HParams tab (once per run)."""
    if step:
        evaluations.supersede_after(params, step)
    else:
        hparams_view.write_hparams(params)


def next_round_end(step, params):
    """The step the round from `step` trains to: the next multiple of steps_per_eval, or
    train_steps when sooner. Multiples, not step + steps_per_eval: a run resumed from a
    checkpoint between two evaluations evaluates where an uninterrupted run does."""
    following = (step // params["steps_per_eval"] + 1) * params["steps_per_eval"]
    return min(following, params["train_steps"])


def is_round_end(step, params):
    """True for a step the schedule evaluates: a multiple of steps_per_eval, or train_steps
    (or beyond it: a run whose train_steps was lowered ends there)."""
    return step % params["steps_per_eval"] == 0 or step >= params["train_steps"]


def stop_early(engine, params, state):
    """When patience ran out: the best export copied to OUT/export/, the reason written to
    OUT/early_stopping.json, and that export's path returned; None (and no stale reason
    file) when training goes on."""
    output_dir = params["output_dir"]
    records = eval_records.read_eval_results(output_dir)
    reason = early_stopping.stop_reason(records, params)
    reason_path = os.path.join(output_dir, EARLY_STOPPING_FILE)
    if reason is None:
        if tf.io.gfile.exists(reason_path):  # an earlier stop, now resumed with more patience
            tf.io.gfile.remove(reason_path)
        return None
    best = early_stopping.best_record(records, params["early_stopping_metric"])
    exported = evaluations.export_stopped_run(engine, params, best, state)
    summary = {"stopped_at_step": records[-1]["global_step"], "best_step": best["global_step"],
               "metric": params["early_stopping_metric"],
               "best_value": best[params["early_stopping_metric"]],
               "patience": params["early_stopping_patience"],
               "export": eval_records.relative_to_run(output_dir, exported), "reason": reason}
    atomic_write.write_text(reason_path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    _LOGGER.info("early stopping at step %d: %s; serving export %s",
                 summary["stopped_at_step"], reason, exported)
    return exported
