"""The dataset description written next to the TFRecords: ``labels.txt`` and ``metadata.json``.

The pipeline writes both; the trainer reads both, so the number of classes,
the label names and the split sizes are never constants in code. The functions
here are pure (text in, text out): the pipeline writes through Beam's
FileSystems (local, gs:// and the GCS emulator), the trainer through tf.io.gfile.

    python -m common.dataset_files DIR          # print the dataset summary in DIR
"""
import json
import posixpath
import sys

from common import record_schema
from common.user_errors import UserError

LABELS_FILE = "labels.txt"
METADATA_FILE = "metadata.json"


class DatasetError(UserError):
    """The dataset directory is missing a file or describes something inconsistent."""


def labels_to_text(labels):
    """One label per line; the line index (0-based) is the label id."""
    return "".join(f"{label}\n" for label in labels)


def label_ids(labels):
    """{label: its id}: the 0-based index in the label list, as in labels.txt."""
    return {label: i for i, label in enumerate(labels)}


def parse_labels(text, source=LABELS_FILE):
    """Returns the label list from labels.txt text; rejects blanks and duplicates by name."""
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise DatasetError(f"{source}: no labels found")
    seen = set()
    for label in labels:
        if label in seen:
            raise DatasetError(f"{source}: duplicate label {label!r}")
        seen.add(label)
    return labels


def build_metadata(labels, splits, rejected, rows_read, converted=None):
    """Returns the metadata dict.

    labels:   list of label strings; index = label id.
    splits:   {split: {"records": int, "per_label": {label: int}, "shards": int}}
    rejected: {reason: int}, the dead-letter counts.
    rows_read: input rows seen; rows_read == sum(records) + sum(rejected).
    converted: {kind: int}, images kept but re-encoded (e.g. "png", "grayscale", "resized").
    """
    return {
        "schema_version": record_schema.SCHEMA_VERSION,
        "labels": list(labels),
        "num_classes": len(labels),
        "splits": splits,
        "rows_read": int(rows_read),
        "rejected": dict(sorted(rejected.items())),
        "rejected_total": int(sum(rejected.values())),
        "converted": dict(sorted((converted or {}).items())),
    }


def metadata_to_json(metadata):
    return json.dumps(metadata, indent=2, sort_keys=True) + "\n"


def parse_metadata(text, source=METADATA_FILE):
    """Parses metadata.json text and checks the schema version and label list."""
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as err:
        raise DatasetError(f"{source}: not valid JSON ({err})") from err
    version = metadata.get("schema_version")
    if version != record_schema.SCHEMA_VERSION:
        raise DatasetError(
            f"{source}: schema_version={version!r}, this code reads "
            f"schema_version={record_schema.SCHEMA_VERSION}; rebuild the TFRecords")
    for key in ("labels", "splits"):
        if key not in metadata:
            raise DatasetError(f"{source}: missing key {key!r}")
    return metadata


def split_size(metadata, split):
    """Number of records in one split, by name."""
    splits = metadata["splits"]
    if split not in splits:
        raise DatasetError(f"split {split!r} not in metadata.json (has {sorted(splits)})")
    return int(splits[split]["records"])


def dataset_dir_of(file_pattern):
    """The directory holding labels.txt/metadata.json for a glob like 'DIR/train-*'."""
    return posixpath.dirname(file_pattern)


def main(argv):
    import tensorflow as tf  # only the CLI needs TF's file systems
    for directory in argv[1:]:
        path = posixpath.join(directory, METADATA_FILE)
        with tf.io.gfile.GFile(path) as f:
            metadata = parse_metadata(f.read(), path)
        print(metadata_to_json(metadata))


if __name__ == "__main__":
    main(sys.argv)
