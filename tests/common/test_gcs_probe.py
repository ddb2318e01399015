"""gs:// without network or credentials is one line at once (common/gcs_probe.py): through the real
trainer command, through its params chain in this process, and the probe against the tests'
GCS emulator.

    .venv/bin/python -m pytest tests/common/test_gcs_probe.py
"""
import socket
import time

import pytest

from common import gcs_probe
from tests import user_commands


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def no_credentials(tmp_path):
    """No credentials of this machine's user, no metadata server (a closed local port)."""
    dead = f"127.0.0.1:{closed_port()}"
    return dict(HOME=tmp_path, CLOUDSDK_CONFIG=tmp_path / "gcloud", GCE_METADATA_HOST=dead,
                GCE_METADATA_IP=dead)


GS_ARGV = ["--train_data_path", "gs://photos/data/train-*", "--eval_data_path", "gs://photos/data/eval-*"]


def test_an_unreachable_storage_endpoint_is_refused_naming_the_path(tmp_path, monkeypatch):
    """The params chain (trainer.task's, before anything is written) in this process."""
    from trainer import chain
    for name, value in no_credentials(tmp_path).items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    with pytest.raises(gcs_probe.GcsUnreachable) as refused:
        chain.parse_params([*GS_ARGV, "--output_dir", str(tmp_path / "out")])
    assert str(refused.value).startswith("train_data_path='gs://photos/data/train-*': cannot reach "
                                         "Cloud Storage within 15 s (no network?)")
    assert time.monotonic() - start < 60  # not minutes of retries
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_no_credentials_is_one_line_with_the_login_command(tmp_path):
    """Before TensorFlow loads (trainer/settings/early_check.py): here it could not load it."""
    env = user_commands.user_env(drop=("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"),
                                 without_tensorflow=True, **no_credentials(tmp_path))
    start = time.monotonic()
    result = user_commands.run_trainer(*GS_ARGV, "--output_dir", "gs://photos/run", env=env,
                                       timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == (
        "error: output_dir='gs://photos/run': no Google Cloud credentials on this machine: run "
        "`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)")
    assert time.monotonic() - start < 60


@pytest.mark.process  # gcs_bucket: the emulator's server
def test_the_probe_passes_a_bucket_the_emulator_has_and_names_one_it_has_not(gcs_bucket):
    checked = set()
    gcs_probe.check_readable(f"gs://{gcs_bucket.name}/data/train-*", "train_data_path", checked)
    assert checked == {gcs_bucket.name}
    with pytest.raises(gcs_probe.GcsUnreachable,
                       match=r"^eval_data_path='gs://no-such-bucket-x/eval-\*': no bucket named "
                             r"'no-such-bucket-x'"):
        gcs_probe.check_readable("gs://no-such-bucket-x/eval-*", "eval_data_path")


@pytest.mark.parametrize("path, expected", [
    ("gs://b/data/train-*", ("b", "data/train-")),
    ("gs://b/data/train-0000[0-3]", ("b", "data/train-0000")),
    ("gs://b", ("b", "")),
])
def test_the_listing_prefix_stops_at_the_first_glob_character(path, expected):
    assert gcs_probe.split_gcs_path(path) == expected
