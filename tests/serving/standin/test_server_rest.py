"""The stand-in's REST API against the fixture SavedModel, including every bad request.

    .venv/bin/python -m pytest tests/serving/standin/test_server_rest.py
"""
import http.client
import json
import socket

import numpy as np
import pytest

from common import signature
from tests.serving.conftest import b64, rest_call as call






MODEL = "/v1/models/image_classifier"


def test_status_lists_the_served_version(standin):
    assert call(standin, "GET", MODEL) == (200, {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]})


def test_metadata_shows_the_contract_signatures(standin):
    status, body = call(standin, "GET", MODEL + "/versions/1/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "image_classifier", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == sorted(signature.SIGNATURES)
    default = signatures[signature.SIGNATURE_DEFAULT]
    assert list(default["inputs"]) == [signature.INPUT_IMAGE_BYTES]
    assert default["inputs"]["image_bytes"]["dtype"] == "DT_STRING"
    assert default["inputs"]["image_bytes"]["tensor_shape"] == {  # TF Serving prints defaults too
        "dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert default["outputs"]["probabilities"]["dtype"] == "DT_FLOAT"
    assert default["method_name"] == "tensorflow/serving/predict"


def test_row_request_returns_predictions_per_image(standin, sample_jpegs):
    status, body = call(standin, "POST", MODEL + ":predict",
                        {"instances": [b64(j) for j in sample_jpegs[:3]]})
    assert status == 200
    rows = body["predictions"]
    assert len(rows) == 3
    for row in rows:
        assert set(row) == {"probabilities", "class_ids", "classes"}
        assert sum(row["probabilities"]) == pytest.approx(1.0, abs=1e-5)
        assert row["classes"] == ("cat", "dog", "fish")[row["class_ids"]]
        assert row["class_ids"] == int(np.argmax(row["probabilities"]))


def test_columnar_keyed_request_returns_outputs_with_keys(standin, sample_jpegs):
    status, body = call(standin, "POST", MODEL + "/versions/1:predict", {
        "signature_name": signature.SIGNATURE_KEYED,
        "inputs": {"image_bytes": [b64(j) for j in sample_jpegs[:2]], "key": ["x1", "x2"]}})
    assert status == 200
    assert body["outputs"]["key"] == ["x1", "x2"]
    assert np.asarray(body["outputs"]["probabilities"]).shape == (2, 3)


def test_named_predict_signature_equals_serving_default(standin, sample_jpegs):
    bodies = [call(standin, "POST", MODEL + ":predict",
                   {"signature_name": name, "instances": [b64(sample_jpegs[0])]})[1]
              for name in (signature.SIGNATURE_PREDICT, signature.SIGNATURE_DEFAULT)]
    assert bodies[0] == bodies[1]


@pytest.mark.parametrize("path, body, status, words", [
    (MODEL + ":predict", {"instances": [b64(b"not a jpeg at all")]}, 400, "Unknown image file format"),
    (MODEL + ":predict", {"instances": [b64(b"")]}, 400, "empty"),
    (MODEL + ":predict", {"instances": ["/9j/4AAQ"]}, 400, "missing 'b64'"),
    (MODEL + ":predict", {"instances": [{"image": b64(b"x")}]}, 400, "does not have named input: image"),
    (MODEL + ":predict", {"instances": [[b64(b"x")]]}, 400, r"expected rank 1 \(shape \(None,\)\)"),
    (MODEL + ":predict", {"inputs": []}, 400, "non-empty batch"),
    (MODEL + ":predict", {"signature_name": "nope", "instances": [b64(b"x")]}, 400, '"nope" not found'),
    (MODEL + ":predict", b'{"instances": [', 400, "JSON Parse error"),
    ("/v1/models/other:predict", {"instances": [b64(b"x")]}, 404, r"Latest\(other\)"),
    (MODEL + "/versions/9:predict", {"instances": [b64(b"x")]}, 404, r"Specific\(image_classifier, 9\)"),
    ("/v1/nothing", None, 400, "Malformed request: GET /v1/nothing"),
    ("DELETE " + MODEL, None, 400, "Malformed request: DELETE"),
    ("/v2/models/image_classifier", None, 404, "TF Serving serves /v1/... only"),
])
def test_bad_requests_get_4xx_naming_the_problem(standin, sample_jpegs, path, body, status, words):
    method = "GET" if body is None else "POST"
    method, path = path.split(" ") if " " in path else (method, path)
    got_status, got = call(standin, method, path, body)
    assert got_status == status
    assert list(got) == ["error"]
    assert __import__("re").search(words, got["error"]), got["error"]
    # ... and the server keeps serving
    assert call(standin, "POST", MODEL + ":predict", {"instances": [b64(sample_jpegs[0])]})[0] == 200


def test_one_bad_image_in_a_batch_rejects_the_batch(standin, sample_jpegs):
    status, body = call(standin, "POST", MODEL + ":predict",
                        {"instances": [b64(sample_jpegs[0]), b64(b"GIF89a-nope")]})
    assert status == 400 and "Invalid GIF data" in body["error"]


def test_oversized_body_is_refused_from_content_length(standin):
    """Only headers are sent: a 413 that arrives anyway proves the body was not awaited."""
    with socket.create_connection(("127.0.0.1", standin.rest_port), timeout=10) as sock:
        sock.sendall(f"POST {MODEL}:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     f"\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)  # no body will follow: the server must not wait for it
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert b"52428800 bytes exceeds the limit" in body


def test_oversized_body_sent_in_full_still_gets_413(standin, sample_jpegs):
    status, body = call(standin, "POST", MODEL + ":predict", b"x" * (50 * 1024 * 1024))
    assert status == 413 and "exceeds the limit" in body["error"]
    assert call(standin, "GET", MODEL)[0] == 200


def test_expect_100_continue_is_answered_before_the_body_unless_it_came_along(standin):
    """libevent's rule: "100 Continue" when the body has not started arriving, then the
    answer; a body sent with the head gets the answer alone."""
    head = (f"GET {MODEL} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            "Content-Length: 2\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", standin.rest_port), timeout=10) as sock:
        stream = sock.makefile("rb")
        sock.sendall(head)
        assert stream.readline() == b"HTTP/1.1 100 Continue\r\n" and stream.readline() == b"\r\n"
        sock.sendall(b"{}")
        assert stream.readline().startswith(b"HTTP/1.1 200")
        headers = dict(line.decode().strip().lower().split(": ", 1)
                       for line in iter(stream.readline, b"\r\n"))
        stream.read(int(headers["content-length"]))
        sock.sendall(head + b"{}")
        assert stream.readline().startswith(b"HTTP/1.1 200")


def test_post_without_content_length_has_an_empty_body(standin):
    """No Content-Length and not chunked: no body (RFC 9112), so TF Serving's empty-document
    error, on a connection that stays usable."""
    with socket.create_connection(("127.0.0.1", standin.rest_port), timeout=10) as sock:
        sock.sendall(f"POST {MODEL}:predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 400") and b"JSON Parse error: The document is empty" in answer


def test_keep_alive_connection_serves_many_requests(standin, sample_jpegs):
    connection = http.client.HTTPConnection("127.0.0.1", standin.rest_port, timeout=30)
    body = json.dumps({"instances": [b64(sample_jpegs[1])]})
    statuses = []
    for _ in range(5):
        connection.request("POST", MODEL + ":predict", body=body)
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
    connection.close()
    assert statuses == [200] * 5


def test_an_unread_body_does_not_poison_the_kept_alive_connection(standin):
    """A POST refused before its body is read (wrong model) must not leave the body in the
    stream, where it would be parsed as the next request."""
    connection = http.client.HTTPConnection("127.0.0.1", standin.rest_port, timeout=30)
    connection.request("POST", "/v1/models/other:predict", body=b'{"instances": ["x"]}')
    first = connection.getresponse()
    first.read()
    connection.request("GET", MODEL)
    second = connection.getresponse()
    assert (first.status, second.status) == (404, 200)
    assert json.loads(second.read())["model_version_status"][0]["state"] == "AVAILABLE"
    connection.close()
