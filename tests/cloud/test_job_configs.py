"""The cloud job configs are valid against the real API schemas.

config.yaml, cloud/ai_platform_custom_tpu.yaml and cloud/ai_platform_hptuning.yaml (the
historical AI Platform route) are checked against the ml v1 discovery document shipped in
google-api-python-client; cloud/vertex_tpu_job.yaml, cloud/vertex_tpu_job_keras.yaml and
cloud/vertex_tpu_job_jax.yaml against google.cloud.aiplatform_v1's CustomJobSpec message and
cloud/vertex_hptuning_job.yaml against its HyperparameterTuningJob, as gcloud parses them. The TPU
machines are the ones Google documents for each TPU generation (v2/v3: cloud-tpu with 8
accelerators; v5e: a ct5lp machine with its topology and the PJRT variables TensorFlow needs;
v6e, for JAX only: one ct6e host with its topology and no TensorFlow variables).
The tuning jobs' parameters must be trainer flags with valid values, and their metric the
one the trainer reports (trainer/cloud/hptuning.py).

    .venv/bin/python -m pytest tests/cloud/test_job_configs.py
"""
import json
import pathlib

import googleapiclient
import pytest
import yaml
from google.cloud.aiplatform_v1.types import AcceleratorType, custom_job, hyperparameter_tuning_job
from google.protobuf import json_format

from trainer.settings import checks, table
from trainer.run import early_stopping

ROOT = pathlib.Path(__file__).resolve().parents[2]
DISCOVERY = pathlib.Path(googleapiclient.__file__).parent / "discovery_cache/documents/ml.v1.json"


def load_ml_v1_schemas():
    return json.loads(DISCOVERY.read_text())["schemas"]


def check_against_schema(value, schema, schemas, path):
    """Returns a list of problems: unknown fields, bad enum values, wrong types."""
    if "$ref" in schema:
        return check_against_schema(value, schemas[schema["$ref"]], schemas, path)
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping, got {value!r}"]
        problems = []
        for key, item in value.items():
            if key not in schema["properties"]:
                problems.append(f"{path}.{key}: unknown field")
            else:
                problems += check_against_schema(item, schema["properties"][key], schemas, f"{path}.{key}")
        return problems
    if kind == "array":
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {value!r}"]
        return [p for i, item in enumerate(value)
                for p in check_against_schema(item, schema["items"], schemas, f"{path}[{i}]")]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} is not one of {schema['enum']}"]
    return check_scalar(value, schema, path)


def check_scalar(value, schema, path):
    kind, fmt = schema.get("type"), schema.get("format")
    if kind == "boolean" and not isinstance(value, bool):
        return [f"{path}: expected a boolean, got {value!r}"]
    if kind == "string" and fmt == "int64":  # int64 travels as a decimal string
        return [] if str(value).lstrip("-").isdigit() else [f"{path}: expected an integer, got {value!r}"]
    if kind == "string" and not isinstance(value, str):
        return [f"{path}: expected a string, got {value!r}"]
    if kind == "integer" and not isinstance(value, int):
        return [f"{path}: expected an integer, got {value!r}"]
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return [f"{path}: expected a number, got {value!r}"]
    return []


def validate_ml_v1_job(config):
    schemas = load_ml_v1_schemas()
    return check_against_schema(config, schemas["GoogleCloudMlV1__Job"], schemas, "job")


def validate_vertex_custom_job_spec(config):
    """Parses like `gcloud ai custom-jobs create --config`: raises ParseError on a bad field or enum."""
    message = custom_job.CustomJobSpec.pb()()
    json_format.ParseDict(config, message)
    return message


@pytest.mark.parametrize("name", ["config.yaml", "cloud/ai_platform_custom_tpu.yaml",
                                  "cloud/ai_platform_hptuning.yaml"])
def test_ai_platform_configs_match_ml_v1_schema(name):
    config = yaml.safe_load((ROOT / name).read_text())
    assert validate_ml_v1_job(config) == []


def test_top_level_config_is_a_tpu_job():
    training = yaml.safe_load((ROOT / "config.yaml").read_text())["trainingInput"]
    assert training["scaleTier"] == "BASIC_TPU"
    assert {"runtimeVersion", "pythonVersion", "region"} <= training.keys()


def test_custom_config_has_a_cloud_tpu_worker():
    training = yaml.safe_load((ROOT / "cloud/ai_platform_custom_tpu.yaml").read_text())["trainingInput"]
    assert training["workerType"] == "cloud_tpu"
    assert training["workerConfig"]["acceleratorConfig"]["type"].startswith("TPU_")


@pytest.mark.parametrize("mutate, problem", [
    (lambda t: t.update(scaleTier="BASIC_TPUS"), "'BASIC_TPUS' is not one of"),
    (lambda t: t.update(runtimVersion="2.11"), "job.trainingInput.runtimVersion: unknown field"),
    (lambda t: t.update(workerConfig={"acceleratorConfig": {"type": "TPU_V9"}}), "'TPU_V9' is not one of"),
    (lambda t: t.update(workerCount="one"), "workerCount: expected an integer"),
])
def test_ml_v1_validator_rejects_typos(mutate, problem):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    mutate(config["trainingInput"])
    assert any(problem in p for p in validate_ml_v1_job(config)), validate_ml_v1_job(config)


VERTEX_JOBS = ["cloud/vertex_tpu_job.yaml", "cloud/vertex_tpu_job_keras.yaml", "cloud/vertex_tpu_job_jax.yaml"]
# The host VM of each single-host TPU v5e shape (1, 4 or 8 chips) and its topology.
V5E_TOPOLOGIES = {"ct5lp-hightpu-1t": "1x1", "ct5lp-hightpu-4t": "2x2", "ct5lp-hightpu-8t": "2x4"}
# The same for v6e (docs/cloud.md: the machine names are GKE's, not confirmed for Vertex training).
V6E_TOPOLOGIES = {"ct6e-standard-1t": "1x1", "ct6e-standard-4t": "2x2", "ct6e-standard-8t": "2x4"}
PJRT_ENV = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}


def is_jax_job(pool):
    return "--engine=jax" in pool.container_spec.args


def check_tpu_machine(pool):
    """A TPU pool Google documents on Vertex: for TensorFlow v2/v3-8 or a single-host v5e; for
    the JAX engine a single-host v6e (from v6e on Vertex trains no TensorFlow)."""
    machine, env = pool.machine_spec, {e.name: e.value for e in pool.container_spec.env}
    if is_jax_job(pool):
        assert V6E_TOPOLOGIES.get(machine.machine_type) == machine.tpu_topology, machine
        assert pool.replica_count == 1  # one host: how Vertex starts a slice's JAX processes is untried
        assert not machine.accelerator_type and not env  # JAX's PJRT and libtpu need no variables
    elif machine.machine_type == "cloud-tpu":
        assert machine.accelerator_type in (AcceleratorType.TPU_V2, AcceleratorType.TPU_V3)
        assert machine.accelerator_count == 8 and not machine.tpu_topology
        assert not PJRT_ENV.keys() & env.keys()  # v2/v3: the stream-executor runtime
    else:
        assert V5E_TOPOLOGIES.get(machine.machine_type) == machine.tpu_topology, machine
        assert env == PJRT_ENV  # TensorFlow on v5e runs PJRT only


@pytest.mark.parametrize("name", VERTEX_JOBS)
def test_vertex_jobs_parse_as_custom_job_specs_on_a_documented_tpu(name):
    spec = validate_vertex_custom_job_spec(load(name))
    (pool,) = spec.worker_pool_specs
    assert pool.container_spec.image_uri and not pool.python_package_spec.python_module
    assert "--use_tpu" in pool.container_spec.args
    # TensorFlow's engines name the VM's own TPU; JAX finds it and refuses --tpu
    # (tests/cloud/test_container_image.py runs the JAX job's args through the settings checks).
    assert ("--tpu=local" in pool.container_spec.args) != is_jax_job(pool)
    check_tpu_machine(pool)


@pytest.mark.parametrize("mutate", [
    lambda s: s["workerPoolSpecs"][0]["machineSpec"].update(acceleratorCount=4),
    lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(
        env=[{"name": k, "value": v} for k, v in PJRT_ENV.items()]),
])
def test_tpu_machine_check_can_fail(mutate):
    config = load("cloud/vertex_tpu_job.yaml")
    mutate(config)
    with pytest.raises(AssertionError):
        check_tpu_machine(validate_vertex_custom_job_spec(config).worker_pool_specs[0])


@pytest.mark.parametrize("mutate", [
    lambda s: s["workerPoolSpecs"][0]["machineSpec"].update(tpuTopology="4x4"),  # a multi-host v6e
    lambda s: s["workerPoolSpecs"][0].update(replicaCount="2"),
    lambda s: s["workerPoolSpecs"][0]["machineSpec"].update(machineType="ct5lp-hightpu-4t"),
    lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(
        env=[{"name": k, "value": v} for k, v in PJRT_ENV.items()]),
])
def test_jax_tpu_machine_check_can_fail(mutate):
    config = load("cloud/vertex_tpu_job_jax.yaml")
    mutate(config)
    with pytest.raises(AssertionError):
        check_tpu_machine(validate_vertex_custom_job_spec(config).worker_pool_specs[0])


@pytest.mark.parametrize("mutate, problem", [
    (lambda s: s["workerPoolSpecs"][0]["machineSpec"].update(acceleratorType="TPU_V9"), "Invalid enum value TPU_V9"),
    (lambda s: s["workerPoolSpecs"][0].update(pythonPackage={}), 'no field named "pythonPackage"'),
])
def test_vertex_validator_rejects_typos(mutate, problem):
    config = yaml.safe_load((ROOT / "cloud/vertex_tpu_job.yaml").read_text())
    mutate(config)
    with pytest.raises(json_format.ParseError, match=problem):
        validate_vertex_custom_job_spec(config)


def load(name):
    return yaml.safe_load((ROOT / name).read_text())


def check_trainer_values(name, values):
    """Each tuned value is a value of the trainer flag name that its params validation accepts."""
    assert name in table.DEFAULTS, f"{name} is not a trainer flag"
    for value in values:
        params = dict(table.DEFAULTS, output_dir="/out", **{name: checks.coerce(name, value, "test")})
        checks.check_params(params, {})  # raises ConfigError naming a bad value


def test_ai_platform_tuning_tunes_trainer_flags_on_the_metric_it_reports():
    training = load("cloud/ai_platform_hptuning.yaml")["trainingInput"]
    spec = training["hyperparameters"]
    metric = table.DEFAULTS["early_stopping_metric"]
    assert spec["hyperparameterMetricTag"] == metric
    assert spec["goal"] == ("MINIMIZE" if metric in early_stopping.LOWER_IS_BETTER else "MAXIMIZE")
    names = [p["parameterName"] for p in spec["params"]]
    assert {"learning_rate", "weight_decay"} <= set(names) and len(names) == 3
    for param in spec["params"]:
        values = param.get("categoricalValues") or [param["minValue"], param["maxValue"]]
        check_trainer_values(param["parameterName"], values)
    assert training["workerType"] == "cloud_tpu"


def validate_vertex_tuning_job(config_dict):
    """Parses like `gcloud ai hp-tuning-jobs create --config`: ParseError on a bad field or enum."""
    message = hyperparameter_tuning_job.HyperparameterTuningJob.pb()()
    json_format.ParseDict(config_dict, message)
    return message


def test_vertex_tuning_job_tunes_trainer_flags_on_the_metric_it_reports():
    job = validate_vertex_tuning_job(load("cloud/vertex_hptuning_job.yaml"))
    (metric,) = job.study_spec.metrics
    assert metric.metric_id == table.DEFAULTS["early_stopping_metric"]
    assert metric.goal == metric.GoalType.MAXIMIZE
    for param in job.study_spec.parameters:
        if param.HasField("categorical_value_spec"):
            values = list(param.categorical_value_spec.values)
        else:
            values = [param.double_value_spec.min_value, param.double_value_spec.max_value]
        check_trainer_values(param.parameter_id, values)
    (pool,) = job.trial_job_spec.worker_pool_specs
    check_tpu_machine(pool)
    assert pool.container_spec.image_uri  # the entry point is the image's: trainer.task
    assert any(arg.startswith("--output_dir=gs://") for arg in pool.container_spec.args)  # + /<trial id>
    assert job.max_trial_count >= job.parallel_trial_count >= 1


def test_tuning_validators_reject_typos():
    ai_platform = load("cloud/ai_platform_hptuning.yaml")
    ai_platform["trainingInput"]["hyperparameters"]["params"][0]["type"] = "FLOAT"
    ai_platform["trainingInput"]["hyperparameters"]["params"][1]["minValue"] = "tiny"
    problems = validate_ml_v1_job(ai_platform)
    assert any("'FLOAT' is not one of" in p for p in problems), problems
    assert any("params[1].minValue: expected a number" in p for p in problems), problems
    vertex = load("cloud/vertex_hptuning_job.yaml")
    vertex["studySpec"]["parameters"][0]["doubleValueSpecs"] = {}
    with pytest.raises(json_format.ParseError, match='no field named "doubleValueSpecs"'):
        validate_vertex_tuning_job(vertex)


@pytest.mark.parametrize("name, value", [("resnet_depth", "21"), ("learning_rate", "-1")])
def test_trainer_value_check_can_fail(name, value):
    with pytest.raises(checks.ConfigError, match=name):
        check_trainer_values(name, [value])
