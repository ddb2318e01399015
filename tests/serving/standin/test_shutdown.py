"""The stand-in's stop: every request received is answered, new ones are refused, exit code 0.

Requests are held in flight on purpose, never by a timing race: through the real command, a
batch that runs only once full, its last request's body sent after the signal; in this process,
model calls that wait for the test's release.

    .venv/bin/python -m pytest tests/serving/standin/test_shutdown.py
"""
import concurrent.futures
import http.client
import json
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import grpc
import pytest
from tensorflow_serving.apis import (get_model_status_pb2, model_service_pb2_grpc,
                                     prediction_service_pb2_grpc)

from common import predict_protos, signature
from serving.grpc_client import GrpcClient
from serving.rest_client import ServerError
from serving.standin import served_version, server
from tests.serving.conftest import LABELS, b64, rest_call, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODEL = "image_classifier"
MODEL_URL = f"/v1/models/{MODEL}"
PREDICT = f"{MODEL_URL}:predict"
HELD = 8  # requests of each protocol in flight when the signal comes


def is_refused(port):
    """True once nothing listens on the loopback port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def grpc_classes(port, jpegs, timeout=60):
    """The classes a Predict over a new connection answers; ServerError names a failure."""
    client = GrpcClient(f"127.0.0.1:{port}", MODEL, timeout=timeout)
    try:
        return [c.decode() for c in client.predict(jpegs)["classes"]]
    finally:
        client.close()


def rest_classes(port, jpegs):
    """The classes a :predict answers (its status must be 200)."""
    status, answer = rest_call(types.SimpleNamespace(rest_port=port), "POST", PREDICT,
                               {"instances": [b64(j) for j in jpegs]})
    assert status == 200, answer
    return [row["classes"] for row in answer["predictions"]]


# --- SIGTERM to the real command ----------------------------------------------------------------

def start_standin(base, tmp_path):
    """`python -m serving.standin.server` whose batches of 2 * HELD + 1 requests run only when
    full (their timeout: 10 minutes); (process, REST port, gRPC port) once it serves."""
    batching = tmp_path / "batching.txt"
    batching.write_text(f"max_batch_size {{ value: {2 * HELD + 1} }}\n"
                        "batch_timeout_micros { value: 600000000 }\nnum_batch_threads { value: 1 }\n")
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "serving.standin.server", "--model_base_path", str(base),
             "--rest_api_port", "0", "--port", "0", "--enable_batching",
             "--batching_parameters_file", str(batching)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)
    banner = process.stdout.readline()
    ports = re.search(r"REST http://127\.0\.0\.1:(\d+)  gRPC 127\.0\.0\.1:(\d+)", banner)
    assert ports, banner + (tmp_path / "stderr.txt").read_text()[-3000:]
    return process, int(ports.group(1)), int(ports.group(2))


def send_rest_predict(port, jpeg, held_back=0):
    """A connection that has sent a :predict, all but its last held_back bytes:
    (socket, the bytes held back)."""
    body = json.dumps({"instances": [b64(jpeg)]}).encode()
    data = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.sendall(data[:len(data) - held_back])
    return sock, data[len(data) - held_back:]


def read_rest_answer(sock):
    """(status, Connection header, classes) of the answer on a connection from send_rest_predict."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    answer = json.loads(response.read())
    return response.status, response.getheader("Connection"), [
        row["classes"] for row in answer.get("predictions", [])]


def send_grpc_predicts(channel, jpeg):
    """HELD Predict calls started on one connection, then a status call there answered: the
    server has read every call (HTTP/2 reads a connection's streams in order)."""
    grpc.channel_ready_future(channel).result(timeout=60)
    request = predict_protos.make_predict_request([jpeg], MODEL, signature.SIGNATURE_DEFAULT)
    predict = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict
    calls = [predict.future(request, timeout=120) for _ in range(HELD)]
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = MODEL
    model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status, timeout=60)
    return calls


@pytest.mark.process
def test_sigterm_answers_every_request_received_refuses_new_ones_and_exits_0(
        tmp_path, save_tiny_model, sample_jpegs):
    save_tiny_model(tmp_path / MODEL / "1")  # no warm-up requests: they would wait for a batch
    process, rest_port, grpc_port = start_standin(tmp_path / MODEL, tmp_path)
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    try:
        rest = [send_rest_predict(rest_port, jpeg)[0] for jpeg in sample_jpegs[:HELD]]
        last, last_byte = send_rest_predict(rest_port, sample_jpegs[0], held_back=1)
        grpc_calls = send_grpc_predicts(channel, sample_jpegs[0])
        # accepted in order: this one answered, the earlier connections are the server's
        assert rest_call(types.SimpleNamespace(rest_port=rest_port), "GET", MODEL_URL)[0] == 200
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert wait_for(lambda: is_refused(rest_port))
        with pytest.raises(ServerError, match="UNAVAILABLE"):
            grpc_classes(grpc_port, sample_jpegs[:1], timeout=10)
        time.sleep(max(0.0, signalled + 1.5 - time.monotonic()))  # longer than the old grace, 1 s
        assert process.poll() is None and not any(call.done() for call in grpc_calls)
        last.sendall(last_byte)  # the batch is full: it runs
        answers = [read_rest_answer(sock) for sock in rest + [last]]
        grpc_answers = [call.result(timeout=60).outputs["classes"].string_val for call in grpc_calls]
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        channel.close()
    assert [status for status, _, _ in answers] == [200] * (HELD + 1)
    assert {connection for _, connection, _ in answers} == {"close"}  # keep-alive ends with the stop
    assert all(len(classes) == 1 and classes[0] in LABELS for _, _, classes in answers)
    assert all(len(classes) == 1 and classes[0].decode() in LABELS for classes in grpc_answers)
    assert process.stdout.read().splitlines() == ["serving.standin.server: stopped"]
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]


@pytest.mark.process
def test_a_bad_grace_is_one_line_and_exit_code_2():
    result = subprocess.run(
        [sys.executable, "-m", "serving.standin.server", "--model_base_path", "/m",
         "--shutdown_grace_seconds", "-1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "error: --shutdown_grace_seconds=-1 must be a finite number >= 0"]


# --- stop() in this process, model calls held ----------------------------------------------------

@pytest.fixture
def held_calls(monkeypatch):
    """Every model call says it has begun (entered) and waits for release."""
    held = types.SimpleNamespace(entered=threading.Semaphore(0), release=threading.Event())
    run_signature = served_version.ServedVersion.run_signature

    def run_when_released(self, name, arrays):
        held.entered.release()
        assert held.release.wait(60)
        return run_signature(self, name, arrays)
    monkeypatch.setattr(served_version.ServedVersion, "run_signature", run_when_released)
    yield held
    held.release.set()


@pytest.fixture
def running(tiny_export_base):
    running = server.start_server(MODEL, str(tiny_export_base), enable_warmup=False)
    yield running
    if not running.rest_server.is_stopping:  # the test failed before its stop
        running.stop(0)


CLASSES = {"rest": lambda running, jpegs: rest_classes(running.rest_port, jpegs),
           "grpc": lambda running, jpegs: grpc_classes(running.grpc_port, jpegs)}


@pytest.mark.parametrize("protocol", CLASSES)
def test_stop_answers_a_request_in_flight_and_refuses_new_ones(running, held_calls, sample_jpegs,
                                                                protocol):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answer = pool.submit(CLASSES[protocol], running, sample_jpegs[:2])
        assert held_calls.entered.acquire(timeout=60)  # the request is in its model call
        stopped = pool.submit(running.stop, 60)
        assert wait_for(lambda: is_refused(running.rest_port))
        with pytest.raises(ServerError, match="UNAVAILABLE"):
            grpc_classes(running.grpc_port, sample_jpegs[:1], timeout=10)
        held_calls.release.set()
        assert len(answer.result(timeout=60)) == 2
        assert stopped.result(timeout=60) == 0  # none closed unanswered


@pytest.mark.parametrize("protocol", CLASSES)
def test_a_request_past_the_grace_is_closed_and_counted_once_its_model_call_ends(
        running, held_calls, sample_jpegs, protocol):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answer = pool.submit(CLASSES[protocol], running, sample_jpegs[:1])
        assert held_calls.entered.acquire(timeout=60)
        stopped = pool.submit(running.stop, 0.2)
        with pytest.raises((ServerError, http.client.RemoteDisconnected, ConnectionError)):
            answer.result(timeout=60)
        time.sleep(0.2)
        assert not stopped.done()  # the model call still runs: the process must not exit yet
        held_calls.release.set()
        assert stopped.result(timeout=60) == 1
