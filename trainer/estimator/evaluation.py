"""Evaluating checkpoints: one record per checkpoint in OUT/eval_results.jsonl, the best one exported.

Used by the training loop (trainer/estimator/loop.py: an evaluation every steps_per_eval) and by
the evaluation job (trainer/estimator/continuous_eval.py, --mode continuous_eval), which may run
beside a trainer on the same OUT. So that the two never record a step twice or
interleave their writes, recording a result (reading the earlier records, exporting a
new best, appending) holds OUT/eval_results.lock, an flock(2) taken for those few
seconds only (on gs://, which has no flock, a lease on that object: trainer/run/gcs_lease.py).
"Best" is by --early_stopping_metric (trainer/run/early_stopping.py; accuracy unless set).
Estimator also writes every metric to TensorBoard under OUT/eval/.

    .venv/bin/python -m trainer.task --mode evaluate --output_dir OUT --eval_data_path 'DIR/eval-*'
"""
import contextlib
import fcntl
import json
import logging
import os
import time

import tensorflow as tf

from common import signature
from trainer.settings import chain, checks
from trainer.run import checkpoints, early_stopping, gcs_lease, output_lock
from trainer.report import eval_pictures
from trainer.estimator import export, model
from trainer.cloud import hptuning
from trainer.data import input as input_lib

RESULTS_FILE = "eval_results.jsonl"
RESULTS_LOCK_FILE = "eval_results.lock"
EARLY_STOPPING_FILE = "early_stopping.json"  # why a run stopped early; removed when it trains on
COPY_STAGING_SUBDIR = "export_staging_copy"  # the best export is copied here, then moved into place
_LOGGER = logging.getLogger(__name__)  # the lines a person reads (shown in quiet mode)


def step_of(checkpoint_path):
    """The global step a checkpoint holds; NotFoundError if it was deleted meanwhile."""
    return int(tf.train.load_variable(checkpoint_path, "global_step"))


def read_eval_results(output_dir):
    """The records of OUT/eval_results.jsonl, oldest first ([] if none)."""
    path = os.path.join(output_dir, RESULTS_FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        # A kill mid-write can leave a torn last line; it is re-evaluated.
        lines = [line for line in f.read().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            logging.warning("Skipping a torn line of %s: %r", path, line[:80])
    return records


def append_eval_result(output_dir, record):
    path = os.path.join(output_dir, RESULTS_FILE)
    # GFile has no append mode on every file system: rewrite the whole (small) file.
    lines = [json.dumps(r, sort_keys=True) for r in read_eval_results(output_dir) + [record]]
    chain.write_text_atomically(path, "\n".join(lines) + "\n")


def evaluated_steps(output_dir):
    return {record["global_step"] for record in read_eval_results(output_dir)}


@contextlib.contextmanager
def hold_results(output_dir):
    """Blocks until this process alone may record results in output_dir: an flock on a local
    disk, a lease on gs:// (the holder's heartbeat keeps it through a long export), none on
    other remote file systems."""
    if gcs_lease.is_gcs(output_dir):
        with gcs_lease.hold_lease(os.path.join(output_dir, RESULTS_LOCK_FILE),
                                  output_lock.describe_this_process(), wait=True):
            yield
        return
    if not output_lock.is_local(output_dir):
        yield
        return
    tf.io.gfile.makedirs(output_dir)
    fd = os.open(os.path.join(output_dir, RESULTS_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits: the holder is done within one export
        yield
    finally:
        os.close(fd)  # releases the lock


def evaluate(estimator, params, checkpoint_path):
    """Eval metrics of one checkpoint as plain Python numbers; its confusion matrix and
    per-class accuracy go to TensorBoard (trainer/report/eval_pictures.py)."""
    eval_input_fn = input_lib.make_input_fn(
        params["eval_data_path"], tf.estimator.ModeKeys.EVAL, num_examples=params["num_eval_examples"])
    # ceil(N / global batch): input_fn pads the last batch with zero-weight rows.
    steps = input_lib.eval_steps(params["num_eval_examples"], params["eval_batch_size"])
    results = estimator.evaluate(eval_input_fn, steps=steps,
                                 checkpoint_path=checkpoint_path)
    matrix = results.pop(model.CONFUSION_MATRIX_METRIC)  # [C, C]: TensorBoard's, not the record's
    eval_pictures.write_eval_pictures(estimator.eval_dir(), int(results["global_step"]), matrix,
                                      params.get("labels"))
    return {key: value.item() if hasattr(value, "item") else value for key, value in results.items()}


def evaluate_and_record(estimator, params, checkpoint_path=None, staging_dir=None,
                        once_per_step=True):
    """Evaluates a checkpoint (the latest if None), exports it if it is the best, records both.

    Returns the record, or None when another process recorded this step meanwhile (with
    once_per_step; --mode evaluate records every evaluation it is asked for).
    staging_dir: where the export is built (export.export_model stages under output_dir;
    an evaluator beside a trainer passes its own so that their exports never meet).
    """
    if checkpoint_path is None:
        checkpoint_path, step = checkpoints.latest_checkpoint(params["output_dir"])
        if checkpoint_path is None:
            raise checkpoints.CheckpointError(f"output_dir={params['output_dir']!r} has no checkpoint "
                                              f"to evaluate")
    else:
        step = step_of(checkpoint_path)
    start = time.time()
    record = evaluate(estimator, params, checkpoint_path)
    record.update(global_step=step, eval_seconds=round(time.time() - start, 2))
    check_metric_reported(record, params)
    with hold_results(params["output_dir"]):
        earlier = read_eval_results(params["output_dir"])
        if once_per_step and step in {r["global_step"] for r in earlier}:
            logging.info("Step %d was evaluated by another process meanwhile; not recorded", step)
            return None
        if early_stopping.best_record(earlier + [record], params["early_stopping_metric"]) is record:
            exported = export_best(estimator, params, checkpoint_path, step, staging_dir)
            record["best_export"] = relative_to_run(params["output_dir"], exported)
        record["evaluations_without_improvement"] = early_stopping.evaluations_since_best(
            earlier + [record], params["early_stopping_metric"])
        append_eval_result(params["output_dir"], record)
    hptuning.report_metric(params, record)
    log_record(record, params)
    return record


def relative_to_run(output_dir, path):
    """path as recorded in the run's bookkeeping: relative to output_dir, so that a moved or
    downloaded run (local or gs://) still finds it."""
    return os.path.relpath(path, output_dir) if "://" not in output_dir else path[len(output_dir):].lstrip("/")


def path_in_run(output_dir, recorded):
    """A recorded path joined onto output_dir as it is now. Records of older versions hold
    absolute paths of the place the run was written: their part from best_export/ or export/ on
    is what counts."""
    for subdir in (signature.BEST_EXPORT_SUBDIR, signature.EXPORT_SUBDIR):
        marker = f"/{subdir}/"
        if recorded.startswith(f"{subdir}/"):
            return os.path.join(output_dir, recorded)
        if marker in recorded:
            return os.path.join(output_dir, subdir, recorded.rsplit(marker, 1)[1])
    return os.path.join(output_dir, recorded)


def check_metric_reported(record, params):
    """ConfigError when the chosen metric is not among the eval metrics (e.g. top_5 of 3 classes)."""
    metric = params["early_stopping_metric"]
    if metric not in record:
        reported = sorted(k for k, v in record.items() if isinstance(v, float))
        raise checks.ConfigError(f"early_stopping_metric={metric!r} is not reported by this "
                                 f"run's evaluation; it reports {reported}")


def log_record(record, params):
    step = record["global_step"]
    logging.info("Eval at step %d: %s", step, json.dumps(record, sort_keys=True))
    _LOGGER.info("eval at step %d: accuracy %.4f, loss %.4f (%d images, %.0f s)%s", step,
                 record["accuracy"], record["loss"], params["num_eval_examples"],
                 record["eval_seconds"], ", new best" if "best_export" in record else "")


def export_best(estimator, params, checkpoint_path, step, staging_dir=None):
    """Exports to OUT/best_export/<serving_model_name>/<step>/ and removes the earlier best."""
    best_base = os.path.join(params["output_dir"], signature.BEST_EXPORT_SUBDIR)
    export_params = dict(params, output_dir=staging_dir) if staging_dir else params
    path = export.export_model(estimator, export_params, checkpoint_path, step, best_base)
    remove_other_versions(os.path.dirname(path), keep=str(step))
    return path


def remove_other_versions(model_base, keep):
    """Deletes every version directory under model_base except keep (TF Serving serves the highest)."""
    for name in tf.io.gfile.listdir(model_base):
        name = name.rstrip("/")
        if name.isdigit() and name != keep:
            tf.io.gfile.rmtree(os.path.join(model_base, name))


def stop_early(estimator, params):
    """When patience ran out: the best export copied to OUT/export/, the reason written to
    OUT/early_stopping.json, and that export's path returned; None (and no stale reason
    file) when training goes on."""
    output_dir = params["output_dir"]
    records = read_eval_results(output_dir)
    reason = early_stopping.stop_reason(records, params)
    reason_path = os.path.join(output_dir, EARLY_STOPPING_FILE)
    if reason is None:
        if tf.io.gfile.exists(reason_path):  # an earlier stop, now resumed with more patience
            tf.io.gfile.remove(reason_path)
        return None
    best = early_stopping.best_record(records, params["early_stopping_metric"])
    exported = export_stopped_run(estimator, params, best)
    summary = {"stopped_at_step": records[-1]["global_step"], "best_step": best["global_step"],
               "metric": params["early_stopping_metric"],
               "best_value": best[params["early_stopping_metric"]],
               "patience": params["early_stopping_patience"],
               "export": relative_to_run(output_dir, exported), "reason": reason}
    chain.write_text_atomically(reason_path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    _LOGGER.info("early stopping at step %d: %s; serving export %s",
                 summary["stopped_at_step"], reason, exported)
    return exported


def export_stopped_run(estimator, params, best):
    """OUT/export/<serving_model_name>/<best step>/: a copy of the best export. A best record
    without one (the metric was changed mid-run) exports the latest checkpoint instead."""
    output_dir = params["output_dir"]
    export_base = os.path.join(output_dir, signature.EXPORT_SUBDIR)
    if not best.get("best_export"):
        checkpoint_path, step = checkpoints.latest_checkpoint(output_dir)
        return export.export_model(estimator, params, checkpoint_path, step, export_base)
    target = os.path.join(export_base, params["serving_model_name"], str(best["global_step"]))
    return copy_export(path_in_run(output_dir, best["best_export"]), target,
                       os.path.join(output_dir, COPY_STAGING_SUBDIR))


def copy_export(source, target, staging):
    """Copies an export directory to target (kept if it exists), whole: TF Serving polls target's
    parent, so the copy is made in staging and then moved into place."""
    if tf.io.gfile.exists(target):
        return target
    if tf.io.gfile.exists(staging):  # left over by a killed copy
        tf.io.gfile.rmtree(staging)
    for directory, _, files in tf.io.gfile.walk(source):
        relative = directory[len(source):].strip("/")  # walk joins onto source; keeps gs://
        tf.io.gfile.makedirs(os.path.join(staging, relative))
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(staging, relative, name))
    tf.io.gfile.makedirs(os.path.dirname(target))
    tf.io.gfile.rename(staging, target)
    return target
