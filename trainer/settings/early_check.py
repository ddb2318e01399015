"""The settings' own checks before TensorFlow loads, so a typo'd value answers in well under a second.

The chain (trainer/chain.py) checks everything again once TensorFlow has loaded; this early
pass judges the same values by the same rules (checks.check_params) whenever it can see them
all without TensorFlow: a local --output_dir (and its params.json of an earlier run, a damaged
one refused as the chain refuses it) and a local (or no) --config file. Otherwise (gs://) it
leaves the judgement to the chain.

    .venv/bin/python -m trainer.task --learning_rate nan --output_dir /tmp/o   # one line, exit 2
"""
import os

from trainer.settings import checks, config_file, saved_run, table


def is_remote(path):
    return bool(path) and "://" in str(path)


def check_before_tensorflow(flag_values, config_path, output_dir):
    """Raises the chain's ConfigError for a bad typed or --config value, or a damaged or bad
    params.json of an earlier run, where the chain would see exactly these values (all of them
    local); else returns None. output_dir: the run's, as the chain resolves it (a tuning trial's
    subdirectory)."""
    if not output_dir or is_remote(output_dir) or is_remote(config_path):
        return  # no output_dir typed: the chain may take it from elsewhere (an earlier check's test)
    saved = read_local_params(output_dir)
    if saved is None:
        return  # a params.json it cannot read here: its values are unknown, the chain says why
    saved = saved_run.settings_of(saved)
    config_values = config_file.read_config_file(config_path) if config_path else {}
    params, sources = checks.merge_layers(saved, saved_run.source(output_dir), config_values,
                                          f"--config {config_path}", flag_values)
    checks.check_params(params, sources)


def read_local_params(output_dir):
    """OUT/params.json as written, a damaged one refused as the chain refuses it; {} without one;
    None when it cannot be read here (OUT a file, no permission)."""
    path = os.path.join(output_dir, table.PARAMS_FILE)
    try:
        with open(path, "rb") as saved:
            content = saved.read()
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    return saved_run.parse(content, path)
