"""TensorBoard's HParams view of a run: its settings beside its evaluation metrics.

Written once per training command into OUT (the run TensorBoard shows as "."), with the
eval metrics TensorBoard finds under OUT/eval, so several runs side by side
(tensorboard --logdir runs/) compare settings against accuracy.

    .venv/bin/tensorboard --logdir OUT      # the HPARAMS tab
"""
import tensorflow as tf
from tensorboard.plugins.hparams import api as hp

# Settings a person varies between runs (strings, numbers, booleans of trainer/settings/table.py).
HPARAM_TYPES = (bool, int, float, str)
EVAL_METRICS = ("accuracy", "loss", "mean_per_class_accuracy")


def hparam_values(params):
    """The params keys a run compares by: every scalar setting but paths and the mode."""
    skipped = ("train_data_path", "eval_data_path", "output_dir", "mode", "predict_input",
               "predict_output_dir", "predict_export_dir", "warm_start_from", "hub_module")
    return {key: value for key, value in sorted(params.items())
            if isinstance(value, HPARAM_TYPES) and key not in skipped}


def write_hparams(params):
    """Writes the HParams config and this run's values as a summary in params["output_dir"]."""
    values = hparam_values(params)
    with tf.summary.create_file_writer(params["output_dir"]).as_default():
        hp.hparams_config(hparams=[hp.HParam(key) for key in values],
                          metrics=[hp.Metric(name, group="eval") for name in EVAL_METRICS])
        hp.hparams(values, trial_id=params["output_dir"])
