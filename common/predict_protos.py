"""PredictRequest / PredictResponse <-> Python values, shared by warmup, client and server.

The protos come from the `tensorflow-serving-api` package, so a request built
here is byte-for-byte what TF Serving expects.

    .venv/bin/python -c "import common.predict_protos as p; print(p.make_predict_request([b'x']))"
"""
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

from common import signature


def make_predict_request(jpeg_bytes_list, model_name=signature.DEFAULT_MODEL_NAME,
                         signature_name=signature.SIGNATURE_DEFAULT, keys=None, version=None):
    """Builds a PredictRequest for a batch of JPEG byte strings (and optional keys)."""
    jpegs = [bytes(jpeg) for jpeg in jpeg_bytes_list]
    if not jpegs:
        raise ValueError("jpeg_bytes_list is empty: a predict request needs at least one image")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    request.inputs[signature.INPUT_IMAGE_BYTES].CopyFrom(
        tf.make_tensor_proto(jpegs, dtype=tf.string, shape=[len(jpegs)]))
    if keys is not None:
        keys = [key.encode() if isinstance(key, str) else bytes(key) for key in keys]
        if len(keys) != len(jpegs):
            raise ValueError(f"len(keys)={len(keys)} must equal len(jpeg_bytes_list)={len(jpegs)}")
        request.inputs[signature.INPUT_KEY].CopyFrom(
            tf.make_tensor_proto(keys, dtype=tf.string, shape=[len(keys)]))
    return request


def tensor_proto_to_array(tensor_proto):
    """A TensorProto as a numpy array (strings come back as an object array of bytes)."""
    return tf.make_ndarray(tensor_proto)


def request_inputs_to_arrays(request):
    """{input name: numpy array} for every input of a PredictRequest."""
    return {name: tensor_proto_to_array(proto) for name, proto in request.inputs.items()}


def response_outputs_to_arrays(response):
    """{output name: numpy array} for every output of a PredictResponse."""
    return {name: tensor_proto_to_array(proto) for name, proto in response.outputs.items()}
