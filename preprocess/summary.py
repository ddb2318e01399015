"""What a finished pipeline tells before its dataset is published: the summary table, and the
refusals of a dataset that would be silently wrong (no usable row at all, a class without
an example).

Both checks read the metadata the pipeline staged; when one refuses, the run publishes
nothing (preprocess/output_dir.py) and exits 2 with one line naming the problem, the fix
and where the dead letters are.

    .venv/bin/python -m preprocess.summary OUT/metadata.json     # the table of a dataset
"""
import posixpath
import sys

from common import dataset_files, image_uris
from common.user_errors import UserError

# Why every row of an input might have been refused, and what to do: the one line's hint.
HINTS = {
    image_uris.MALFORMED_CSV_LINE: ("expected 'uri,label' lines such as 'photos/1.jpg,daisy' "
                                    "(a CSV without a label column?)"),
    image_uris.HEADER_LINE: "the only line is a header: add 'uri,label' lines below it",
    image_uris.MISSING_FILE: ("no listed file exists (a relative uri is resolved against the "
                              "CSV's own folder)"),
    image_uris.UNKNOWN_LABEL: "no row's label is in --labels_file",
    image_uris.NOT_IN_LABEL_FOLDER: "expected files at ROOT/<label>/<image>",
    image_uris.INVALID_LABEL: "labels must be UTF-8 text",
}
DEFAULT_HINT = "no file could be used as an image"


class NoUsableRows(UserError):
    """Every input row was refused (or there were none): there is no dataset to write."""


def format_summary(meta):
    """The end-of-job table: records per split, rejections by reason, and the balance."""
    lines = [f"{'split':<12}{'records':>10}{'shards':>8}"]
    for split, stats in sorted(meta["splits"].items()):
        lines.append(f"{split:<12}{stats['records']:>10}{stats['shards']:>8}")
    for reason, count in meta["rejected"].items():
        lines.append(f"{'rejected':<12}{count:>10}  {reason}")
    for kind, count in meta.get("converted", {}).items():
        lines.append(f"{'converted':<12}{count:>10}  {kind}")
    written = records_written(meta)
    balance = "OK" if meta["rows_read"] == written + meta["rejected_total"] else "MISMATCH"
    lines.append(f"rows read {meta['rows_read']} = written {written} + rejected "
                 f"{meta['rejected_total']}: {balance}")
    lines.append(f"labels: {meta['num_classes']}; dead letters: errors-*.jsonl")
    return "\n".join(lines)


def records_written(meta):
    return sum(stats["records"] for stats in meta["splits"].values())


def check_some_rows_usable(meta, inputs, errors_path):
    """NoUsableRows unless at least one record was written. inputs: what was read, for the
    message ('train.csv, eval.csv' or '--input_dir photos/')."""
    if records_written(meta):
        return
    if not meta["rows_read"]:
        raise NoUsableRows(f"{inputs} gave no rows: nothing to write (expected 'uri,label' "
                           "lines, or ROOT/<label>/<image> files)")
    top_reason = max(meta["rejected"], key=meta["rejected"].get)
    counts = ", ".join(f"{reason}: {count}" for reason, count in meta["rejected"].items())
    raise NoUsableRows(
        f"no row of {inputs} could be used, all {meta['rows_read']} were rejected ({counts}): "
        f"{HINTS.get(top_reason, DEFAULT_HINT)}; the dead letters say why for each row: "
        f"{errors_path}")


def check_every_label_has_records(meta, errors_path):
    """Labels derived from the data come from the parsed rows, before their images are read.

    A label whose every row was then rejected (a typo on a row whose file is missing)
    would be a class without one example, silently skewing the model and its
    per-class metrics. With --labels_file the user chose the classes: not called then.
    """
    empty = [label for label in meta["labels"]
             if not any(stats["per_label"].get(label) for stats in meta["splits"].values())]
    if empty:
        raise UserError(
            f"label(s) {empty} have no usable image: every row with them was rejected (see "
            f"{errors_path}); fix or remove those rows, or pass --labels_file. Nothing was "
            f"published")


def describe_inputs(csv_paths, input_dir):
    """'train.csv, eval.csv' or '--input_dir photos'."""
    if input_dir:
        return f"--input_dir {input_dir}"
    return ", ".join(dict.fromkeys(posixpath.basename(path) for path in csv_paths))


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(format_summary(dataset_files.parse_metadata(f.read(), sys.argv[1])))
