"""The REST endpoint's HTTP/1.x reader on real request bytes.

    .venv/bin/python -m pytest tests/serving/standin/test_http_wire.py
"""
import io

import pytest

from serving.standin import errors, http_wire

LIMIT = 1000


def request_bytes(body=b'{"instances": []}', method="POST", extra=""):
    return (f"{method} /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def events_of(data, limit=LIMIT):
    """Every request read from a connection that sent `data`, up to a Refused."""
    stream, events = io.BufferedReader(io.BytesIO(data)), []
    event = http_wire.read_request(stream, limit)
    while event is not None:
        events.append(event)
        if isinstance(event, http_wire.Refused):
            return events
        event = http_wire.read_request(stream, limit)
    return events


def test_pipelined_requests_come_out_whole_and_in_order():
    data = (request_bytes(b'{"a": 1}') + b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\n\r\n"
            + request_bytes(b'{"b": 22}'))
    events = events_of(data)
    assert [(e.head.method, e.body) for e in events] == [
        ("POST", b'{"a": 1}'), ("GET", b""), ("POST", b'{"b": 22}')]


def test_a_chunked_body_is_joined_and_its_trailer_skipped():
    data = (b"POST /v1/models/m:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
            b"GET /v1/models/m HTTP/1.1\r\n\r\n")
    events = events_of(data)
    assert [e.body for e in events] == [b"hello world", b""]


def test_headers_are_read_in_any_case_and_repeated_ones_joined():
    data = b"GET /v1/models/m HTTP/1.1\r\nX-Thing: a\r\nx-thing: b\r\nConnection: Close\r\n\r\n"
    (event,) = events_of(data)
    assert event.head.header("x-thing") == "a, b"
    assert event.head.close_after


@pytest.mark.parametrize("version, connection, closes", [
    ("HTTP/1.1", "", False), ("HTTP/1.1", "close", True),
    ("HTTP/1.0", "", True), ("HTTP/1.0", "keep-alive", False)])
def test_which_requests_close_the_connection(version, connection, closes):
    header = f"Connection: {connection}\r\n" if connection else ""
    (event,) = events_of(f"GET /v1/models/m {version}\r\n{header}\r\n".encode())
    assert event.head.close_after is closes


def test_lf_only_line_ends_are_read_too():
    (event,) = events_of(b"POST /v1/models/m:predict HTTP/1.1\nContent-Length: 2\n\n{}")
    assert (event.head.target, event.body) == ("/v1/models/m:predict", b"{}")


def test_expect_100_continue_asks_to_go_on_before_the_body():
    data = request_bytes(extra="Expect: 100-continue\r\n")
    asked = []
    head_only = io.BytesIO(data[:data.index(b"\r\n\r\n") + 4])
    assert http_wire.read_request(head_only, LIMIT, asked.append) is None  # no body came
    assert [head.target for head in asked] == ["/v1/models/m:predict"]
    request = http_wire.read_request(io.BytesIO(data), LIMIT, asked.append)
    assert request.body == b'{"instances": []}' and len(asked) == 2


def test_a_content_length_over_the_limit_is_413_before_the_body_is_read():
    (event,) = events_of(request_bytes(b"x" * (LIMIT + 1))[:200])
    assert isinstance(event, http_wire.Refused) and event.status == 413
    assert isinstance(event.error, errors.PayloadTooLarge)
    assert event.unread == LIMIT + 1  # to be read and dropped, so the client sees the 413
    (asked,) = events_of(request_bytes(b"x" * (LIMIT + 1), extra="Expect: 100-continue\r\n")[:200])
    assert asked.status == 413 and asked.unread == 0  # it waits for 100: nothing to drop


def test_a_chunked_body_outgrowing_the_limit_is_413():
    chunk = b"%x\r\n%s\r\n" % (600, b"y" * 600)
    (event,) = events_of(b"POST /v1/models/m:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                         b"\r\n" + chunk * 2)
    assert event.status == 413 and event.unread == http_wire.UNKNOWN_LENGTH


@pytest.mark.parametrize("data, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b'"extra": 1}\r\n', 400),  # judged once the line is whole, before any blank line
    (b"GET /v1/models/m HTTP/2.0\r\n\r\n", 400),
    (b"TRACE /v1/models/m HTTP/1.1\r\n\r\n", 501),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /v1/models/m HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"GET /v1/models/m HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n", 400),
    (b"GET /v1/models/m HTTP/1.1\r\n" + b"A: 1\r\n" * 101 + b"\r\n", 400),
])
def test_heads_libevent_cannot_parse_get_its_page(data, status):
    (event,) = events_of(data)
    assert isinstance(event, http_wire.Refused)
    assert (event.status, event.error) == (status, None)


@pytest.mark.parametrize("data, words", [
    (request_bytes(extra="Content-Length: x\r\n").replace(b"Content-Length: 17\r\n", b""),
     "Content-Length must be a number"),
    (b"POST /v1/models/m:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     "bad chunk-size line"),
    (b"POST /v1/models/m:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
     "a chunk is shorter than its size line says"),
])
def test_bodies_that_cannot_be_read_are_400_naming_the_problem(data, words):
    (event,) = events_of(data)
    assert event.status == 400 and words in event.error.message


def test_answer_heads_name_version_length_and_connection():
    head = http_wire.answer_head("HTTP/1.0", 200, "application/json", 12, "keep-alive")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.0 200 OK"
    assert "Content-Length: 12" in lines and "Connection: keep-alive" in lines
    assert head.endswith(b"\r\n\r\n")
    no_body = http_wire.answer_head("HTTP/1.1", 404, "application/json", None, None).decode()
    assert "Content-Length" not in no_body and "Connection" not in no_body
