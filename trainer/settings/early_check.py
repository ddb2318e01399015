"""The settings' own checks before TensorFlow loads, so a typo'd value answers in well under a second.

The chain (trainer/chain.py) checks everything again once TensorFlow has loaded; this early
pass judges the same values by the same rules (checks.check_params) whenever it can see them
all without TensorFlow: a local --output_dir (and its params.json of an earlier run, a damaged
one refused as the chain refuses it) and a local (or no) --config file. Otherwise (gs://) it
leaves the judgement to the chain. A predict run is refused here too when its local output is
held by another run or its local --predict_export_dir is not an export: the same functions
decide again in the run (trainer/run/predictions.py), for gs:// too.

    .venv/bin/python -m trainer.task --learning_rate nan --output_dir /tmp/o   # one line, exit 2
"""
import os

from common import export_versions, prediction_records
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
    flag_values = dict(flag_values, output_dir=output_dir)  # as the chain takes it
    params, sources = checks.merge_layers(saved, saved_run.source(output_dir), config_values,
                                          f"--config {config_path}", flag_values)
    checks.check_params(params, sources)
    if table.mode_reads(params).predicts:
        check_predict_places(params)


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


def check_predict_places(params):
    """Refuses a predict run, as the run itself would, when its local output is held by another
    run (OutputBusy) or its local --predict_export_dir is not an export (ExportNotFound). The
    lock is taken and let go at once, and only where its file is: without one no run holds it,
    and none is made. gs:// is left to the run."""
    output_dir = table.predict_output_dir(params)
    lock_file = prediction_records.prediction_prefix(output_dir) + prediction_records.LOCK_SUFFIX
    if not is_remote(output_dir) and is_file(lock_file):
        with held_output(params):
            pass
    export_dir = params["predict_export_dir"]
    if export_dir and not is_remote(export_dir):
        export_versions.resolve_export_dir(export_dir)


def is_file(path):
    try:
        with open(path, "rb"):
            return True
    except OSError:  # absent, a folder, below a file, no permission: no lock to probe here
        return False


def held_output(params):
    """OUT/predictions.lock of a predict run's output directory (table.predict_output_dir): held
    by the run from before any image is read or the model loads, and probed by the early check,
    so that a second predict run there (or a Beam job with --output OUT/predictions) is refused
    at once."""
    output_dir = table.predict_output_dir(params)  # its default, OUT/predictions, named as if typed
    return prediction_records.hold_prefix(prediction_records.prediction_prefix(output_dir),
                                          "--predict_output_dir", output_dir)
