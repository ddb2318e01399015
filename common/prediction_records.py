"""Batch-prediction records and files, shared by both batch routes.

One record per input image: {"uri", "class_index", "class", "top_k": [{"class",
"probability"}, ...]} for a prediction, {"uri", "error": {"reason", "detail"}}
for an image that could not be classified. Written as JSON lines (sharded) or
as one CSV with CSV_COLUMNS, with a summary.json. A run writes everything into a
staging folder beside its output and moves it into place only when complete
(publish): it replaces the files an earlier run of the same format wrote under the
same prefix, and the earlier summary, as a whole; the other format's files stay.
A run holds PREFIX.lock for all that (hold_prefix, from before its model loads and its
images are read to the end): a second run into the same prefix, by either route, is
refused at once in one line, so two runs never publish at once.

    .venv/bin/python -m common.prediction_records OUT/predictions   # print the summary of a run
"""
import collections
import csv
import glob
import io
import json
import logging
import math
import posixpath
import re
import sys
import time
import uuid

from common import output_lock
from common.signature import PREDICTION_FORMATS

CSV_COLUMNS = ("uri", "class_index", "class", "probability", "top_k_classes",
               "top_k_probabilities", "error", "label")
# The files one run writes under an output prefix, by format: numbered JSON-lines
# shards (Beam's default shard names, also used by write_records) or one CSV.
# A rerun deletes exactly these first: fewer shards than last time must leave no
# stale shard for a reader's PREFIX-* glob.
OUTPUT_PATTERNS = {"jsonl": "{prefix}-?????-of-?????.jsonl", "csv": "{prefix}.csv"}
PREDICTIONS_PREFIX = "predictions"  # write_records' file names inside its output directory
SUMMARY_FILE = "summary.json"  # the latest write_records run: counts and its format
SUMMARY_SUFFIX = ".summary.json"  # batch_predict's OUTPUT.summary.json, beside its shards
STAGING_PREFIX = "_staging-"  # a run's own folder beside its output until it is complete
RUN_ID_PATTERN = r"\d{8}-\d{6}-[0-9a-f]{6}"  # new_run_id's names: start time, then random
# PREFIX.lock, one run at a time into a prefix (hold_prefix). Both routes name it so:
# OUT/predictions.lock for the trainer's --mode predict into OUT, and for a Beam job with
# --output OUT/predictions, which would write the same shards. A reader's PREFIX-* glob
# never matches it.
LOCK_SUFFIX = ".lock"
_LOGGER = logging.getLogger(__name__)


def make_prediction_record(uri, probabilities, labels, top_k, label=None):
    """The record of one image; probabilities: [num_classes] floats, labels: class names;
    label: the true class given with the input, kept as "label" so accuracy can be counted."""
    order = sorted(range(len(probabilities)), key=lambda i: -float(probabilities[i]))
    best = order[:min(top_k, len(order))]
    record = {"uri": uri, "class_index": int(best[0]), "class": labels[best[0]],
              "top_k": [{"class": labels[i], "probability": float(probabilities[i])} for i in best]}
    if label is not None:
        record["label"] = label
    return record


def make_error_record(uri, reason, detail, label=None):
    record = {"uri": uri, "error": {"reason": reason, "detail": detail}}
    if label is not None:
        record["label"] = label
    return record


def to_json_line(record):
    return json.dumps(record, sort_keys=True)


def to_csv_line(record):
    """One CSV line (no newline) in CSV_COLUMNS order; top-k lists are ';'-joined."""
    top_k = record.get("top_k", [])
    error = record.get("error")
    values = [record["uri"], record.get("class_index", ""), record.get("class", ""),
              top_k[0]["probability"] if top_k else "",
              ";".join(item["class"] for item in top_k),
              ";".join(repr(item["probability"]) for item in top_k),
              f"{error['reason']}: {error['detail']}" if error else "", record.get("label", "")]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(values)
    return buffer.getvalue()


def summarize(records, class_names=None):
    """{"images", "predicted", "errors": {reason: count}} over records, plus accuracy when
    inputs carried labels (see summarize_labelled)."""
    errors = collections.Counter(r["error"]["reason"] for r in records if "error" in r)
    summary = {"images": len(records), "predicted": len(records) - sum(errors.values()),
               "errors": dict(sorted(errors.items()))}
    pairs = collections.Counter((r["label"], r["class"]) for r in records
                                if "label" in r and "error" not in r)
    summary.update(summarize_labelled(pairs, class_names))
    return summary


def summarize_labelled(pairs, class_names=None):
    """{"labelled", "accuracy", "confusion": {true: {predicted: n}}, "unknown_labels"} from
    {(true label, predicted class): count}; {} without labels. A label the model does not
    know (not in class_names) cannot be right: counted apart, not in the accuracy."""
    if not pairs:
        return {}
    known = {pair: n for pair, n in pairs.items() if class_names is None or pair[0] in class_names}
    labelled = sum(known.values())
    confusion = collections.defaultdict(dict)
    for (true, predicted), n in sorted(known.items()):
        confusion[true][predicted] = n
    correct = sum(n for (true, predicted), n in known.items() if true == predicted)
    return {"labelled": labelled, "accuracy": round(correct / labelled, 6) if labelled else None,
            "confusion": dict(confusion),
            "unknown_labels": sum(pairs.values()) - labelled}


def filesystems():
    """Beam's FileSystems, imported on first use: a trainer command that predicts nothing
    need not load Beam."""
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


class FileOps:
    """What staging and publishing need, through Beam's FileSystems, for both routes: the Beam
    job's files are published by the file system that wrote them, and the trainer's writes
    reach gs:// (and the tests' GCS emulator, which tf.io.gfile cannot) and every scheme
    Beam knows. Tests pass a subclass to stop a publish halfway."""

    @staticmethod
    def glob(pattern):
        return [m.path for m in filesystems().match([pattern])[0].metadata_list]

    @staticmethod
    def folders(pattern):
        """The folders matching pattern: locally every one; on gs:// those holding files
        (Beam's match lists files only, and GCS has no folders without objects)."""
        if "://" not in pattern:
            return sorted(glob.glob(pattern))
        depth = pattern.count("/") + 1
        return sorted({"/".join(path.split("/")[:depth]) for path in FileOps.glob(pattern + "/**")})

    @staticmethod
    def exists(path):
        return filesystems().exists(path)

    @staticmethod
    def isdir(path):
        """A local directory, or a gs:// prefix with objects below it."""
        if "://" not in path:
            return posixpath.isdir(path)
        return bool(FileOps.glob(path.rstrip("/") + "/*"))

    @staticmethod
    def delete(paths):
        if paths:
            filesystems().delete(list(paths))

    @staticmethod
    def rename(source, destination):
        filesystems().rename([source], [destination])

    @staticmethod
    def remove_tree(path):
        """Every file below path, then (locally) the folder itself."""
        if "://" in path:
            FileOps.delete(FileOps.glob(path.rstrip("/") + "/**"))
        elif filesystems().exists(path):
            filesystems().delete([path])

    @staticmethod
    def write_text(path, text, mime_type="text/plain"):
        """Writes path whole (creating local parent folders, as Beam's local create does)."""
        with filesystems().create(path, mime_type=mime_type) as f:
            f.write(text.encode("utf-8"))


def hold_prefix(prefix, flag, place):
    """Holds the lock of the outputs under prefix for the with-block: PREFIX.lock beside them
    (common/output_lock.py), deleted when released; OutputBusy naming the holder if taken.
    flag and place: the flag naming the output and its value, for the busy message."""
    directory, name = posixpath.split(prefix)
    lock = output_lock.OutputLock(name + LOCK_SUFFIX, "batch prediction", flag,
                                  is_removed_when_released=True)
    return lock.hold(directory, place)


def check_prefix_free(prefix, flag, place):
    """OutputBusy, as hold_prefix would raise it, while another run holds a local prefix's lock:
    a command's check before Beam and TensorFlow load, so that it answers at once. The lock is
    taken and let go at once, and only where its file is (without one no run holds it, and none
    is made); the run takes it again. A URL (gs://) is left to the run."""
    if "://" in prefix:
        return
    try:
        open(prefix + LOCK_SUFFIX, "rb").close()
    except OSError:  # absent, a folder, below a file, no permission: no lock to probe here
        return
    with hold_prefix(prefix, flag, place):
        pass


def check_format(output_format):
    if output_format not in PREDICTION_FORMATS:
        raise ValueError(f"format={output_format!r} is not one of {list(PREDICTION_FORMATS)}")


def output_pattern(prefix, output_format):
    """The glob of the files a run of output_format writes under prefix."""
    check_format(output_format)
    return OUTPUT_PATTERNS[output_format].format(prefix=prefix)


def remove_earlier_outputs(prefix, output_format, files):
    """Deletes an earlier run's output_format files under prefix and logs how many.

    The other format's files are kept and named in a warning: they are not this
    run's output, and a reader should know they describe an earlier run.
    Returns the removed paths.
    """
    pattern = output_pattern(prefix, output_format)
    removed = sorted(files.glob(pattern))
    files.delete(removed)
    if removed:
        _LOGGER.info("Removed %d file(s) of an earlier %s run matching %s: this run's output "
                     "replaces them", len(removed), output_format, pattern)
    for other in PREDICTION_FORMATS:
        kept = sorted(files.glob(output_pattern(prefix, other)))
        if other != output_format and kept:
            _LOGGER.warning("Kept %d %s file(s) of an earlier run (%s): this %s run does not "
                            "replace another format's files; delete them if they are stale",
                            len(kept), other, name_some(kept), output_format)
    return removed


def name_some(paths, shown=3):
    """'a, b, c, ... (10 in all)' for a log line."""
    more = f", ... ({len(paths)} in all)" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def staging_dir(prefix, run_id):
    """DIR/_staging-<name>-<run_id>: where a run writing prefix DIR/<name> writes everything
    first. Readers' globs (DIR/<name>-*, DIR/<name>.csv) never match it."""
    directory, name = posixpath.split(prefix)
    return posixpath.join(directory, f"{STAGING_PREFIX}{name}-{run_id}")


def new_run_id():
    """Start time first, so that earlier runs' staging folders sort before this one's."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def publish(staging, prefix, output_format, summary_path, files):
    """Moves a finished run's staged files into place under prefix, summary last.

    The earlier summary goes first, so that from then on nothing looks finished; then
    the earlier run's output_format files (remove_earlier_outputs; the other format's
    stay). A run killed before this leaves only its staging folder; one killed during
    it leaves shards without a summary. Other runs' staging folders are removed after:
    call it only while holding hold_prefix(prefix, ...), so that those runs are dead ones.
    """
    name = posixpath.basename(prefix)
    staged_summary = posixpath.join(staging, SUMMARY_FILE)
    if files.exists(summary_path):
        files.delete([summary_path])
    remove_earlier_outputs(prefix, output_format, files)
    for path in sorted(files.glob(output_pattern(posixpath.join(staging, name), output_format))):
        files.rename(path, posixpath.join(posixpath.dirname(prefix), posixpath.basename(path)))
    files.rename(staged_summary, summary_path)
    files.remove_tree(staging)
    remove_leftover_staging(prefix, staging, files)


def remove_leftover_staging(prefix, staging, files):
    """Deletes every staging folder of a run into prefix but this one's and says so. Under
    prefix's lock no other run into prefix is alive: those folders are of killed or failed
    runs (a finished run removes its own). Only names staging_dir(prefix, <a run id>) match:
    not those of a prefix that starts with this one's name (prefix "p" and "p-2")."""
    own = staging.rstrip("/")
    is_leftover = re.compile(re.escape(posixpath.basename(staging_dir(prefix, ""))) + RUN_ID_PATTERN)
    folders = [path.rstrip("/") for path in files.folders(staging_dir(prefix, "*"))]
    leftovers = [path for path in folders
                 if path != own and is_leftover.fullmatch(posixpath.basename(path))]
    for path in leftovers:
        files.remove_tree(path)
    if leftovers:
        _LOGGER.info("Removed %d staging folder(s) of earlier unfinished runs: %s",
                     len(leftovers), name_some(leftovers))


def as_text(lines):
    return "".join(line + "\n" for line in lines)


def write_jsonl_shards(records, prefix, records_per_shard, files):
    num_shards = max(1, math.ceil(len(records) / records_per_shard))
    for shard in range(num_shards):
        chunk = records[shard * records_per_shard:(shard + 1) * records_per_shard]
        files.write_text(f"{prefix}-{shard:05d}-of-{num_shards:05d}.jsonl",
                         as_text(to_json_line(r) for r in chunk))


def write_staged(records, staged_prefix, output_format, records_per_shard, files):
    if output_format == "csv":
        files.write_text(output_pattern(staged_prefix, "csv"),
                         as_text([",".join(CSV_COLUMNS)] + [to_csv_line(r) for r in records]))
    else:
        write_jsonl_shards(records, staged_prefix, records_per_shard, files)


def write_records(records, output_dir, output_format, records_per_shard, class_names=None):
    """Writes predictions-NNNNN-of-NNNNN.jsonl shards or predictions.csv, and summary.json,
    staged in output_dir/_staging-predictions-<run>/ and then published (publish); call it
    while holding hold_prefix(prediction_prefix(output_dir), ...).

    Returns the summary (summary.json's content: counts and "format"). The
    earlier run's files of the same format are replaced; the other format's files stay.
    """
    check_format(output_format)
    files = FileOps
    prefix = prediction_prefix(output_dir)
    staging = staging_dir(prefix, new_run_id())
    write_staged(records, posixpath.join(staging, PREDICTIONS_PREFIX), output_format,
                 records_per_shard, files)
    summary = dict(summarize(records, class_names), format=output_format)
    files.write_text(posixpath.join(staging, SUMMARY_FILE),
                     as_text([json.dumps(summary, sort_keys=True)]), "application/json")
    publish(staging, prefix, output_format, posixpath.join(output_dir, SUMMARY_FILE), files)
    return summary


def prediction_prefix(output_dir):
    """OUTPUT_DIR/predictions: the prefix of write_records' files (and of its lock)."""
    return posixpath.join(output_dir, PREDICTIONS_PREFIX)


def summary_paths(output):
    """Where a finished run into output left its summary: OUT/summary.json of a --mode
    predict directory, or OUTPUT.summary.json beside a batch_predict --output prefix."""
    return [posixpath.join(output, SUMMARY_FILE), output.rstrip("/") + SUMMARY_SUFFIX]


def main(argv=None):
    """Prints the summary of the finished run into OUTPUT; one line and exit 2 without one."""
    from common import console
    parser = console.ArgumentParser(prog="python -m common.prediction_records",
                                    description="The summary of a finished batch-prediction run.")
    parser.add_argument("output", metavar="OUTPUT", help="a --mode predict output directory "
                        "(OUT/predictions) or a serving.batch_predict --output prefix")
    output = parser.parse_args(argv).output
    console.quiet_unless_verbose([])
    for path in summary_paths(output):
        text = read_summary(path)
        if text is not None:
            print(text.strip())
            return
    console.exit_with_error(f"{output} has no finished prediction run: neither "
                            f"{' nor '.join(summary_paths(output))} exists")


def read_summary(path):
    """The text of the summary file at path, None without one. A local path is read without
    Beam, so that the command answers at once; a URL (gs://) through Beam's FileSystems."""
    if "://" in path:
        if not FileOps.exists(path):
            return None
        with filesystems().open(path) as f:
            return f.read().decode("utf-8")
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):  # absent, or below a file: no run there
        return None


if __name__ == "__main__":
    main()
