"""Entry point: flags -> params (trainer/config.py) -> the loop (trainer/loop.py).

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT [--use_tpu --tpu NAME \\
        --tpu_zone Z --gcp_project P] [--config hparams.yaml] [--train_steps 1500 ...]

Every params key of trainer/config.py is a flag of the same name. Flags default
to "unset" and override only what the user typed. --job-dir (passed by AI
Platform) is another name for --output_dir, --format for --predict_format.
"""
import argparse
import logging
import sys

import tensorflow as tf

from trainer import cluster, config


def make_parser():
    """One flag per params key, all defaulting to None (= not typed)."""
    parser = argparse.ArgumentParser(
        description="Train, evaluate and export an image classifier with TPUEstimator.",
        argument_default=argparse.SUPPRESS)  # untyped flags stay out of the namespace
    parser.add_argument("--config", help="YAML file of params keys, applied before the flags")
    for key, default in config.DEFAULTS.items():
        names = [f"--{key}"]
        if key == "output_dir":
            names += ["--job-dir", "--job_dir"]
        if key == "predict_format":
            names += ["--format"]  # the same flag as serving.batch_predict --format
        help_text = f"default: {default!r} (see trainer/config.py)"
        if isinstance(default, bool):
            parser.add_argument(*names, dest=key, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(*names, dest=key, help=help_text)  # typed by config.coerce
    return parser


def parse_params(argv):
    """The resolved, validated params for command-line arguments argv (without the program)."""
    flag_values = vars(make_parser().parse_args(argv))
    config_file = flag_values.pop("config", None)
    return config.resolve(flag_values, config_file)


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # A library that logged on import (Beam does) has already configured the root logger
    # at WARNING, making basicConfig a no-op: INFO lines of the run would vanish.
    logging.getLogger().setLevel(logging.INFO)
    try:
        params = parse_params(sys.argv[1:] if argv is None else argv)
    except ValueError as err:  # ConfigError, DatasetError: a bad setting, named
        sys.exit(f"error: {err}")
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    tf.get_logger().propagate = False  # TF prints its own lines; the root handler would repeat them
    return cluster.run(params)  # loop.run, or this task's role of a TF_CONFIG cluster


if __name__ == "__main__":
    main()
