"""The REST endpoint's event loop: what waits never holds up the others.

    .venv/bin/python -m pytest tests/serving/standin/test_rest_event_loop.py
"""
import concurrent.futures
import json
import socket
import threading
import time

import pytest

from serving.standin import config_files, rest_server, server
from tests.serving.conftest import b64, rest_call

MODEL = "/v1/models/image_classifier"


@pytest.fixture(scope="module")
def slow_batches(tiny_export_base):
    """Batching whose lone request waits 1 s for company (batches of 8, timeout 1 s)."""
    options = config_files.BatchingOptions(max_batch_size=8, batch_timeout_micros=1_000_000,
                                           num_batch_threads=1, allowed_batch_sizes=(8,))
    running = server.start_server("image_classifier", str(tiny_export_base), batching=options,
                                  enable_warmup=False)
    yield running
    running.stop()


def test_a_request_waiting_for_its_batch_does_not_hold_up_other_connections(slow_batches,
                                                                            sample_jpegs):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(rest_call, slow_batches, "POST", MODEL + ":predict",
                              {"instances": [b64(sample_jpegs[0])]})
        time.sleep(0.2)  # the predict is in its batch, waiting out the 1 s timeout
        status, _ = rest_call(slow_batches, "GET", MODEL)
        answered_after = time.monotonic() - started
        assert status == 200
        assert answered_after < 0.9, "the status request waited for the batch"
        assert waiting.result(timeout=30)[0] == 200
        assert time.monotonic() - started >= 0.9  # it did wait for its batch


def test_a_half_sent_request_does_not_hold_up_other_connections(slow_batches):
    with socket.create_connection(("127.0.0.1", slow_batches.rest_port), timeout=10) as sock:
        sock.sendall(f"POST {MODEL}:predict HTTP/1.1\r\nContent-Length: 500\r\n\r\n{{".encode())
        started = time.monotonic()
        assert rest_call(slow_batches, "GET", MODEL)[0] == 200
        assert time.monotonic() - started < 0.9


def test_a_large_body_padded_with_whitespace_equals_the_small_one(slow_batches, sample_jpegs):
    """The same :predict with 256 KiB of whitespace after it gets the same answer."""
    body = json.dumps({"instances": [b64(j) for j in sample_jpegs]}).encode()
    padded = body + b" " * (256 * 1024 + 1)
    small = rest_call(slow_batches, "POST", MODEL + ":predict", body)
    large = rest_call(slow_batches, "POST", MODEL + ":predict", padded)
    assert small[0] == 200 and small == large


def test_an_idle_connection_is_closed(tiny_export_base, monkeypatch):
    monkeypatch.setattr(rest_server, "IDLE_SECONDS", 0.3)
    running = server.start_server("image_classifier", str(tiny_export_base),
                                  enable_warmup=False)
    try:
        with socket.create_connection(("127.0.0.1", running.rest_port), timeout=10) as sock:
            sock.sendall(f"GET {MODEL} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
            started = time.monotonic()
            assert sock.recv(65536) == b""  # closed by the server, not by our timeout
            assert 0.2 < time.monotonic() - started < 5
    finally:
        running.stop()


def test_stop_answers_the_first_request_of_a_connection_made_before_it(tiny_export_base):
    """A client that connected before stop() but whose request bytes arrive just after (a
    loaded machine) is answered: a connection is idle only between its requests."""
    running = server.start_server("image_classifier", str(tiny_export_base), enable_warmup=False)
    with socket.create_connection(("127.0.0.1", running.rest_port), timeout=10) as sock:
        time.sleep(0.2)  # accepted, its thread waiting for the first bytes
        stopping = threading.Thread(target=running.stop)
        stopping.start()
        time.sleep(0.2)
        sock.sendall(f"GET {MODEL} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        stopping.join(timeout=30)

