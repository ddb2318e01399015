"""Version pick-up, retry, fallback and status, warmup replay and a bounded loopback load test.

    .venv/bin/python -m pytest tests/serving/standin/test_versions_and_load.py
"""
import logging
import shutil
import time

import grpc
import pytest
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc
from tensorflow_serving.apis.get_model_status_pb2 import ModelVersionStatus

from bench import loadgen
from common import predict_protos

from serving.standin import server, served_version
from serving.grpc_client import GrpcClient
from tests.serving.conftest import wait_for
from serving.rest_client import RestClient, ServerError

LOAD_REQUESTS, LOAD_CLIENTS = 2000, 8  # the bound; loopback only
POLL_SECONDS = 0.05  # the stand-in's poll interval here: a change is picked up within ~0.1 s
STATUS_OK = {"error_code": "OK", "error_message": ""}




def version_states(status):
    """[(version, state)] of a REST GetModelStatus answer, in the server's order."""
    return [(line["version"], line["state"]) for line in status["model_version_status"]]


def grpc_version_states(client):
    """[(version, state name, error code name)] of a gRPC GetModelStatus answer, in order."""
    lines = client.status().model_version_status
    return [(line.version, ModelVersionStatus.State.Name(line.state),
             error_codes_pb2.Code.Name(line.status.error_code)) for line in lines]


def count_load_failures(caplog, version):
    return sum(record.levelno == logging.ERROR and
               f"version {version} at " in record.getMessage() and
               "failed to load" in record.getMessage() for record in caplog.records)


def predicted_version(running, jpegs):
    """The version the server says answered a gRPC Predict (response.model_spec.version)."""
    with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
        request = predict_protos.make_predict_request(jpegs, "image_classifier")
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=30)
    return response.model_spec.version.value


def test_server_picks_up_a_newer_version_and_skips_a_broken_one(tmp_path, sample_jpegs,
                                                                save_tiny_model):
    base = tmp_path / "image_classifier"
    running = server.start_server("image_classifier", str(base), poll_seconds=0.1)
    client = RestClient(f"http://127.0.0.1:{running.rest_port}", "image_classifier")
    try:
        with pytest.raises(ServerError, match="Could not find any versions of model image_classifier"):
            client.status()  # nothing exported yet: TF Serving's 404
        save_tiny_model(base / "tmp-1", seed=0, warmup_jpegs=sample_jpegs[:1])
        (base / "tmp-1").rename(base / "1")
        assert wait_for(lambda: running.core.refresh()["image_classifier"] is not None, 30)
        first = client.predict(sample_jpegs[:1])["probabilities"]
        (base / "3").mkdir()
        (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")  # fails to load
        save_tiny_model(base / "tmp-2", seed=1)
        (base / "tmp-2").rename(base / "2")  # as exporters do: the version appears whole
        assert wait_for(lambda: version_states(client.status()) == [
            ("3", "END"), ("2", "AVAILABLE"), ("1", "END")], 30)  # TF Serving's order: highest first
        second = client.predict(sample_jpegs[:1])["probabilities"]
        assert abs(first - second).max() > 1e-3  # different weights, so really the new model
        with pytest.raises(ServerError, match=r"Specific\(image_classifier, 1\)"):
            client.predict(sample_jpegs[:1], version=1)  # only the latest is served
    finally:
        client.close()
        running.stop()


def test_a_failed_version_is_retried_once_its_files_change(tmp_path, sample_jpegs,
                                                          save_tiny_model, caplog):
    """`cp -r` and `gsutil cp` land saved_model.pb before variables/: the first load fails,
    is listed in status with its error and logged once (not once per poll); the version
    loads when the rest of its files arrive."""
    base = tmp_path / "image_classifier"
    save_tiny_model(base / "1", seed=0)
    staged = save_tiny_model(tmp_path / "staging", seed=1)
    caplog.set_level(logging.INFO, logger="serving.standin.model_store")
    running = server.start_server("image_classifier", str(base), poll_seconds=POLL_SECONDS)
    client = RestClient(f"http://127.0.0.1:{running.rest_port}", "image_classifier")
    try:
        first = client.predict(sample_jpegs[:1])["probabilities"]
        (base / "2").mkdir()
        # The copy has begun: saved_model.pb lands whole (renamed in), so a poll never reads it
        # half-written, which failed it with another error first (a fresh clone's CI, ff72355).
        shutil.copy(staged / "saved_model.pb", tmp_path / "saved_model.pb")
        (tmp_path / "saved_model.pb").rename(base / "2" / "saved_model.pb")
        assert wait_for(lambda: version_states(client.status()) == [("2", "END"),
                                                                    ("1", "AVAILABLE")], 30)
        failed = client.status()["model_version_status"][0]["status"]
        assert failed["error_code"] == "NOT_FOUND"
        assert "variables" in failed["error_message"]
        time.sleep(10 * POLL_SECONDS)  # ten polls over unchanged files: no retry, no new line
        assert count_load_failures(caplog, 2) == 1
        assert predicted_version(running, sample_jpegs[:1]) == 1
        (staged / "variables").rename(base / "2" / "variables")  # the rest lands (whole, no race)
        assert wait_for(lambda: version_states(client.status()) == [("2", "AVAILABLE"),
                                                                    ("1", "END")], 30)
        assert client.status()["model_version_status"][0]["status"] == STATUS_OK
        assert predicted_version(running, sample_jpegs[:1]) == 2
        assert abs(client.predict(sample_jpegs[:1])["probabilities"] - first).max() > 1e-3
        assert count_load_failures(caplog, 2) == 1
    finally:
        client.close()
        running.stop()


def test_deleting_the_served_version_falls_back_and_reports_end(tmp_path, sample_jpegs,
                                                               save_tiny_model):
    """TF Serving serves the highest version present: deleting it serves the next one, and
    GetModelStatus (REST and gRPC) reports the deleted version END, a failed one END with
    its error."""
    base = tmp_path / "image_classifier"
    save_tiny_model(base / "1", seed=0)
    save_tiny_model(base / "2", seed=1)
    (base / "3").mkdir()
    (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
    running = server.start_server("image_classifier", str(base), poll_seconds=POLL_SECONDS)
    rest = RestClient(f"http://127.0.0.1:{running.rest_port}", "image_classifier")
    grpc_client = GrpcClient(f"127.0.0.1:{running.grpc_port}", "image_classifier", timeout=30)
    try:
        answer = rest.status()
        status = answer["model_version_status"]
        assert version_states(answer) == [("3", "END"), ("2", "AVAILABLE")]
        assert status[0]["status"]["error_code"] == "DATA_LOSS"
        assert "cannot parse" in status[0]["status"]["error_message"]
        assert predicted_version(running, sample_jpegs[:1]) == 2
        shutil.rmtree(base / "2")
        assert wait_for(lambda: version_states(rest.status()) == [
            ("3", "END"), ("2", "END"), ("1", "AVAILABLE")], 30)
        assert grpc_version_states(grpc_client) == [(3, "END", "DATA_LOSS"), (2, "END", "OK"),
                                                    (1, "AVAILABLE", "OK")]
        assert rest.status(version=2) == {"model_version_status": [
            {"version": "2", "state": "END", "status": STATUS_OK}]}
        assert predicted_version(running, sample_jpegs[:1]) == 1
        shutil.rmtree(base / "1")  # nothing loadable left: nothing served, all listed END
        assert wait_for(lambda: version_states(rest.status()) == [
            ("3", "END"), ("2", "END"), ("1", "END")], 30)
        with pytest.raises(ServerError, match=r"Latest\(image_classifier\)") as raised:
            rest.predict(sample_jpegs[:1])
        assert raised.value.status == 404
    finally:
        rest.close()
        grpc_client.close()
        running.stop()


def test_warmup_requests_are_replayed_on_load(tiny_export_base):
    served = served_version.ServedVersion("image_classifier", 1, str(tiny_export_base / "1"))
    assert served_version.warm_up(served) == 3  # two single images and their batch


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_bounded_load_completes_without_errors(standin, sample_jpegs, transport):
    requests = LOAD_REQUESTS if transport == "rest" else LOAD_REQUESTS // 4
    def make_client():
        if transport == "rest":
            return RestClient(f"http://127.0.0.1:{standin.rest_port}", "image_classifier", 30)
        return GrpcClient(f"127.0.0.1:{standin.grpc_port}", "image_classifier", 30)
    def check(outputs, batch):
        shape = outputs["probabilities"].shape
        return None if shape == (len(batch), 3) else f"probabilities shape {shape}"
    result = loadgen.run_load(make_client, [[j] for j in sample_jpegs], requests, LOAD_CLIENTS,
                              timeout=120, check=check)
    print(f"{transport} load on the stand-in: {result.summary()}")
    assert result.errors == []
    assert len(result.latencies) == requests


def test_the_flat_signature_call_answers_as_the_keyword_call(tiny_export_base, sample_jpegs):
    """served_version.call_signature (TF's flat call, for speed) gives the keyword call's outputs,
    and falls back to the keyword call on a function without the private method."""
    import numpy as np
    import tensorflow as tf

    from common import signature
    function = tf.saved_model.load(f"{tiny_export_base}/1").signatures[signature.SIGNATURE_DEFAULT]
    tensors = {signature.INPUT_IMAGE_BYTES: tf.constant(sample_jpegs[:3], dtype=tf.string)}
    expected = {k: v.numpy() for k, v in function(**tensors).items()}

    class KeywordOnly:
        def __call__(self, **kwargs):
            return function(**kwargs)
    for callee in (function, KeywordOnly()):
        outputs = served_version.call_signature(callee, tensors)
        assert set(outputs) == set(expected)
        for key, value in outputs.items():
            np.testing.assert_array_equal(value.numpy(), expected[key])
