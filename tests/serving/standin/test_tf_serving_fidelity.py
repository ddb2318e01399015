"""The stand-in answers as TF Serving 2.15 does where they used to differ (issue 26), each
case a real request to a running stand-in; raw sockets where an HTTP client would tidy the
request (a short Content-Length, HEAD) or hide the answer's bytes.

What each case follows in TF Serving's source: rapidjson's parse errors (util/json_tensor.cc
ParseJson); libevent's methods and error pages (util/net_http/server/internal/
evhttp_server.cc, libevent's http.c); columnar batch sizes (json_tensor.cc
FillTensorMapFromInputsMap, BatchingSession); absolute base paths (server_core.cc
ValidateModelConfigList); ReloadConfigResponse (model_service_impl.cc); the request and
warm-up metrics (servables/tensorflow/util.cc, saved_model_warmup_util.cc,
prediction_service_impl.cc, model_servers/http_server.cc).

    .venv/bin/python -m pytest tests/serving/standin/test_tf_serving_fidelity.py
"""
import base64
import json
import socket

import pytest

from common import signature
from tests.serving.conftest import b64, rest_call as call

MODEL = "/v1/models/image_classifier"


def raw_exchange(server, request, answers=1, timeout=30):
    """Sends request bytes on one connection; returns the bytes received until `answers`
    HTTP answers have arrived or the server closes the connection."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
            if count_answers(data) >= answers:
                return data, False


def count_answers(data):
    """Complete HTTP answers in data (Content-Length bodies, or head-only answers)."""
    count, rest = 0, data
    while b"\r\n\r\n" in rest:
        head, rest = rest.split(b"\r\n\r\n", 1)
        length = header(head, "Content-Length")
        size = int(length) if length is not None else 0
        if len(rest) < size:
            break
        rest, count = rest[size:], count + 1
    return count


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.decode("latin-1").partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def split_answers(data):
    """[(status line, head bytes, body bytes)] of the complete answers in data."""
    answers, rest = [], data
    while b"\r\n\r\n" in rest:
        head, rest = rest.split(b"\r\n\r\n", 1)
        size = int(header(head, "Content-Length") or 0)
        answers.append((head.split(b"\r\n")[0].decode(), head, rest[:size]))
        rest = rest[size:]
    return answers


def post(path, body, content_length=None, extra_headers=""):
    length = len(body) if content_length is None else content_length
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra_headers}\r\n").encode() + body


def predict_body(jpegs):
    return json.dumps({"instances": [b64(j) for j in jpegs]}).encode()


# --- 1. a body that is not JSON: rapidjson's words and byte offset ----------------------------

@pytest.mark.parametrize("body, words", [
    (b"instances = [1, 2]", "JSON Parse error: Invalid value. at offset: 0"),
    (b'{"instances": [1, 2}', "JSON Parse error: Missing a comma or ']' after an array element. "
                              "at offset: 19"),
    (b'{"instances" [1]}', "JSON Parse error: Missing a colon after a name of object member. "
                           "at offset: 13"),
    (b'{"instances": ["x"] "y"}', "JSON Parse error: Missing a comma or '}' after an object "
                                  "member. at offset: 20"),
    (b'{"instances": ["a\\q"]}', "JSON Parse error: Invalid escape character in string. "
                                 "at offset: 17"),
    (b'{"instances": ["abc', "JSON Parse error: Missing a closing quotation mark in string. "
                         "at offset: 19"),
    (b'{"instances": [1e400]}', "JSON Parse error: Number too big to be stored in double. "
                                "at offset: 15"),
    (b'{} {}', "JSON Parse error: The document root must not be followed by other values. "
               "at offset: 3"),
    (b"   ", "JSON Parse error: The document is empty. at offset: 3"),
    (b"", "JSON Parse error: The document is empty"),  # TF Serving's own words, no offset
])
def test_a_body_that_is_not_json_gets_rapidjsons_words(standin, body, words):
    assert call(standin, "POST", MODEL + ":predict", body) == (400, {"error": words})


# --- 4. bytes that are not UTF-8 in a string are fed as sent; a UTF-16 body is refused --------

def test_invalid_utf8_inside_a_string_is_accepted_and_fed_as_sent(standin, sample_jpegs):
    encoded = base64.b64encode(sample_jpegs[0]).decode()
    body = (b'{"signature_name": "%s", "instances": [{"image_bytes": {"b64": "%s"}, '
            b'"key": "k\xff\xfe"}]}' % (signature.SIGNATURE_KEYED.encode(), encoded.encode()))
    status, answer = call(standin, "POST", MODEL + ":predict", body)
    assert status == 200, answer
    (row,) = answer["predictions"]
    # the graph echoed the key's three bytes; not UTF-8, the stand-in writes them as b64
    assert base64.b64decode(row["key"]["b64"]) == b"k\xff\xfe"


@pytest.mark.parametrize("encoding, offset", [("utf-16", 0), ("utf-16-le", 1), ("utf-32", 0)])
def test_a_utf16_or_utf32_body_is_refused(standin, sample_jpegs, encoding, offset):
    body = json.dumps({"instances": [b64(sample_jpegs[0])]}).encode(encoding)
    status, answer = call(standin, "POST", MODEL + ":predict", body)
    assert status == 400
    assert answer["error"].startswith("JSON Parse error: ")
    assert answer["error"].endswith(f" at offset: {offset}")


def test_a_utf8_byte_order_mark_is_skipped(standin, sample_jpegs):
    status, answer = call(standin, "POST", MODEL + ":predict",
                          b"\xef\xbb\xbf" + predict_body(sample_jpegs[:1]))
    assert status == 200 and len(answer["predictions"]) == 1


# --- 2. OPTIONS and HEAD reach the REST handler; TRACE gets libevent's 501 page --------------

@pytest.mark.parametrize("method", ["OPTIONS", "PATCH", "DELETE"])
def test_options_is_a_malformed_request_in_json(standin, method):
    assert call(standin, method, MODEL) == (
        400, {"error": f"Malformed request: {method} {MODEL}"})


def test_head_gets_the_handlers_status_and_headers_without_a_body(standin):
    data, is_closed = raw_exchange(standin, f"HEAD {MODEL} HTTP/1.1\r\nHost: x\r\n\r\n"
                                            f"GET {MODEL} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                                   answers=2)
    (status_line, head, body), (second_line, _, second_body) = split_answers(data)[:2]
    assert status_line == "HTTP/1.1 400 Bad Request"
    assert header(head, "Content-Type") == "application/json"
    assert header(head, "Content-Length") is None and body == b""
    # the connection stays usable: the next answer follows at once
    assert second_line == "HTTP/1.1 200 OK" and json.loads(second_body)["model_version_status"]


def test_trace_gets_libevents_501_page_and_a_closed_connection(standin):
    data, is_closed = raw_exchange(standin, f"TRACE {MODEL} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                                   answers=2)
    ((status_line, head, body),) = split_answers(data)
    assert status_line == "HTTP/1.1 501 Not Implemented" and is_closed
    assert header(head, "Content-Type") == "text/html"
    assert header(head, "Connection") == "close"
    assert body == (b"<HTML><HEAD>\n<TITLE>501 Not Implemented</TITLE>\n</HEAD><BODY>\n"
                    b"<H1>Not Implemented</H1>\n</BODY></HTML>\n")


# --- 8. a Content-Length shorter than the body ----------------------------------------------

def test_a_short_content_length_answers_the_body_it_names_then_refuses_the_rest(
        standin, sample_jpegs):
    body = predict_body(sample_jpegs[:1])
    # TF Serving's libevent reads Content-Length bytes as the body and the rest as the next
    # request line, which does not parse: libevent's 400 page, and the connection closed.
    request = post(MODEL + ":predict", body + b' "extra": 1}\r\n', content_length=len(body))
    data, is_closed = raw_exchange(standin, request, answers=3)
    answers = split_answers(data)
    assert [line for line, _, _ in answers] == ["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"]
    assert len(json.loads(answers[0][2])["predictions"]) == 1
    assert header(answers[1][1], "Connection") == "close" and is_closed
    assert answers[1][2].startswith(b"<HTML><HEAD>\n<TITLE>400 Bad Request</TITLE>")


def test_a_content_length_cutting_the_json_short_is_a_parse_error(standin, sample_jpegs):
    body = predict_body(sample_jpegs[:1])
    data, _ = raw_exchange(standin, post(MODEL + ":predict", body, content_length=20), answers=1)
    ((status_line, _, answer),) = split_answers(data)[:1]
    assert status_line == "HTTP/1.1 400 Bad Request"
    assert json.loads(answer) == {"error": "JSON Parse error: Missing a closing quotation mark "
                                           "in string. at offset: 20"}
