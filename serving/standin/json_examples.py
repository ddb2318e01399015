"""A classify/regress body's "context" and "examples" as a tensorflow.serving.Input of
tf.Examples, by TF Serving's rules (FillClassifyRegressRequestFromJson,
MakeExampleFromJsonObject in util/json_tensor.cc), with its error words.

    .venv/bin/python -c "from serving.standin import json_examples as j; from tensorflow_serving.apis import input_pb2; i = input_pb2.Input(); j.fill_examples({'examples': [{'x': 1.5}]}, i); print(i)"
"""
from tensorflow.core.example import feature_pb2

from serving.standin import errors, json_reader
from serving.standin.json_tensors import (INT64, decode_b64, format_error, is_b64_object, is_int_in,
                                          is_lossless, lossy_error, type_name)

FEATURE_KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def add_to_feature(value, name, feature):
    """AddValueToFeature: a JSON leaf into an Example feature of one kind."""
    if value is None or isinstance(value, list) or (isinstance(value, dict)
                                                     and not is_b64_object(value)):
        raise errors.InvalidArgument(f"Feature: {name} has element with unexpected JSON type: "
                                     f"{type_name(value)}")
    if isinstance(value, bool):
        kind, item = "int64_list", int(value)
    elif isinstance(value, dict):
        kind, item = "bytes_list", None
    elif isinstance(value, str):
        kind, item = "bytes_list", json_reader.to_bytes(value)
    elif isinstance(value, float) or not is_int_in(value, (-2**63, 2**64 - 1)):
        kind, item = "float_list", float(value)  # rapidjson reads huge integers as doubles
    elif value > INT64[1]:
        kind, item = "int64_list", None
    else:
        kind, item = "int64_list", value
    current = feature.WhichOneof("kind")
    if current not in (None, kind):
        raise errors.InvalidArgument(f"Unexpected element type in feature: {name} expecting "
                                     f"type: {FEATURE_KINDS[current]}")
    if kind == "float_list" and not is_lossless(value, "float"):
        raise lossy_error(value, "float")
    if kind == "int64_list" and item is None:
        raise errors.InvalidArgument(f"Feature: {name} has uint64 element. Only int64 is "
                                     "supported.")
    getattr(feature, kind).value.append(decode_b64(value) if item is None else item)


def make_example(value, example):
    """MakeExampleFromJsonObject: {feature: value | [values] | {"b64": ...}} -> Example."""
    if not isinstance(value, dict):
        raise errors.InvalidArgument(f"Example must be JSON object but got JSON {type_name(value)}")
    for name, content in value.items():
        feature = feature_pb2.Feature()
        for item in content if isinstance(content, list) else [content]:
            add_to_feature(item, name, feature)
        example.features.feature[name].CopyFrom(feature)


def fill_examples(request_json, input_proto):
    """A classify/regress body's "context" and "examples" into a tensorflow.serving.Input."""
    has_context = "context" in request_json
    if has_context:
        make_example(request_json["context"], input_proto.example_list_with_context.context)
    examples = request_json.get("examples")
    if "examples" not in request_json:
        raise format_error(request_json, "When method is classify, key 'examples' is expected "
                           "and was not found")
    if not isinstance(examples, list):
        raise format_error(request_json, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise format_error(request_json, "'examples' value is an empty array")
    target = (input_proto.example_list_with_context if has_context
              else input_proto.example_list).examples
    for value in examples:
        make_example(value, target.add())
