"""The chain that turns the table, a saved run, a config file and flags into one checked params dict.

    table defaults -> OUT/params.json of an earlier run (if any) -> --config FILE.yaml
                   -> flags the user typed -> every value checked (checks.py)
                   -> values read from the dataset, judged against the settings -> params

Nothing is written until the whole chain has passed: a bad value from any source stops
the run with one line naming the setting, the value, what is allowed and where the
value came from. The result is written to OUT/params.json beside the checkpoints (by
the engine, once its run starts) and passed as ``params`` to TPUEstimator;
model_fn, input_fn and serving_input_fn read nothing else.

    .venv/bin/python -m trainer.chain --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir /tmp/out   # print the resolved params
"""
import json
import logging
import sys

import tensorflow as tf

from common import gcs_probe
from trainer.cloud import hptuning
from trainer.data import byo_records, dataset_info
from trainer.run import params_file
from trainer.settings import checks, flags, saved_run
from trainer.settings import config_file as config_file_reader

# The settings that name files a run reads or writes (output_dir and --config are probed first).
GCS_PATH_SETTINGS = ("train_data_path", "eval_data_path", "warm_start_from", "hub_module",
                     "predict_input", "predict_export_dir", "predict_output_dir")


def resolve(flag_values, config_file=None):
    """Runs the chain; flag_values holds only the flags the user typed."""
    output_dir = flag_values.get("output_dir")
    if output_dir:  # a hyperparameter-tuning trial writes to OUT/<trial id> (trainer/cloud/hptuning.py)
        output_dir = hptuning.trial_output_dir(output_dir)
        flag_values = dict(flag_values, output_dir=output_dir)
    reachable = set()  # buckets checked: gs:// without network or credentials is one line at once
    gcs_probe.check_readable(output_dir, "output_dir", reachable)
    gcs_probe.check_readable(config_file, "--config", reachable)
    saved = params_file.read_saved_params(output_dir)
    config_values = config_file_reader.read_config_file(config_file, tf.io.gfile) if config_file else {}
    params, sources = checks.merge_layers(saved, saved_run.source(output_dir), config_values,
                                          f"--config {config_file}", flag_values)
    checks.check_params(params, sources)
    params_file.check_is_not_a_file(params["predict_output_dir"], "predict_output_dir")
    for key in GCS_PATH_SETTINGS:
        gcs_probe.check_readable(params[key], key, reachable)
    record_counts = byo_records.RecordCounts(output_dir) if output_dir else None
    params = dataset_info.add_dataset_info(params, typed=set(config_values) | set(flag_values),
                                           record_counts=record_counts)
    params = fit_to_data(params)
    if output_dir:
        params_file.check_same_run(saved, params)
        params_file.check_eval_loss_compares(saved, params)
        record_counts.save()  # the first write of the run: every check has passed
    return params


def fit_to_data(params):
    """Settings judged against the dataset now that its sizes are known (still nothing written)."""
    eval_size = params.get("num_eval_examples") or 0
    if params["eval_data_path"] and 0 < eval_size < params["num_warmup_images"]:
        logging.getLogger(__name__).warning(
            "num_warmup_images=%d is more than the eval split holds: the export's warm-up "
            "file gets its %d images", params["num_warmup_images"], eval_size)
        params = dict(params, num_warmup_images=eval_size)
    return params


def parse_params(argv):
    """The resolved, checked params for command-line arguments argv (without the program)."""
    flag_values, config_file = flags.parse_flags(argv)
    return resolve(flag_values, config_file)


if __name__ == "__main__":
    print(json.dumps(parse_params(sys.argv[1:]), indent=2, sort_keys=True))
