"""trainer.task --mode predict under its output's lock (trainer/settings/early_check.py held_output):
the real command refused in one line while another run holds OUT/predictions.lock, and the
whole route into a gs:// --predict_output_dir on the suite's GCS emulator (files through Beam's
FileSystems, prediction_records.FileOps, which reach it; tf.io.gfile cannot).

    .venv/bin/python -m pytest tests/trainer/test_predict_lock.py
"""
import json
import os
import socket

import pytest

from common import output_lock, prediction_records
from tests import user_commands
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)
from tests.serving.test_batch_predict_inputs import trainer_argv
from tests.serving.test_batch_predict_routes import run_trainer_predict

HOLDER = f"pid {os.getpid()} on {socket.gethostname()} since "


@pytest.mark.process
@pytest.mark.trains
def test_a_held_output_refuses_the_command_at_once_writing_nothing(trained_run, input_csv, tmp_path):
    """Held by a Beam job with --output OUT/predictions: the same files, the same lock. Refused
    before TensorFlow loads (trainer/settings/early_check.py): here it could not load it."""
    out = tmp_path / "preds"
    out.mkdir()
    with prediction_records.hold_prefix(f"{out}/predictions", "--output", f"{out}/predictions"):
        result = user_commands.run_trainer(*trainer_argv(trained_run[0], input_csv, out),
                                           env=user_commands.user_env(without_tensorflow=True))
        assert os.listdir(out) == ["predictions.lock"]  # the holder's
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(
        f"error: --predict_output_dir {out} is in use by another batch prediction ({HOLDER}")
    assert lines[0].endswith("): wait for it to end, or use another --predict_output_dir")
    assert os.listdir(out) == []


@pytest.mark.process  # gcs_bucket: the emulator's server
@pytest.mark.trains
@pytest.mark.usefixtures("bucket")
def test_gcs_predict_output_dir_is_published_whole_under_its_lock(trained_run, input_csv,
                                                                  gcs_bucket):
    preds = f"gs://{gcs_bucket.name}/preds"
    gcs_bucket.blob("preds/summary.json").upload_from_string('{"images": 99}')
    gcs_bucket.blob("preds/predictions-00000-of-00003.jsonl").upload_from_string('{"uri": "old"}\n')
    with prediction_records.hold_prefix(f"{preds}/predictions", "--output", f"{preds}/predictions"):
        with pytest.raises(output_lock.OutputBusy, match=(
                f"--predict_output_dir {preds} is in use by another batch prediction .* if that "
                f"run is gone \\(killed\\), delete {preds}/predictions.lock")):
            run_trainer_predict(trained_run[0], input_csv, preds)
    summary = run_trainer_predict(trained_run[0], input_csv, preds)
    names = sorted(blob.name for blob in gcs_bucket.list_blobs())
    assert names == ["preds/predictions-00000-of-00001.jsonl", "preds/summary.json"]
    lines = gcs_bucket.blob(names[0]).download_as_bytes().decode().splitlines()
    assert len(lines) == 14 and all(json.loads(line)["uri"] != "old" for line in lines)
    published = json.loads(gcs_bucket.blob("preds/summary.json").download_as_bytes())
    assert (published["images"], published["predicted"]) == (14, 11)
    assert summary["output_dir"] == preds and summary["predicted"] == 11
