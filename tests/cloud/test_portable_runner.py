"""Both Beam pipelines are portable: a Beam job service runs them as a Flink or Spark cluster would.

Beam's own Python job service (python -m apache_beam.runners.portability.local_job_service_main,
offline) receives each real command's pipeline through the portable Job API
(--runner PortableRunner --job_endpoint localhost:P), the same API FlinkRunner's job server
speaks; the SDK workers run in this test's process (--environment_type LOOPBACK). Preprocessing
must write the same files, byte for byte, and batch prediction the same predictions as with
the default runner. The FlinkRunner route itself: docs/cloud.md "Beam beyond Dataflow".

    .venv/bin/python -m pytest tests/cloud/test_portable_runner.py
"""
import json
import os
import pathlib
from importlib import metadata
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from apache_beam.options.pipeline_options import FlinkRunnerOptions, SetupOptions

from common import beam_pipeline
from preprocess import jpeg_to_tfrecord, output_dir
from serving import batch_predict
from tests.conftest import LABELS, NUM_GOOD_IMAGES, free_port, make_jpeg_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 90  # the job service imports Beam first (a few seconds here)
# The Flink versions each pinned Beam's FlinkRunner accepts (2.72: requirements.lock, 2.77:
# the Keras environment's locks); docs/cloud.md's table lists the same.
FLINK_VERSIONS_OF_BEAM = {"2.72.0": ["1.17", "1.18", "1.19", "1.20"],
                          "2.77.0": ["1.19", "1.20", "2.0", "2.1", "2.2"]}
BEAM_VERSION = metadata.version("apache-beam")
FLINK_VERSIONS = FLINK_VERSIONS_OF_BEAM[BEAM_VERSION]


def wait_for_port(port, process, log_path):
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the job service exited ({process.returncode}): "
                        f"{log_path.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the job service did not listen on {port} in {STARTUP_SECONDS} s")


@pytest.fixture(scope="module")
def job_service(tmp_path_factory):
    """localhost:PORT of a Beam job service in its own process, stopped after the module."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("job_service") / "job_service.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore"))
    try:
        wait_for_port(port, process, log_path)
        yield f"localhost:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def runners_used(monkeypatch):
    """The module of each pipeline result, in order: which runner really ran each command."""
    seen, run = [], beam_pipeline.run_to_completion

    def run_and_record(build, options):
        result = run(build, options)
        seen.append(type(result).__module__.rsplit(".", 1)[-1])
        return result
    monkeypatch.setattr(beam_pipeline, "run_to_completion", run_and_record)
    return seen


def portable_flags(endpoint):
    return ["--runner", "PortableRunner", "--job_endpoint", endpoint,
            "--environment_type", "LOOPBACK"]


@pytest.fixture
def labelled_csvs(tmp_path):
    """train/eval CSVs of labelled JPEGs, with one corrupt and one missing file among them."""
    rows = []
    for i in range(8):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(make_jpeg_bytes(50 + i, size=18 + i))
        rows.append(f"{path},{LABELS[i % 2]}")
    (tmp_path / "corrupt.jpg").write_bytes(b"not a JPEG")
    rows[2:2] = [f"{tmp_path}/corrupt.jpg,{LABELS[0]}", f"{tmp_path}/missing.jpg,{LABELS[1]}"]
    (tmp_path / "train.csv").write_text("\n".join(rows[:7]) + "\n")
    (tmp_path / "eval.csv").write_text("\n".join(rows[7:]) + "\n")
    return ["--input_csv", f"train={tmp_path}/train.csv", "--input_csv", f"eval={tmp_path}/eval.csv"]


def files_by_name(folder):
    """The dataset's files; not the run's lock file, which records its pid and start time."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())
            if path.name != output_dir.LOCK_FILE}


@pytest.mark.process
def test_preprocessing_through_the_job_service_writes_the_same_files(job_service, labelled_csvs,
                                                                     runners_used, tmp_path):
    local = jpeg_to_tfrecord.run(labelled_csvs + ["--output_dir", str(tmp_path / "local")])
    portable = jpeg_to_tfrecord.run(labelled_csvs + ["--output_dir", str(tmp_path / "portable")]
                                    + portable_flags(job_service))
    assert (local["rejected_total"], local["splits"]["train"]["records"],
            local["splits"]["eval"]["records"]) == (2, 5, 3)
    assert runners_used == ["fn_runner", "portable_runner"]
    assert portable == local
    written = files_by_name(tmp_path / "local")
    assert {"labels.txt", "metadata.json"} <= set(written)
    assert any(name.startswith("train-") for name in written)
    assert files_by_name(tmp_path / "portable") == written  # every shard, byte for byte


def read_predictions(prefix):
    records = [json.loads(line) for path in sorted(prefix.parent.glob(f"{prefix.name}-*.jsonl"))
               for line in path.read_text().splitlines()]
    return sorted(records, key=lambda record: record["uri"])


@pytest.mark.trains
def test_batch_prediction_through_the_job_service_predicts_the_same(job_service, trained_run,
                                                                    input_csv, runners_used,
                                                                    tmp_path):
    argv = ["--input_csv", str(input_csv), "--model_dir", str(trained_run[1])]
    batch_predict.run(argv + ["--output", str(tmp_path / "local" / "predictions")])
    batch_predict.run(argv + ["--output", str(tmp_path / "portable" / "predictions")]
                      + portable_flags(job_service))
    assert runners_used == ["fn_runner", "portable_runner"]
    local = read_predictions(tmp_path / "local" / "predictions")
    portable = read_predictions(tmp_path / "portable" / "predictions")
    assert len(local) == NUM_GOOD_IMAGES + 3 and sum("error" in r for r in local) == 3
    assert [r["uri"] for r in portable] == [r["uri"] for r in local]
    for ours, theirs in zip(portable, local):
        assert ours.get("error") == theirs.get("error") and ours.get("class") == theirs.get("class")
        assert [c["class"] for c in ours.get("top_k", [])] == [c["class"] for c in theirs.get("top_k", [])]
        np.testing.assert_allclose([c["probability"] for c in ours.get("top_k", [])],
                                   [c["probability"] for c in theirs.get("top_k", [])], atol=1e-6)


@pytest.mark.parametrize("environment, staged", [
    (["--environment_type", "LOOPBACK"], False),  # the workers are this process
    (["--environment_type", "EXTERNAL", "--environment_config", "localhost:50000"], True),
])
def test_setup_py_is_staged_only_for_workers_elsewhere(environment, staged):
    options = beam_pipeline.build_pipeline_options(["--runner", "PortableRunner"] + environment)
    setup_file = options.view_as(SetupOptions).setup_file
    assert setup_file == (beam_pipeline.PROJECT_SETUP_FILE if staged else None)


def test_the_documented_flink_flags_pass_the_entry_points_check():
    flags = ["--runner", "FlinkRunner", "--flink_master", "flink-jobmanager:8081",
             "--flink_version", FLINK_VERSIONS[-1], "--flink_job_server_jar",
             "/opt/beam/beam-runners-flink-1.20-job-server-2.72.0.jar",
             "--environment_type", "EXTERNAL", "--environment_config", "localhost:50000",
             "--parallelism", "4"]
    beam_pipeline.check_pipeline_flags(flags, ["--input_csv", "--output_dir"])  # no error
    assert FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS == FLINK_VERSIONS
    row = f"| {BEAM_VERSION} | {', '.join(FLINK_VERSIONS)} "
    assert row in (ROOT / "docs/cloud.md").read_text()
