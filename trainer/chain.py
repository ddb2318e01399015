"""The chain that turns the table, a saved run, a config file and flags into one checked params dict.

    table defaults -> OUT/params.json of an earlier run (if any) -> --config FILE.yaml
                   -> flags the user typed -> every value checked (checks.py)
                   -> values read from the dataset, judged against the settings -> params

Nothing is written until the whole chain has passed: a bad value from any source stops
the run with one line naming the setting, the value, what is allowed and where the
value came from. The result is written to OUT/params.json beside the checkpoints (by
the engine, once its run starts) and passed as ``params`` to TPUEstimator;
model_fn, input_fn and serving_input_fn read nothing else.

    .venv/bin/python -m trainer.chain --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir /tmp/out   # print the resolved params
"""
import json
import logging
import os
import sys

import tensorflow as tf
import yaml

from common import atomic_write, gcs_probe
from trainer.cloud import hptuning
from trainer.data import byo_records, dataset_info
from trainer.run import checkpoints
from trainer.settings import checks, flags, table
from trainer.settings.checks import ConfigError

# The settings that name files a run reads or writes (output_dir and --config are probed first).
GCS_PATH_SETTINGS = ("train_data_path", "eval_data_path", "warm_start_from", "hub_module",
                     "predict_input", "predict_export_dir", "predict_output_dir")


def read_config_file(path):
    """The settings in a YAML file (a mapping of setting names to values)."""
    if not tf.io.gfile.exists(path):
        raise ConfigError(f"--config {path}: no such file")
    if tf.io.gfile.isdir(path):
        raise ConfigError(f"--config {path} is a directory: pass a YAML file of settings")
    with tf.io.gfile.GFile(path) as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as err:
            problem = str(err).replace("\n", " ")
            raise ConfigError(f"--config {path}: not valid YAML ({problem})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    return values


def check_is_not_a_file(directory, key):
    """ConfigError when the local directory a setting names is a file (nothing is written then).
    A URL is left alone: gs:// has no directories to be files instead of, and asking would
    cost a request (and reach the real GCS where the tests' emulator is meant)."""
    if not directory or "://" in directory:
        return
    if tf.io.gfile.exists(directory) and not tf.io.gfile.isdir(directory):
        raise ConfigError(f"{key}={directory!r} is a file, not a directory: pass a new or "
                          f"existing directory")


def read_saved_params(output_dir):
    """OUT/params.json of an earlier run, except its per-command settings ({} if there is none).

    The mode is per command: an export-only run must not turn the next plain rerun of
    the training command into another export; nor may one prediction run's input or
    export choose what the next one reads. A file that is not a JSON mapping is refused.
    """
    if not output_dir:
        return {}
    check_is_not_a_file(output_dir, "output_dir")
    path = os.path.join(output_dir, table.PARAMS_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        try:
            saved = json.load(f)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path} is damaged ({err}): restore it from a copy, or use a new "
                              f"--output_dir") from None
    if not isinstance(saved, dict):
        raise ConfigError(f"{path} is not a mapping of settings: restore it, or use a new --output_dir")
    for key in table.PER_COMMAND_KEYS:
        saved.pop(key, None)
    return saved


def write_params(params):
    """Writes OUT/params.json (sorted keys, so runs diff cleanly); returns its path."""
    tf.io.gfile.makedirs(params["output_dir"])
    path = os.path.join(params["output_dir"], table.PARAMS_FILE)
    atomic_write.write_text(path, json.dumps(params, indent=2, sort_keys=True) + "\n")
    return path


def merge(params, sources, overrides, source, is_saved_run=False):
    """(params, sources) updated with overrides, each value typed by the table; unknown keys
    are refused by name with the closest setting's name. source: where they came from."""
    merged, where = dict(params), dict(sources)
    for key, value in overrides.items():
        if key in table.DATASET_KEYS:
            if not is_saved_run:
                raise ConfigError(f"{source}: {key} is read from the dataset, not set")
            merged[key] = value  # a saved run's dataset values, for export without data
        elif key not in table.SETTINGS:
            raise checks.unknown_key_error(key, source)
        else:
            merged[key] = checks.coerce(key, value, flag_source(key, source))
        where[key] = flag_source(key, source)
    return merged, where


def flag_source(key, source):
    return f"flag --{key}" if source == "flags" else source


def resolve(flag_values, config_file=None):
    """Runs the chain; flag_values holds only the flags the user typed."""
    params, sources = dict(table.DEFAULTS), {}
    output_dir = flag_values.get("output_dir")
    if output_dir:  # a hyperparameter-tuning trial writes to OUT/<trial id> (trainer/cloud/hptuning.py)
        output_dir = hptuning.trial_output_dir(output_dir)
        flag_values = dict(flag_values, output_dir=output_dir)
    reachable = set()  # buckets checked: gs:// without network or credentials is one line at once
    gcs_probe.check_readable(output_dir, "output_dir", reachable)
    gcs_probe.check_readable(config_file, "--config", reachable)
    saved = read_saved_params(output_dir)
    if saved:
        saved_file = f"{os.path.join(output_dir, table.PARAMS_FILE)} of an earlier run"
        params, sources = merge(params, sources, saved, saved_file, is_saved_run=True)
    config_values = read_config_file(config_file) if config_file else {}
    params, sources = merge(params, sources, config_values, f"--config {config_file}")
    params, sources = merge(params, sources, flag_values, "flags")
    checks.check_params(params, sources)
    check_is_not_a_file(params["predict_output_dir"], "predict_output_dir")
    for key in GCS_PATH_SETTINGS:
        gcs_probe.check_readable(params[key], key, reachable)
    record_counts = byo_records.RecordCounts(output_dir) if output_dir else None
    params = dataset_info.add_dataset_info(params, typed=set(config_values) | set(flag_values),
                                           record_counts=record_counts)
    params = fit_to_data(params)
    if output_dir:
        check_same_run(saved, params)
        record_counts.save()  # the first write of the run: every check has passed
    return params


def fit_to_data(params):
    """Settings judged against the dataset now that its sizes are known (still nothing written)."""
    eval_size = params.get("num_eval_examples") or 0
    if params["eval_data_path"] and 0 < eval_size < params["num_warmup_images"]:
        logging.getLogger(__name__).warning(
            "num_warmup_images=%d is more than the eval split holds: the export's warm-up "
            "file gets its %d images", params["num_warmup_images"], eval_size)
        params = dict(params, num_warmup_images=eval_size)
    return params


def check_same_run(saved, params):
    """ConfigError naming every setting that differs from the run whose checkpoints
    output_dir holds; nothing has been written yet. Without a checkpoint there is
    nothing to mismatch, and the new settings simply replace params.json."""
    output_dir = params["output_dir"]
    if not saved or not checkpoints.list_checkpoints(output_dir):  # by the files: the state may be lost
        return
    keys = table.RUN_IDENTITY_KEYS + table.NETWORKS[params["model"]].options
    before = {key: saved_value(saved, key) for key in keys}
    changed = [describe_change(key, before[key], params[key])
               for key in keys if before[key] is not NOT_SAVED and before[key] != params[key]]
    if changed:
        raise ConfigError(
            f"output_dir={output_dir!r} holds checkpoints of a run built with other settings: "
            f"{'; '.join(changed)}. Use a new --output_dir (or the earlier settings and dataset)")


NOT_SAVED = object()


def saved_value(saved, key):
    """What the earlier run had for key. A params.json written before a setting existed ran
    with that setting's default (a new setting's default keeps the old behaviour: --seed 0
    is unseeded), so resuming it with another value is a change too."""
    if key in saved:
        return saved[key]
    setting = table.SETTINGS.get(key)
    return setting.default if setting else NOT_SAVED


def describe_change(key, before, after):
    if key == "labels":
        added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        return f"labels +{added} -{removed}" if added or removed else "labels reordered"
    return f"{key} {before!r} -> {after!r}"


def estimator_params(params):
    """params without the keys TPUEstimator sets itself."""
    return {k: v for k, v in params.items() if k not in table.TPU_ESTIMATOR_KEYS}


def parse_params(argv):
    """The resolved, checked params for command-line arguments argv (without the program)."""
    flag_values, config_file = flags.parse_flags(argv)
    return resolve(flag_values, config_file)


if __name__ == "__main__":
    print(json.dumps(parse_params(sys.argv[1:]), indent=2, sort_keys=True))
