"""The settings' own checks before TensorFlow loads, so a typo'd value answers in well under a second.

The chain (trainer/chain.py) checks everything again once TensorFlow has loaded; this early
pass judges the same values by the same rules (checks.check_params) whenever it can see them
all without TensorFlow: a local --output_dir (and its params.json of an earlier run, a damaged
one refused as the chain refuses it) and a local (or no) --config file. Otherwise (gs://) it
leaves the judgement to the chain. A resume whose settings differ from the run whose checkpoints
the local OUT holds is refused here by the chain's rules (saved_run's check_same_run and
check_eval_loss_compares), but for what the dataset decides. A predict run is refused here too
when its local output is held by another run or its local --predict_export_dir is not an export:
the same functions decide again in the run (trainer/run/predictions.py), for gs:// too. So is
--use_tpu where no TPU is named and this machine is not a TPU VM, or --tpu local where it has no
TPU chips: that is decided here, by the environment and the device files alone (tpu_name,
check_local_chips), for this check and for the run's (trainer/cloud/tpu.py). The engine those
values name is judged by the run's own check_engine (trainer/task.py hands it in): an engine
whose packages this environment lacks (the Estimator in .venv-keras) is refused here. Of a gs://
--output_dir or --config only one thing is judged here: whether this machine has Google Cloud
credentials at all (common/gcs_probe.py's check_credentials, which the chain's probe asks too).

    .venv/bin/python -m trainer.task --learning_rate nan --output_dir /tmp/o   # one line, exit 2
"""
import glob
import logging
import os

from common import export_versions, gcs_probe, prediction_records
from trainer.settings import checks, config_file, saved_run, table

LOCAL_TPU = "local"  # --tpu local: this TPU VM's own chips
# A TPU VM's chips as the kernel shows them: accel devices (v2-v4), VFIO groups (v5e, v5p, v6e).
LOCAL_DEVICE_PATTERNS = ("/dev/accel*", "/dev/vfio/[0-9]*")
# Set by Cloud TPU jobs and GKE; TensorFlow's resolver reads them when --tpu is unset.
NAME_ENVIRONMENT = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG")
NO_TPU_FIX = "or train on this machine's CPU/GPU with --no-use_tpu"
# What the dataset decides (labels.txt: the labels and their count), not known before TensorFlow
# loads: a resume's change of them is judged by the chain once it has read the dataset.
READ_FROM_THE_DATASET = table.DATASET_KEYS + ("num_classes",)
_LOGGER = logging.getLogger(__name__)


class TpuNotFound(checks.ConfigError):
    """--use_tpu, and the TPU it names cannot be reached from here."""


def is_remote(path):
    return bool(path) and "://" in str(path)


def check_before_tensorflow(flag_values, config_path, output_dir, check_engine):
    """Raises the chain's ConfigError for a bad typed or --config value, a damaged or bad
    params.json of an earlier run or a resume with other settings, where the chain would see
    exactly these values (all of them local), then check_engine's refusal of the engine they
    name (the run's own: trainer/task.py, which this room may not import), the run's TpuNotFound
    for --use_tpu with no TPU to name or --tpu local without chips, and the chain's
    GcsUnreachable for a gs:// OUT or --config on a machine without Google Cloud credentials;
    else returns None. output_dir: the run's, as the chain resolves it (a tuning trial's
    subdirectory)."""
    for path, what in ((output_dir, "output_dir"), (config_path, "--config")):
        gcs_probe.check_credentials(path, what)  # gs:// with no credentials: the chain's first refusal
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
    check_resume(saved, params)
    check_engine(params["engine"])  # the run asks it as it loads the engine, before the driver's checks
    if params["use_tpu"]:
        check_local_chips(tpu_name(params))  # the driver's first checks: no TPU named, no chips here
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


def check_resume(saved, params):
    """The chain's refusals of a resume with other settings than the run whose checkpoints the
    local OUT holds (saved_run's rules; its checkpoints listed here by their files), for every
    setting but those the dataset decides."""
    saved_run.check_same_run(saved, params, list_local_checkpoints, skip=READ_FROM_THE_DATASET)
    saved_run.check_eval_loss_compares(saved, params, list_local_checkpoints)


def list_local_checkpoints(output_dir):
    """[(step, prefix)] of a local OUT's checkpoints (saved_run.checkpoints_among its files); []
    when it cannot be listed here, which leaves the judgement to the chain."""
    try:
        names = os.listdir(output_dir)
    except OSError:
        return []
    return saved_run.checkpoints_among(os.path.join(output_dir, name) for name in names)


def check_predict_places(params):
    """Refuses a predict run, as the run itself would, when its local output is held by another
    run (OutputBusy, probed as serving.batch_predict probes its --output:
    prediction_records.check_prefix_free) or its local --predict_export_dir is not an export
    (ExportNotFound). gs:// is left to the run."""
    output_dir = table.predict_output_dir(params)  # its default, OUT/predictions, named as if typed
    prediction_records.check_prefix_free(prediction_records.prediction_prefix(output_dir),
                                         "--predict_output_dir", output_dir)
    export_dir = params["predict_export_dir"]
    if export_dir and not is_remote(export_dir):
        export_versions.resolve_export_dir(export_dir)


def held_output(params):
    """OUT/predictions.lock of a predict run's output directory (table.predict_output_dir): held
    by the run from before any image is read or the model loads, and probed by the early check,
    so that a second predict run there (or a Beam job with --output OUT/predictions) is refused
    at once."""
    output_dir = table.predict_output_dir(params)  # its default, OUT/predictions, named as if typed
    return prediction_records.hold_prefix(prediction_records.prediction_prefix(output_dir),
                                          "--predict_output_dir", output_dir)


def local_tpu_devices():
    """This host's TPU chip devices ([] off a TPU VM): device files, which are always local."""
    return sorted(path for pattern in LOCAL_DEVICE_PATTERNS for path in glob.glob(pattern))


def tpu_name(params):
    """The TPU the resolver is given (trainer/cloud/tpu.py): --tpu; unset, None when the
    environment names one (the resolver reads it), 'local' on a TPU VM; TpuNotFound when
    nothing names a TPU. No TensorFlow: the early check asks it too."""
    if params["tpu"]:
        return params["tpu"]
    if os.environ.get("TPU_NAME") == LOCAL_TPU:
        return LOCAL_TPU
    if any(os.environ.get(key) for key in NAME_ENVIRONMENT):
        return None
    if local_tpu_devices():
        _LOGGER.info("use_tpu without --tpu on a TPU VM: using its own chips (--tpu local)")
        return LOCAL_TPU
    raise TpuNotFound(f"use_tpu: no TPU named and this machine is not a TPU VM (no "
                      f"{' or '.join(LOCAL_DEVICE_PATTERNS)}, no $TPU_NAME): pass --tpu NAME (a Cloud "
                      f"TPU, with --tpu_zone and --gcp_project off Google Cloud), --tpu grpc://IP:8470, "
                      f"or run on the TPU VM; {NO_TPU_FIX}")


def check_local_chips(name):
    """TpuNotFound when the TPU named is 'local' (this TPU VM's chips) and this machine has none;
    else returns None. Device files only, no TensorFlow: the early check asks it too, before the
    run's (trainer/cloud/tpu.py's check_reachable)."""
    if name == LOCAL_TPU and not local_tpu_devices():
        raise TpuNotFound(f"use_tpu: --tpu local needs this machine's TPU chips (a Cloud TPU VM) "
                          f"and it has none ({' or '.join(LOCAL_DEVICE_PATTERNS)}): run on the "
                          f"TPU VM, or pass --tpu NAME of a Cloud TPU; {NO_TPU_FIX}")
