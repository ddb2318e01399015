"""What the dataset tells the settings: labels, class count and split sizes, read before writing.

This project's datasets describe themselves (labels.txt and metadata.json beside the
shards, common/dataset_files.py); records with neither file (tensorflow/tpu's ImageNet
records) are read by trainer/data/byo_records.py. Runs after every setting has passed
its check and before anything is written (trainer/chain.py).

    .venv/bin/python -c "from trainer.data import dataset_info as d; print(d.read_dataset_info('work/demo/data/train-*')[0])"
"""
import logging
import os

import tensorflow as tf

from common import dataset_files
from trainer.data import byo_records
from trainer.settings.checks import ConfigError
from trainer.settings.table import PARAMS_FILE, mode_reads


def split_of(file_pattern, dataset_metadata):
    """The metadata.json split a glob like 'DIR/train-*' reads (its basename's prefix)."""
    basename = os.path.basename(file_pattern)
    for split in sorted(dataset_metadata["splits"], key=len, reverse=True):
        if basename.startswith(split):
            return split
    raise ConfigError(f"file pattern {file_pattern!r} names no split of metadata.json "
                      f"{sorted(dataset_metadata['splits'])}; expected e.g. DIR/<split>-*")


def read_dataset_info(file_pattern):
    """(labels, metadata) from labels.txt and metadata.json beside file_pattern."""
    directory = dataset_files.dataset_dir_of(file_pattern)
    paths = [os.path.join(directory, name) for name in (dataset_files.LABELS_FILE, dataset_files.METADATA_FILE)]
    for path in paths:
        if not tf.io.gfile.exists(path):
            raise ConfigError(f"{path} not found: the data glob {file_pattern!r} must sit beside "
                              f"{dataset_files.LABELS_FILE} and {dataset_files.METADATA_FILE}")
    with tf.io.gfile.GFile(paths[0]) as f:
        labels = dataset_files.parse_labels(f.read(), paths[0])
    with tf.io.gfile.GFile(paths[1]) as f:
        dataset_metadata = dataset_files.parse_metadata(f.read(), paths[1])
    if list(dataset_metadata["labels"]) != labels:
        raise ConfigError(f"{paths[0]} and {paths[1]} list different labels")
    return labels, dataset_metadata


def check_glob(key, file_pattern):
    if not file_pattern:
        raise ConfigError(f"{key} is required (a glob such as DIR/train-*)")
    if tf.io.gfile.isdir(file_pattern):
        split = "train" if key == "train_data_path" else "eval"
        raise ConfigError(f"{key}={file_pattern!r} is a directory: did you mean "
                          f"'{file_pattern.rstrip('/')}/{split}-*'?")
    if not tf.io.gfile.glob(file_pattern):
        raise ConfigError(f"{key}={file_pattern!r} matches no files")


def data_patterns(params):
    """{split-size key: glob} of the splits params["mode"] reads, each checked to match files."""
    patterns = {}
    reads = mode_reads(params)
    if reads.trains:
        check_glob("train_data_path", params["train_data_path"])
        patterns["num_train_examples"] = params["train_data_path"]
    if reads.evaluates:
        check_glob("eval_data_path", params["eval_data_path"])
        patterns["num_eval_examples"] = params["eval_data_path"]
    if len(patterns) == 2:
        warn_if_evaluating_on_training_data(params["train_data_path"], params["eval_data_path"])
    return patterns


def warn_if_evaluating_on_training_data(train_pattern, eval_pattern):
    """One loud line when the eval glob reads training files: its accuracy is not held-out accuracy."""
    shared = set(tf.io.gfile.glob(train_pattern)) & set(tf.io.gfile.glob(eval_pattern))
    if shared:
        logging.getLogger(__name__).warning(
            "WARNING: eval_data_path=%r reads %d of the training files (e.g. %s): every evaluation, "
            "the best export and early stopping measure the training set, not held-out data",
            eval_pattern, len(shared), sorted(shared)[0])


def add_dataset_info(params, typed=(), record_counts=None):
    """params plus labels, num_classes and split sizes read from the data directories.

    This project's datasets describe themselves (labels.txt, metadata.json); records
    with neither file beside them (tensorflow/tpu's ImageNet records) are read by
    trainer/data/byo_records.py, their counts kept in record_counts (a
    byo_records.RecordCounts, saved by the caller once every check has passed).
    typed: the keys the user set (flags, --config).
    """
    params = dict(params)
    patterns = data_patterns(params)
    if any(byo_records.has_dataset_files(pattern) for pattern in patterns.values()):
        params.update(read_described_splits(patterns, params, typed))
    elif patterns:
        record_counts = record_counts or byo_records.RecordCounts(params["output_dir"])
        params.update(read_own_records(patterns, params, record_counts))
    uses_export = mode_reads(params).predicts and params["predict_export_dir"]
    if not params.get("labels") and not uses_export:  # an export carries its labels
        raise ConfigError(f"mode={params['mode']!r} needs the labels: pass --eval_data_path, "
                          f"or use an output_dir holding the {PARAMS_FILE} of a training run")
    return params


def read_described_splits(patterns, params, typed):
    """labels, num_classes and split sizes from labels.txt and metadata.json."""
    info = {}
    for key, pattern in patterns.items():
        labels, dataset_metadata = read_dataset_info(pattern)
        if info.get("labels", labels) != labels:
            raise ConfigError(f"eval_data_path={pattern!r} has other labels than "
                              f"train_data_path={params['train_data_path']!r}")
        count = dataset_files.split_size(dataset_metadata, split_of(pattern, dataset_metadata))
        if count == 0:
            raise ConfigError(f"{pattern!r}: metadata.json counts 0 records in this split (were all "
                              f"rows rejected? see errors-*.jsonl beside it)")
        info.update({"labels": labels, "num_classes": len(labels), key: count})
        for typed_key in {key, "num_classes"} & set(typed):
            if params[typed_key] != info[typed_key]:
                raise ConfigError(
                    f"{typed_key} is read from the dataset files beside {pattern!r} "
                    f"({info[typed_key]}), not set to {params[typed_key]}: it is only for "
                    f"records without {dataset_files.LABELS_FILE}/{dataset_files.METADATA_FILE}")
    return info


def read_own_records(patterns, params, record_counts):
    """labels and split sizes of records without labels.txt/metadata.json (trainer/data/byo_records.py)."""
    if not params["num_classes"]:
        directory = dataset_files.dataset_dir_of(next(iter(patterns.values())))
        raise ConfigError(
            f"{directory} has no {dataset_files.LABELS_FILE} or {dataset_files.METADATA_FILE}: for "
            f"records written by another tool pass --num_classes N (and --label_offset 1 for "
            f"tensorflow/tpu's 1-based ImageNet records)")
    info, names = {}, {}
    for key, pattern in patterns.items():
        info[key], split_names = byo_records.read_split(
            sorted(tf.io.gfile.glob(pattern)), params, record_counts, params[key])
        for label, name in split_names.items():
            byo_records.add_name(names, label, name, pattern)
    info["labels"] = byo_records.class_names(names, params)
    return info
