"""gs:// input and output through Beam's gcsio, against the suite's local GCS emulator
(fake-gcs-server on 127.0.0.1, tests/gcs_emulator.py); each test has a bucket of its own."""
import json
import os
import subprocess
import sys
import time

import pytest

from preprocess import jpeg_to_tfrecord
from tests.conftest import encode_image, free_port, pattern_image
from tests.preprocess.conftest import IN_PROCESS, read_split

pytestmark = [pytest.mark.process]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def bucket(gcs_bucket, monkeypatch):
    """This test's emulated bucket; Beam's gcsio connects anonymously (no credential lookup retries)."""
    from apache_beam.internal.gcp import auth
    monkeypatch.setattr(auth, "get_service_credentials", lambda options: None)
    return gcs_bucket


def test_gs_input_and_output_round_trip(bucket, tmp_path):
    from common import record_schema
    for i in range(6):
        data = encode_image(pattern_image(16, 20, seed=i), fmt="PNG" if i == 5 else "JPEG")
        bucket.blob(f"in/img/{i}.jpg").upload_from_string(data)
    lines = [f"gs://{bucket.name}/in/img/{i}.jpg,{'ab'[i % 2]}" for i in range(4)]
    bucket.blob("in/train.csv").upload_from_string("\n".join(lines) + "\n")
    # eval.csv: a relative path (resolved inside the bucket) and a missing object
    bucket.blob("in/eval.csv").upload_from_string("img/4.jpg,a\nimg/5.jpg,b\nimg/gone.jpg,a\n")
    out = f"gs://{bucket.name}/out"
    meta = jpeg_to_tfrecord.run(["--input_csv", f"train=gs://{bucket.name}/in/train.csv",
                                 "--input_csv", f"eval=gs://{bucket.name}/in/eval.csv",
                                 "--output_dir", out] + IN_PROCESS)
    assert {s: v["records"] for s, v in meta["splits"].items()} == {"train": 4, "eval": 2}
    assert meta["rejected"] == {"missing_file": 1} and meta["converted"] == {"format_png": 1}
    local = tmp_path / "out"
    local.mkdir()
    for blob in bucket.list_blobs(prefix="out/"):
        blob.download_to_filename(str(local / blob.name.split("/")[-1]))
    assert json.loads((local / "metadata.json").read_text()) == meta
    assert (local / "labels.txt").read_text() == "a\nb\n"
    filenames = sorted(r[record_schema.FILENAME].decode() for r in read_split(local, "eval"))
    assert filenames == [f"gs://{bucket.name}/in/img/4.jpg", f"gs://{bucket.name}/in/img/5.jpg"]
    letter = json.loads((local / "errors-00000-of-00001.jsonl").read_text())
    assert (letter["reason"], letter["source"]) == ("missing_file",
                                                    f"gs://{bucket.name}/in/img/gone.jpg")


def test_gs_glob_that_matches_nothing_is_an_error(bucket):
    with pytest.raises(ValueError, match=f"gs://{bucket.name}/nothing/\\*.csv matches no file"):
        jpeg_to_tfrecord.parse_config(["--input_csv", f"gs://{bucket.name}/nothing/*.csv",
                                       "--output_dir", f"gs://{bucket.name}/o"])


def test_gs_shard_from_one_piece_is_moved_and_from_several_is_joined(bucket):
    from preprocess import shards
    from tests.preprocess.test_transforms import parse_records
    pieces = [f"gs://{bucket.name}/tmp/piece{i}" for i in range(3)]
    for path, payloads in zip(pieces, [[b"a"], [b"bb", b"c"], [b"ddd"]]):
        shards.write_records(path, payloads)
    shards.assemble_shard(f"gs://{bucket.name}/shards/moved", pieces[:1])
    shards.assemble_shard(f"gs://{bucket.name}/shards/joined", pieces[1:])
    assert parse_records(bucket.blob("shards/moved").download_as_bytes()) == [b"a"]
    assert parse_records(bucket.blob("shards/joined").download_as_bytes()) == [
        b"bb", b"c", b"ddd"]
    assert not bucket.blob("tmp/piece0").exists() and bucket.blob("tmp/piece1").exists()


@pytest.mark.parametrize("flags", [
    ["--input_csv", "train=gs://photos-bucket/train.csv"],
    ["--input_dir", "gs://photos-bucket/photos"],
    ["--input_csv", "train={tmp}/train.csv", "--output_dir", "gs://photos-bucket/out"],
])
def test_gs_path_without_network_is_one_line_at_once(flags, tmp_path):
    """The real command with Cloud Storage unreachable (the client pointed at a closed local
    port): one line naming the path, the likely cause and the fix, exit 2, well within a
    minute (Beam's client alone retries for ~4 minutes, then prints a traceback)."""
    (tmp_path / "train.csv").write_text("a.jpg,cat\n")
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    if "--output_dir" not in flags:
        flags += ["--output_dir", str(tmp_path / "out")]
    env = dict(os.environ, STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{free_port()}")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "preprocess.jpeg_to_tfrecord", *flags],
                            capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert (result.returncode, time.monotonic() - start < 60) == (2, True), result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    flag, path = next((flag, value) for flag, value in zip(flags, flags[1:]) if "gs://" in value)
    assert lines[0].startswith(f"error: {flag}={path.partition('=')[2] or path!r}: cannot "
                               "reach Cloud Storage within 15 s (no network?)")
    assert "gcloud auth application-default login" in lines[0]
    assert not (tmp_path / "out").exists()
