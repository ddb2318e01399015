"""OUT/params.json's text as the settings an earlier run was made with, without TensorFlow: read by
the chain (trainer/run/params_file.py, through TensorFlow's file access, gs:// too) and by the
early check of a local OUT (trainer/settings/early_check.py), which then refuses a damaged file or
a bad saved value before TensorFlow loads. So are the rules of a resume against the run whose
checkpoints OUT holds (check_same_run, check_eval_loss_compares): each caller lists OUT's
checkpoints its own way (checkpoints_among their paths), and the rules are these alone.

    .venv/bin/python -c "from trainer.settings import saved_run; print(saved_run.settings_of({'seed': 1, 'mode': 'export'}))"
"""
import json
import os
import re

from trainer.settings import table
from trainer.settings.checks import ConfigError

# params.json's key for the recipe changes of resumes: [{"step": N, "changed": {key: [from, to]}}],
# oldest first; each applies from its step on. Not a setting: never merged into params.
RECIPE_CHANGES_KEY = "recipe_changes"
# OUT/model.ckpt-<step>.index: a checkpoint of either engine, known by its index file.
CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-(\d+)\.index$")
NOT_SAVED = object()  # saved_value of a key that is not a setting and not in params.json


def source(output_dir):
    """How a value read from OUT/params.json is named in a refusal."""
    return f"{os.path.join(output_dir, table.PARAMS_FILE)} of an earlier run"


def parse(content, path):
    """params.json's mapping as written (content: its bytes); ConfigError naming path when it is
    not a JSON mapping (cut short, or bytes that are not text)."""
    try:
        saved = json.loads(content)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is damaged ({err}): restore it from a copy, or use a new "
                          f"--output_dir") from None
    if not isinstance(saved, dict):
        raise ConfigError(f"{path} is not a mapping of settings: restore it, or use a new --output_dir")
    return saved


def settings_of(saved):
    """The saved mapping without its per-command settings and its recipe_changes.

    The mode is per command: an export-only run must not turn the next plain rerun of
    the training command into another export; nor may one prediction run's input or
    export choose what the next one reads.
    """
    return {key: value for key, value in saved.items()
            if key not in table.PER_COMMAND_KEYS + (RECIPE_CHANGES_KEY,)}


def checkpoints_among(paths):
    """[(step, prefix)] of the checkpoints among paths, by their .index files, oldest first."""
    found = []
    for path in paths:
        match = CHECKPOINT_INDEX.match(os.path.basename(path))
        if match:
            found.append((int(match[1]), path[:-len(".index")]))
    return sorted(found)


def check_same_run(saved, params, list_checkpoints, skip=()):
    """ConfigError naming every setting that differs from the run whose checkpoints
    params["output_dir"] holds; nothing has been written yet. Without a checkpoint there is
    nothing to mismatch, and the new settings simply replace params.json.
    list_checkpoints(output_dir) -> checkpoints_among its files; skip: keys not judged (the
    early check's, which the dataset has not yet decided)."""
    output_dir = params["output_dir"]
    keys = [key for key in table.RUN_IDENTITY_KEYS + table.NETWORKS[params["model"]].options
            if key not in skip]
    before = {key: saved_value(saved, key) for key in keys}
    changed = [describe_change(key, before[key], params[key])
               for key in keys if before[key] is not NOT_SAVED and before[key] != params[key]]
    if changed and has_checkpoints(saved, output_dir, list_checkpoints):
        raise ConfigError(
            f"output_dir={output_dir!r} holds checkpoints of a run built with other settings: "
            f"{'; '.join(changed)}. Use a new --output_dir (or the earlier settings and dataset)")


def check_eval_loss_compares(saved, params, list_checkpoints):
    """ConfigError when a resume changes a setting the eval loss is made with while
    early_stopping_metric='loss' picks the best export and stops early by comparing eval
    losses, the earlier steps' with the later ones'; nothing has been written yet."""
    if params["early_stopping_metric"] != "loss" or not saved:
        return
    changed = [key for key in table.settings_in_the_loss(params) if saved_value(saved, key) != params[key]]
    if not changed or not has_checkpoints(saved, params["output_dir"], list_checkpoints):
        return
    key = changed[0]
    raise ConfigError(
        f"{describe_change(key, saved_value(saved, key), params[key])} changes what the eval loss "
        f"measures from the checkpoints of output_dir={params['output_dir']!r} on, and "
        f"early_stopping_metric='loss' would compare eval losses across them to pick the best export "
        f"and stop early: pass --early_stopping_metric cross_entropy (the loss without label smoothing "
        f"or weight decay) or accuracy, or keep {key}={saved_value(saved, key)!r}")


def has_checkpoints(saved, output_dir, list_checkpoints):
    """True when output_dir holds an earlier run's params.json and checkpoints (by the files:
    the state may be lost). Without a checkpoint there is nothing to resume."""
    return bool(saved) and bool(list_checkpoints(output_dir))


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
