"""OUT/params.json: the settings a run was made with, read by the next command on the same OUT and checked against it.

The chain (trainer/chain.py) merges an earlier run's params.json under the new settings
and refuses a resume with other run-identity settings (check_same_run: the rule is
trainer/settings/saved_run.py's, which the early check asks of a local OUT before TensorFlow
loads); the driver writes params.json once a run's checks have passed (trainer/run/driver.py),
with the recipe settings a resume changed (the table's on_resume="record") said in one line
and appended to its recipe_changes; an evaluation job beside a trainer, and the report, read
the trainer's.

    .venv/bin/python -c "from trainer.run import params_file; print(params_file.read_saved_params('OUT'))"
"""
import json
import logging
import os

import tensorflow as tf

from common import atomic_write
from trainer.run import checkpoints
from trainer.settings import saved_run, table
from trainer.settings.checks import ConfigError

RECIPE_CHANGES_KEY = saved_run.RECIPE_CHANGES_KEY
_LOGGER = logging.getLogger(__name__)


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
    """OUT/params.json of an earlier run, except its per-command settings and its
    recipe_changes ({} if there is none): trainer/settings/saved_run.py."""
    return saved_run.settings_of(read_params_file(output_dir))


def read_params_file(output_dir):
    """OUT/params.json as written ({} if there is none); one that is not a JSON mapping is refused."""
    if not output_dir:
        return {}
    check_is_not_a_file(output_dir, "output_dir")
    path = os.path.join(output_dir, table.PARAMS_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path, "rb") as f:
        return saved_run.parse(f.read(), path)


def write_params(params, recipe_changes=()):
    """Writes OUT/params.json (sorted keys, so runs diff cleanly), with recipe_changes when
    there are any (record_recipe_changes); returns its path."""
    tf.io.gfile.makedirs(params["output_dir"])
    path = os.path.join(params["output_dir"], table.PARAMS_FILE)
    written = dict(params, **{RECIPE_CHANGES_KEY: list(recipe_changes)}) if recipe_changes else params
    atomic_write.write_text(path, json.dumps(written, indent=2, sort_keys=True) + "\n")
    return path


def record_recipe_changes(params, state):
    """params.json's recipe_changes for this command: the earlier run's, plus one entry when
    it goes on from the checkpoint state.prefix with other recipe settings, each change
    said (from -> to) in one line. [] for a fresh run: the new settings simply apply.
    Read here, under the run's lock, not from the chain's earlier read."""
    saved = read_params_file(params["output_dir"]) if state.prefix else {}
    if not saved:
        return []
    history = list(saved.get(RECIPE_CHANGES_KEY, []))
    changed = {key: [saved_run.saved_value(saved, key), params[key]] for key in table.RECIPE_KEYS
               if saved_run.saved_value(saved, key) != params[key]}
    if changed:
        _LOGGER.warning("%s", describe_recipe_changes(params, state.step, changed))
        history.append({"step": state.step, "changed": changed})
    return history


def describe_recipe_changes(params, step, changed):
    """The one line that names each recipe change; a loud one (WARNING:, as dataset_info's) when
    the eval loss is made with a changed setting, since its curve then jumps for that alone."""
    line = (f"output_dir={params['output_dir']!r} goes on from step {step} with other settings "
            f"(recorded in {table.PARAMS_FILE}'s {RECIPE_CHANGES_KEY}): "
            + ", ".join(saved_run.describe_change(key, before, after)
                        for key, (before, after) in changed.items()))
    in_loss = [key for key in table.settings_in_the_loss(params) if key in changed]
    if not in_loss:
        return line
    return (f"WARNING: {line}; the eval loss is made with {' and '.join(in_loss)}, so eval losses "
            f"before and after step {step} do not compare (cross_entropy's do)")


def check_same_run(saved, params):
    """saved_run.check_same_run, OUT's checkpoints listed through TensorFlow (gs:// too)."""
    saved_run.check_same_run(saved, params, checkpoints.list_checkpoints)


def check_eval_loss_compares(saved, params):
    """saved_run.check_eval_loss_compares, OUT's checkpoints listed through TensorFlow (gs:// too)."""
    saved_run.check_eval_loss_compares(saved, params, checkpoints.list_checkpoints)
