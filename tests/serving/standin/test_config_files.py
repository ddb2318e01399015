"""TF Serving's config files: ModelServerConfig, BatchingParameters, MonitoringConfig in text format.

    .venv/bin/python -m pytest tests/serving/standin/test_config_files.py
"""
import pytest
from google.protobuf import text_format

from serving.standin import config_files, version_policy

MODEL_CONFIG = """
model_config_list {
  config {
    name: "image_classifier"
    base_path: "/models/image_classifier"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config { name: "other" base_path: "/models/other" model_platform: "tensorflow" }
}
"""


def write(tmp_path, text, name="config.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_model_config_is_tensorflow_servings_own_proto(tmp_path):
    config = config_files.read_model_server_config(write(tmp_path, MODEL_CONFIG))
    first, second = config.model_config_list.config
    assert (first.name, first.base_path, second.name) == (
        "image_classifier", "/models/image_classifier", "other")
    assert list(first.model_version_policy.specific.versions) == [1, 2]
    assert dict(first.version_labels) == {"stable": 1, "canary": 2}


@pytest.mark.parametrize("text, words", [
    ("model_config_list { config { name: 'a' base_path: '/a' model_platform: 'tensorflow' } "
     "config { name: 'a' base_path: '/b' model_platform: 'tensorflow' } }",
     "Illegal to list model a multiple times in config list"),
    ("model_config_list { config { name: 'a' base_path: '/a' } }", 'model_platform must be "tensorflow"'),
    ("model_config_list { config { name: 'a' model_platform: 'tensorflow' } }", "needs a name and a base_path"),
    ("model_config_list { config { name: 'a' base_path: '/a' model_platform: 'tensorflow' "
     "model_version_policy { specific { } } } }", "specific {} lists no versions"),
    ("model_config_list { config { nme: 'a' } }", "Invalid protobuf file"),
    ("custom_model_config { }", "custom_model_config is not supported"),
])
def test_bad_model_configs_are_named(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(config_files.ConfigFileError, match=words) as raised:
        config_files.read_model_server_config(path)
    assert f"--model_config_file={path}" in str(raised.value)


def test_unreadable_file_names_the_flag(tmp_path):
    with pytest.raises(config_files.ConfigFileError, match="--monitoring_config_file=.*cannot read"):
        config_files.read_prometheus_path(str(tmp_path / "missing.txt"))


def test_batching_parameters_parse_as_tf_serving_writes_them(tmp_path):
    options = config_files.read_batching_parameters(write(tmp_path, """
        max_batch_size { value: 32 }
        batch_timeout_micros { value: 2000 }
        max_enqueued_batches { value: 100 }
        num_batch_threads { value: 2 }
        thread_pool_name { value: "pool" }
        allowed_batch_sizes: 8
        allowed_batch_sizes: 32
    """))
    assert options == config_files.BatchingOptions(32, 2000, 100, 2, "pool", (8, 32))


def test_an_empty_batching_file_means_tf_servings_defaults(tmp_path):
    options = config_files.read_batching_parameters(write(tmp_path, ""))
    assert (options.max_batch_size, options.batch_timeout_micros, options.max_enqueued_batches,
            options.allowed_batch_sizes) == (1000, 0, 10, ())


@pytest.mark.parametrize("text, words", [
    ("max_batch_size: 8", "Invalid protobuf file"),  # a wrapper: { value: 8 }
    ("max_batch_size { value: 8 } allowed_batch_sizes: 4 allowed_batch_sizes: 2 "
     "allowed_batch_sizes: 8", "must be monotonically increasing"),
    ("max_batch_size { value: 8 } allowed_batch_sizes: 4", "final entry in allowed_batch_sizes "
     "must equal max_batch_size, got 4 and 8"),
    ("num_batch_threads { value: 0 }", "num_batch_threads=0 must be >= 1"),
    ("pad_variable_length_inputs: true", "pad_variable_length_inputs is not implemented"),
    ("max_execution_batch_size { value: 4 }", "max_execution_batch_size is not implemented"),
])
def test_bad_batching_parameters_are_named(tmp_path, text, words):
    with pytest.raises(config_files.ConfigFileError, match=words):
        config_files.read_batching_parameters(write(tmp_path, text))


@pytest.mark.parametrize("text, path", [
    ('prometheus_config { enable: true path: "/metrics" }', "/metrics"),
    ("prometheus_config { enable: true }", "/monitoring/prometheus/metrics"),
    ('prometheus_config { path: "/metrics" }', None),
    ("", None),
])
def test_monitoring_config(tmp_path, text, path):
    assert config_files.read_prometheus_path(write(tmp_path, text)) == path


def test_declared_messages_have_tf_servings_field_numbers():
    """Numbers from session_bundle_config.proto and monitoring_config.proto: a binary
    message from TF Serving's own classes would decode into these."""
    numbers = {f.name: f.number for f in config_files.BatchingParameters.DESCRIPTOR.fields}
    assert {k: numbers[k] for k in ("max_batch_size", "batch_timeout_micros",
                                    "max_enqueued_batches", "num_batch_threads",
                                    "thread_pool_name", "allowed_batch_sizes")} == {
        "max_batch_size": 1, "batch_timeout_micros": 2, "max_enqueued_batches": 3,
        "num_batch_threads": 4, "thread_pool_name": 5, "allowed_batch_sizes": 6}
    assert config_files.BatchingParameters.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    monitoring = config_files.MonitoringConfig.DESCRIPTOR
    assert monitoring.fields_by_name["prometheus_config"].number == 1
    prometheus = monitoring.fields_by_name["prometheus_config"].message_type
    assert {f.name: f.number for f in prometheus.fields} == {"enable": 1, "path": 2}
    message = text_format.Parse("max_batch_size { value: 7 }", config_files.BatchingParameters())
    assert message.SerializeToString() == b"\x0a\x02\x08\x07"  # field 1, Int64Value{value: 7}


@pytest.mark.parametrize("policy, present, served", [
    ("", [1, 2, 3], {3}),
    ("latest { num_versions: 2 }", [1, 2, 3], {2, 3}),
    ("all { }", [1, 2, 3], {1, 2, 3}),
    ("specific { versions: 1 versions: 5 }", [1, 2, 3], {1}),
    ("latest { }", [], set()),
])
def test_version_policies_pick_like_tf_serving(policy, present, served):
    from tensorflow_serving.config import file_system_storage_path_source_pb2 as fs
    proto = text_format.Parse(policy, fs.FileSystemStoragePathSourceConfig.ServableVersionPolicy())
    assert version_policy.select_versions(proto, present) == served
