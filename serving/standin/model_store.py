"""One model of the stand-in server: the versions under its base path that its policy serves.

TF Serving's model_version_policy decides which versions are served: `latest`
(the N highest, default 1: TF Serving's default), `all`, or `specific` versions.
A refresh (the server polls every --file_system_poll_wait_seconds) loads each
wanted version that is new, replays its warmup requests, then swaps the set in;
requests in flight keep the version they started with. Loaded versions are
immutable, so concurrent requests need no lock. A version that fails to load is
skipped (for `latest`, the next highest serves instead) and retried when its files
change (a copy that lands saved_model.pb before variables/ fails once, then loads).
When a served version is deleted, the policy picks again from what remains.
Model status lists every version seen, as TF Serving's GetModelStatus does: served
ones AVAILABLE, replaced or deleted ones END, failed loads END with their error.

    .venv/bin/python -c "from serving.standin import model_store as m; print(m.list_versions('OUT/export/image_classifier'))"
"""
import collections
import logging
import os
import re
import threading
import time

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_status_pb2, status_pb2

from common import predict_protos, signature, warmup

from serving.standin import errors, metrics

log = logging.getLogger(__name__)
INIT_OP_SIGNATURE = "__saved_model_init_op"  # internal to SavedModel; TF Serving hides it too
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
END = get_model_status_pb2.ModelVersionStatus.END
# tensorflow.error.Code values, the type of a version status' error_code
OK, UNKNOWN, NOT_FOUND, DATA_LOSS = 0, 2, 5, 15
# One version's line in GetModelStatus: state is AVAILABLE or END, error_code OK unless it failed.
VersionStatus = collections.namedtuple("VersionStatus", "state error_code error_message")
SERVING_OK = VersionStatus(AVAILABLE, OK, "")
UNLOADED_OK = VersionStatus(END, OK, "")
STRING_ENUM = tf.string.as_datatype_enum


def list_versions(model_base_path):
    """Integer version directories holding a saved_model.pb, ascending."""
    if not tf.io.gfile.isdir(model_base_path):
        return []
    versions = []
    for name in tf.io.gfile.listdir(model_base_path):
        name = name.rstrip("/")
        path = os.path.join(model_base_path, name)
        if name.isdigit() and tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
            versions.append(int(name))
    return sorted(versions)


def fingerprint_version(export_dir):
    """(path, size, mtime) of every file under a version directory, sorted.

    A failed version is retried only when this changes, so a copy still in progress is
    retried (and its failure logged) once per change, not once per poll. gfile's mtime
    has one-second resolution; names and sizes carry most changes.
    """
    entries = []
    for root, _, names in tf.io.gfile.walk(export_dir):
        for name in names:
            path = os.path.join(root, name)
            try:
                stat = tf.io.gfile.stat(path)
            except tf.errors.NotFoundError:  # deleted between the listing and the stat
                continue
            entries.append((path, stat.length, stat.mtime_nsec))
    return tuple(sorted(entries))


def load_error_code(error):
    """The tensorflow.error.Code TF Serving would report for a failed load."""
    if isinstance(error, tf.errors.OpError):
        return error.error_code
    if isinstance(error, errors.ServingError):  # a warmup request failed
        return error.grpc_code.value[0]  # gRPC and TF share the canonical codes
    if isinstance(error, DecodeError):  # TF's ReadBinaryProto: "Can't parse ... as binary proto"
        return DATA_LOSS
    return NOT_FOUND if isinstance(error, FileNotFoundError) else UNKNOWN


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


def summarize_op_error(op_error):
    """TF's own message without the execution preamble and node trace, plus the failing node.

    A graph error reads "Graph execution error: ... Detected at node X ... <message>
    [[{{node X}}]] [Op:...]"; the line before the [[node]] marker is the message.
    """
    lines = op_error.message.splitlines()
    marker = next((i for i, line in enumerate(lines) if "[[{{node" in line), len(lines))
    before = [line.strip() for line in lines[:marker] if line.strip()]
    text = re.sub(r"\s*\[Op:[^\]]*\]$", "", before[-1] if before else op_error.message.strip())
    node = re.search(r"\[\[\{\{node ([^}]+)\}\}\]\]", op_error.message)
    return f"{text} (at node {node.group(1)})" if node else text


class ServedVersion:
    """One loaded SavedModel version; safe to call from many threads at once.

    With a scheduler (--enable_batching) predict() runs inside merged batches.
    """

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

    def resolve_signature(self, signature_name):
        """The SignatureDef to run; "" means serving_default, as in TF Serving (REST's words)."""
        name = signature_name or signature.SIGNATURE_DEFAULT
        if name not in self.signature_defs:
            raise errors.InvalidArgument(
                f'Serving signature name: "{name}" not found in signature def')
        return name, self.signature_defs[name]

    def predict(self, signature_name, inputs, api="Predict"):
        """Runs a signature on {input name: array-like}; returns {output name: numpy array}.

        api ("Predict", "Classify", "Regress") labels the model call's runtime_latency.
        """
        name, signature_def = self.resolve_signature(signature_name)
        check_input_names(signature_def, inputs)
        arrays = convert_inputs(name, self.input_specs[name], inputs)
        start = time.perf_counter()
        if self.scheduler is None:
            outputs = self.run_signature(name, arrays)
        else:
            outputs = self.scheduler.run((self.model_name, self.version, name),
                                         lambda merged: self.run_signature(name, merged), arrays)
        metrics.PROCESS.record_runtime(self.model_name, api, time.perf_counter() - start)
        return outputs

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


def call_signature(function, tensors):
    """{output: tensor} of a loaded signature called with {input: tensor}.

    The flat call TF falls back to for an estimator export's signatures: the keyword call
    first fails a structured binding whose error text reprs every input tensor (0.15 ms of
    GIL-held CPU at batch 1, 0.6 ms at 32). It is TF 2.15's private method (the lock pins
    TF), so a TensorFlow without it gets the keyword call. bench_serving's baseline uses
    this too."""
    flat_call = getattr(function, "_call_with_flat_signature", None)
    if flat_call is None:
        return function(**tensors)
    return flat_call((), tensors)


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
    """A numpy array of the input's dtype: strings as an object array of bytes or str (numpy's
    fixed-width bytes would drop trailing NUL bytes), anything else refused here, so a
    merged batch never meets a value that cannot become a tensor."""
    try:  # the enum, not dtype != tf.string: DType.__eq__ costs ~3 us per request
        if dtype.as_datatype_enum != STRING_ENUM:
            return np.asarray(value, dtype=dtype.as_numpy_dtype)
        array = np.asarray(value, dtype=object)
    except (TypeError, ValueError, OverflowError) as e:
        raise errors.InvalidArgument(f"input {name}: cannot convert to {dtype.name}: {e}") from e
    if not all(isinstance(item, (bytes, str)) for item in array.flat):
        raise errors.InvalidArgument(f"input {name}: cannot convert to string: expected bytes or "
                                     f"text in every element, got shape {array.shape} of {array.dtype}")
    return array


def convert_inputs(signature_name, specs, inputs):
    """{input name: numpy array} with each input's dtype and rank, one batch size for all.

    specs: {input name: (tf.DType, tf.TensorShape)}; input names checked beforehand.
    """
    arrays = {}
    for name, value in inputs.items():
        dtype, shape = specs[name]
        arrays[name] = to_array(name, value, dtype)
        check_shape(name, tuple(arrays[name].shape), shape)
    batch_sizes = {name: int(array.shape[0]) for name, array in arrays.items()}
    if len(set(batch_sizes.values())) > 1:
        raise errors.InvalidArgument(f"inputs have different batch sizes: {batch_sizes} "
                                     f"(signature {signature_name})")
    return arrays


def servable_not_found(model_name, version):
    """TF Serving's NotFound, naming what the request asked for: Latest(m) or Specific(m, v)."""
    spec = f"Specific({model_name}, {version})" if version is not None else f"Latest({model_name})"
    return errors.NotFound(f"Servable not found for request: {spec}")


def warm_up(served):
    """Replays the export's warmup requests (as TF Serving does) before the version serves."""
    requests = warmup.read_warmup_requests(served.export_dir)
    for request in requests:
        served.predict(request.model_spec.signature_name,
                       predict_protos.request_inputs_to_arrays(request))
    return len(requests)


def select_versions(policy, present):
    """The versions a ModelVersionPolicy serves out of the loadable ones present."""
    choice = policy.WhichOneof("policy_choice") if policy is not None else None
    if choice == "all":
        return set(present)
    if choice == "specific":
        return set(present) & set(policy.specific.versions)
    count = max(policy.latest.num_versions, 1) if choice == "latest" else 1  # TF's default: 1
    return set(sorted(present)[-count:])


class ModelStore:
    """The versions of one model that its policy serves; refresh() follows its base path."""

    def __init__(self, model_name, model_base_path, enable_warmup=True, policy=None,
                 scheduler=None):
        self.model_name = model_name
        self.model_base_path = model_base_path
        self.enable_warmup = enable_warmup
        self.policy = policy        # a ModelVersionPolicy proto; None: the latest version
        self.scheduler = scheduler  # a batching.BatchScheduler with --enable_batching
        self._served = {}    # version -> ServedVersion answering requests; replaced whole
        self._failed = {}    # version -> fingerprint of the failed load: retried when it changes
        self._statuses = {}  # version -> VersionStatus; replaced whole, so readers need no lock
        self._refresh_lock = threading.Lock()

    def refresh(self):
        """Serves what the policy wants of the loadable versions present; returns the highest
        served ServedVersion (or None). New versions load before the old ones go, so requests
        never see a gap; a deleted version is never served."""
        with self._refresh_lock:
            present = list_versions(self.model_base_path)
            self._failed = {v: f for v, f in self._failed.items() if v in present}
            served = {v: s for v, s in self._served.items() if v in present}
            failed_now = set()  # tried in this refresh: never twice, even if files still change
            while True:
                loadable = [v for v in present
                            if v not in failed_now and not self._is_stale_failure(v)]
                wanted = select_versions(self.policy, loadable)
                missing = sorted(wanted - set(served), reverse=True)
                if not missing:
                    break
                loaded = self._load(missing[0])
                if loaded is None:
                    failed_now.add(missing[0])
                else:
                    served[loaded.version] = loaded
            self._swap_in({v: served[v] for v in wanted})
            return self.latest()

    def _is_stale_failure(self, version):
        """True when the version failed to load and its files have not changed since."""
        if version not in self._failed:
            return False
        path = os.path.join(self.model_base_path, str(version))
        return self._failed[version] == fingerprint_version(path)

    def _load(self, version):
        path = os.path.join(self.model_base_path, str(version))
        fingerprint = fingerprint_version(path)  # taken before the load: a copy mid-load retries
        try:
            served = ServedVersion(self.model_name, version, path, self.scheduler)
            count = warm_up(served) if self.enable_warmup else 0
        except (OSError, ValueError, DecodeError, tf.errors.OpError, errors.ServingError) as e:
            log.error("model %s version %d at %s failed to load (retried when its files "
                      "change): %s", self.model_name, version, path, e)
            self._failed[version] = fingerprint
            self._set_status(version, VersionStatus(END, load_error_code(e), str(e)))
            return None
        self._failed.pop(version, None)
        log.info("model %s: serving version %d from %s (%d warmup requests replayed)",
                 self.model_name, version, path, count)
        return served

    def _swap_in(self, served):
        """Makes served answer requests; the versions it drops are reported END."""
        previous, self._served = self._served, served
        for version in sorted(set(previous) - set(served)):
            if served and version > max(served):
                log.warning("model %s: version %d was removed; falling back to version %d",
                            self.model_name, version, max(served))
            elif not served:
                log.warning("model %s: version %d was removed and no other version loads; "
                            "serving nothing", self.model_name, version)
            self._set_status(version, UNLOADED_OK)
        for version in served:
            if self._statuses.get(version) != SERVING_OK:
                self._set_status(version, SERVING_OK)

    def _set_status(self, version, status):
        self._statuses = {**self._statuses, version: status}

    def latest(self):
        """The highest served version, or None."""
        served = self._served
        return served[max(served)] if served else None

    def served_versions(self):
        return sorted(self._served)

    def get(self, version=None):
        """The ServedVersion for a request; NotFound in TF Serving's words otherwise."""
        served = self._served
        if version is None:
            if not served:
                raise servable_not_found(self.model_name, None)
            return served[max(served)]
        if int(version) not in served:
            raise servable_not_found(self.model_name, version)
        return served[int(version)]

    def statuses(self):
        """{version: VersionStatus} of every version seen."""
        return self._statuses

    def retire(self):
        """The model left the config: nothing is served, every version is reported END."""
        with self._refresh_lock:
            self._swap_in({})


def format_status(model_name, statuses, version=None):
    """GetModelStatusResponse for statuses (highest version first, TF Serving's VersionMap
    order), or TF Serving's NotFound (get_model_status_impl.cc) when nothing matches."""
    if version is not None:
        statuses = {v: s for v, s in statuses.items() if v == int(version)}
        if not statuses:
            raise errors.NotFound(f"Could not find version {version} of model {model_name}")
    elif not statuses:
        raise errors.NotFound(f"Could not find any versions of model {model_name}")
    response = get_model_status_pb2.GetModelStatusResponse()
    for number in sorted(statuses, reverse=True):
        state, code, message = statuses[number]
        response.model_version_status.add(version=number, state=state, status=(
            status_pb2.StatusProto(error_code=code, error_message=message)))
    return response
