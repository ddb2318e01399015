"""Evaluating and exporting checkpoints, with either engine: one record per checkpoint in OUT/eval_results.jsonl, the best one exported.

Used by the training rounds (trainer/run/rounds.py: an evaluation every steps_per_eval)
and by the evaluation job (trainer/run/continuous_eval.py, --mode continuous_eval),
which may run beside a trainer on the same OUT. So that the two never record a step
twice or interleave their writes, recording a result (reading the earlier records,
exporting a new best, appending) holds OUT/eval_results.lock, an flock(2) taken for
those few seconds only (common/output_lock.py: on gs://, which has no flock, a
lease on that object). "Best" is by --early_stopping_metric
(trainer/run/early_stopping.py; accuracy unless set). Each evaluation's confusion
matrix and per-class accuracy go to TensorBoard beside the engine's eval scalars
(OUT/eval, trainer/run/eval_pictures.py).

The engine (trainer/run/engine.py's Engine) evaluates and exports; what is recorded,
where and when is decided here, the same for both engines, and so is where the latest
checkpoint's export goes (export_latest: a run's end, --mode export), and a run stopped early
serves its best (export_stopped_run).

    .venv/bin/python -m trainer.task --mode evaluate --output_dir OUT --eval_data_path 'DIR/eval-*'
"""
import json
import logging
import os
import time

import tensorflow as tf

from common import export_versions, output_lock, publish, signature
from trainer.cloud import hptuning
from trainer.export import staging
from trainer.objective import metrics
from trainer.run import checkpoints, early_stopping, eval_pictures, eval_records
from trainer.settings import checks

RESULTS_LOCK_FILE = "eval_results.lock"
_LOGGER = logging.getLogger(__name__)  # the lines a person reads (shown in quiet mode)


class ResultsLock(output_lock.OutputLock):
    """OUT/eval_results.lock: held for seconds at a time, so a second recorder waits for it."""

    def no_lock_warning(self, directory):
        return None  # the trainer's lock warned once already; this one is taken per evaluation


RESULTS_LOCK = ResultsLock(RESULTS_LOCK_FILE, "evaluation recorder", "--output_dir")


def hold_results(output_dir):
    """Blocks until this process alone may record results in output_dir: an flock on a local
    disk, a lease on gs:// (the holder's heartbeat keeps it through a long export), none on
    other remote file systems (common/output_lock.py)."""
    return RESULTS_LOCK.hold(output_dir, wait=True)


def evaluate(engine, params, checkpoint_path, step):
    """Eval metrics of one checkpoint as plain Python numbers; its confusion matrix and
    per-class accuracy go to TensorBoard (trainer/run/eval_pictures.py), by the writer."""
    results = dict(engine.evaluate(checkpoint_path))  # by every process of the run
    matrix = results.pop(metrics.CONFUSION_MATRIX_METRIC)  # [C, C]: TensorBoard's, not the record's
    record = {key: value.item() if hasattr(value, "item") else value for key, value in results.items()}
    check_metric_reported(record, params)  # before anything of this evaluation is written
    if engine.processes.is_writer:
        eval_pictures.write_eval_pictures(engine.eval_dir, step, matrix, params.get("labels"))
    return record


def evaluate_and_record(engine, params, checkpoint_path, once_per_step=True):
    """Evaluates a checkpoint (every process of the run), exports it if it is the best and
    records both (the writer; the others get its record).

    Returns the record, or None when another process recorded this step meanwhile (with
    once_per_step; --mode evaluate records every evaluation it is asked for). An evaluator
    beside a trainer exports under this lock too, each into a staging folder of its own
    (common/publish.py): their exports never meet.
    """
    step = checkpoints.step_of(checkpoint_path)
    start = time.time()
    record = evaluate(engine, params, checkpoint_path, step)
    record.update(global_step=step, eval_seconds=round(time.time() - start, 2))
    return engine.processes.from_writer(f"record {step}", lambda: record_evaluation(
        engine, params, checkpoint_path, record, once_per_step))


def record_evaluation(engine, params, checkpoint_path, record, once_per_step):
    """Exports the evaluated checkpoint if its record is the best, appends the record (under
    OUT/eval_results.lock) and reports it; the record, or None when recorded meanwhile."""
    step = record["global_step"]
    with hold_results(params["output_dir"]):
        earlier = eval_records.read_eval_results(params["output_dir"])
        if once_per_step and step in {r["global_step"] for r in earlier}:
            logging.info("Step %d was evaluated by another process meanwhile; not recorded", step)
            return None
        records, metric = earlier + [record], params["early_stopping_metric"]
        is_best = early_stopping.best_record(records, metric) is record
        record["evaluations_without_improvement"] = early_stopping.evaluations_since_best(records, metric)
        exported = export_best(engine, params, checkpoint_path, step) if is_best else None
        if exported:
            record["best_export"] = eval_records.relative_to_run(params["output_dir"], exported)
        eval_records.append_eval_result(params["output_dir"], record)
    hptuning.report_metric(params, record)
    logging.info("Eval at step %d: %s", step, json.dumps(record, sort_keys=True))
    _LOGGER.info("eval at step %d: accuracy %.4f, loss %.4f (%d images, %.0f s)%s", step,
                 record["accuracy"], record["loss"], params["num_eval_examples"],
                 record["eval_seconds"], ", new best" if "best_export" in record else "")
    return record


def supersede_after(params, step):
    """A run resuming from `step`: what was recorded of later checkpoints, which it no longer has
    (the newest was lost or moved away), is set aside with one line each: their eval records
    (eval_records.set_aside_after), and an export or best export of such a step, which TF
    Serving would otherwise keep serving over what this run exports (moved to
    OUT/superseded/export/... and OUT/superseded/best_export/...). The steps trained again are
    then evaluated and exported again, and the records stay in step order."""
    output_dir = params["output_dir"]
    with hold_results(output_dir):
        moved = eval_records.set_aside_exports(output_dir, params["serving_model_name"], step)
        later = eval_records.set_aside_after(output_dir, step)
    if later:
        _LOGGER.warning("resuming from step %d: the eval records of steps %s, whose checkpoints "
                        "this run no longer has, moved to %s", step,
                        [r["global_step"] for r in later],
                        os.path.join(output_dir, eval_records.SUPERSEDED_SUBDIR, eval_records.RESULTS_FILE))
    for kind, source, target in moved:
        _LOGGER.warning("resuming from step %d: %s %s is of a checkpoint this run no longer "
                        "has: moved to %s; TF Serving would serve it over what this run exports",
                        step, kind, source, target)


def check_metric_reported(record, params):
    """ConfigError when the chosen metric is not among the eval metrics (e.g. top_5 of 3 classes)."""
    metric = params["early_stopping_metric"]
    if metric not in record:
        reported = sorted(k for k, v in record.items() if isinstance(v, float))
        raise checks.ConfigError(f"early_stopping_metric={metric!r} is not reported by this "
                                 f"run's evaluation; it reports {reported}")


def export_latest(engine, params, state):
    """Exports the latest checkpoint (state: the run's CheckpointState) to
    OUT/export/<serving_model_name>/<step>/: the writer's export, its path on every process."""
    checkpoint_path, step = state
    if checkpoint_path is None:
        raise checkpoints.CheckpointError(f"output_dir={params['output_dir']!r} has no checkpoint "
                                          f"to export: train first (--mode train_and_eval)")
    return engine.processes.from_writer(f"export {step}", lambda: export_latest_here(
        engine, params, checkpoint_path, step))


def export_latest_here(engine, params, checkpoint_path, step):
    """export_latest by this process (the writer)."""
    export_base = os.path.join(params["output_dir"], signature.EXPORT_SUBDIR)
    # Under OUT's lock (a run's end, --mode export): this command is the only publisher of its
    # versions, so what killed exports of any step left there goes, not only this step's.
    publish.remove_leftovers_in(os.path.join(export_base, params["serving_model_name"]))
    return export_model(engine, params, checkpoint_path, step, export_base)


def export_stopped_run(engine, params, best, state):
    """OUT/export/<serving_model_name>/<best step>/: a copy of the best export. A best record
    without one (the metric was changed mid-run) exports the latest checkpoint instead."""
    output_dir = params["output_dir"]
    if not best.get("best_export"):
        return export_latest(engine, params, state)
    export_base = os.path.join(output_dir, signature.EXPORT_SUBDIR)
    target = os.path.join(export_base, params["serving_model_name"], str(best["global_step"]))
    return staging.copy_into_place(eval_records.path_in_run(output_dir, best["best_export"]), target)


def export_model(engine, params, checkpoint_path, step, export_base):
    """export_base/<serving_model_name>/<step>/ of checkpoint_path, by the engine, put in place whole."""
    return staging.export_into_place(params, step, export_base,
                                     lambda staging_base: engine.export(checkpoint_path, staging_base))


def export_best(engine, params, checkpoint_path, step):
    """Exports to OUT/best_export/<serving_model_name>/<step>/ and removes the earlier best."""
    best_base = os.path.join(params["output_dir"], signature.BEST_EXPORT_SUBDIR)
    path = export_model(engine, params, checkpoint_path, step, best_base)
    remove_other_versions(os.path.dirname(path), keep=step)
    return path


def remove_other_versions(model_base, keep):
    """Deletes every version directory under model_base except keep (TF Serving serves the highest)."""
    for version in export_versions.list_versions(model_base, complete=False):
        if version != keep:
            tf.io.gfile.rmtree(export_versions.version_dir(model_base, version))
