"""Entry point: flags -> params (trainer/settings/config.py) -> the loop (trainer/estimator/loop.py).

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT [--use_tpu --tpu NAME \\
        --tpu_zone Z --gcp_project P] [--config hparams.yaml] [--train_steps 1500 ...]

Every params key of trainer/settings/config.py is a flag of the same name. Flags default
to "unset" and override only what the user typed. --job-dir (passed by AI
Platform) is another name for --output_dir, --format for --predict_format.
"""
import sys

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once


from common.dataset_files import DatasetError  # noqa: E402
from common.export_predictor import ExportNotFound  # noqa: E402
from trainer.cloud import cluster  # noqa: E402
from trainer.settings import config
from trainer.run import output_lock, summary
from trainer.cloud.tf_config import ClusterError  # noqa: E402

# Raised by a run for what its user can fix.
USER_ERRORS = (config.ConfigError, DatasetError, ExportNotFound, output_lock.OutputDirBusy,
               ClusterError)


def main(argv=None):
    console.configure_logging(VERBOSITY)
    try:
        params = config.parse_params(sys.argv[1:] if argv is None else argv)
    except ValueError as err:  # ConfigError, DatasetError: a bad setting, named
        console.exit_with_error(err)
    try:
        result = cluster.run(params)  # loop.run, or this task's role of a TF_CONFIG cluster
    except USER_ERRORS as err:  # a busy output_dir, data that does not match its metadata
        console.exit_with_error(err)
    print(summary.summarize_run(params, result), flush=True)
    return result


if __name__ == "__main__":
    main()
