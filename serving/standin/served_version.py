"""One loaded SavedModel version of the stand-in: its signatures, called from many threads.

Loading reads the `serve` meta graph's SignatureDefs (TF Serving hides the init op too)
and the SavedModel, then replays the export's warmup requests. A request's inputs are
checked in TF Serving's words (signature_inputs.py); a graph error becomes
InvalidArgument with TF's message and the failing node.

    .venv/bin/python -c "from serving.standin import served_version as s; v = s.ServedVersion('m', 1, 'OUT/export/image_classifier/1'); print(sorted(v.signature_defs))"
"""
import gc
import os
import re
import time

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_metadata_pb2

from common import predict_protos, signature, warmup
from common.export_predictor import call_signature  # TF's flat call, shared with batch prediction

from serving.standin import errors, metrics
from serving.standin.signature_inputs import (check_batch_sizes, check_input_names, convert_inputs,
                                             parse_input_specs)

INIT_OP_SIGNATURE = "__saved_model_init_op"  # internal to SavedModel; TF Serving hides it too


class _Released:
    """Set when a ServedVersion is freed: a plain attribute, since __del__ may run inside
    another lock's critical section (an Event's lock there could deadlock)."""
    is_pending = False


def read_signature_defs(export_dir):
    """{signature name: SignatureDef} of the `serve` meta graph, without the init-op entry."""
    saved_model = saved_model_pb2.SavedModel()
    path = os.path.join(export_dir, "saved_model.pb")
    with tf.io.gfile.GFile(path, "rb") as f:
        try:
            saved_model.ParseFromString(f.read())
        except DecodeError as e:  # protobuf's own message names neither the file nor the type
            raise DecodeError(f"cannot parse {path} as a SavedModel: {e}") from e
    for meta_graph in saved_model.meta_graphs:
        if "serve" in meta_graph.meta_info_def.tags:
            return {name: sig for name, sig in meta_graph.signature_def.items()
                    if name != INIT_OP_SIGNATURE}
    raise ValueError(f"{export_dir} has no meta graph tagged 'serve'")


def rest_signature_not_found(name):
    return errors.InvalidArgument(f'Serving signature name: "{name}" not found in signature def')


def summarize_op_error(op_error):
    """TF's own message (the line before the "[[{{node X}}]]" marker of a graph error),
    without the execution preamble and node trace, plus the failing node."""
    lines = op_error.message.splitlines()
    marker = next((i for i, line in enumerate(lines) if "[[{{node" in line), len(lines))
    before = [line.strip() for line in lines[:marker] if line.strip()]
    text = re.sub(r"\s*\[Op:[^\]]*\]$", "", before[-1] if before else op_error.message.strip())
    node = re.search(r"\[\[\{\{node ([^}]+)\}\}\]\]", op_error.message)
    return f"{text} (at node {node.group(1)})" if node else text


class ServedVersion:
    """One loaded SavedModel version; safe to call from many threads at once. With a scheduler
    (--enable_batching) predict() runs inside merged batches."""

    def __init__(self, model_name, version, export_dir, scheduler=None):
        self.model_name = model_name
        self.version = version
        self.export_dir = export_dir
        self.scheduler = scheduler
        start, is_loaded = time.perf_counter(), False
        try:  # TF's loader counts every attempt and times the successful ones
            self.signature_defs = read_signature_defs(export_dir)
            self.input_specs = parse_input_specs(self.signature_defs)
            self._loaded = tf.saved_model.load(export_dir, tags=["serve"])
            self._functions = {name: self._loaded.signatures[name] for name in self.signature_defs}
            is_loaded = True
        finally:
            metrics.PROCESS.record_load(export_dir, is_loaded, time.perf_counter() - start)

    def __del__(self):
        # Unloaded and answered: its graphs and variables reference each other, so only a full
        # collection frees them, which collect_released() runs.
        _Released.is_pending = True

    def signature_def_map(self):
        """The SignatureDefMap GetModelMetadata answers with (REST and gRPC)."""
        return get_model_metadata_pb2.SignatureDefMap(signature_def=self.signature_defs)

    def resolve_signature(self, signature_name, not_found=None):
        """(name, SignatureDef) to run; "" means serving_default, as in TF Serving. not_found(name)
        is the error for a name the model lacks: each API words it its own way (REST's here)."""
        name = signature_name or signature.SIGNATURE_DEFAULT
        if name not in self.signature_defs:
            raise (not_found or rest_signature_not_found)(name)
        return name, self.signature_defs[name]

    def predict(self, signature_name, inputs, api="Predict"):
        """{output name: numpy array} of a signature run on {input name: array-like}; api
        ("Predict", "Classify", "Regress") labels its runtime_latency."""
        name, arrays = self.checked_inputs(signature_name, inputs)
        start = time.perf_counter()
        if self.scheduler is None:
            outputs = self.run_signature(name, arrays)
        else:
            check_batch_sizes(arrays)
            outputs = self.scheduler.run((self.model_name, self.version, name),
                                         lambda merged: self.run_signature(name, merged), arrays)
        metrics.PROCESS.record_runtime(self.model_name, api, time.perf_counter() - start)
        return outputs

    def checked_inputs(self, signature_name, inputs):
        """(signature name, {input name: numpy array}) of a request, by TF Serving's checks."""
        name, signature_def = self.resolve_signature(signature_name)
        check_input_names(signature_def, inputs)
        return name, convert_inputs(name, self.input_specs[name], inputs)

    def run_signature(self, name, arrays):
        """One model call on validated arrays (convert_inputs'): {output name: numpy array}."""
        specs = self.input_specs[name]
        tensors = {key: tf.constant(array, dtype=specs[key][0]) for key, array in arrays.items()}
        start = time.perf_counter()
        try:
            outputs = call_signature(self._functions[name], tensors)
        except tf.errors.InvalidArgumentError as e:  # e.g. bytes that are not a JPEG
            raise errors.InvalidArgument(
                f"signature {name} failed on this input: {summarize_op_error(e)}") from e
        metrics.PROCESS.record_graph_run(time.perf_counter() - start)  # TF counts successful runs
        return {key: value.numpy() for key, value in outputs.items()}


def collect_released():
    """The seconds of a full garbage collection, run when a ServedVersion was freed since the
    last call (else None): without it an unloaded version's memory stays."""
    if not _Released.is_pending:
        return None
    _Released.is_pending = False
    start = time.perf_counter()
    gc.collect()
    return time.perf_counter() - start


def warm_up(served):
    """Replays the export's warmup requests before the version serves, timed (when the file's
    end is reached) in model_warmup_latency from before the file is read, as TF Serving."""
    start = time.perf_counter()
    if not tf.io.gfile.exists(os.path.join(served.export_dir, signature.WARMUP_FILE)):
        return 0  # no file: no warm-up and no metric, as in TF Serving
    requests = warmup.read_warmup_requests(served.export_dir)
    for request in requests:
        served.predict(request.model_spec.signature_name,
                       predict_protos.request_inputs_to_arrays(request))
    metrics.PROCESS.record_warmup(served.export_dir, time.perf_counter() - start)
    return len(requests)
