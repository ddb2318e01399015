"""Bring your own TFRecords: ImageNet-format records written by other tools, such as
tensorflow/tpu's tools/datasets/imagenet_to_gcs.py and jpeg_to_tf_record.py.

Their image keys are this project's (image/encoded, image/height, image/width,
image/class/label; common/record_schema.py), but:
  * image/class/label is 1-based (imagenet_to_gcs numbers the sorted synsets from 1;
    jpeg_to_tf_record writes "label_int + 1  # model expects 1-based");
  * the class name is image/class/synset (a WordNet id such as n01440764, or the label
    string), not image/class/text;
  * the eval split is validation-*, and files have no extension (train-00000-of-01024);
  * there is no labels.txt or metadata.json.
A data directory with neither file is read this way (trainer/settings/table.py): --num_classes
gives the class count and --label_offset 1 makes the ids 0-based (trainer/data/input.py
subtracts it from every label). The split sizes, the class names and the range of the
label ids are read from the records in one pass (no image is decoded) and cached in
OUT/record_counts.json, keyed by file path and size, so a resumed run does not read
them again; --num_train_examples / --num_eval_examples skip the pass for a split (class
names then come from the other split, a resumed run's params.json, or are the 0-based ids).

    .venv/bin/python -m trainer.data.byo_records 'DIR/validation-*'   # records, label ids and names
"""
import collections
import json
import os
import sys

import tensorflow as tf

from common import atomic_write, dataset_files, record_schema

SYNSET = "image/class/synset"  # tensorflow/tpu's writers: the class name (bytes)
CACHE_FILE = "record_counts.json"
SCAN_BATCH = 1024  # records parsed per step of the counting pass


def has_dataset_files(file_pattern):
    """True when labels.txt or metadata.json sits beside the glob (this project's datasets)."""
    directory = dataset_files.dataset_dir_of(file_pattern)
    return any(tf.io.gfile.exists(os.path.join(directory, name))
               for name in (dataset_files.LABELS_FILE, dataset_files.METADATA_FILE))


def scan_file(path):
    """{"records": n, "labels": {id: count}, "names": {id: name}} of one TFRecord file.

    Only the label and the two name keys are parsed (no image is decoded), in batches.
    """
    spec = {record_schema.LABEL: tf.io.FixedLenFeature([], tf.int64),
            SYNSET: tf.io.FixedLenFeature([], tf.string, default_value=b""),
            record_schema.LABEL_TEXT: tf.io.FixedLenFeature([], tf.string, default_value=b"")}
    dataset = tf.data.TFRecordDataset(path).batch(SCAN_BATCH).map(
        lambda records: tf.io.parse_example(records, spec))
    counts, names = collections.Counter(), {}
    try:
        for batch in dataset:
            ids = batch[record_schema.LABEL].numpy().tolist()
            counts.update(ids)
            for label, synset, text in zip(ids, batch[SYNSET].numpy(), batch[record_schema.LABEL_TEXT].numpy()):
                name = (synset or text).decode("utf-8", "replace").strip()
                add_name(names, label, name, path)
    except tf.errors.DataLossError as err:
        raise dataset_files.DatasetError(f"{path}: truncated or corrupt TFRecord "
                                         f"({err.message.strip().splitlines()[0]})") from None
    except tf.errors.InvalidArgumentError:
        raise dataset_files.DatasetError(
            f"{path}: a record without an int64 {record_schema.LABEL}: not an image "
            f"classification TFRecord") from None
    return {"records": sum(counts.values()), "labels": dict(counts), "names": names}


def add_name(names, label, name, source):
    """Records name for label id; one id with two names is an error naming both."""
    if not name:
        return
    if names.setdefault(label, name) != name:
        raise dataset_files.DatasetError(
            f"{source}: label {label} is named both {names[label]!r} and {name!r} "
            f"({SYNSET} / {record_schema.LABEL_TEXT})")


def read_cache(output_dir):
    path = os.path.join(output_dir, CACHE_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError:  # torn by a kill: count again
            return {}


def write_cache(output_dir, cache):
    """Written whole through a rename, so a reader sees the old or the new file."""
    tf.io.gfile.makedirs(output_dir)
    atomic_write.write_text(os.path.join(output_dir, CACHE_FILE),
                            json.dumps(cache, indent=1, sort_keys=True) + "\n")


class RecordCounts:
    """OUT/record_counts.json: read once; new counts are kept in memory until save(), which the
    settings chain calls only after every check has passed (nothing is written before)."""

    def __init__(self, output_dir):
        self.output_dir = output_dir
        self.cache = read_cache(output_dir)
        self.changed = False

    def file_stats(self, files):
        """[scan_file(path)] for files, from the cache when a file's size matches."""
        stats = []
        for path in files:
            size = tf.io.gfile.stat(path).length
            cached = self.cache.get(path)
            if not cached or cached.get("bytes") != size:
                cached = dict(scan_file(path), bytes=size)
                self.cache[path], self.changed = cached, True
            stats.append({"records": cached["records"],
                          "labels": {int(k): v for k, v in cached["labels"].items()},
                          "names": {int(k): v for k, v in cached["names"].items()}})
        return stats

    def save(self):
        if self.changed:
            write_cache(self.output_dir, self.cache)
            self.changed = False


def cached_records(files, output_dir):
    """The records of files per OUT/record_counts.json, or None unless every file is cached
    at its current size (then reading them again would only repeat the count)."""
    cache = read_cache(output_dir)
    entries = [cache.get(path) for path in files]
    if not all(entries) or any(entry.get("bytes") != tf.io.gfile.stat(path).length
                               for path, entry in zip(files, entries)):
        return None
    return sum(entry["records"] for entry in entries)


def check_label_ids(path, label_ids, params):
    """DatasetError when a label id minus label_offset is not a class id in [0, num_classes)."""
    offset, num_classes = params["label_offset"], params["num_classes"]
    low, high = min(label_ids), max(label_ids)
    if low - offset >= 0 and high - offset < num_classes:
        return
    bad = low if low - offset < 0 else high
    if offset == 0 and high == num_classes and low >= 1:
        hint = "the labels look 1-based (tensorflow/tpu's writers): pass --label_offset 1"
    elif offset >= 1 and low == 0:
        hint = "the labels look 0-based (as this project writes them): pass --label_offset 0"
    else:
        hint = "check --num_classes and --label_offset"
    raise dataset_files.DatasetError(
        f"{path}: {record_schema.LABEL}={bad} - label_offset={offset} is {bad - offset}, not a "
        f"class id in [0, num_classes={num_classes}); {hint}")


def read_split(files, params, record_counts, count=0):
    """(number of records, {label id: name}) of one split's files, label ids checked.

    record_counts: a RecordCounts of the output dir. count: the split size given by flag
    (0 = read it); a given count skips the pass.
    """
    if count:
        return count, {}
    names = {}
    stats = record_counts.file_stats(files)
    for path, file_stat in zip(files, stats):
        if file_stat["labels"]:
            check_label_ids(path, file_stat["labels"], params)
        for label, name in file_stat["names"].items():
            add_name(names, label, name, path)
    return sum(s["records"] for s in stats), names


def class_names(names, params):
    """The label list, index = 0-based class id: each id's name from the records, else from
    the resumed run's params.json (a pass skipped by given counts finds no names), else the id."""
    offset, num_classes = params["label_offset"], params["num_classes"]
    saved = params.get("labels") or []
    fallback = saved if len(saved) == num_classes else [str(i) for i in range(num_classes)]
    labels = [names.get(i + offset) or fallback[i] for i in range(num_classes)]
    duplicates = sorted({name for name in labels if labels.count(name) > 1})
    if duplicates:
        raise dataset_files.DatasetError(f"several classes are named {duplicates[0]!r} by "
                                         f"{SYNSET} / {record_schema.LABEL_TEXT}")
    return labels


def main(argv):
    files = sorted(tf.io.gfile.glob(argv[1]))
    stats = [scan_file(path) for path in files]
    print(json.dumps({"files": len(files), "records": sum(s["records"] for s in stats),
                      "labels": dict(sorted(sum((collections.Counter(s["labels"]) for s in stats),
                                                collections.Counter()).items())),
                      "names": dict(sorted({k: v for s in stats for k, v in s["names"].items()}.items()))},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv)
