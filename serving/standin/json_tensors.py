"""TF Serving's JSON -> tensor rules (util/json_tensor.cc FillTensorProto), with its error words.

Every leaf at the tensor's rank, every list of its level's size, each leaf of the
dtype's JSON type, {"b64": ...} for strings; the messages are TF Serving's, since
clients match on them. Classify/regress bodies: json_examples.py; answers: json_writer.py.

    .venv/bin/python -c "from serving.standin import json_tensors as j; print(j.read_tensor([[1, 2]], 'DT_FLOAT', 'x'))"
"""
import base64
import binascii
import json

import numpy as np
from tensorflow.core.framework import types_pb2

from serving.standin import errors, json_reader
from serving.standin.json_writer import BINARY_SUFFIX, format_float

FLOAT32_MAX = float(np.finfo(np.float32).max)
# Integers a float type holds exactly: (1 << digits) - 1 (IsLosslessDecimal).
MAX_EXACT_INT = {"float": (1 << 24) - 1, "double": (1 << 53) - 1}
INT32, INT64, UINT32, UINT64 = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1), (0, 2**32 - 1), (0, 2**64 - 1)
# DataType -> (numpy dtype, the JSON leaf test of AddValueToTensor)
_INT32_TYPES = ("DT_INT32", "DT_INT16", "DT_INT8", "DT_UINT8")
NUMPY_TYPES = {"DT_FLOAT": np.float32, "DT_DOUBLE": np.float64, "DT_INT32": np.int32,
               "DT_INT16": np.int16, "DT_INT8": np.int8, "DT_UINT8": np.uint8,
               "DT_STRING": object, "DT_INT64": np.int64, "DT_BOOL": np.bool_,
               "DT_UINT32": np.uint32, "DT_UINT64": np.uint64}


# --- JSON values in messages (JsonValueToString) --------------------------------------------

def type_name(value):
    """rapidjson's type of a JSON value, as TF Serving names it."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return "String" if isinstance(value, str) else "Number"


def value_text(value, limit=1000):
    """A JSON value as TF Serving prints it in a message (rapidjson's PrettyWriter: objects
    and lists over several lines, 4-space indent); cut at `limit` characters."""
    if isinstance(value, float):
        text = format_float(value, is_double=not abs(value) <= FLOAT32_MAX)
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, indent=4, ensure_ascii=False)
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def format_error(value, *words):
    """TF Serving's FormatError: the offending JSON value, then what is wrong with it."""
    return errors.InvalidArgument(f"JSON Value: {value_text(value)} {''.join(words)}")


def type_error(value, dtype_name):
    return errors.InvalidArgument(f"JSON Value: {value_text(value)} Type: {type_name(value)} "
                                  f"is not of expected type: {data_type_string(dtype_name)}")


def lossy_error(value, target):
    return errors.InvalidArgument(f"Cannot convert JSON value: {value_text(value)} to {target} "
                                  "without loss of precision.")


def data_type_string(dtype_name):
    """DataTypeString: DT_FLOAT -> "float"."""
    return dtype_name[3:].lower()


# --- leaves in (AddValueToTensor) -----------------------------------------------------------

def is_b64_object(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def decode_b64(value):
    """JsonDecodeBase64Object: the bytes of {"b64": "<base64>"} (padding optional, as absl)."""
    if not is_b64_object(value):
        raise errors.InvalidArgument(f"JSON Value: {value_text(value)} not formatted correctly "
                                     "for base64 data")
    text = value["b64"]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidArgument("Unable to base64 decode") from None


def is_int_in(value, bounds):
    return isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]


def is_lossless(value, target):
    """IsLosslessDecimal: integers up to the type's exact range, others within its range."""
    if is_int_in(value, (-2**63, 2**64 - 1)):
        return abs(value) <= MAX_EXACT_INT[target]
    number = float(value)
    if number != number or abs(number) == float("inf"):
        return True
    return target == "double" or abs(number) <= FLOAT32_MAX


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def convert_leaf(value, dtype_name, input_name):
    """One JSON leaf as a value of the dtype, or TF Serving's error for it."""
    if isinstance(value, dict):
        if dtype_name != "DT_STRING":
            raise type_error(value, dtype_name)
        return decode_b64(value)
    if dtype_name in ("DT_FLOAT", "DT_DOUBLE"):
        target = data_type_string(dtype_name)
        if not is_number(value):
            raise type_error(value, dtype_name)
        if not is_lossless(value, target):
            raise lossy_error(value, target)
        return float(value)
    if dtype_name == "DT_STRING":
        if not isinstance(value, str):
            raise type_error(value, dtype_name)
        if input_name.endswith(BINARY_SUFFIX):  # the stand-in's own check (see README)
            raise errors.InvalidArgument(
                f"JSON Value: {value_text(value)} input '{input_name}' holds binary data; send "
                "it as {\"b64\": \"<base64>\"}, not a plain string (missing 'b64')")
        return json_reader.to_bytes(value)  # bytes that are not UTF-8 fed as sent
    if dtype_name == "DT_BOOL":
        if not isinstance(value, bool):
            raise type_error(value, dtype_name)
        return value
    bounds = INT32 if dtype_name in _INT32_TYPES else {
        "DT_INT64": INT64, "DT_UINT32": UINT32, "DT_UINT64": UINT64}.get(dtype_name)
    if bounds is None:
        raise errors.Unimplemented(f"Conversion of JSON Value: {value_text(value)} to type: "
                                   f"{data_type_string(dtype_name)}")
    if not is_int_in(value, bounds):
        raise type_error(value, dtype_name)
    return value


# --- tensors in (FillTensorProto) -----------------------------------------------------------

def dense_shape(value):
    """GetDenseTensorShape: the sizes of the first list at each level."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def fill_values(value, level, shape, dtype_name, input_name, out):
    """Appends the leaves of value to out, checking them against shape as TF Serving does."""
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise errors.InvalidArgument(
                f"JSON Value: {value_text(value)} found at incorrect level: {level + 1} in the "
                f"JSON DOM. Expected at level: {rank}")
        out.append(convert_leaf(value, dtype_name, input_name))
        return
    if level >= rank:
        raise errors.InvalidArgument(
            f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise errors.InvalidArgument(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected "
            f"size: {shape[level]}")
    for item in value:
        fill_values(item, level + 1, shape, dtype_name, input_name, out)


def read_tensor(value, dtype_name, input_name):
    """(flat list of leaves, shape) of one JSON value for an input of dtype_name."""
    shape = dense_shape(value)
    out = []
    fill_values(value, 0, shape, dtype_name, input_name, out)
    return out, shape


def to_array(values, shape, dtype_name):
    """The numpy array of read_tensor's leaves; small integer types wrap as TF's do."""
    numpy_type = NUMPY_TYPES[dtype_name]
    if numpy_type is object:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    if dtype_name in _INT32_TYPES:
        return np.asarray(values, np.int32).astype(numpy_type).reshape(shape)
    return np.asarray(values, numpy_type).reshape(shape)


def dtype_name_of(tensor_info):
    return types_pb2.DataType.Name(tensor_info.dtype)


def shape_text(shape):
    return "[" + ",".join(str(size) for size in shape) + "]"


def wrap_element_error(error, index, key=None):
    """TF Serving's wrapper around an instance's error, with the inner status' code."""
    where = f"{index} key: {key}" if key is not None else f"{index}"
    return errors.InvalidArgument(f"Failed to process element: {where} of 'instances' list. "
                                  f"Error: {error.code_name}: {error.message}")


def is_element_object(value):
    return isinstance(value, dict) and not is_b64_object(value)


def read_instance_item(item, name, tensor_infos, shapes, columns):
    """AddInstanceItem: one instance's value of input `name`, sized and shaped like the first."""
    if name not in tensor_infos:
        raise errors.InvalidArgument(f"JSON object: does not have named input: {name}")
    values, shape = read_tensor(item, dtype_name_of(tensor_infos[name]), name)
    if name not in shapes:
        shapes[name] = (len(values), shape)
    elif shapes[name][0] != len(values):
        raise errors.InvalidArgument(f"Expecting tensor size: {shapes[name][0]} but got: "
                                     f"{len(values)}")
    elif shapes[name][1] != shape:
        raise errors.InvalidArgument(f"Expecting shape {shape_text(shapes[name][1])} but got: "
                                     f"{shape_text(shape)}")
    columns.setdefault(name, []).extend(values)


def read_instances(request, tensor_infos):
    """{input name: numpy array} from a row-format request (FillTensorMapFromInstancesList)."""
    instances = request["instances"]
    if not isinstance(instances, list):
        raise format_error(request, "Excepting 'instances' to be an list/array")
    if not instances:
        raise format_error(request, "No values in 'instances' array")
    if not isinstance(instances[0], dict) and len(tensor_infos) > 1:
        raise errors.InvalidArgument(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map")
    are_objects = is_element_object(instances[0])
    names = sorted(tensor_infos)
    shapes, columns = {}, {}
    for index, element in enumerate(instances):
        if are_objects:
            read_object_instance(element, index, tensor_infos, shapes, columns)
            continue
        if is_element_object(element):
            raise errors.InvalidArgument(f"Expecting value/list but got object at item {index} "
                                         "of input list")
        try:
            read_instance_item(element, names[0], tensor_infos, shapes, columns)
        except errors.ServingError as e:
            raise wrap_element_error(e, index) from None
    return {name: to_array(values, [len(instances)] + shapes[name][1],
                           dtype_name_of(tensor_infos[name]))
            for name, values in columns.items()}


def read_object_instance(element, index, tensor_infos, shapes, columns):
    """One {input name: value} instance; its keys must be the signature's inputs."""
    if not is_element_object(element):
        raise errors.InvalidArgument(f"Expecting object but got list at item {index} of input list")
    for name, item in element.items():
        try:
            read_instance_item(item, name, tensor_infos, shapes, columns)
        except errors.ServingError as e:
            raise wrap_element_error(e, index, name) from None
    if set(element) != set(tensor_infos):
        raise errors.InvalidArgument(
            f"Failed to process element: {index} of 'instances' list. JSON object: "
            f"{value_text(element)} keys must be equal to: {','.join(sorted(tensor_infos))}")


def read_inputs(request, tensor_infos):
    """{input name: numpy array} from a columnar request (FillTensorMapFromInputsMap); keys
    that are not inputs of the signature are ignored, as TF Serving ignores them."""
    value = request["inputs"]
    if not isinstance(value, dict) or is_b64_object(value):
        if len(tensor_infos) > 1:
            raise errors.InvalidArgument(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map")
        value = {next(iter(tensor_infos)): value}
    arrays = {}
    for name in sorted(tensor_infos):
        if name not in value:
            raise errors.InvalidArgument(f"Missing named input: {name} in 'inputs' object.")
        dtype_name = dtype_name_of(tensor_infos[name])
        values, shape = read_tensor(value[name], dtype_name, name)
        arrays[name] = to_array(values, shape, dtype_name)
    return arrays
