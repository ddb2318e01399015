"""OUT/params.json's text as the settings an earlier run was made with, without TensorFlow: read by
the chain (trainer/run/params_file.py, through TensorFlow's file access, gs:// too) and by the
early check of a local OUT (trainer/settings/early_check.py), which then refuses a damaged file or
a bad saved value before TensorFlow loads.

    .venv/bin/python -c "from trainer.settings import saved_run; print(saved_run.settings_of({'seed': 1, 'mode': 'export'}))"
"""
import json
import os

from trainer.settings import table
from trainer.settings.checks import ConfigError

# params.json's key for the recipe changes of resumes: [{"step": N, "changed": {key: [from, to]}}],
# oldest first; each applies from its step on. Not a setting: never merged into params.
RECIPE_CHANGES_KEY = "recipe_changes"


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
