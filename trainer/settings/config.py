"""Every setting of the trainer, defined once, and the chain that resolves them into params.

The chain (tensorflow/tpu ResNet style, nanoGPT-style defaults):

    DEFAULTS  ->  OUT/params.json of an earlier run (if any)  ->  --config FILE.yaml
              ->  flags the user typed  ->  values read from the dataset  ->  validate

The result is one plain dict, written to OUT/params.json beside the checkpoints
and passed as ``params`` to TPUEstimator; model_fn, input_fn and
serving_input_fn read nothing else. Flags, config-file keys and params keys
share one name. TPUEstimator owns the params keys ``batch_size`` and
``context`` and sets ``use_tpu`` itself (see estimator_params).

    .venv/bin/python -m trainer.settings.config --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir /tmp/out   # print resolved params
"""
import argparse
import json
import os
import re
import sys

import tensorflow as tf
import yaml

from common import console, dataset_files, prediction_records, signature
from trainer import nets
from trainer.data import byo_records
from trainer.run import early_stopping
from trainer.settings import flag_help
from trainer.cloud import hptuning

PARAMS_FILE = "params.json"

# A None default marks a string setting that is unset unless given.
DEFAULTS = {
    # --- Run: where data and outputs live, and what to do. ---
    "train_data_path": None,   # glob of training TFRecords, e.g. DIR/train-*
    "eval_data_path": None,    # glob of evaluation TFRecords, e.g. DIR/eval-*
    "output_dir": None,        # checkpoints, params.json, eval_results.jsonl, exports
    "mode": "train_and_eval",  # train_and_eval: train with evaluations; train: without (a continuous_eval
    # job evaluates); continuous_eval: evaluate each new checkpoint of a trainer's output_dir;
    # evaluate/export/predict act on an existing output_dir
    # --- TPU. Off by default: the same TPUEstimator then runs on CPU/GPU. ---
    "use_tpu": False,          # train on a Cloud TPU (TPUEstimator); off: the same code on CPU/GPU
    "tpu": None,               # TPU name or grpc:// address; unset = the resolver's default
    "tpu_zone": None,          # GCE zone of the TPU; unset = detected on GCE
    "gcp_project": None,       # project of the TPU; unset = detected on GCE
    "num_cores": 8,            # a v2-8/v3-8 has 8 cores; every batch is split across them
    "iterations_per_loop": 100,  # TPU steps per session.run: fewer host round trips
    "use_host_call": True,     # TPU summaries go through host_call (costs an outfeed per step)
    # --- Model. ---
    "model": "small_cnn",      # trainer/nets: small_cnn (flowers sample), resnet (CIFAR-style);
    # for photos resnet50, efficientnet_b0, mobilenet_v2 (keras.applications) or hub (--hub_module)
    "cnn_filters": [32, 64],   # small_cnn: filters of each conv/pool block; 2 blocks fit 32px digits
    "dense_units": 128,        # small_cnn: width of the hidden dense layer
    "dropout_rate": 0.3,       # small_cnn and the backbone networks' heads: dropout before the
    # classifier (1,400 images overfit fast)
    "resnet_depth": 20,        # resnet: 6n+2 layers (CIFAR ResNet v2); 20 = 3 blocks per stage
    "resnet_width": 16,        # resnet: filters of the first stage (doubled at each later stage)
    "use_bfloat16": False,     # TPU: bfloat16 activations (mixed precision); slow on CPU
    # --- Fine-tuning (trainer/estimator/warm_start.py; the backbone networks of trainer/nets). ---
    "warm_start_from": None,   # a fresh run starts from this output dir, checkpoint prefix or Keras
    # .h5/.weights.h5 backbone weights file (e.g. downloaded ImageNet weights); unset = from scratch
    "warm_start_exclude": "^logits/",  # regex of variables warm start leaves fresh: the classifier,
    # whose shape is the class count; '' warm-starts everything
    "freeze_backbone": False,  # backbone networks: train the head only (phase 1 of a fine-tune)
    "batch_norm_momentum": 0.9,  # resnet50/efficientnet_b0/mobilenet_v2: the reference ResNet's; Keras'
    # own 0.99 (MobileNetV2 0.999) leaves eval's statistics near their start for thousands of steps
    "backbone_learning_rate_multiplier": 1.0,  # backbone networks: the backbone's learning rate
    # relative to the head's; 1 = one rate for all, e.g. 0.1 to fine-tune gently
    "hub_module": None,        # model hub: a TF2 SavedModel image feature vector (TF Hub format)
    # --- Input (read by trainer/data/input.py; its docstring says how). ---
    "image_size": 32,          # the demo digits are 32x32; use 224 for photos like flowers
    "transpose_input": False,  # TPU: batch-last infeed is faster; a needless copy on CPU
    "cache_dataset": True,     # the demo set is a few MB; turn off for data that does not fit RAM
    "random_flip": False,      # off: a mirrored digit is a different glyph; on for photos
    "min_crop_area": 0.85,     # light crop augmentation; the reference ResNet uses 0.08 for photos
    "shuffle_buffer": 2048,    # larger than the demo train split, so it shuffles it fully
    # --- Optimisation. ---
    "train_batch_size": 64,    # global batch; TPU users raise it (1024 on a v3-8)
    "eval_batch_size": 128,    # global, a multiple of num_cores; eval is padded with zero-weight rows
    "predict_batch_size": 8,   # global; TPUEstimator.predict needs one
    "train_steps": 1500,       # ~70 epochs of the 1,437-image demo split
    "steps_per_eval": 500,     # train this many steps between evaluations
    "optimizer": "adam",       # "momentum" (the reference ResNet's choice) or "adam"
    "learning_rate": 0.01,     # at learning_rate_batch_size; scaled linearly with the batch
    "learning_rate_batch_size": 256,  # Goyal et al.: lr = learning_rate * batch / 256
    "warmup_steps": 100,       # linear warmup: large scaled rates diverge in the first steps
    "momentum": 0.9,           # momentum optimizer only
    "weight_decay": 1e-4,      # L2 on kernels (the reference ResNet's value)
    "lr_schedule": "cosine",   # after the warmup: "cosine" to 0 at train_steps (the demo's, tuned with
    # it) or "step" (the reference ResNet's x0.1 at 30, 60 and 80 of 90 epochs' share of train_steps)
    "label_smoothing": 0.0,    # 0 = plain cross entropy; the reference ResNet uses 0.1 on ImageNet
    "moving_average_decay": 0.0,  # 0 = off; else evaluate and export an exponential moving average
    # of the weights (the reference ResNet's 0.9999 suits long runs; ~0.99 for a few hundred steps)
    "top_k": prediction_records.DEFAULT_TOP_K,  # eval top-k accuracy, k = min(top_k, num_classes - 1)
    # --- Checkpoints, logging, export. ---
    "save_checkpoints_steps": 250,  # a kill loses at most this many steps
    "keep_checkpoint_max": 3,       # older checkpoints are deleted
    "save_summary_steps": 100,      # TensorBoard summary interval (CPU/GPU)
    "log_step_count_steps": 100,    # steps/sec and examples/sec are logged this often (-v)
    "progress_seconds": 20,         # a progress line (step, loss, examples/s, ETA) this often
    "serving_model_name": signature.DEFAULT_MODEL_NAME,  # OUT/export/<serving_model_name>/<version>/
    "num_warmup_images": 4,         # eval JPEGs written as TF Serving warmup requests
    # --- Batch prediction (mode predict; trainer/estimator/predict.py). ---
    "predict_input": None,          # CSV of 'uri[,label]' lines (the pipeline's format) or a TFRecord glob
    "predict_format": "jsonl",      # "jsonl" (sharded, for pipelines) or "csv" (one file, for people)
    "predict_output_dir": None,     # unset = OUT/predictions, beside the model that made them
    "predict_export_dir": None,     # a SavedModel to predict with; unset = the latest checkpoint
    "predict_records_per_shard": 10000,  # JSON-lines shard size: ~2 MB of records, easy to stream
    "predict_chunk_images": 4096,   # images in memory per predict call: bounds RAM and the 2 GB graph limit
    # --- Evaluation job and early stopping (trainer/estimator/continuous_eval.py, trainer/run/early_stopping.py). ---
    "eval_timeout_secs": 3600,      # continuous_eval exits after this long without a new checkpoint
    "early_stopping_patience": 0,   # stop after this many evaluations without improvement; 0 = never
    "early_stopping_metric": "accuracy",  # the eval metric that picks the best export, stops early and
    # is reported to hyperparameter tuning; loss and cross_entropy count lower as better
    # --- Your own TFRecords: no labels.txt / metadata.json beside them (trainer/data/byo_records.py). ---
    "num_classes": 0,               # class count of such records (0 = read from labels.txt)
    "label_offset": 0,              # subtracted from image/class/label: 1 for tensorflow/tpu's 1-based records
    "num_train_examples": 0,        # train records there (0 = counted once, cached in OUT/record_counts.json)
    "num_eval_examples": 0,         # eval records there (0 = counted once, cached in OUT/record_counts.json)
}

# Read from the dataset's labels.txt (or, for your own records, their class names); never set by
# the user. num_classes and the split sizes are too, unless the data has no labels.txt/metadata.json.
DATASET_KEYS = ("labels",)
MODES = ("train_and_eval", "evaluate", "export", "predict", "train", "continuous_eval")
# Modes that read the train / the eval split.
TRAIN_MODES = ("train_and_eval", "train")
EVAL_MODES = ("train_and_eval", "evaluate", "continuous_eval")
PREDICT_FORMATS = ("jsonl", "csv")
OPTIMIZERS = ("momentum", "adam")
LR_SCHEDULES = ("cosine", "step")  # trainer/estimator/model.py, learning_rate_schedule
# What one command does, not how the model is built: never carried over from params.json.
# The split sizes belong to this command's globs: read again (or given) every time.
PER_COMMAND_KEYS = ("mode", "predict_input", "predict_format", "predict_output_dir",
                    "predict_export_dir", "num_train_examples", "num_eval_examples")
# What a run was built for: resuming its checkpoints with another value would restore
# them into another graph (class count, network, image size, optimizer slots) or name
# its outputs wrongly (labels). Compared with OUT/params.json once a checkpoint exists;
# with the chosen network's option keys (trainer/nets) added. moving_average_decay: a run
# with moving averages checkpoints them, and evaluation restores from them.
RUN_IDENTITY_KEYS = ("labels", "num_classes", "model", "image_size", "optimizer", "label_offset",
                     "moving_average_decay")
# Other names a flag answers to: AI Platform passes --job-dir; --format is
# serving.batch_predict's name for the same setting.
FLAG_ALIASES = {"output_dir": ["--job-dir", "--job_dir"], "predict_format": ["--format"]}
# Owned by TPUEstimator: it adds them to params itself.
TPU_ESTIMATOR_KEYS = ("batch_size", "context", "use_tpu")


class ConfigError(ValueError):
    """A setting is unknown, has the wrong type or an invalid value."""


def read_config_file(path):
    """The hyperparameters in a YAML file (a mapping of params keys)."""
    if not tf.io.gfile.exists(path):
        raise ConfigError(f"--config {path}: no such file")
    with tf.io.gfile.GFile(path) as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"--config {path}: not valid YAML ({err})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    return values


def read_saved_params(output_dir):
    """OUT/params.json of an earlier run, except its PER_COMMAND_KEYS ({} if there is none).

    The mode is per command: an export-only run must not turn the next plain
    rerun of the training command into another export; nor may one prediction
    run's input or export choose what the next one reads.
    """
    if not output_dir:
        return {}
    path = os.path.join(output_dir, PARAMS_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        saved = json.load(f)
    for key in PER_COMMAND_KEYS:
        saved.pop(key, None)
    return saved


def write_text_atomically(path, text):
    """Writes a small file so that readers see the old or the new text, never a partial one.

    Other tasks of a cluster read OUT/params.json while the chief rewrites it.
    """
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write(text)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def write_params(params):
    """Writes OUT/params.json (sorted keys, so runs diff cleanly); returns its path."""
    tf.io.gfile.makedirs(params["output_dir"])
    path = os.path.join(params["output_dir"], PARAMS_FILE)
    write_text_atomically(path, json.dumps(params, indent=2, sort_keys=True) + "\n")
    return path


def coerce(key, value):
    """value converted to the type of DEFAULTS[key]; ConfigError naming key and value."""
    default = DEFAULTS[key]
    try:
        if value is None or default is None:
            return None if value is None else str(value)
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            if not isinstance(value, bool):
                raise TypeError
            return value
        if isinstance(default, list):
            items = value.split(",") if isinstance(value, str) else list(value)
            return [type(default[0])(item) for item in items]
        if isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            raise TypeError
        return type(default)(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a {type(default).__name__}") from None


def merge(params, overrides, source):
    """params updated with overrides; unknown keys are rejected by name."""
    unknown = sorted(set(overrides) - set(DEFAULTS) - set(DATASET_KEYS))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {unknown}; see trainer/settings/config.py")
    merged = dict(params)
    for key, value in overrides.items():
        if key not in DATASET_KEYS:
            merged[key] = coerce(key, value)
        elif source.endswith(PARAMS_FILE):
            merged[key] = value  # a saved run's dataset values, for export without data
        else:
            raise ConfigError(f"{source}: {key} is read from the dataset, not set")
    return merged


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
    if not tf.io.gfile.glob(file_pattern):
        raise ConfigError(f"{key}={file_pattern!r} matches no files")


def data_patterns(params):
    """{split-size key: glob} of the splits params["mode"] reads, each checked to match files."""
    patterns = {}
    if params["mode"] in TRAIN_MODES:
        check_glob("train_data_path", params["train_data_path"])
        patterns["num_train_examples"] = params["train_data_path"]
    if params["mode"] in EVAL_MODES:
        check_glob("eval_data_path", params["eval_data_path"])
        patterns["num_eval_examples"] = params["eval_data_path"]
    return patterns


def add_dataset_info(params, typed=()):
    """params plus labels, num_classes and split sizes read from the data directories.

    This project's datasets describe themselves (labels.txt, metadata.json); records
    with neither file beside them (tensorflow/tpu's ImageNet records) are read by
    trainer/data/byo_records.py. typed: the keys the user set (flags, --config).
    """
    params = dict(params)
    patterns = data_patterns(params)
    if any(byo_records.has_dataset_files(pattern) for pattern in patterns.values()):
        params.update(read_described_splits(patterns, params, typed))
    elif patterns:
        params.update(read_own_records(patterns, params))
    uses_export = params["mode"] == "predict" and params["predict_export_dir"]
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


def read_own_records(patterns, params):
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
            sorted(tf.io.gfile.glob(pattern)), params, params[key])
        for label, name in split_names.items():
            byo_records.add_name(names, label, name, pattern)
    info["labels"] = byo_records.class_names(names, params)
    return info


def validate(params):
    """Raises ConfigError naming the first bad value; returns params unchanged."""
    if not params["output_dir"]:
        raise ConfigError("output_dir is required (--output_dir or --job-dir)")
    if params["mode"] not in MODES:
        raise ConfigError(f"mode={params['mode']!r} is not one of {list(MODES)}")
    if params["model"] not in nets.NETWORKS:
        raise ConfigError(f"model={params['model']!r} is not one of {sorted(nets.NETWORKS)}")
    validate_predict(params)
    validate_fine_tuning(params)
    validate_evaluation_and_records(params)
    if params["optimizer"] not in OPTIMIZERS:
        raise ConfigError(f"optimizer={params['optimizer']!r} is not one of {list(OPTIMIZERS)}")
    for key in ("train_batch_size", "eval_batch_size", "predict_batch_size", "train_steps",
                "steps_per_eval", "iterations_per_loop", "num_cores", "top_k",
                "save_checkpoints_steps", "keep_checkpoint_max", "log_step_count_steps",
                "save_summary_steps", "learning_rate_batch_size", "resnet_width", "dense_units",
                "progress_seconds",
                "predict_records_per_shard", "predict_chunk_images"):
        if params[key] < 1:
            raise ConfigError(f"{key}={params[key]} must be >= 1")
    for key in ("learning_rate", "weight_decay", "warmup_steps", "momentum", "num_warmup_images"):
        if params[key] < 0:
            raise ConfigError(f"{key}={params[key]} must be >= 0")
    if not 0.0 <= params["dropout_rate"] < 1.0:
        raise ConfigError(f"dropout_rate={params['dropout_rate']} must be in [0, 1)")
    if params["image_size"] < 8:
        raise ConfigError(f"image_size={params['image_size']} must be >= 8 pixels")
    if (params["resnet_depth"] - 2) % 6 or params["resnet_depth"] < 8:
        raise ConfigError(f"resnet_depth={params['resnet_depth']} must be 6n+2 with n >= 1 (8, 14, 20, ...)")
    if params["use_tpu"]:
        for key in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
            if params[key] % params["num_cores"]:
                raise ConfigError(f"{key}={params[key]} must be divisible by "
                                  f"num_cores={params['num_cores']} (each TPU core gets an equal share)")
    return params


def validate_evaluation_and_records(params):
    """The evaluation job's, early stopping's and your own records' settings."""
    for key in ("eval_timeout_secs", "early_stopping_patience", "num_classes", "label_offset",
                "num_train_examples", "num_eval_examples"):
        if params[key] < 0:
            raise ConfigError(f"{key}={params[key]} must be >= 0")
    if params["num_classes"] == 1:
        raise ConfigError("num_classes=1: a classifier needs at least 2 classes")
    problem = early_stopping.metric_problem(params["early_stopping_metric"])
    if problem:
        raise ConfigError(problem)


def validate_predict(params):
    """Mode predict needs an input; the output format is one of PREDICT_FORMATS."""
    if params["mode"] == "predict" and not params["predict_input"]:
        raise ConfigError("mode='predict' needs predict_input (a CSV of image URIs or a TFRecord glob)")
    if params["predict_format"] not in PREDICT_FORMATS:
        raise ConfigError(f"predict_format={params['predict_format']!r} is not one of "
                          f"{list(PREDICT_FORMATS)}")


def validate_fine_tuning(params):
    """The schedule, loss and averaging knobs; the backbone settings only with a backbone network."""
    model = params["model"]
    if params["lr_schedule"] not in LR_SCHEDULES:
        raise ConfigError(f"lr_schedule={params['lr_schedule']!r} is not one of {list(LR_SCHEDULES)}")
    for key in ("label_smoothing", "moving_average_decay", "batch_norm_momentum"):
        if not 0.0 <= params[key] < 1.0:
            raise ConfigError(f"{key}={params[key]} must be in [0, 1)")
    if params["backbone_learning_rate_multiplier"] <= 0:
        raise ConfigError(f"backbone_learning_rate_multiplier={params['backbone_learning_rate_multiplier']} "
                          f"must be > 0 (--freeze_backbone trains the head only)")
    backbone_settings = [key for key, unset in (("freeze_backbone", False),
                                                ("backbone_learning_rate_multiplier", 1.0))
                         if params[key] != unset]
    if backbone_settings and not nets.has_backbone(model):
        raise ConfigError(f"{backbone_settings[0]} needs a network with a backbone, not model={model!r} "
                          f"(one of {sorted(n for n in nets.NETWORKS if nets.has_backbone(n))})")
    if (model == "hub") != bool(params["hub_module"]):
        raise ConfigError(f"model='hub' needs --hub_module PATH" if model == "hub" else
                          f"hub_module={params['hub_module']!r} is only read by --model hub, not {model!r}")
    if params["image_size"] < nets.min_image_size(model):
        raise ConfigError(f"image_size={params['image_size']} is too small for model={model!r} "
                          f"(at least {nets.min_image_size(model)})")
    try:
        re.compile(params["warm_start_exclude"] or "")
    except re.error as err:
        raise ConfigError(f"warm_start_exclude={params['warm_start_exclude']!r} is not a regular "
                          f"expression: {err}") from None


def resolve(flag_values, config_file=None):
    """Runs the chain; flag_values holds only the flags the user typed."""
    params = dict(DEFAULTS)
    output_dir = flag_values.get("output_dir")
    if output_dir:  # a hyperparameter-tuning trial writes to OUT/<trial id> (trainer/cloud/hptuning.py)
        output_dir = hptuning.trial_output_dir(output_dir)
        flag_values = dict(flag_values, output_dir=output_dir)
    saved = {}
    if output_dir:
        saved = read_saved_params(output_dir)
        params = merge(params, saved, os.path.join(output_dir, PARAMS_FILE))
    config_values = read_config_file(config_file) if config_file else {}
    if config_file:
        params = merge(params, config_values, f"--config {config_file}")
    params = merge(params, flag_values, "flags")
    validate(params)
    params = add_dataset_info(params, typed=set(config_values) | set(flag_values))
    if output_dir:
        check_same_run(saved, params)
    return params


def check_same_run(saved, params):
    """ConfigError naming every setting that differs from the run whose checkpoints
    output_dir holds; nothing has been written yet. Without a checkpoint there is
    nothing to mismatch, and the new settings simply replace params.json."""
    output_dir = params["output_dir"]
    if not saved or tf.train.latest_checkpoint(output_dir) is None:
        return
    keys = RUN_IDENTITY_KEYS + nets.NETWORKS[params["model"]][1]
    changed = [describe_change(key, saved[key], params[key])
               for key in keys if key in saved and saved[key] != params[key]]
    if changed:
        raise ConfigError(
            f"output_dir={output_dir!r} holds checkpoints of a run built with other settings: "
            f"{'; '.join(changed)}. Use a new --output_dir (or the earlier settings and dataset)")


def describe_change(key, before, after):
    if key == "labels":
        added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        return f"labels +{added} -{removed}" if added or removed else "labels reordered"
    return f"{key} {before!r} -> {after!r}"


def estimator_params(params):
    """params without the keys TPUEstimator sets itself."""
    return {k: v for k, v in params.items() if k not in TPU_ESTIMATOR_KEYS}


def make_parser(description="Train, evaluate and export an image classifier with TPUEstimator.",
                prog="python -m trainer.task"):
    """One flag per params key, all defaulting to None (= not typed), grouped as DEFAULTS is;
    each flag's help is the comment beside its default (trainer/settings/flag_help.py)."""
    parser = console.ArgumentParser(
        prog=prog, description=description,
        argument_default=argparse.SUPPRESS)  # untyped flags stay out of the namespace
    parser.add_argument("--config", help="YAML file of params keys, applied before the flags")
    parser.add_argument("-v", "--verbose", action="count", dest="verbosity",
                        help="also show TensorFlow's INFO lines (-vv: and its debug lines)")
    for title, entries in flag_help.read_flag_docs():
        group = parser.add_argument_group(title)
        for key, text in entries:
            add_flag(group, key, text)
    return parser


def add_flag(group, key, text):
    default = DEFAULTS[key]
    names = [f"--{key}"] + FLAG_ALIASES.get(key, [])
    help_text = f"{text} (default: {default!r})"
    if isinstance(default, bool):
        group.add_argument(*names, dest=key, action=argparse.BooleanOptionalAction, help=help_text)
    else:  # typed by coerce; choices only listed, validate() names a bad value
        choices = flag_choices().get(key)
        group.add_argument(*names, dest=key, help=help_text,
                           metavar="{" + ",".join(choices) + "}" if choices else None)


def flag_choices():
    return {"mode": MODES, "model": sorted(nets.NETWORKS), "optimizer": OPTIMIZERS,
            "predict_format": PREDICT_FORMATS, "lr_schedule": LR_SCHEDULES}


def parse_params(argv):
    """The resolved, validated params for command-line arguments argv (without the program)."""
    flag_values = vars(make_parser().parse_args(argv))
    flag_values.pop("verbosity", None)
    config_file = flag_values.pop("config", None)
    return resolve(flag_values, config_file)


if __name__ == "__main__":
    print(json.dumps(parse_params(sys.argv[1:]), indent=2, sort_keys=True))
