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
import urllib.request

import grpc
import pytest
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import (inference_pb2, model_management_pb2, model_service_pb2_grpc,
                                     prediction_service_pb2_grpc)

from common import predict_protos, signature, warmup
from serving.standin import config_files, server
from tests.serving.conftest import b64, rest_call as call

MODEL = "/v1/models/image_classifier"
METRICS_PATH = "/monitoring/prometheus/metrics"
CONFIG = 'model_config_list {{ {} }}'
MODEL_CONFIG = 'config {{ name: "{}" base_path: "{}" model_platform: "tensorflow" }}'


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


# --- 3. columnar inputs of different batch sizes reach the graph (batching refuses them) -----

def keyed_columnar_body(jpegs, keys):
    return {"signature_name": signature.SIGNATURE_KEYED,
            "inputs": {"image_bytes": [b64(j) for j in jpegs], "key": keys}}


def test_columnar_inputs_of_different_batch_sizes_are_not_checked(standin, sample_jpegs):
    status, answer = call(standin, "POST", MODEL + ":predict",
                          keyed_columnar_body(sample_jpegs[:2], ["only-one"]))
    assert status == 200, answer
    outputs = answer["outputs"]
    assert outputs["key"] == ["only-one"]  # the graph's own answer: one key, two images
    assert len(outputs["probabilities"]) == 2 and len(outputs["classes"]) == 2


def test_grpc_inputs_of_different_batch_sizes_are_not_checked(standin, sample_jpegs):
    request = predict_protos.make_predict_request(sample_jpegs[:3], "image_classifier",
                                                  signature.SIGNATURE_KEYED)
    request.inputs[signature.INPUT_KEY].CopyFrom(predict_protos.make_predict_request(
        sample_jpegs[:1], "m", signature.SIGNATURE_KEYED, keys=["k"]).inputs[signature.INPUT_KEY])
    with grpc.insecure_channel(f"127.0.0.1:{standin.grpc_port}") as channel:
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=60)
    assert response.outputs["probabilities"].tensor_shape.dim[0].size == 3
    assert list(response.outputs["key"].string_val) == [b"k"]


@pytest.fixture(scope="module")
def batching_server(tiny_export_base):
    running = server.start_server("image_classifier", str(tiny_export_base), enable_warmup=False,
                                  batching=config_files.BatchingOptions(max_batch_size=8))
    yield running
    running.stop()


def test_with_batching_inputs_of_different_batch_sizes_are_refused(batching_server, sample_jpegs):
    assert call(batching_server, "POST", MODEL + ":predict",
                keyed_columnar_body(sample_jpegs[:2], ["only-one"])) == (
        400, {"error": "Batching Run() input tensors must have equal 0th-dimension size"})
    status, answer = call(batching_server, "POST", MODEL + ":predict",
                          keyed_columnar_body(sample_jpegs[:2], ["a", "b"]))
    assert status == 200 and answer["outputs"]["key"] == ["a", "b"]


# --- 5, 6. ModelService.HandleReloadConfigRequest: absolute paths; status and metrics --------

@pytest.fixture(scope="module")
def config_base(tmp_path_factory, save_tiny_model, sample_jpegs):
    """A base path of its own (the load and warm-up metrics are process-wide, by path)."""
    base = tmp_path_factory.mktemp("fidelity") / "image_classifier"
    save_tiny_model(base / "1", seed=0, warmup_jpegs=sample_jpegs[:2])
    return base


@pytest.fixture(scope="module")
def config_server(config_base):
    """A stand-in with Prometheus metrics, serving the fixture model (with its warmup file)."""
    config = text_format.Parse(CONFIG.format(MODEL_CONFIG.format("image_classifier",
                                                                 config_base)),
                               config_files.model_server_config_pb2.ModelServerConfig())
    running = server.start_server(model_config=config, prometheus_path=METRICS_PATH,
                                  poll_seconds=0.5)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channel(config_server):
    with grpc.insecure_channel(f"127.0.0.1:{config_server.grpc_port}") as opened:
        yield opened


def reload_request(*models, metric_names=()):
    request = model_management_pb2.ReloadConfigRequest(metric_names=list(metric_names))
    text_format.Parse(CONFIG.format(" ".join(MODEL_CONFIG.format(name, path)
                                             for name, path in models)), request.config)
    return request


@pytest.mark.parametrize("base_path", ["relative/image_classifier", "./image_classifier",
                                       "C:/models/image_classifier"])
def test_reload_with_a_relative_base_path_is_invalid_argument(config_server, channel, base_path):
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    with pytest.raises(grpc.RpcError) as raised:
        stub.HandleReloadConfigRequest(reload_request(("image_classifier", base_path)), timeout=60)
    assert (raised.value.code(), raised.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Expected model image_classifier to have an absolute "
        f"path or URI; got base_path()={base_path}")
    assert call(config_server, "GET", MODEL)[0] == 200  # the previous config keeps serving


@pytest.mark.parametrize("uri, is_relative", [
    ("relative/m", True), ("m", True), ("C:/m", True), ("/abs/m", False),
    ("gs://bucket/m", False), ("s3://bucket/m", False), ("hdfs://host:9000/m", False), ("", False)])
def test_uri_is_relative_path_as_tf_serving_reads_it(uri, is_relative):
    assert config_files.is_relative_path(uri) is is_relative


def test_a_relative_model_base_path_is_refused_at_start_up():
    with pytest.raises(config_files.ConfigFileError, match=r"^Expected model m to have an "
                       r"absolute path or URI; got base_path\(\)=export/m$"):
        server.start_server("m", "export/m")


def test_reload_answers_its_status_and_the_metrics_asked_for(
        config_server, channel, config_base, tmp_path, save_tiny_model, sample_jpegs):
    second = save_tiny_model(tmp_path / "second" / "1", seed=2, warmup_jpegs=sample_jpegs[:3])
    warmup_runs = len(warmup.read_warmup_requests(str(second)))
    names = ["/tensorflow/core/graph_runs", "/tensorflow/serving/no_such_metric",
             "/tensorflow/serving/model_warmup_latency"]
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    response = stub.HandleReloadConfigRequest(reload_request(
        ("image_classifier", config_base), ("second", tmp_path / "second"),
        metric_names=names), timeout=120)
    assert response.HasField("status") and response.status.error_code == 0
    # graph runs grew by the new model's warm-up; an unknown name and a histogram read 0
    assert [(m.name, m.int64_value_increase) for m in response.metric] == [
        (names[0], warmup_runs), (names[1], 0), (names[2], 0)]
    assert warmup_runs == 4 and call(config_server, "GET", "/v1/models/second")[0] == 200


# --- 7. the warm-up metric; request counts as TF Serving keeps them --------------------------

def scrape(running):
    with urllib.request.urlopen(f"http://127.0.0.1:{running.rest_port}{METRICS_PATH}",
                                timeout=30) as page:
        return {f.name: f for f in text_string_to_metric_families(page.read().decode())}


def sample(families, name, suffix="", **labels):
    family = families.get(name)
    return sum(s.value for s in (family.samples if family else [])
               if s.name == name + suffix and s.labels == labels)


def test_a_warm_up_is_timed_in_model_warmup_latency(config_server, config_base):
    families = scrape(config_server)
    path = str(config_base / "1")
    name = ":tensorflow:serving:model_warmup_latency"
    assert sample(families, name, "_count", model_path=path, status="OK") == 1
    assert sample(families, name, "_sum", model_path=path, status="OK") > 0  # microseconds


def test_request_count_covers_every_rest_request_under_v1(config_server, sample_jpegs):
    count, latency = ":tensorflow:serving:request_count", ":tensorflow:serving:request_latency"
    before = scrape(config_server)
    assert call(config_server, "GET", MODEL)[0] == 200
    assert call(config_server, "GET", MODEL + "/metadata")[0] == 200
    assert call(config_server, "GET", "/v1/foo")[0] == 400
    assert call(config_server, "OPTIONS", MODEL)[0] == 400
    assert call(config_server, "GET", "/v1/models/nope")[0] == 404
    assert call(config_server, "POST", MODEL + ":predict", predict_body(sample_jpegs[:1]))[0] == 200
    assert call(config_server, "GET", "/elsewhere")[0] == 404  # not under /v1/: not counted
    after = scrape(config_server)
    deltas = {key: sample(after, count, "_total", model_name=key[0], status=key[1]) -
              sample(before, count, "_total", model_name=key[0], status=key[1])
              for key in [("image_classifier", "OK"), ("", "INVALID_ARGUMENT"),
                          ("nope", "NOT_FOUND")]}
    assert deltas == {("image_classifier", "OK"): 3, ("", "INVALID_ARGUMENT"): 2,
                      ("nope", "NOT_FOUND"): 1}
    latencies = {api: sample(after, latency, "_count", model_name="image_classifier", API=api,
                             entrypoint="REST") -
                 sample(before, latency, "_count", model_name="image_classifier", API=api,
                        entrypoint="REST") for api in ("", "predict")}
    assert latencies == {"": 2, "predict": 1}  # successes only, GETs under an empty API


def test_multi_inference_is_not_counted(config_server, channel, sample_jpegs):
    count = ":tensorflow:serving:request_count"
    before = scrape(config_server)
    request = inference_pb2.MultiInferenceRequest()
    task = request.tasks.add(method_name="tensorflow/serving/classify")
    task.model_spec.name = "image_classifier"
    request.input.example_list.examples.add()
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    with pytest.raises(grpc.RpcError) as raised:  # the fixture model has no classify signature
        stub.MultiInference(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = scrape(config_server)
    assert [s for s in after[count].samples if s.labels["model_name"] == "image_classifier"] == [
        s for s in before[count].samples if s.labels["model_name"] == "image_classifier"]


def test_with_batching_pipelined_requests_are_answered_in_order(batching_server, sample_jpegs):
    """The batch thread answers batched requests; a client that sends its next request before
    the answer (pipelining) still gets the answers in its requests' order, and an HTTP/1.0
    request without keep-alive gets its answer before the connection closes."""
    first, second = predict_body(sample_jpegs[:1]), predict_body(sample_jpegs[:3])
    request = (post(MODEL + ":predict", first) + post(MODEL + ":predict", second)
               + post(MODEL + ":predict", first).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    data, is_closed = raw_exchange(batching_server, request, answers=4)
    answers = split_answers(data)
    assert [line for line, _, _ in answers] == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK",
                                                "HTTP/1.0 200 OK"]
    assert [len(json.loads(body)["predictions"]) for _, _, body in answers] == [1, 3, 1]
    assert is_closed and header(answers[2][1], "Connection") == "close"
