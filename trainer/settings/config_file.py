"""A --config file: a YAML mapping of setting names to values, read locally or through tf.io.gfile.

The chain (trainer/chain.py) reads it through tf.io.gfile, so gs:// works; the early check
(trainer/settings/early_check.py) reads a local one with plain Python, before TensorFlow loads.
Both give the same one-line refusals.

    .venv/bin/python -c "from trainer.settings import config_file; print(config_file.read_config_file('config.yaml'))"
"""
import os

import yaml

from trainer.settings.checks import ConfigError


class LocalFiles:
    """The three file calls read_config_file makes, for a local path (tf.io.gfile's names)."""
    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)
    GFile = staticmethod(open)


def read_config_file(path, files=LocalFiles):
    """The settings in the YAML file at path; files: LocalFiles, or tf.io.gfile for gs://."""
    if not files.exists(path):
        raise ConfigError(f"--config {path}: no such file")
    if files.isdir(path):
        raise ConfigError(f"--config {path} is a directory: pass a YAML file of settings")
    with files.GFile(path) as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as err:
            problem = str(err).replace("\n", " ")
            raise ConfigError(f"--config {path}: not valid YAML ({problem})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    return values
