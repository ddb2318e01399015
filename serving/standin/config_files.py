"""TF Serving's config files, read with protobuf's text_format exactly as TF Serving reads them.

    --model_config_file        ModelServerConfig (tensorflow_serving/config/model_server_config.proto,
                               shipped in tensorflow-serving-api)
    --batching_parameters_file BatchingParameters (servables/tensorflow/session_bundle_config.proto)
    --monitoring_config_file   MonitoringConfig (config/monitoring_config.proto)

tensorflow-serving-api 2.15 ships no Python classes for the last two: they are declared
here from descriptor protos with TF Serving's names and field numbers, so a file parses
here exactly when it parses there.

    .venv/bin/python -c "from serving.standin import config_files as c; print(c.BatchingParameters())"
"""
import dataclasses
import os
import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2
from tensorflow_serving.config import model_server_config_pb2

PACKAGE = "tensorflow.serving"
TENSORFLOW_PLATFORM = "tensorflow"  # the only model_platform the stand-in serves
DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"  # PrometheusExporter::kPrometheusPath
_URI_SCHEME = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://")  # tensorflow::io::ParseURI's scheme
_F = descriptor_pb2.FieldDescriptorProto
# (message, [(field, number, type, wrapper message or None, repeated?)]) as TF Serving declares them.
_MESSAGES = (
    ("BatchingParameters", [
        ("max_batch_size", 1, _F.TYPE_MESSAGE, "Int64Value", False),
        ("batch_timeout_micros", 2, _F.TYPE_MESSAGE, "Int64Value", False),
        ("max_enqueued_batches", 3, _F.TYPE_MESSAGE, "Int64Value", False),
        ("num_batch_threads", 4, _F.TYPE_MESSAGE, "Int64Value", False),
        ("thread_pool_name", 5, _F.TYPE_MESSAGE, "StringValue", False),
        ("allowed_batch_sizes", 6, _F.TYPE_INT64, None, True),
        ("pad_variable_length_inputs", 7, _F.TYPE_BOOL, None, False),
        ("enable_large_batch_splitting", 8, _F.TYPE_BOOL, None, False),
        ("max_execution_batch_size", 9, _F.TYPE_MESSAGE, "Int64Value", False)]),
    ("PrometheusConfig", [
        ("enable", 1, _F.TYPE_BOOL, None, False),
        ("path", 2, _F.TYPE_STRING, None, False)]),
    ("MonitoringConfig", [
        ("prometheus_config", 1, _F.TYPE_MESSAGE, f".{PACKAGE}.PrometheusConfig", False)]),
)


class ConfigFileError(ValueError):
    """A config file the server cannot use; main() prints it as one "error:" line, exit 2."""
    code = "INVALID_ARGUMENT"  # TF Serving's canonical code for it (gRPC reloads answer it)


class LabelNotAllowedError(ConfigFileError):
    """A version label on a version that is not AVAILABLE (TF Serving's FAILED_PRECONDITION)."""
    code = "FAILED_PRECONDITION"


def build_message_classes():
    """{message name: generated class} for _MESSAGES, in a private descriptor pool."""
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="serving/standin/tf_serving_config.proto", package=PACKAGE, syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    for message_name, fields in _MESSAGES:
        message = file_proto.message_type.add(name=message_name)
        for name, number, kind, type_name, is_repeated in fields:
            if type_name is not None and not type_name.startswith("."):
                type_name = f".google.protobuf.{type_name}"
            message.field.add(name=name, number=number, type=kind, type_name=type_name,
                              label=_F.LABEL_REPEATED if is_repeated else _F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file_proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name, _ in _MESSAGES}


_CLASSES = build_message_classes()
BatchingParameters = _CLASSES["BatchingParameters"]
MonitoringConfig = _CLASSES["MonitoringConfig"]


def read_text_proto(path, message_class, flag):
    """The message parsed from a text-format file; ConfigFileError naming the flag otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigFileError(f"--{flag}={path}: cannot read it ({e})") from e
    try:
        return text_format.Parse(text, message_class())
    except text_format.ParseError as e:  # TF Serving: "Invalid protobuf file: '<path>'"
        raise ConfigFileError(f"--{flag}={path}: Invalid protobuf file: '{path}' "
                              f"({message_class.DESCRIPTOR.name}: {e})") from e


def read_model_server_config(path):
    """A validated ModelServerConfig from --model_config_file."""
    config = read_text_proto(path, model_server_config_pb2.ModelServerConfig, "model_config_file")
    check_model_server_config(config, f"--model_config_file={path}")
    return config


def check_model_server_config(config, where):
    """TF Serving's checks (server_core.cc) plus the stand-in's limits, each naming the model."""
    if config.WhichOneof("config") == "custom_model_config":
        raise ConfigFileError(f"{where}: custom_model_config is not supported (TF Serving "
                              "cannot load one either); use model_config_list")
    names = set()
    for model in config.model_config_list.config:
        if model.name in names:
            raise ConfigFileError(f"{where}: Illegal to list model {model.name} multiple times "
                                  "in config list")
        names.add(model.name)
        check_model_config(model, where)
    try:
        check_base_paths(config)
    except ConfigFileError as e:
        raise ConfigFileError(f"{where}: {e}") from None


def check_base_paths(config):
    """ValidateModelConfigList's rule (TF Serving has no model_config_list_root_dir flag): every
    base_path is absolute or a URI, for a start-up config and a gRPC reload alike."""
    for model in config.model_config_list.config:
        if is_relative_path(model.base_path):
            raise ConfigFileError(f"Expected model {model.name} to have an absolute path or URI; "
                                  f"got base_path()={model.base_path}")


def is_relative_path(uri):
    """UriIsRelativePath: no scheme:// (io::ParseURI's) and a path not starting with "/"."""
    return _URI_SCHEME.match(uri) is None and uri != "" and not uri.startswith("/")


def check_model_config(model, where):
    if not model.name or not model.base_path:
        raise ConfigFileError(f"{where}: every config needs a name and a base_path, got "
                              f"name={model.name!r} base_path={model.base_path!r}")
    if model.model_platform != TENSORFLOW_PLATFORM:
        raise ConfigFileError(
            f"{where}: model {model.name}: model_platform must be \"{TENSORFLOW_PLATFORM}\" "
            f"(TF Serving requires it too), got {model.model_platform!r}")
    policy = model.model_version_policy
    if policy.WhichOneof("policy_choice") == "specific" and not policy.specific.versions:
        raise ConfigFileError(f"{where}: model {model.name}: model_version_policy specific {{}} "
                              "lists no versions")


def single_model_config(model_name, model_base_path):
    """What --model_name/--model_base_path mean: one TensorFlow model, latest version only."""
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.config.add(name=model_name, base_path=model_base_path,
                                        model_platform=TENSORFLOW_PLATFORM)
    return config


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """Resolved batching parameters. Each default is TF Serving's for an unset field
    (SharedBatchScheduler::QueueOptions and ::Options), so an empty file batches the same."""
    max_batch_size: int = 1000
    batch_timeout_micros: int = 0      # 0: a free batch thread takes whatever is queued
    max_enqueued_batches: int = 10
    num_batch_threads: int = os.cpu_count() or 1  # TF: port::MaxParallelism()
    thread_pool_name: str = "model_server_batch_threads"  # TF Serving's name without a file
    allowed_batch_sizes: tuple = ()


def read_batching_parameters(path):
    """BatchingOptions from --batching_parameters_file; ConfigFileError for a bad value."""
    params = read_text_proto(path, BatchingParameters, "batching_parameters_file")
    where = f"--batching_parameters_file={path}"
    unsupported = [name for name in ("pad_variable_length_inputs", "enable_large_batch_splitting")
                   if getattr(params, name)]
    unsupported += ["max_execution_batch_size"] * params.HasField("max_execution_batch_size")
    if unsupported:
        raise ConfigFileError(f"{where}: {unsupported[0]} is not implemented by the stand-in; "
                              "remove it or use TF Serving")
    defaults = BatchingOptions()
    values = {name: getattr(params, name).value if params.HasField(name) else getattr(defaults, name)
              for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                           "num_batch_threads")}
    options = BatchingOptions(**values, thread_pool_name=(
        params.thread_pool_name.value if params.HasField("thread_pool_name") else "batch_threads"),
        allowed_batch_sizes=tuple(params.allowed_batch_sizes))
    check_batching_options(options, where)
    return options


def check_batching_options(options, where):
    """TF Serving's rules for the values, named with the offending value."""
    for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
        if getattr(options, name) < 1:
            raise ConfigFileError(f"{where}: {name}={getattr(options, name)} must be >= 1")
    if options.batch_timeout_micros < 0:
        raise ConfigFileError(f"{where}: batch_timeout_micros={options.batch_timeout_micros} "
                              "must be >= 0")
    sizes = options.allowed_batch_sizes
    if any(later <= earlier for earlier, later in zip(sizes, sizes[1:])):
        raise ConfigFileError(f"{where}: allowed_batch_sizes entries must be monotonically "
                              f"increasing, got {list(sizes)}")
    if sizes and sizes[-1] != options.max_batch_size:
        raise ConfigFileError(f"{where}: final entry in allowed_batch_sizes must equal "
                              f"max_batch_size, got {sizes[-1]} and {options.max_batch_size}")


def read_prometheus_path(path):
    """The metrics URL path from --monitoring_config_file, or None when Prometheus is disabled."""
    config = read_text_proto(path, MonitoringConfig, "monitoring_config_file")
    prometheus = config.prometheus_config
    if not prometheus.enable:
        return None
    return prometheus.path or DEFAULT_PROMETHEUS_PATH
