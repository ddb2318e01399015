"""The settings' own checks before TensorFlow loads, so a typo'd value answers in well under a second.

The chain (trainer/chain.py) checks everything again once TensorFlow has loaded; this early
pass judges the same values by the same rules (checks.check_params) whenever it can see them
all without TensorFlow: a local (or no) --config file and no params.json of an earlier run
under a local --output_dir. Otherwise (gs://, a resume) it leaves the judgement to the chain.

    .venv/bin/python -m trainer.task --learning_rate nan --output_dir /tmp/o   # one line, exit 2
"""
import os

from trainer.settings import checks, config_file, table


def is_remote(path):
    return bool(path) and "://" in str(path)


def check_before_tensorflow(flag_values, config_path, output_dir):
    """Raises the chain's ConfigError for a bad typed or --config value, where the chain would see
    exactly these values (no earlier run's params.json, nothing on gs://); else returns None.
    output_dir: the run's, as the chain resolves it (a tuning trial's subdirectory)."""
    if not output_dir or is_remote(output_dir) or is_remote(config_path):
        return  # no output_dir typed: the chain may take it from elsewhere (an earlier check's test)
    if output_dir and os.path.exists(os.path.join(output_dir, table.PARAMS_FILE)):
        return  # a saved run's settings join the chain: it judges them with TensorFlow's file access
    config_values = config_file.read_config_file(config_path) if config_path else {}
    params, sources = checks.merge(dict(table.DEFAULTS), {}, config_values, f"--config {config_path}")
    params, sources = checks.merge(params, sources, flag_values, "flags")
    checks.check_params(params, sources)
