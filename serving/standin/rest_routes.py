"""TF Serving's REST handler (http_rest_api_handler.cc): one route table, one process_* per verb.

No sockets here (rest_server.py owns HTTP). route() matches TF Serving's patterns
(http_rest_api_util.cc); each process_* parses the body, asks the ServerCore (gRPC's too)
and returns the JSON-able answer in TF Serving's api_rest formats. Values in:
json_tensors.py and json_examples.py; answers written by json_writer.py.

    .venv/bin/python -c "from serving.standin import rest_routes as r; print(r.route('GET', '/v1/models/m/metadata'))"
"""
import collections
import inspect
import json
import re
import urllib.parse

import numpy as np
from google.protobuf import json_format
from tensorflow_serving.apis import classification_pb2, regression_pb2

from serving.standin import (errors, inference, json_examples, json_reader, json_tensors,
                             json_writer)

API_PREFIX = re.compile(r"/v1/.*", re.IGNORECASE)  # HttpRestApiHandler::kPathRegex
_POST_PATH = re.compile(r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                        r":(classify|regress|predict)", re.IGNORECASE)
_GET_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                       r"(?:/(metadata))?", re.IGNORECASE)
PATTERNS = {"POST": _POST_PATH, "GET": _GET_PATH}  # the route table: a method's one pattern
POST_ACTIONS = ("predict", "classify", "regress")
INT64_MAX = 2 ** 63 - 1
# TF's TensorShape holds at most 254 dimensions; with the request object and the list of
# instances around them, deeper JSON cannot be a tensor and is refused with 400.
MAX_JSON_DEPTH = 256
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: no backtracking
_OPENERS, _CLOSERS = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


class Route(collections.namedtuple("Route", "action model_name version label")):
    """action: predict|classify|regress|status|metadata; version int or None; label str or None."""


def is_api_path(path):
    """True for /v1/... paths (any case): the REST API's, the rest are not TF Serving's."""
    return API_PREFIX.fullmatch(url_path(path)) is not None


def url_path(path):
    return path.split("?", 1)[0]


def route(method, path):
    """The Route of a request, or TF Serving's InvalidArgument for a URL it does not serve.

    As in TF Serving the verb and "metadata" match in any case in the pattern but must then
    be lower case: POST .../m:PREDICT is a malformed request, GET .../m/METADATA a status.
    """
    malformed = errors.InvalidArgument(f"Malformed request: {method} {url_path(path)}")
    pattern = PATTERNS.get(method)
    match = pattern.fullmatch(url_path(path)) if pattern is not None else None
    if match is None:
        raise malformed
    name, version, label, verb = match.groups()
    version = parse_version(version)
    label = urllib.parse.unquote(label) if label is not None else None
    if method == "POST":
        if verb not in POST_ACTIONS:
            raise malformed
        return Route(verb, urllib.parse.unquote(name), version, label)
    if not name:
        raise errors.InvalidArgument("Missing model name in request.")
    action = "metadata" if verb == "metadata" else "status"
    return Route(action, urllib.parse.unquote(name), version, label)


def parse_version(text):
    if text is None:
        return None
    if int(text) > INT64_MAX:
        raise errors.InvalidArgument(f"Failed to convert version: {text} to numeric.")
    return int(text)


def parse_json_object(body):
    """The request body as a JSON object, with TF Serving's messages (json_tensor.cc's
    ParseJson: its own words for an empty body, rapidjson's for one that does not parse)."""
    if not body:
        raise errors.InvalidArgument("JSON Parse error: The document is empty")
    check_json_depth(body)
    try:
        request = json_reader.loads(body)
    except json_reader.JsonParseError as e:
        raise errors.InvalidArgument(f"JSON Parse error: {e}") from None
    if not isinstance(request, dict):
        raise json_tensors.format_error(request, "Is not object")
    signature_name = request.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise json_tensors.format_error(
            request, "not formatted correctly. 'signature_name' key must be a string value.")
    return request


def check_json_depth(body):
    """Refuses JSON nested deeper than MAX_JSON_DEPTH before Python's parser recurses into it
    (RecursionError, an HTTP 500): strings cut out, then brackets counted with numpy."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return  # the common case: too few brackets to nest that deep
    skeleton = _JSON_STRING.sub(b"", body)
    codes = np.frombuffer(skeleton, dtype=np.uint8)
    steps = np.isin(codes, _OPENERS).astype(np.int32) - np.isin(codes, _CLOSERS).astype(np.int32)
    if int(np.cumsum(steps).max()) > MAX_JSON_DEPTH:
        raise errors.InvalidArgument(f"JSON Parse error: nested deeper than {MAX_JSON_DEPTH} levels")


def parse_predict_body(body):
    """(signature_name, is_row_format, payload) from a :predict request body."""
    request = parse_json_object(body)
    has_rows, has_columns = "instances" in request, "inputs" in request
    if has_rows and has_columns:
        raise json_tensors.format_error(
            request, "Not formatted correctly expecting only one of 'inputs' or 'instances' "
            "keys to exist ")
    if not has_rows and not has_columns:
        raise errors.InvalidArgument("Missing 'inputs' or 'instances' key")
    return request.get("signature_name", ""), has_rows, request["instances" if has_rows else "inputs"]


def extract_inputs(is_row, payload, tensor_infos):
    """{input name: numpy array} from a row or columnar payload, by TF Serving's rules and
    with its words (serving/standin/json_tensors.py); tensor_infos: the signature's inputs."""
    request = {"instances" if is_row else "inputs": payload}
    if is_row:
        return json_tensors.read_instances(request, tensor_infos)
    return json_tensors.read_inputs(request, tensor_infos)


def format_predictions(outputs, is_row):
    """The :predict response body: {"predictions": rows} or {"outputs": columns}, each value
    pre-encoded (json_writer.RawJson) with TF Serving's float texts; encode_json writes it."""
    if is_row:
        return {"predictions": json_writer.RawJson("[" + ", ".join(make_row_texts(outputs)) + "]")}
    columns = {name: json_writer.value_texts(name, outputs[name]) for name in outputs}
    whole = {name: json_writer.RawJson("[" + ", ".join(texts) + "]")
             if np.ndim(outputs[name]) else json_writer.RawJson(texts[0])
             for name, texts in columns.items()}
    return {"outputs": next(iter(whole.values())) if len(whole) == 1 else whole}


def make_row_texts(outputs):
    columns = [json_writer.value_texts(name, outputs[name]) for name in outputs]
    if len(columns) == 1:
        return columns[0]
    keys = [json.dumps(name) + ": " for name in outputs]
    return ["{" + ", ".join(map(str.__add__, keys, row)) + "}" for row in zip(*columns)]


def parse_examples_body(body, route, request):
    """A :classify/:regress body into a Classification/RegressionRequest (FillClassify-
    RegressRequestFromJson), model_spec from the route; returns the request."""
    document = parse_json_object(body)
    request.model_spec.name = route.model_name
    if route.version is not None:
        request.model_spec.version.value = route.version
    if route.label is not None:
        request.model_spec.version_label = route.label
    request.model_spec.signature_name = document.get("signature_name", "")
    json_examples.fill_examples(document, request.input)
    return request


def process_request(core, route, body):
    """The JSON-able answer to a routed request: its verb's process_* (ProcessRequest)."""
    return PROCESSORS[route.action](core, route, body)


def process_status(core, route, body):
    """ProcessModelStatusRequest; labels are ignored, as TF Serving ignores them here."""
    return format_status(core.get_status(route.model_name, route.version))


def process_metadata(core, route, body):
    """ProcessModelMetadataRequest."""
    served = core.get(route.model_name, route.version, route.label)
    return format_metadata(served)


def process_predict(core, route, body):
    """ProcessPredictRequest: the body parsed first, then the model resolved (TF Serving's
    order), the inputs read by the signature's, the model run."""
    signature_name, is_row, payload = parse_predict_body(body)
    served = core.get(route.model_name, route.version, route.label)
    name, signature_def = served.resolve_signature(signature_name)
    inputs = extract_inputs(is_row, payload, signature_def.inputs)
    return format_predictions(served.predict(name, inputs), is_row)


def process_classify(core, route, body):
    """ProcessClassifyRequest: the body parsed, then run as gRPC's Classify runs it."""
    request = parse_examples_body(body, route, classification_pb2.ClassificationRequest())
    served = core.get(route.model_name, route.version, route.label)
    return format_classification(inference.classify(served, request).result)


def process_regress(core, route, body):
    """ProcessRegressRequest: the body parsed, then run as gRPC's Regress runs it."""
    request = parse_examples_body(body, route, regression_pb2.RegressionRequest())
    served = core.get(route.model_name, route.version, route.label)
    return format_regression(inference.regress(served, request).result)


def format_classification(result):
    """{"results": [[[label, score], ...] per example]} (MakeJsonFromClassificationResult)."""
    scores = json_writer.format_floats(np.array(
        [c.score for item in result.classifications for c in item.classes], np.float32))
    rows, index = [], 0
    for item in result.classifications:
        pairs = []
        for c in item.classes:
            pairs.append(f"[{json.dumps(c.label)}, {scores[index]}]")
            index += 1
        rows.append(json_writer.RawJson("[" + ", ".join(pairs) + "]"))
    return {"results": rows}


def format_regression(result):
    """{"results": [value per example]} (MakeJsonFromRegressionResult)."""
    values = json_writer.format_floats(np.array([r.value for r in result.regressions], np.float32))
    return {"results": [json_writer.RawJson(v) for v in values]}


# MessageToDict's option that prints fields left at their default: renamed in protobuf 5.26
# (TensorFlow 2.20's protobuf 6: .venv-keras); TensorFlow 2.15's protobuf 4 has the old name.
_NEW_NAME = "always_print_fields_with_no_presence"
PRINT_DEFAULTS = ({_NEW_NAME: True} if _NEW_NAME in inspect.signature(json_format.MessageToDict).parameters
                  else {"including_default_value_fields": True})


def format_status(response):
    """A GetModelStatusResponse as TF Serving's JSON, defaults included: every version prints
    "status": {"error_code": "OK", "error_message": ""} unless its load failed."""
    return json_format.MessageToDict(response, preserving_proto_field_name=True, **PRINT_DEFAULTS)


def format_metadata(served):
    """GetModelMetadataResponse JSON: model_spec plus the signature_def map."""
    return {
        "model_spec": {"name": served.model_name, "signature_name": "",
                       "version": str(served.version)},
        "metadata": {"signature_def": json_format.MessageToDict(
            served.signature_def_map(), preserving_proto_field_name=True, **PRINT_DEFAULTS)},
    }


PROCESSORS = {"status": process_status, "metadata": process_metadata,
              "predict": process_predict, "classify": process_classify,
              "regress": process_regress}
encode_json = json_writer.encode_json
