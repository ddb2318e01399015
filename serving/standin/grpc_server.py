"""The stand-in's gRPC endpoint: TF Serving's PredictionService and ModelService.

tensorflow-serving-api's generated services and messages, so any TF Serving client works:
Predict (outputs in their dtype's typed field, never tensor_content: kAsProtoField),
Classify, Regress and MultiInference (inference.py), GetModelMetadata, GetModelStatus,
HandleReloadConfigRequest, with TF Serving's codes and words.

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier --port 8500
"""
import logging
from concurrent import futures

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2, model_management_pb2, model_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from common import predict_protos

from serving.standin import (config_files, errors, inference, metrics as metrics_lib,
                             signature_inputs)

# Concurrent RPCs, each holding a thread while its model call runs (the calls release the
# GIL); with --enable_batching this bounds how many requests one batch can merge.
GRPC_WORKERS = 64
SIGNATURE_DEF_FIELD = "signature_def"  # the only GetModelMetadata field TF Serving serves
# dtype -> the TensorProto field AsProtoField fills (tensor.proto documents which is which).
TYPED_FIELDS = {
    tf.float32: "float_val", tf.float64: "double_val", tf.int64: "int64_val",
    tf.int32: "int_val", tf.int16: "int_val", tf.int8: "int_val", tf.uint8: "int_val",
    tf.uint16: "int_val", tf.bool: "bool_val", tf.string: "string_val",
    tf.uint32: "uint32_val", tf.uint64: "uint64_val",
    tf.float16: "half_val", tf.bfloat16: "half_val",            # the 16 bits, as integers
    tf.complex64: "scomplex_val", tf.complex128: "dcomplex_val",  # real, imaginary, ...
}


def make_typed_tensor_proto(value):
    """A TensorProto of a numpy array (strings: an object array of bytes) in typed fields."""
    array = np.asarray(value)
    dtype = tf.string if array.dtype == object else tf.as_dtype(array.dtype)
    proto = tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    getattr(proto, TYPED_FIELDS[dtype]).extend(typed_values(array, dtype))
    return proto


def typed_values(array, dtype):
    """The flat values in the form their repeated field holds."""
    flat = array.ravel()
    if dtype in (tf.float16, tf.bfloat16):
        return flat.view(np.uint16).tolist()
    if dtype.is_complex:
        return np.stack([flat.real, flat.imag], axis=-1).ravel().tolist()
    return flat.tolist()


def abort_on_error(method):
    """Turns ServingError into the matching gRPC status; logs anything else as INTERNAL. The
    RPC is in self.in_flight meanwhile (a set: add and discard are atomic, no lock needed)."""
    def wrapper(self, request, context):
        self.in_flight.add(context)
        try:
            return method(self, request, context)
        except errors.ServingError as e:
            context.abort(e.grpc_code, e.message)
        except Exception as e:  # the RPC boundary: log it, answer INTERNAL, keep serving
            logging.exception("gRPC %s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        finally:
            self.in_flight.discard(context)
    return wrapper


def model_spec_of(request):
    """The request's model_spec; TF Serving's InvalidArgument when it has none."""
    if not request.HasField("model_spec"):
        raise errors.InvalidArgument("Missing ModelSpec")
    return request.model_spec


def resolve(core, request):
    """The ServedVersion a request's model_spec names: a version, a label, or the latest."""
    return resolve_spec(core, model_spec_of(request))


def resolve_spec(core, spec):
    """The ServedVersion a ModelSpec names."""
    choice = spec.WhichOneof("version_choice")
    return core.get(spec.name, spec.version.value if choice == "version" else None,
                    spec.version_label if choice == "version_label" else None)


def select_output_names(signature_def, output_filter):
    """The outputs to return: output_filter's, checked as TF Serving checks them, or all."""
    seen = []
    for alias in output_filter:
        if alias not in signature_def.outputs:
            raise errors.InvalidArgument(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{','.join(sorted(signature_def.outputs))}}}.")
        if alias in seen:
            raise errors.InvalidArgument(f"duplicate output tensor alias: {alias}")
        seen.append(alias)
    return seen or sorted(signature_def.outputs)


def read_request_tensors(request):
    """{input name: numpy array}; a TensorProto that does not parse is TF's parsing error."""
    arrays = {}
    for alias, proto in request.inputs.items():
        try:
            arrays[alias] = predict_protos.tensor_proto_to_array(proto)
        except (TypeError, ValueError) as e:
            raise errors.InvalidArgument(f"tensor parsing error: {alias} ({e})") from e
    return arrays


def predict(core, request):
    """A PredictResponse, checking the request in TF Serving's order (predict_util.cc)."""
    served = resolve(core, request)
    name, signature_def = served.resolve_signature(request.model_spec.signature_name, lambda name: (
        errors.FailedPrecondition(f'Serving signature key "{name}" not found.')))
    signature_inputs.check_input_names(signature_def, request.inputs)
    inputs = read_request_tensors(request)
    output_names = select_output_names(signature_def, request.output_filter)
    outputs = served.predict(name, inputs)
    response = predict_pb2.PredictResponse()
    inference.set_model_spec(response.model_spec, served, name)
    for key in output_names:
        response.outputs[key].CopyFrom(make_typed_tensor_proto(outputs[key]))
    return response


def metadata(core, request):
    """GetModelMetadataResponse with the signature_def map packed, as TF Serving sends it."""
    spec = model_spec_of(request)
    if not request.metadata_field:
        raise errors.InvalidArgument(
            "GetModelMetadataRequest must specify at least one metadata_field")
    for field in request.metadata_field:
        if field != SIGNATURE_DEF_FIELD:
            raise errors.InvalidArgument(f"Metadata field {field} is not supported")
    served = resolve_spec(core, spec)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = served.model_name
    response.model_spec.version.value = served.version
    response.metadata[SIGNATURE_DEF_FIELD].Pack(served.signature_def_map())
    return response


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, core, metrics, in_flight):
        self.core, self.metrics, self.in_flight = core, metrics, in_flight

    @abort_on_error
    def Predict(self, request, context):
        with metrics_lib.track(self.metrics, request.model_spec.name, "Predict", "GRPC"):
            return predict(self.core, request)

    @abort_on_error
    def Classify(self, request, context):
        with metrics_lib.track(self.metrics, request.model_spec.name, "Classify", "GRPC"):
            return inference.classify(resolve(self.core, request), request)

    @abort_on_error
    def Regress(self, request, context):
        with metrics_lib.track(self.metrics, request.model_spec.name, "Regress", "GRPC"):
            return inference.regress(resolve(self.core, request), request)

    @abort_on_error
    def MultiInference(self, request, context):
        """The model of the first task's model_spec (TF Serving's GetModelSpecFromRequest).
        Not counted in request_count or request_latency: TF Serving's MultiInference records
        neither (only Predict, Classify and Regress do)."""
        spec = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()
        return inference.multi_inference(resolve_spec(self.core, spec), request)

    @abort_on_error
    def GetModelMetadata(self, request, context):
        return metadata(self.core, request)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, core, metrics, in_flight):
        self.core, self.metrics, self.in_flight = core, metrics, in_flight

    @abort_on_error
    def HandleReloadConfigRequest(self, request, context):
        """Applies a ModelServerConfig sent over gRPC, as TF Serving's ModelServiceImpl does:
        the answer carries its status and, for each of the request's metric_names, how much
        the metric's first point grew while the config was applied."""
        before = {name: metrics_lib.int64_value(self.metrics, name) for name in request.metric_names}
        if request.config.WhichOneof("config") != "model_config_list":
            raise errors.InvalidArgument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                "ModelConfigList is currently supported")
        try:
            config_files.check_base_paths(request.config)  # TF Serving's words, no prefix
            config_files.check_model_server_config(request.config, "ReloadConfigRequest")
            self.core.apply_config(request.config)
        except config_files.ConfigFileError as e:
            if e.code == "FAILED_PRECONDITION":
                raise errors.FailedPrecondition(str(e)) from e
            raise errors.InvalidArgument(str(e)) from e
        response = model_management_pb2.ReloadConfigResponse()
        response.status.SetInParent()  # ToStatusProto(OK): error_code OK, set as TF Serving sets it
        for name, value in before.items():
            response.metric.add(name=name, int64_value_increase=(
                metrics_lib.int64_value(self.metrics, name) - value))
        return response

    @abort_on_error
    def GetModelStatus(self, request, context):
        """Every version seen, or the one asked for; a label is ignored, as in TF Serving."""
        spec = model_spec_of(request)
        return self.core.get_status(spec.name, spec.version.value if spec.HasField("version") else None)


def start_grpc_server(core, host, port, max_message_bytes, metrics=None):
    """(server, bound port) of a started gRPC server (port 0: a free one); OSError if it cannot
    bind, which does not say why (server.check_port does, before)."""
    options = [("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.max_send_message_length", max_message_bytes),
               # gRPC's default SO_REUSEPORT lets a second server bind the same port and
               # silently take half the connections; a port in use must be an error.
               ("grpc.so_reuseport", 0)]
    executor = futures.ThreadPoolExecutor(max_workers=GRPC_WORKERS)
    server = grpc.server(executor, options=options)
    server.executor, server.in_flight = executor, set()  # for RunningServer.stop()
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(core, metrics, server.in_flight), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(
        ModelService(core, metrics, server.in_flight), server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as e:  # newer grpc raises here instead of returning 0
        raise OSError(f"gRPC could not bind {host}:{port}") from e
    if bound == 0:
        raise OSError(f"gRPC could not bind {host}:{port}")
    server.start()
    return server, bound
