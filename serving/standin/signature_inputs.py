"""A request's inputs checked against a signature as TF Serving checks them, then made arrays.

The names first (predict_util.cc's words), then each value's dtype and rank: a value
that cannot become the input's tensor is refused here, so a merged batch never meets one.

    .venv/bin/python -c "import tensorflow as tf; from serving.standin import signature_inputs as s; print(s.convert_inputs('serving_default', {'x': (tf.float32, tf.TensorShape([None]))}, {'x': [1, 2]}))"
"""
import numpy as np
import tensorflow as tf

from serving.standin import errors


def parse_input_specs(signature_defs):
    """{signature: {input: (tf.DType, tf.TensorShape)}}, parsed once per load so requests
    only look them up."""
    return {name: {key: (tf.dtypes.as_dtype(info.dtype), tf.TensorShape(info.tensor_shape))
                   for key, info in signature_def.inputs.items()}
            for name, signature_def in signature_defs.items()}


def check_input_names(signature_def, inputs):
    """TF Serving's checks and words (predict_util.cc): the count first, then each alias."""
    expected, given = set(signature_def.inputs), set(inputs)
    if len(given) != len(expected):
        raise errors.InvalidArgument(
            f"input size does not match signature: {len(given)}!={len(expected)} "
            f"len({{{','.join(sorted(given))}}}) != len({{{','.join(sorted(expected))}}}). "
            f"Sent extra: {{{','.join(sorted(given - expected))}}}. "
            f"Missing but required: {{{','.join(sorted(expected - given))}}}.")
    for name in sorted(given - expected):
        raise errors.InvalidArgument(
            f"input tensor alias not found in signature: {name}. Inputs expected to be in "
            f"the set {{{','.join(sorted(expected))}}}.")


def check_shape(name, shape, expected):
    """A non-empty batch whose rank is the signature's (when the signature fixes one)."""
    if expected.rank is not None and len(shape) != expected.rank:
        raise errors.InvalidArgument(
            f"input {name}: expected rank {expected.rank} (shape {expected}), got shape {shape}")
    if len(shape) == 0 or shape[0] == 0:
        raise errors.InvalidArgument(f"input {name}: expected a non-empty batch, got shape {shape}")


def to_array(name, value, dtype):
    """A numpy array of the input's dtype; strings as an object array of bytes or str (numpy's
    fixed-width bytes would drop trailing NUL bytes)."""
    try:
        if dtype != tf.string:
            return np.asarray(value, dtype=dtype.as_numpy_dtype)
        array = np.asarray(value, dtype=object)
    except (TypeError, ValueError, OverflowError) as e:
        raise errors.InvalidArgument(f"input {name}: cannot convert to {dtype.name}: {e}") from e
    if not all(isinstance(item, (bytes, str)) for item in array.flat):
        raise errors.InvalidArgument(f"input {name}: cannot convert to string: expected bytes or "
                                     f"text in every element, got shape {array.shape} of {array.dtype}")
    return array


def convert_inputs(signature_name, specs, inputs):
    """{input name: numpy array} with each input's dtype and rank (specs: {name: (tf.DType,
    tf.TensorShape)}). Batch sizes may differ, as in TF Serving; batching checks them."""
    arrays = {}
    for name, value in inputs.items():
        dtype, shape = specs[name]
        arrays[name] = to_array(name, value, dtype)
        check_shape(name, tuple(arrays[name].shape), shape)
    return arrays


def check_batch_sizes(arrays):
    """BatchingSession's rule (ComputeTensorBatchSize): every input of a batched request has
    the same 0th-dimension size, since the merged batch is split back by it."""
    if len({int(array.shape[0]) for array in arrays.values()}) > 1:
        raise errors.InvalidArgument(
            "Batching Run() input tensors must have equal 0th-dimension size")
