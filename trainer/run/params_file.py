"""OUT/params.json: the settings a run was made with, read by the next command on the same OUT and checked against it.

The chain (trainer/chain.py) merges an earlier run's params.json under the new settings
and refuses a resume with other run-identity settings (check_same_run); the driver writes
params.json once a run's checks have passed (trainer/run/driver.py); an evaluation job
beside a trainer, and the report, read the trainer's.

    .venv/bin/python -c "from trainer.run import params_file; print(params_file.read_saved_params('OUT'))"
"""
import json
import os

import tensorflow as tf

from common import atomic_write
from trainer.run import checkpoints
from trainer.settings import table
from trainer.settings.checks import ConfigError


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
