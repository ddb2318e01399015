"""TF Serving REST formats as pure functions: routing, request decoding, response shapes.

    .venv/bin/python -m pytest tests/serving/standin/test_rest_api.py
"""
import base64
import json

import numpy as np
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import get_model_status_pb2, status_pb2
from tensorflow_serving.apis.get_model_status_pb2 import ModelVersionStatus

from serving.standin import errors, rest_routes


@pytest.mark.parametrize("method, path, expected", [
    ("GET", "/v1/models/m", ("status", "m", None, None)),
    ("GET", "/v1/models/m/versions/7", ("status", "m", 7, None)),
    ("GET", "/v1/models/m/labels/stable", ("status", "m", None, "stable")),
    ("GET", "/v1/models/m/metadata", ("metadata", "m", None, None)),
    ("GET", "/v1/models/m/versions/3/metadata", ("metadata", "m", 3, None)),
    ("GET", "/v1/models/m/labels/canary/metadata", ("metadata", "m", None, "canary")),
    ("POST", "/v1/models/m:predict", ("predict", "m", None, None)),
    ("POST", "/v1/models/m/versions/12:predict", ("predict", "m", 12, None)),
    ("POST", "/v1/models/m/labels/stable:predict", ("predict", "m", None, "stable")),
    ("POST", "/v1/models/m:classify", ("classify", "m", None, None)),
    ("POST", "/v1/models/m:regress?x=1", ("regress", "m", None, None)),
    ("POST", "/V1/MODELS/My_Model/VERSIONS/2:predict", ("predict", "My_Model", 2, None)),
    ("GET", "/v1/models/my%20model/labels/a%2Fb", ("status", "my model", None, "a/b")),
    ("GET", "/v1/models/m/METADATA", ("status", "m", None, None)),  # TF compares "metadata" exactly
])
def test_route_matches_tf_serving_urls(method, path, expected):
    assert rest_routes.route(method, path) == expected


@pytest.mark.parametrize("method, path, words", [
    ("GET", "/v1/foo", "Malformed request: GET /v1/foo"),
    ("POST", "/v1/models", "Malformed request: POST /v1/models"),
    ("GET", "/v1/models", "Missing model name in request."),
    ("GET", "/v1/models/debug/model_name", "Malformed request"),
    ("GET", "/v1/models/m:predict", "Malformed request: GET /v1/models/m:predict"),
    ("POST", "/v1/models/m/version/50:regress", "Malformed request"),
    ("POST", "/v1/models/m/versions/HELLO:regress", "Malformed request"),
    ("POST", "/v1/models/m/versions/18446744073709551615:regress",
     "Failed to convert version: 18446744073709551615 to numeric."),
    ("POST", "/v1/models/m/metadata", "Malformed request"),
    ("POST", "/v1/models/m/versions/50/labels/x:regress", "Malformed request"),
    ("POST", "/v1/models/m:PREDICT", "Malformed request"),  # matched in any case, then compared
    ("DELETE", "/v1/models/m", "Malformed request: DELETE /v1/models/m"),
])
def test_route_rejects_what_tf_serving_rejects(method, path, words):
    """TF Serving's UnsupportedApiCalls cases: all INVALID_ARGUMENT, HTTP 400."""
    with pytest.raises(errors.InvalidArgument) as raised:
        rest_routes.route(method, path)
    assert words in raised.value.message and raised.value.http_status == 400


@pytest.mark.parametrize("body, words", [
    (b"", "JSON Parse error: The document is empty"),
    (b"{not json", "JSON Parse error"),
    (b"[1, 2]", "JSON Value: [\n    1,\n    2\n] Is not object"),  # rapidjson's PrettyWriter
    (b'{"signature_name": "x"}', "Missing 'inputs' or 'instances' key"),
    (b'{"instances": [], "inputs": []}', "expecting only one of 'inputs' or 'instances' keys"),
    (b'{"signature_name": 3, "inputs": []}', "'signature_name' key must be a string value."),
    (b"\xff\xfe", "JSON Parse error"),
    (b"[" * 300 + b"]" * 300, "nested deeper than 256 levels"),
    (b'{"inputs": ' + b"[" * 2000 + b"]" * 2000 + b"}", "nested deeper than 256 levels"),
])
def test_parse_predict_body_names_the_problem(body, words):
    with pytest.raises(errors.InvalidArgument, match=__import__("re").escape(words)):
        rest_routes.parse_predict_body(body)


def test_brackets_inside_strings_do_not_count_as_nesting():
    body = b'{"inputs": ["' + b"[" * 1000 + b'\\"]"]}'
    assert rest_routes.parse_predict_body(body) == ("", False, ["[" * 1000 + '"]'])  # \" escaped


def b64(data):
    return {"b64": base64.b64encode(data).decode()}


STRING_INPUT = {"image_bytes": types_pb2.DataType.DT_STRING}
KEYED_INPUTS = {"image_bytes": types_pb2.DataType.DT_STRING, "key": types_pb2.DataType.DT_STRING}


def tensor_infos(dtypes):
    return {name: meta_graph_pb2.TensorInfo(dtype=dtype) for name, dtype in dtypes.items()}


@pytest.mark.parametrize("is_row, payload", [
    (True, [b64(b"a"), b64(b"b")]),
    (True, [{"image_bytes": b64(b"a")}, {"image_bytes": b64(b"b")}]),
    (False, [b64(b"a"), b64(b"b")]),
    (False, {"image_bytes": [b64(b"a"), b64(b"b")]}),
])
def test_extract_inputs_accepts_row_and_columnar_forms(is_row, payload):
    arrays = rest_routes.extract_inputs(is_row, payload, tensor_infos(STRING_INPUT))
    assert {name: a.tolist() for name, a in arrays.items()} == {"image_bytes": [b"a", b"b"]}


def test_extract_inputs_keyed_rows_become_columns():
    rows = [{"image_bytes": b64(b"a"), "key": "k1"}, {"image_bytes": b64(b"b"), "key": "k2"}]
    arrays = rest_routes.extract_inputs(True, rows, tensor_infos(KEYED_INPUTS))
    assert {name: a.tolist() for name, a in arrays.items()} == {
        "image_bytes": [b"a", b"b"], "key": [b"k1", b"k2"]}


@pytest.mark.parametrize("is_row, payload, words", [
    (True, ["plain string"], "missing 'b64'"),
    (True, [{"b64": "***"}], "Unable to base64 decode"),
    (True, [{"b64": 5}], "does not have named input: b64"),  # an object, not a b64 value
    (True, [[{"b64": 5}]], "not formatted correctly for base64 data"),
    (True, [], "No values in 'instances' array"),
    (True, [b64(b"a"), {"image_bytes": b64(b"b"), "key": "k"}],
     "Expecting value/list but got object at item 1 of input list"),
])
def test_extract_inputs_names_the_bad_value(is_row, payload, words):
    with pytest.raises(errors.InvalidArgument, match=words):
        rest_routes.extract_inputs(is_row, payload, tensor_infos(STRING_INPUT))


def encoded(body):
    """What the client reads: format_predictions' body through encode_json."""
    return json.loads(rest_routes.encode_json(body))


OUTPUTS = {"classes": np.array([b"cat", b"dog"], dtype=object),
           "class_ids": np.array([0, 1], dtype=np.int64),
           "probabilities": np.array([[0.75, 0.25], [0.5, 0.5]], dtype=np.float32)}


def test_row_response_is_a_list_of_objects():
    assert encoded(rest_routes.format_predictions(OUTPUTS, is_row=True)) == {"predictions": [
        {"classes": "cat", "class_ids": 0, "probabilities": [0.75, 0.25]},
        {"classes": "dog", "class_ids": 1, "probabilities": [0.5, 0.5]}]}


def test_columnar_response_is_an_object_of_lists():
    assert encoded(rest_routes.format_predictions(OUTPUTS, is_row=False)) == {"outputs": {
        "classes": ["cat", "dog"], "class_ids": [0, 1], "probabilities": [[0.75, 0.25], [0.5, 0.5]]}}


@pytest.mark.parametrize("is_row, key", [(True, "predictions"), (False, "outputs")])
def test_single_output_drops_its_name(is_row, key):
    assert encoded(rest_routes.format_predictions({"class_ids": np.array([4, 5])}, is_row)) == {
        key: [4, 5]}


def test_binary_outputs_are_base64_objects():
    out = encoded(rest_routes.format_predictions({
        "thumb_bytes": np.array([b"\x00\xff"], dtype=object),
        "name": np.array([b"\xff"], dtype=object)}, False))
    assert out == {"outputs": {"thumb_bytes": [{"b64": "AP8="}], "name": [{"b64": "/w=="}]}}


def test_status_matches_tf_serving_json():
    response = get_model_status_pb2.GetModelStatusResponse()
    response.model_version_status.add(version=3, state=ModelVersionStatus.AVAILABLE,
                                       status=status_pb2.StatusProto())
    response.model_version_status.add(version=2, state=ModelVersionStatus.END, status=(
        status_pb2.StatusProto(error_code=5, error_message="no variables")))
    assert rest_routes.format_status(response) == {"model_version_status": [
        {"version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
        {"version": "2", "state": "END",
         "status": {"error_code": "NOT_FOUND", "error_message": "no variables"}}]}
