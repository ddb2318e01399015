"""TF Serving's JSON answers (MakeJsonFromTensors in util/json_tensor.cc), float texts included.

Floats as WriteDecimal writes them: C's "%g" when that reads back to the same float32/64,
else "%.9g" / "%.17g"; ".0" after a whole number not in exponent form; NaN, Infinity and
-Infinity bare. Strings are text, or {"b64": ...} for *_bytes outputs and non-UTF-8 bytes.

    .venv/bin/python -c "from serving.standin import json_writer as j; import numpy as np; print(j.format_floats(np.float32([0.1, 1, 2/3, np.nan])))"
"""
import base64
import json

import numpy as np

BINARY_SUFFIX = "_bytes"  # TF Serving: string tensors named *_bytes carry base64 binary


class RawJson(str):
    """JSON text that encode_json writes as it is (floats already in TF Serving's form)."""


def format_floats(values):
    """TF Serving's text of each value of a float16/32/64 numpy array, flattened."""
    values = np.asarray(values)
    is_double = values.dtype == np.float64
    flat = values.ravel()
    if not is_double:
        flat = flat.astype(np.float32)
    numbers = flat.tolist()
    texts = ["%.6g" % v for v in numbers]
    finite = np.isfinite(flat)
    back = np.array(texts, dtype=np.float64)  # "nan"/"inf" parse too; no warnings
    if not is_double:
        back = back.astype(np.float32)  # 6 digits never round past float32's max
    long_form = "%.17g" if is_double else "%.9g"
    for i in np.flatnonzero(finite & (back != flat)).tolist():
        texts[i] = long_form % numbers[i]
    maybe_whole = ~finite | (flat == np.floor(flat))  # only these can lack "." and "e"
    for i in np.flatnonzero(maybe_whole).tolist():
        text = texts[i]
        if "." not in text and "e" not in text:
            texts[i] = text + ".0" if finite[i] else non_finite_text(numbers[i])
    return texts


def non_finite_text(value):
    if value != value:
        return "NaN"
    return "-Infinity" if value < 0 else "Infinity"


def format_float(value, is_double=False):
    """One value as WriteDecimal writes it (float32 unless is_double)."""
    return format_floats(np.array([value], np.float64 if is_double else np.float32))[0]


def to_json_value(name, array):
    """A non-float numpy output as JSON values: strings as text, or {"b64"} for *_bytes
    outputs and for values that are not UTF-8 (TF Serving writes those bytes raw)."""
    def convert(item):
        if isinstance(item, list):
            return [convert(x) for x in item]
        if isinstance(item, bytes):
            if not name.endswith(BINARY_SUFFIX):
                try:
                    return item.decode("utf-8")
                except UnicodeDecodeError:
                    pass  # not text: base64 keeps the answer valid JSON
            return {"b64": base64.b64encode(item).decode("ascii")}
        return item
    return convert(np.asarray(array).tolist())


def value_texts(name, array):
    """JSON texts of array[i] for each i (one text for a scalar)."""
    array = np.asarray(array)
    if array.dtype.kind != "f" or array.ndim == 0 or 0 in array.shape[1:]:
        values = to_json_value(name, array)
        return [json.dumps(v) for v in values] if array.ndim else [json.dumps(values)]
    texts = format_floats(array)
    for size in reversed(array.shape[1:]):
        texts = ["[" + ", ".join(texts[i:i + size]) + "]" for i in range(0, len(texts), size)]
    return texts


def encode_json(body):
    """JSON bytes of dicts, lists, RawJson and plain values (RawJson written as it is)."""
    return write_json(body).encode("utf-8")


def write_json(value):
    if isinstance(value, RawJson):
        return value
    if isinstance(value, dict):
        return "{" + ", ".join(json.dumps(str(k)) + ": " + write_json(v)
                               for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(write_json(v) for v in value) + "]"
    if isinstance(value, float):
        return format_float(value, is_double=True)
    return json.dumps(value)
