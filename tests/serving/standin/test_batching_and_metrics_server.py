"""A stand-in with --enable_batching and Prometheus metrics, over REST and gRPC.

    .venv/bin/python -m pytest tests/serving/standin/test_batching_and_metrics_server.py
"""
import concurrent.futures
import http.client
import threading
import urllib.request

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serving.grpc_client import GrpcClient
from serving.rest_client import RestClient, ServerError
from serving.standin import config_files, served_version, server

METRICS_PATH = "/monitoring/prometheus/metrics"
CLIENTS = 8


@pytest.fixture(scope="module")
def batching_server(tiny_export_base):
    """Batches of up to 8 rows, padded to 4 or 8; a batch waits up to 1 s to fill."""
    options = config_files.BatchingOptions(max_batch_size=8, batch_timeout_micros=1_000_000,
                                           num_batch_threads=1, allowed_batch_sizes=(4, 8))
    running = server.start_server("image_classifier", str(tiny_export_base), batching=options,
                                  prometheus_path=METRICS_PATH, enable_warmup=False)
    yield running
    running.stop()


def scrape(running, path=METRICS_PATH):
    """{metric family name: family} from the metrics page, via prometheus_client's parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{running.rest_port}{path}", timeout=30) as page:
        assert page.headers["Content-Type"] == "text/plain"
        return {f.name: f for f in text_string_to_metric_families(page.read().decode())}


def sample_value(families, name, **labels):
    """The value of the sample of family `name` whose labels include `labels` (0 if none)."""
    family = families.get(name)
    return sum(s.value for s in (family.samples if family else [])
               if all(s.labels.get(k) == v for k, v in labels.items())
               and not s.name.endswith(("_bucket", "_sum")))


def send_together(make_client, jpegs):
    """One batch-1 request per JPEG, all released at once; the probabilities in order."""
    barrier = threading.Barrier(len(jpegs))

    def send(jpeg):
        client = make_client()
        try:
            barrier.wait()
            return client.predict([jpeg])["probabilities"][0]
        finally:
            client.close()
    with concurrent.futures.ThreadPoolExecutor(len(jpegs)) as pool:
        return np.array(list(pool.map(send, jpegs)))


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_concurrent_requests_share_one_model_call(batching_server, tiny_export_base, sample_jpegs,
                                                  transport):
    """Eight batch-1 requests arrive within the timeout: one merged call (the batch is full),
    and each request gets exactly its own row, as an unbatched call computes it."""
    def make_client():
        if transport == "rest":
            return RestClient(f"http://127.0.0.1:{batching_server.rest_port}", "image_classifier")
        return GrpcClient(f"127.0.0.1:{batching_server.grpc_port}", "image_classifier")
    name = ":tensorflow:serving:batching_session:wrapped_run_count"
    before = sample_value(scrape(batching_server), name)
    batched = send_together(make_client, sample_jpegs[:CLIENTS])
    assert sample_value(scrape(batching_server), name) - before == 1
    direct = served_version.ServedVersion("image_classifier", 1, str(tiny_export_base / "1"))
    np.testing.assert_allclose(batched, direct.predict("", {"image_bytes": sample_jpegs[:CLIENTS]})[
        "probabilities"], atol=1e-6)


def test_a_batch_padded_to_an_allowed_size_returns_only_real_rows(batching_server, sample_jpegs):
    client = RestClient(f"http://127.0.0.1:{batching_server.rest_port}", "image_classifier")
    outputs = client.predict(sample_jpegs[:3])  # one request of 3 rows: padded to 4, cut to 3
    client.close()
    assert outputs["probabilities"].shape == (3, 3) and len(outputs["classes"]) == 3


def test_request_metrics_count_by_model_and_status(batching_server, sample_jpegs):
    rest = RestClient(f"http://127.0.0.1:{batching_server.rest_port}", "image_classifier")
    missing = RestClient(f"http://127.0.0.1:{batching_server.rest_port}", "missing")
    before = scrape(batching_server)
    rest.predict(sample_jpegs[:1])
    with pytest.raises(ServerError):
        rest.predict([b"not a jpeg"])
    with pytest.raises(ServerError):
        missing.predict(sample_jpegs[:1])
    rest.close()
    missing.close()
    after = scrape(batching_server)
    count = ":tensorflow:serving:request_count"
    deltas = {(model, status): sample_value(after, count, model_name=model, status=status) -
              sample_value(before, count, model_name=model, status=status)
              for model, status in (("image_classifier", "OK"),
                                    ("image_classifier", "INVALID_ARGUMENT"), ("missing", "NOT_FOUND"))}
    assert deltas == {("image_classifier", "OK"): 1, ("image_classifier", "INVALID_ARGUMENT"): 1,
                      ("missing", "NOT_FOUND"): 1}
    latency = ":tensorflow:serving:request_latency"
    assert sample_value(after, latency, model_name="image_classifier", API="predict",
                        entrypoint="REST") >= 1  # the _count sample: successes only


def test_other_paths_are_not_the_metrics_page(batching_server):
    connection = http.client.HTTPConnection("127.0.0.1", batching_server.rest_port, timeout=30)
    connection.request("GET", "/monitoring/prometheus/other")
    assert connection.getresponse().status == 404
    connection.close()


def test_a_full_queue_is_503_and_unavailable(tiny_export_base, sample_jpegs, monkeypatch):
    """The model call is held, so one batch runs and one waits: the next request finds the
    queue full (max_enqueued_batches=1) and gets TF Serving's UNAVAILABLE / HTTP 503."""
    release, started = threading.Event(), threading.Event()
    original = served_version.ServedVersion.run_signature

    def held(self, name, tensors):
        started.set()
        release.wait(30)
        return original(self, name, tensors)
    monkeypatch.setattr(served_version.ServedVersion, "run_signature", held)
    options = config_files.BatchingOptions(max_batch_size=1, max_enqueued_batches=1,
                                           num_batch_threads=1)
    running = server.start_server("image_classifier", str(tiny_export_base), batching=options,
                                  enable_warmup=False)
    rest = RestClient(f"http://127.0.0.1:{running.rest_port}", "image_classifier")
    grpc_client = GrpcClient(f"127.0.0.1:{running.grpc_port}", "image_classifier")
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            running_one = pool.submit(GrpcClient(f"127.0.0.1:{running.grpc_port}",
                                                 "image_classifier").predict, sample_jpegs[:1])
            assert started.wait(30)
            waiting_one = pool.submit(GrpcClient(f"127.0.0.1:{running.grpc_port}",
                                                 "image_classifier").predict, sample_jpegs[:1])
            while not running.core.scheduler._queues:  # noqa: SLF001 - until it is queued
                threading.Event().wait(0.01)
            with pytest.raises(ServerError, match="queue to which this task was submitted is full") as over_rest:
                rest.predict(sample_jpegs[:1])
            with pytest.raises(ServerError) as over_grpc:
                grpc_client.predict(sample_jpegs[:1])
            release.set()
            assert running_one.result(30)["probabilities"].shape == (1, 3)
            assert waiting_one.result(30)["probabilities"].shape == (1, 3)
        assert over_rest.value.status == 503
        assert over_grpc.value.status == grpc.StatusCode.UNAVAILABLE
    finally:
        release.set()
        rest.close()
        grpc_client.close()
        running.stop()
