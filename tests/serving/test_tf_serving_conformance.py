"""Conformance of the stand-in with TF Serving's wire behaviour, one case per documented behaviour.

Organised as TF Serving's own tests are, so the next difference found is one more case:
  - HttpRestApiHandlerTest (model_servers/http_rest_api_handler_test.cc): routing,
    UnsupportedApiCalls, PredictModelNameVersionErrors, PredictRequestErrors, Predict,
    Classify/Regress, GetStatus, GetModelMetadata;
  - TensorflowModelServerTest (model_servers/tensorflow_model_server_test.py): the gRPC
    services, read the way TF Serving's example clients read them;
  - Classify/Regress/MultiInference on a real classification/regression SavedModel
    (tests/serving/inference_models.py), REST and gRPC against the signature run directly;
  - JsonTensorTest (util/json_tensor_test.cc): float texts out, value errors in;
  - the :tensorflow:* metrics (load, graph runs, runtime latency) on the Prometheus page;
  - the HTTP transport under the handler (http_server.cc / libevent): bodies read in
    full before answering, JSON nesting, HTTP/1.0 keep-alive, chunked bodies.
The server is the stand-in in this process, serving versions 1 and 2 of the fixture model
from a ModelServerConfig with labels stable -> 1 and canary -> 2, as TF Serving's handler
test serves half_plus_two with a version label.

    .venv/bin/python -m pytest tests/serving/test_tf_serving_conformance.py
"""
import http.client
import json
import socket

import grpc
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                     get_model_status_pb2, inference_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc, regression_pb2)
from tensorflow_serving.config import model_server_config_pb2

from common import predict_protos, signature
from serving.standin import served_version, server
from tests.serving import inference_models
from tests.serving.conftest import b64, rest_call as rest

MODEL = "image_classifier"
PATH = f"/v1/models/{MODEL}"
CONFIG = """model_config_list {{ config {{
  name: "{name}" base_path: "{base}" model_platform: "tensorflow"
  model_version_policy {{ all {{ }} }}
  version_labels {{ key: "stable" value: 1 }}
  version_labels {{ key: "canary" value: 2 }} }} }}"""


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory, save_tiny_model):
    base = tmp_path_factory.mktemp("conformance") / MODEL
    save_tiny_model(base / "1", seed=0)
    save_tiny_model(base / "2", seed=1)
    return base


@pytest.fixture(scope="module")
def tf_server(two_versions):
    config = text_format.Parse(CONFIG.format(name=MODEL, base=two_versions),
                               model_server_config_pb2.ModelServerConfig())
    running = server.start_server(model_config=config, allow_unavailable_labels=True,
                                  enable_warmup=False, poll_seconds=0.5)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stubs(tf_server):
    channel = grpc.insecure_channel(f"127.0.0.1:{tf_server.grpc_port}")
    yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
           model_service_pb2_grpc.ModelServiceStub(channel))
    channel.close()






def instances(jpegs):
    return {"instances": [b64(j) for j in jpegs]}


def grpc_error(call, request):
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=60)
    return raised.value.code().name, raised.value.details()


# --- HttpRestApiHandlerTest -----------------------------------------------------------------

@pytest.mark.parametrize("path, status", [("/statuspage", 404), ("/index", 404), ("/v1/models", 400)])
def test_only_v1_paths_reach_the_api(tf_server, path, status):
    assert rest(tf_server, "GET", path)[0] == status


@pytest.mark.parametrize("method, path, words", [
    ("GET", "/v1/foo", "Malformed request: GET /v1/foo"),
    ("POST", "/v1/foo", "Malformed request: POST /v1/foo"),
    ("GET", "/v1/models", "Missing model name in request."),
    ("GET", "/v1/models/debug/model_name", "Malformed request"),
    ("POST", "/v1/models", "Malformed request"),
    ("GET", "/v1/models/foo:predict", "Malformed request"),
    ("GET", "/v1/models/foo/version/50:predict", "Malformed request"),
    ("POST", "/v1/models/foo/version/50:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/HELLO:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/18446744073709551615:regress", "Failed to convert version"),
    ("POST", "/v1/models/foo/metadata", "Malformed request"),
    ("POST", "/v1/models/foo/label/some_label:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/50/labels/some_label:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/some_label:regress", "Malformed request"),
    ("PUT", PATH, "Malformed request: PUT"),
])
def test_unsupported_api_calls(tf_server, method, path, words):
    status, body = rest(tf_server, method, path, b"{}" if method != "GET" else None)
    assert status == 400 and words in body["error"]


@pytest.mark.parametrize("path, words", [
    ("/v1/models/foo:predict", "Servable not found for request: Latest(foo)"),
    ("/v1/models/foo/versions/50:predict", "Servable not found for request: Specific(foo, 50)"),
    (f"{PATH}/versions/99:predict", f"Servable not found for request: Specific({MODEL}, 99)"),
])
def test_predict_model_name_version_errors(tf_server, sample_jpegs, path, words):
    status, body = rest(tf_server, "POST", path, instances(sample_jpegs[:1]))
    assert (status, body) == (404, {"error": words})


@pytest.mark.parametrize("path, body, words", [
    (PATH + ":predict", b"", "JSON Parse error: The document is empty"),
    (PATH + ":predict", b"instances = [1, 2]", "JSON Parse error"),
    (PATH + "/labels/Version_Nonexistent:predict", {"instances": ["x"]},
     "Unrecognized servable version label: Version_Nonexistent"),
    (PATH + ":predict", {"signature_name": 100}, "'signature_name' key must be a string value."),
    (PATH + ":predict", {"signature_name": "nope", "instances": ["x"]},
     'Serving signature name: "nope" not found in signature def'),
])
def test_predict_request_errors(tf_server, path, body, words):
    status, answer = rest(tf_server, "POST", path, body)
    assert status == 400 and words in answer["error"]


def rest_probabilities(running, path, jpegs):
    status, body = rest(running, "POST", path, instances(jpegs))
    assert status == 200, body
    return np.array([row["probabilities"] for row in body["predictions"]])


def test_predict_latest_version_and_label(tf_server, sample_jpegs):
    """Latest is the highest version; /versions/N and /labels/L pick one; paths ignore case."""
    jpegs = sample_jpegs[:2]
    latest = rest_probabilities(tf_server, PATH + ":predict", jpegs)
    v1 = rest_probabilities(tf_server, PATH + "/versions/1:predict", jpegs)
    np.testing.assert_array_equal(rest_probabilities(tf_server, PATH + "/labels/stable:predict", jpegs), v1)
    np.testing.assert_array_equal(rest_probabilities(tf_server, PATH + "/versions/2:predict", jpegs), latest)
    np.testing.assert_array_equal(
        rest_probabilities(tf_server, f"/V1/MODELS/{MODEL}/LABELS/canary:predict", jpegs), latest)
    assert np.abs(latest - v1).max() > 1e-3  # the two versions really differ


@pytest.mark.parametrize("verb, kind", [("classify", "classification"), ("regress", "regression")])
def test_classify_and_regress_on_a_predict_only_model(tf_server, verb, kind):
    status, body = rest(tf_server, "POST", f"{PATH}:{verb}", {"examples": [{"x": 1.0}]})
    assert (status, body) == (400, {"error": f"Expected {kind} signature method_name to be "
                                             f"tensorflow/serving/{verb}. Was: tensorflow/serving/predict"})
    assert rest(tf_server, "POST", f"/v1/models/foo:{verb}", {"examples": [{"x": 1.0}]})[0] == 404
    assert rest(tf_server, "POST", f"{PATH}/labels/nope:{verb}", {"examples": [{}]})[0] == 400
    # the body is read before the model is looked up, as in TF Serving
    status, body = rest(tf_server, "POST", f"/v1/models/foo:{verb}", {"examples": []})
    assert status == 400 and body["error"].endswith("'examples' value is an empty array")


STATUS_OK = {"error_code": "OK", "error_message": ""}


@pytest.mark.parametrize("path, status, body", [
    (PATH, 200, {"model_version_status": [
        {"version": "2", "state": "AVAILABLE", "status": STATUS_OK},
        {"version": "1", "state": "AVAILABLE", "status": STATUS_OK}]}),
    (PATH + "/versions/1", 200, {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": STATUS_OK}]}),
    (PATH + "/labels/stable", 200, {"model_version_status": [  # status ignores labels
        {"version": "2", "state": "AVAILABLE", "status": STATUS_OK},
        {"version": "1", "state": "AVAILABLE", "status": STATUS_OK}]}),
    (PATH + "/versions/9", 404, {"error": f"Could not find version 9 of model {MODEL}"}),
    ("/v1/models/foo", 404, {"error": "Could not find any versions of model foo"}),
])
def test_get_status(tf_server, path, status, body):
    assert rest(tf_server, "GET", path) == (status, body)


@pytest.mark.parametrize("path, status, version", [
    (PATH + "/metadata", 200, "2"),
    (PATH + "/versions/1/metadata", 200, "1"),
    (PATH + "/labels/stable/metadata", 200, "1"),
    (PATH + "/labels/nope/metadata", 400, None),
])
def test_get_model_metadata(tf_server, path, status, version):
    got_status, body = rest(tf_server, "GET", path)
    assert got_status == status
    if version is None:
        assert body == {"error": "Unrecognized servable version label: nope"}
    else:
        assert body["model_spec"]["version"] == version
        assert sorted(body["metadata"]["signature_def"]["signature_def"]) == sorted(signature.SIGNATURES)


# --- TensorflowModelServerTest (gRPC) -------------------------------------------------------

def predict_request(jpegs, label=None, version=None, signature_name=""):
    request = predict_protos.make_predict_request(jpegs, MODEL, signature_name)
    if label is not None:
        request.model_spec.version_label = label
    if version is not None:
        request.model_spec.version.value = version
    return request


def test_predict_outputs_are_typed_fields_like_tf_serving_writes_them(stubs, sample_jpegs):
    """Read as TF Serving's example client reads them (outputs['scores'].float_val)."""
    result = stubs[0].Predict(predict_request(sample_jpegs[:2]), timeout=60)
    probabilities = result.outputs["probabilities"]
    assert len(probabilities.float_val) == 6 and probabilities.tensor_content == b""
    assert [d.size for d in probabilities.tensor_shape.dim] == [2, 3]
    np.testing.assert_allclose(np.reshape(probabilities.float_val, (2, 3)).sum(axis=1), 1.0, atol=1e-5)
    assert list(result.outputs["class_ids"].int64_val) == list(tf.make_ndarray(result.outputs["class_ids"]))
    assert [c.decode() for c in result.outputs["classes"].string_val] == [
        ("cat", "dog", "fish")[i] for i in result.outputs["class_ids"].int64_val]
    assert tf.make_ndarray(probabilities).shape == (2, 3)
    assert (result.model_spec.name, result.model_spec.version.value,
            result.model_spec.signature_name) == (MODEL, 2, "serving_default")


@pytest.mark.parametrize("label, version", [("stable", 1), ("canary", 2)])
def test_rest_and_grpc_agree_on_labels(tf_server, stubs, sample_jpegs, label, version):
    result = stubs[0].Predict(predict_request(sample_jpegs[:2], label=label), timeout=60)
    assert result.model_spec.version.value == version
    over_rest = rest_probabilities(tf_server, f"{PATH}/labels/{label}:predict", sample_jpegs[:2])
    np.testing.assert_allclose(tf.make_ndarray(result.outputs["probabilities"]), over_rest, atol=1e-6)


@pytest.mark.parametrize("mutate, code, words", [
    (lambda r: r.ClearField("model_spec"), "INVALID_ARGUMENT", "Missing ModelSpec"),
    (lambda r: setattr(r.model_spec, "name", ""), "INVALID_ARGUMENT", "ModelSpec has no name specified."),
    (lambda r: setattr(r.model_spec, "version_label", "nope"), "INVALID_ARGUMENT",
     "Unrecognized servable version label: nope"),
    (lambda r: r.model_spec.version.__setattr__("value", 9), "NOT_FOUND",
     f"Servable not found for request: Specific({MODEL}, 9)"),
    (lambda r: setattr(r.model_spec, "signature_name", "nope"), "FAILED_PRECONDITION",
     'Serving signature key "nope" not found.'),
    (lambda r: r.output_filter.append("nope"), "INVALID_ARGUMENT",
     "output tensor alias not found in signature: nope Outputs expected to be in the set "
     "{class_ids,classes,probabilities}."),
    (lambda r: r.output_filter.extend(["classes", "classes"]), "INVALID_ARGUMENT",
     "duplicate output tensor alias: classes"),
    (lambda r: r.inputs["key"].CopyFrom(r.inputs["image_bytes"]), "INVALID_ARGUMENT",
     "input size does not match signature: 2!=1 len({image_bytes,key}) != len({image_bytes}). "
     "Sent extra: {key}. Missing but required: {}."),
])
def test_predict_errors(stubs, sample_jpegs, mutate, code, words):
    request = predict_request(sample_jpegs[:1])
    mutate(request)
    assert grpc_error(stubs[0].Predict, request) == (code, words)


@pytest.mark.parametrize("method, request_class, kind", [
    ("Classify", classification_pb2.ClassificationRequest, "classification"),
    ("Regress", regression_pb2.RegressionRequest, "regression"),
])
def test_classify_and_regress_are_invalid_argument(stubs, method, request_class, kind):
    request = request_class()
    request.model_spec.name = MODEL
    verb = {"classification": "classify", "regression": "regress"}[kind]
    assert grpc_error(getattr(stubs[0], method), request) == (
        "INVALID_ARGUMENT", f"Expected {kind} signature method_name to be tensorflow/serving/"
                            f"{verb}. Was: tensorflow/serving/predict")
    assert grpc_error(getattr(stubs[0], method), request_class())[0] == "INVALID_ARGUMENT"


def test_get_model_status_has_the_status_sub_message(stubs):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = MODEL
    request.model_spec.version_label = "stable"  # ignored, as in TF Serving
    response = stubs[1].GetModelStatus(request, timeout=60)
    assert [(s.version, s.HasField("status"), s.status.error_code) for s in
            response.model_version_status] == [(2, True, 0), (1, True, 0)]
    assert grpc_error(stubs[1].GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
        "INVALID_ARGUMENT", "Missing ModelSpec")


@pytest.mark.parametrize("fields, label, expected", [
    (["signature_def"], "stable", ("OK", 1)),
    ([], None, ("INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field")),
    (["signature_def", "other"], None, ("INVALID_ARGUMENT", "Metadata field other is not supported")),
    (["signature_def"], "nope", ("INVALID_ARGUMENT", "Unrecognized servable version label: nope")),
])
def test_get_model_metadata_over_grpc(stubs, fields, label, expected):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=fields)
    request.model_spec.name = MODEL
    if label:
        request.model_spec.version_label = label
    if expected[0] != "OK":
        assert grpc_error(stubs[0].GetModelMetadata, request) == expected
        return
    response = stubs[0].GetModelMetadata(request, timeout=60)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    assert response.model_spec.version.value == expected[1]
    assert sorted(signature_map.signature_def) == sorted(signature.SIGNATURES)


def test_handle_reload_config_request(tf_server, two_versions, stubs, sample_jpegs):
    """ModelService.HandleReloadConfigRequest: a new label serves; moving a label to a version
    that is not loaded is FAILED_PRECONDITION and changes nothing; custom configs are refused."""
    from tensorflow_serving.apis import model_management_pb2
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(CONFIG.format(name=MODEL, base=two_versions), request.config)
    request.config.model_config_list.config[0].version_labels["newest"] = 2
    response = stubs[1].HandleReloadConfigRequest(request, timeout=60)
    assert response.status.error_code == 0
    result = stubs[0].Predict(predict_request(sample_jpegs[:1], label="newest"), timeout=60)
    assert result.model_spec.version.value == 2
    request.config.model_config_list.config[0].version_labels["stable"] = 9
    code, details = grpc_error(stubs[1].HandleReloadConfigRequest, request)
    assert code == "FAILED_PRECONDITION" and "assign label to version 9" in details
    assert tf_server.core.get(MODEL, label="stable").version == 1
    custom = model_management_pb2.ReloadConfigRequest()
    custom.config.custom_model_config.Pack(request.config)
    assert grpc_error(stubs[1].HandleReloadConfigRequest, custom)[0] == "INVALID_ARGUMENT"


# --- Classify / Regress / MultiInference on a real classification/regression model --------
# (http_rest_api_handler_test.cc's Classify/Regress, json_tensor_test.cc, classifier_test.cc,
# regressor_test.cc, multi_inference_test.cc)

EXAMPLES = "examples"
EXAMPLES_PATH = f"/v1/models/{EXAMPLES}"
METRICS_PATH = "/monitoring/prometheus/metrics"
ROWS = [{"x": [1.0, 2.0]}, {"x": [0.5, -1.0], "bias": 1.0}]


@pytest.fixture(scope="module")
def examples_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("inference") / EXAMPLES
    inference_models.save_examples_model(base / "1")
    return base


@pytest.fixture(scope="module")
def examples_server(examples_base):
    running = server.start_server(EXAMPLES, str(examples_base), enable_warmup=False,
                                  poll_seconds=60, prometheus_path=METRICS_PATH)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def examples_stub(examples_server):
    channel = grpc.insecure_channel(f"127.0.0.1:{examples_server.grpc_port}")
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def direct_signatures(examples_base):
    """The SavedModel's signatures run directly, not through any server."""
    return tf.saved_model.load(str(examples_base / "1")).signatures


def serialized_rows(rows, context=None):
    """The tf.Example bytes TF Serving feeds for JSON rows (context bytes first)."""
    prefix = inference_models.make_example(**context).SerializeToString() if context else b""
    return [prefix + inference_models.make_example(**row).SerializeToString() for row in rows]


def fill_input(input_proto, rows, context=None):
    examples = input_proto.example_list.examples
    if context:
        input_proto.example_list_with_context.context.CopyFrom(
            inference_models.make_example(**context))
        examples = input_proto.example_list_with_context.examples
    for row in rows:
        examples.add().CopyFrom(inference_models.make_example(**row))


def raw_rest(running, path, body):
    """(status, body text) of a POST: the JSON text as the server wrote it."""
    connection = http.client.HTTPConnection("127.0.0.1", running.rest_port, timeout=60)
    connection.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body))
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, text


@pytest.mark.parametrize("signature_name, has_labels, has_scores", [
    ("", True, True), ("classify_scores", False, True), ("classify_classes", True, False)])
def test_classify_matches_the_signature_over_rest_and_grpc(
        examples_server, examples_stub, direct_signatures, signature_name, has_labels, has_scores):
    direct = direct_signatures[signature_name or "serving_default"](
        inputs=tf.constant(serialized_rows(ROWS)))
    status, body = rest(examples_server, "POST", EXAMPLES_PATH + ":classify",
                        {"signature_name": signature_name, "examples": ROWS})
    assert status == 200
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = EXAMPLES, signature_name
    fill_input(request.input, ROWS)
    response = examples_stub.Classify(request, timeout=60)
    assert response.model_spec.signature_name == signature_name or "serving_default"
    over_grpc = [[[c.label, c.score] for c in item.classes]
                 for item in response.result.classifications]
    labels = direct["classes"].numpy() if has_labels else np.full((2, 3), b"")
    scores = direct["scores"].numpy() if has_scores else np.zeros((2, 3), np.float32)
    expected = [[[labels[i, j].decode(), float(scores[i, j])] for j in range(3)] for i in range(2)]
    assert [[p[0] for p in r] for r in body["results"]] == [[p[0] for p in r] for r in expected]
    np.testing.assert_array_equal(  # float32 texts: "%g", or 9 digits when that is needed
        np.array([[p[1] for p in r] for r in body["results"]], np.float32), scores)
    np.testing.assert_array_equal(np.array([[p[1] for p in r] for r in over_grpc], np.float32),
                                  scores)
    assert [[p[0] for p in r] for r in over_grpc] == [[p[0] for p in r] for r in expected]


@pytest.mark.parametrize("signature_name", ["regress", "regress_column"])
def test_regress_merges_the_context_into_each_example(
        examples_server, examples_stub, direct_signatures, signature_name):
    """Context features are merged into every example; an example's own feature wins."""
    context = {"x": [9.0, 9.0], "bias": 2.0}
    rows = [{"x": [1.0, 2.0]}, {"x": [3.0, 3.0], "bias": -1.0}]
    direct = direct_signatures[signature_name](
        inputs=tf.constant(serialized_rows(rows, context)))["outputs"].numpy().ravel()
    np.testing.assert_allclose(direct, [1.5 + 2.0, 3.0 - 1.0])
    status, body = rest(examples_server, "POST", EXAMPLES_PATH + ":regress",
                        {"signature_name": signature_name, "context": context, "examples": rows})
    assert (status, body) == (200, {"results": [3.5, 2.0]})
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = EXAMPLES, signature_name
    fill_input(request.input, rows, context)
    response = examples_stub.Regress(request, timeout=60)
    assert [r.value for r in response.result.regressions] == direct.tolist()


def test_multi_inference_runs_each_task_on_the_same_examples(examples_stub):
    request = inference_pb2.MultiInferenceRequest()
    for name, method in (("classify_both", "tensorflow/serving/classify"),
                         ("regress", "tensorflow/serving/regress")):
        task = request.tasks.add(method_name=method)
        task.model_spec.name, task.model_spec.signature_name = EXAMPLES, name
    fill_input(request.input, ROWS)
    response = examples_stub.MultiInference(request, timeout=60)
    classify_request = classification_pb2.ClassificationRequest()
    classify_request.model_spec.name = EXAMPLES
    fill_input(classify_request.input, ROWS)
    assert response.results[0].classification_result == examples_stub.Classify(
        classify_request, timeout=60).result
    assert [r.value for r in response.results[1].regression_result.regressions] == [1.5, 0.75]
    assert [r.model_spec.signature_name for r in response.results] == ["classify_both", "regress"]
    request.tasks[1].model_spec.signature_name = "classify_both"
    assert grpc_error(examples_stub.MultiInference, request) == (
        "INVALID_ARGUMENT", "Duplicate evaluation of signature: classify_both")


@pytest.mark.parametrize("verb, body, words", [
    ("classify", {"signature_name": "regress", "examples": ROWS},
     "Expected classification signature method_name to be tensorflow/serving/classify. "
     "Was: tensorflow/serving/regress"),
    ("regress", {"signature_name": "nope", "examples": ROWS},
     "No signature was found with the name: nope"),
    ("regress", {"context": {"x": [1.0, 2.0]}}, "When method is classify, key 'examples' is "
     "expected and was not found"),
    ("classify", {"examples": {"x": 1}}, "Expecting 'examples' value to be an list/array"),
    ("classify", {"examples": [5]}, "Example must be JSON object but got JSON Number"),
    ("classify", {"examples": [{"x": [1, 2.5]}]},
     "Unexpected element type in feature: x expecting type: int64"),  # mixed types
    ("classify", {"examples": [{"x": None}]},
     "Feature: x has element with unexpected JSON type: Null"),
    ("classify", {"examples": [{"x": [[1.0, 2.0]]}]},
     "Feature: x has element with unexpected JSON type: Array"),
    ("classify", {"examples": [{"x": 18446744073709551615}]},
     "Feature: x has uint64 element. Only int64 is supported."),
    ("classify", {"examples": [{"x": 1e39}]},
     "Cannot convert JSON value: 1e+39 to float without loss of precision."),
    ("classify", {"examples": [{"x": {"b64": "!!"}}]}, "Unable to base64 decode"),
])
def test_classify_and_regress_request_errors(examples_server, verb, body, words):
    status, answer = rest(examples_server, "POST", f"{EXAMPLES_PATH}:{verb}", body)
    assert status == 400 and answer["error"].endswith(words), answer


def test_classify_over_grpc_with_no_examples_is_input_is_empty(examples_stub):
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = EXAMPLES
    assert grpc_error(examples_stub.Classify, request) == ("INVALID_ARGUMENT", "Input is empty.")


# --- json_tensor.cc: numbers out and values in --------------------------------------------------

def test_floats_are_written_as_tf_serving_writes_them(examples_server):
    """WriteDecimal: "%g" when it reads back to the same float, else max_digits10 digits;
    ".0" on whole numbers; NaN and Infinity as bare words."""
    status, text = raw_rest(examples_server, EXAMPLES_PATH + ":predict", b'{"signature_name": '
                            b'"scale", "inputs": [[0.75, 3.0], [2.0, 2.7e7], [0.3, -Infinity]]}')
    assert status == 200
    assert json.loads(text) == {"outputs": {  # TF Serving's json_tensor_test values
        "third": [[0.25, 1.0], [0.666666687, 9e6], [0.100000009, -float("inf")]],
        "third64": [[0.25, 1.0], [2 / 3, 9e6], [0.10000000397364298, -float("inf")]]}}
    assert ('"third": [[0.25, 1.0], [0.666666687, 9e+06], [0.100000009, -Infinity]]' in text), text
    assert '"third64": [[0.25, 1.0], [0.66666666666666663, 9e+06], [0.10000000397364298, ' in text


@pytest.mark.parametrize("body, words", [
    ({"instances": [["a", 1.0]]}, "Failed to process element: 0 of 'instances' list. Error: "
     'INVALID_ARGUMENT: JSON Value: "a" Type: String is not of expected type: float'),
    ({"instances": [[1.0, 2.0], [1.0]]}, "Failed to process element: 1 of 'instances' list. "
     "Error: INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1"),  # ragged rows
    ({"inputs": [[1.0, 2.0], [1.0]]},
     "Encountered list at unexpected size: 1 at level: 1 expected size: 2"),
    ({"inputs": [[1.0, [2.0]]]}, "Encountered list at unexpected level: 2 expected < 2"),
    ({"inputs": [[1.0, 2.0], 3.0]},
     "JSON Value: 3.0 found at incorrect level: 2 in the JSON DOM. Expected at level: 2"),
    ({"inputs": [[16777217, 1.0]]},
     "Cannot convert JSON value: 16777217 to float without loss of precision."),
    ({"inputs": [[{"b64": "AA=="}, 1.0]]},
     'JSON Value: {\n    "b64": "AA=="\n} Type: Object is not of expected type: float'),
    ({"inputs": [[True, 1.0]]}, "JSON Value: true Type: True is not of expected type: float"),
    ({"instances": 5}, "Excepting 'instances' to be an list/array"),
    ({"instances": [{"y": [1.0, 2.0]}]}, "Failed to process element: 0 key: y of 'instances' "
     "list. Error: INVALID_ARGUMENT: JSON object: does not have named input: y"),
    ({"inputs": {"y": [[1.0, 2.0]]}}, "Missing named input: x in 'inputs' object."),
])
def test_value_errors_use_json_tensor_words(examples_server, body, words):
    status, answer = rest(examples_server, "POST", EXAMPLES_PATH + ":predict",
                          {"signature_name": "scale", **body})
    assert status == 400 and answer["error"].endswith(words), answer


# --- :tensorflow:* metrics on the Prometheus page ---------------------------------------------

def scrape(running):
    connection = http.client.HTTPConnection("127.0.0.1", running.rest_port, timeout=60)
    connection.request("GET", METRICS_PATH)
    page = connection.getresponse().read().decode()
    connection.close()
    # prometheus_client names a counter's samples NAME_total; TF Serving's page says NAME
    return {(family.name if family.type == "counter" else s.name,
             tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page) for s in family.samples}


def test_tensorflow_load_and_run_metrics(examples_server, examples_base, examples_stub):
    before = scrape(examples_server)
    status, _ = rest(examples_server, "POST", EXAMPLES_PATH + ":classify", {"examples": ROWS})
    assert status == 200
    after = scrape(examples_server)
    path = str(examples_base / "1")
    assert after[(":tensorflow:cc:saved_model:load_attempt_count",
                  (("model_path", path), ("status", "success")))] == 1
    assert after[(":tensorflow:cc:saved_model:load_latency", (("model_path", path),))] > 0
    delta = {key: after[key] - before.get(key, 0) for key in after}
    runtime = (("API", "Classify"), ("model_name", EXAMPLES), ("runtime", "TF1"))
    assert delta[(":tensorflow:serving:runtime_latency_count", runtime)] == 1
    # the page's ...request_example_count_total (prometheus_client drops "_total" from the family)
    assert delta[(":tensorflow:serving:request_example_count", (("model", EXAMPLES),))] == 2
    assert delta[(":tensorflow:core:graph_runs", ())] >= 1  # other servers may run too
    assert delta[(":tensorflow:core:graph_run_time_usecs", ())] > 0


def test_a_failed_load_is_counted_as_fail(examples_server, tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"not a SavedModel")
    with pytest.raises(Exception):
        served_version.ServedVersion("broken", 1, str(tmp_path))
    key = (":tensorflow:cc:saved_model:load_attempt_count",
           (("model_path", str(tmp_path)), ("status", "fail")))
    assert scrape(examples_server)[key] == 1


# --- the HTTP transport ---------------------------------------------------------------------

@pytest.mark.parametrize("megabytes", [2, 15])
def test_error_answers_come_after_the_whole_body_is_read(tf_server, megabytes):
    """A large body to an unknown model: the 404 arrives, never a BrokenPipeError, and the
    kept-alive connection serves the next request."""
    body = json.dumps({"instances": [{"b64": "A" * (megabytes * 1024 * 1024)}]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", tf_server.rest_port, timeout=60)
    statuses = []
    for _ in range(3):
        connection.request("POST", "/v1/models/missing:predict", body=body)
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
    connection.request("GET", PATH)
    response = connection.getresponse()
    statuses.append(response.status)
    response.read()
    connection.close()
    assert statuses == [404, 404, 404, 200]


@pytest.mark.parametrize("depth", [1000, 5000])
def test_deeply_nested_json_is_400(tf_server, depth):
    status, body = rest(tf_server, "POST", PATH + ":predict",
                        b'{"instances": ' + b"[" * depth + b"]" * depth + b"}")
    assert (status, body) == (400, {"error": "JSON Parse error: nested deeper than 256 levels"})


def read_answer(stream):
    """(status line, headers dict, body) of one HTTP answer from a socket file."""
    status_line = stream.readline().decode().strip()
    headers = {}
    for line in iter(stream.readline, b"\r\n"):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status_line, headers, stream.read(int(headers["content-length"]))


def test_http10_keep_alive_is_answered_and_honoured(tf_server):
    """What `ab -k` sends: HTTP/1.0 with Connection: Keep-Alive, several requests, one
    connection; then a plain HTTP/1.0 request, after which the server closes."""
    with socket.create_connection(("127.0.0.1", tf_server.rest_port), timeout=30) as sock:
        stream = sock.makefile("rb")
        answers = []
        for connection in ("Keep-Alive", "Keep-Alive", None):
            header = f"Connection: {connection}\r\n" if connection else ""
            sock.sendall(f"GET {PATH} HTTP/1.0\r\nHost: x\r\n{header}\r\n".encode())
            answers.append(read_answer(stream))
        assert stream.read() == b""  # closed after the request that did not ask to keep it
    assert [(a[0], a[1].get("connection")) for a in answers] == [
        ("HTTP/1.0 200 OK", "keep-alive"), ("HTTP/1.0 200 OK", "keep-alive"),
        ("HTTP/1.0 200 OK", "close")]
    assert json.loads(answers[0][2])["model_version_status"][0]["state"] == "AVAILABLE"


def test_chunked_bodies_are_accepted(tf_server, sample_jpegs):
    body = json.dumps(instances(sample_jpegs[:2])).encode()
    connection = http.client.HTTPConnection("127.0.0.1", tf_server.rest_port, timeout=60)
    connection.request("POST", PATH + ":predict", body=iter([body[:10], body[10:100], body[100:]]),
                       encode_chunked=True)
    response = connection.getresponse()
    chunked = json.loads(response.read())
    connection.close()
    assert response.status == 200
    assert chunked == rest(tf_server, "POST", PATH + ":predict", body)[1]


def test_chunked_bodies_over_the_limit_are_413(tf_server):
    chunk = b"x" * (1024 * 1024)
    connection = http.client.HTTPConnection("127.0.0.1", tf_server.rest_port, timeout=60)
    connection.request("POST", PATH + ":predict", body=iter([chunk] * 17), encode_chunked=True)
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert response.status == 413
    assert "exceeds the limit of 16777216 bytes" in body["error"]
