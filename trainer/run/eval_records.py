"""The run's own bookkeeping: OUT/eval_results.jsonl, the paths recorded in it, and OUT/superseded/.

Engine-neutral: both engines, the report and the closing summary read the same records,
kept in step order (a record is inserted after those of its step and earlier, whoever
writes it and whenever). Records of steps past the checkpoint a training run resumes from
describe checkpoints it no longer has: set_aside_after moves them to
OUT/superseded/eval_results.jsonl, so that the steps trained again are evaluated again, and
set_aside_exports moves their exports under OUT/superseded/.
Every path recorded is relative to the run directory (relative_to_run), so a moved or
downloaded run, local or on gs://, still finds what it names (path_in_run); small files
are written whole through a rename (common/atomic_write.py).

    .venv/bin/python -c "from trainer.run import eval_records; print(eval_records.read_eval_results('work/demo/run')[-1])"
"""
import json
import logging
import os

import tensorflow as tf

from common import atomic_write, export_versions, signature

RESULTS_FILE = "eval_results.jsonl"
SUPERSEDED_SUBDIR = "superseded"  # OUT/superseded/: records and exports of checkpoints a run lost


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
    """Adds record after every record of its step or earlier: an evaluator beside the trainer,
    or --mode evaluate of an older checkpoint, may record a step below the last one."""
    records = read_eval_results(output_dir)
    at = sum(1 for r in records if r["global_step"] <= record["global_step"])
    write_records((os.path.join(output_dir, RESULTS_FILE), records[:at] + [record] + records[at:]))


def write_records(*files):
    """Each (path, records) of files rewritten whole, in the order given. GFile has no append
    mode on every file system: the whole (small) file is written aside and renamed."""
    for path, records in files:
        atomic_write.write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def set_aside_after(output_dir, step):
    """Moves the records of steps past `step` to OUT/superseded/eval_results.jsonl (after any
    set aside before); returns them. Superseded first, then the results rewritten: a kill
    between the two leaves a record in both, set aside once when the run resumes again."""
    records = read_eval_results(output_dir)
    later = [r for r in records if r["global_step"] > step]
    if later:
        superseded_dir = os.path.join(output_dir, SUPERSEDED_SUBDIR)
        tf.io.gfile.makedirs(superseded_dir)
        kept_aside = read_eval_results(superseded_dir)
        write_records((os.path.join(superseded_dir, RESULTS_FILE),
                       kept_aside + [r for r in later if r not in kept_aside]),
                      (os.path.join(output_dir, RESULTS_FILE), [r for r in records if r["global_step"] <= step]))
    return later


def set_aside_exports(output_dir, model_name, step):
    """Moves OUT/{export,best_export}/<model_name>/<version> of versions past step under
    OUT/superseded/ (TF Serving would serve them over what the resumed run exports);
    returns [(kind, source, target)]."""
    moved = []
    for kind, subdir in (("export", signature.EXPORT_SUBDIR), ("best export", signature.BEST_EXPORT_SUBDIR)):
        relative = os.path.join(subdir, model_name)
        model_base = os.path.join(output_dir, relative)
        for version in export_versions.list_versions(model_base, complete=False):
            if version > step:
                target = os.path.join(output_dir, SUPERSEDED_SUBDIR, relative, str(version))
                moved.append((kind, export_versions.version_dir(model_base, version), target))
    for _, source, target in moved:
        if tf.io.gfile.exists(target):  # set aside by an earlier resume from a lower step
            tf.io.gfile.rmtree(target)
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.rename(source, target)
    return moved


def evaluated_steps(output_dir):
    return {record["global_step"] for record in read_eval_results(output_dir)}


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
