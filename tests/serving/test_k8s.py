"""python -m serving.k8s: Kubernetes manifests (and a KServe InferenceService) for TF Serving on an
export on GCS, checked offline against the real schemas and the stand-in.

- Every object validates against the Kubernetes API's schemas of every release from 1.30 (the
  manifests' minimum: the preStop `sleep` action) to 1.37, the newest kubernetes-validate 1.37.0
  ships, in its strict form (an unknown field fails).
- The InferenceService matches KServe 0.21.0's own models (tests/serving/data/: the kserve SDK's
  generated classes, read from its PyPI wheel), the Kubernetes types inside it those schemas.
- The ConfigMap's files are parsed by the stand-in with the very flags the Deployment (or KServe's
  runtime plus the InferenceService) passes, and the stand-in then answers the probes' URL and
  the Prometheus annotations' path.
- The export is read from the suite's GCS emulator: the image follows the export's TensorFlow
  (serving.launch's table); bad input is one line, exit code 2, nothing written.

    .venv/bin/python -m pytest tests/serving/test_k8s.py
    .venv-keras/bin/python -m pytest tests/serving/test_k8s.py
"""
import dataclasses
import ast
import http.client
import json
import os
import pathlib
import re
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from google.protobuf import text_format
from kubernetes_validate import utils as kubernetes_schemas

from common import console
from serving import export_tensorflow
from serving.k8s import __main__ as k8s_main
from serving.k8s import checks, kserve, manifests, output
from serving.standin import config_files, server
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture: Beam's gcsio, anonymous)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(__file__).with_name("data")
KUBERNETES_VERSIONS = [f"1.{minor}" for minor in range(30, 38)]
NEWEST = KUBERNETES_VERSIONS[-1]
KSERVE = json.loads((DATA / "kserve-0.21.0-models.json").read_text())
# KServe's ClusterServingRuntime kserve-tensorflow-serving (kserve/kserve, config/runtimes/
# kserve-tensorflow-serving.yaml): the flags it starts TF Serving with, before the
# InferenceService's args. Its --rest_api_timeout_in_ms is left out: the stand-in does not
# implement it (docs/serving.md, the stand-in's flag table).
KSERVE_RUNTIME_ARGS = ["--model_name={name}", "--port=9000", "--rest_api_port=8080",
                       "--model_base_path=/mnt/models"]
SETTINGS = manifests.Settings("gs://bucket/run/export/image_classifier", "tensorflow/serving:2.15.1",
                              "image-classifier", "image_classifier")


def by_kind(objects):
    return {obj["kind"]: obj for obj in objects}


# --- the schemas --------------------------------------------------------------------------------

def definitions_registry(version):
    """kubernetes-validate's strict definitions of a release, as a referencing registry."""
    path = (pathlib.Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
            / f"v{version}.0-local-strict" / "_definitions.json")
    return referencing.Resource.from_contents(json.loads(path.read_text())) @ referencing.Registry()


def kubernetes_definition(kserve_type):
    """The Kubernetes schema name of a type named the SDK's way (V1Volume, ResourceQuantity)."""
    if kserve_type == "V1ObjectMeta":
        return "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    if kserve_type == "ResourceQuantity":
        return "io.k8s.apimachinery.pkg.api.resource.Quantity"
    if kserve_type.startswith("K8sIoApiAppsV1"):
        return f"io.k8s.api.apps.v1.{kserve_type[len('K8sIoApiAppsV1'):]}"
    if re.fullmatch(r"V1[A-Z]\w+", kserve_type):
        return f"io.k8s.api.core.v1.{kserve_type[2:]}"
    raise AssertionError(f"no Kubernetes schema for the SDK type {kserve_type}")


PRIMITIVES = {"str": str, "bool": bool, "int": int, "float": (int, float), "object": object}


def kserve_problems(value, kind, registry, where="$"):
    """What in value does not match KServe's model `kind` (its fields, required fields and
    types), the Kubernetes types inside it checked against registry's schemas."""
    item = re.fullmatch(r"list\[(.+)\]", kind) or re.fullmatch(r"dict\(str, (.+)\)", kind)
    if item:
        container = list if kind.startswith("list") else dict
        if not isinstance(value, container):
            return [f"{where}: expected {kind}"]
        pairs = enumerate(value) if container is list else value.items()
        return [p for key, v in pairs for p in kserve_problems(v, item[1], registry, f"{where}[{key}]")]
    if kind in PRIMITIVES:
        is_right = isinstance(value, PRIMITIVES[kind]) and not (kind == "int" and isinstance(value, bool))
        return [] if is_right else [f"{where}: expected {kind}, got {value!r}"]
    if kind in KSERVE["models"]:
        return model_problems(value, kind, registry, where)
    schema = {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{kubernetes_definition(kind)}"}
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{where}.{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(value)]


def model_problems(value, kind, registry, where):
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({kind})"]
    fields, required = KSERVE["models"][kind]["fields"], KSERVE["models"][kind]["required"]
    problems = [f"{where}.{key}: not a field of {kind}" for key in value if key not in fields]
    problems += [f"{where}.{key}: required by {kind}" for key in required if key not in value]
    return problems + [p for key, v in value.items() if key in fields
                       for p in kserve_problems(v, fields[key], registry, f"{where}.{key}")]


# Every optional object and field on: the NetworkPolicy (--allow_from) and the zone spread.
GUARDED = dataclasses.replace(SETTINGS, allow_from=("ns:frontend", "pods:app=gateway"), spread_zones=True)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_plain_object_validates_against_the_kubernetes_schemas(version):
    objects = manifests.build_objects(GUARDED)
    assert [obj["kind"] for obj in objects] == [
        "ServiceAccount", "ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
        "PodDisruptionBudget", "NetworkPolicy"]
    for obj in objects:
        assert kubernetes_schemas.validate(obj, version, strict=True) == version


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_inference_service_matches_kserve_s_models(version):
    objects = kserve.build_objects(GUARDED)
    assert [obj["kind"] for obj in objects] == ["ServiceAccount", "ConfigMap", "InferenceService",
                                                "PodDisruptionBudget", "NetworkPolicy"]
    for obj in objects[:2] + objects[3:]:
        assert kubernetes_schemas.validate(obj, version, strict=True) == version
    assert kserve_problems(objects[2], KSERVE["root"], definitions_registry(version)) == []


@pytest.mark.parametrize("break_it, expected", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(readynessProbe={}),
     "'readynessProbe' was unexpected"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="8500"),
     "'8500' is not of type"),
    (lambda d: d["spec"]["template"]["metadata"]["annotations"].update({"prometheus.io/scrape": True}),
     "True is not of type"),
])
def test_the_kubernetes_check_fails_a_broken_deployment(break_it, expected):
    deployment = by_kind(manifests.build_objects(SETTINGS))["Deployment"]
    break_it(deployment)
    with pytest.raises(kubernetes_schemas.ValidationError, match=re.escape(expected)):
        kubernetes_schemas.validate(deployment, NEWEST, strict=True)


@pytest.mark.parametrize("break_it, expected", [
    (lambda p: p["model"].update(storageURI=p["model"].pop("storageUri")),
     "$.spec.predictor.model.storageURI: not a field of V1beta1ModelSpec"),
    (lambda p: p["model"].pop("modelFormat"), "$.spec.predictor.model.modelFormat: required by V1beta1ModelSpec"),
    (lambda p: p.update(minReplicas="2"), "$.spec.predictor.minReplicas: expected int, got '2'"),
    (lambda p: p["volumes"][0].update(configmap=p["volumes"][0].pop("configMap")),
     "$.spec.predictor.volumes[0].: Additional properties are not allowed ('configmap' was unexpected)"),
])
def test_the_kserve_check_fails_a_broken_inference_service(break_it, expected):
    service = kserve.build_objects(SETTINGS)[2]
    break_it(service["spec"]["predictor"])
    assert kserve_problems(service, KSERVE["root"], definitions_registry(NEWEST)) == [expected]


def test_the_kserve_models_name_their_source():
    source = KSERVE["source"]
    assert source["package"] == "kserve==0.21.0 (PyPI)" and len(source["sha256"]) == 64
    spec = KSERVE["models"]["V1beta1ModelSpec"]
    assert spec["required"] == ["modelFormat"]
    assert {"runtimeVersion": "str", "storageUri": "str", "args": "list[str]"}.items() <= spec["fields"].items()


# --- the objects --------------------------------------------------------------------------------

def test_the_deployment_serves_the_export_from_gcs_with_probes_resources_and_scraping():
    objects = by_kind(manifests.build_objects(SETTINGS))
    pod = objects["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == "tensorflow/serving:2.15.1"
    assert "--model_base_path=gs://bucket/run/export/image_classifier" in container["args"]
    assert {container[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} \
        == {"/v1/models/image_classifier"}
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "2Gi"},
                                      "limits": {"cpu": "2", "memory": "2Gi"}}
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == config_files.DEFAULT_PROMETHEUS_PATH
    assert pod["spec"]["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert "replicas" not in objects["Deployment"]["spec"]  # the autoscaler owns the count
    assert [(p["name"], p["port"]) for p in objects["Service"]["spec"]["ports"]] == [("http", 8501), ("grpc", 8500)]
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"], hpa["metrics"][0]["resource"]["target"]["averageUtilization"]) \
        == (2, 10, 60)


def test_the_termination_grace_holds_the_pre_stop_sleep_then_the_stand_in_s_drain():
    """Kubernetes counts the preStop sleep in terminationGracePeriodSeconds, then sends SIGTERM:
    the stand-in's default --shutdown_grace_seconds fits after it, within Kubernetes' default 30 s."""
    grace = server.build_parser().parse_args([]).shutdown_grace_seconds
    pod = by_kind(manifests.build_objects(SETTINGS))["Deployment"]["spec"]["template"]["spec"]
    predictor = kserve.build_objects(SETTINGS)[2]["spec"]["predictor"]
    for spec, container in ((pod, pod["containers"][0]), (predictor, predictor["model"])):
        sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert sleep + grace < spec["terminationGracePeriodSeconds"] == 30


def test_workload_identity_is_an_annotation_only_when_a_google_service_account_is_given():
    plain = manifests.service_account(SETTINGS)
    assert "annotations" not in plain["metadata"]
    settings = manifests.Settings(**{**SETTINGS.__dict__, "gcp_service_account": "tfs@p.iam.gserviceaccount.com"})
    assert manifests.service_account(settings)["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "tfs@p.iam.gserviceaccount.com"}


def test_a_changed_config_rolls_the_pods():
    def checksum(settings):
        return manifests.deployment(settings)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    changed = manifests.Settings(**{**SETTINGS.__dict__, "max_batch_size": 16})
    assert checksum(changed) != checksum(SETTINGS) == checksum(manifests.Settings(**SETTINGS.__dict__))


@pytest.mark.parametrize("image, fields", [
    ("tensorflow/serving:2.20.0", {"runtimeVersion": "2.20.0"}),
    ("us-docker.pkg.dev/p/r/serving:2.20.0", {"image": "us-docker.pkg.dev/p/r/serving:2.20.0"}),
])
def test_kserve_runs_the_chosen_image_not_its_default(image, fields):
    model = kserve.model(manifests.Settings(**{**SETTINGS.__dict__, "image": image}))
    assert {key: model[key] for key in fields} == fields
    assert model["modelFormat"] == {"name": "tensorflow", "version": "2"}
    assert model["runtime"] == "kserve-tensorflow-serving"


def benchmark_batching_parameters():
    """bench/bench_serving.py's BATCHING_PARAMETERS, read without importing it (TensorFlow)."""
    tree = ast.parse((ROOT / "bench" / "bench_serving.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["BATCHING_PARAMETERS"])


def test_the_batching_defaults_are_the_serving_benchmark_s():
    benchmark = text_format.Parse(benchmark_batching_parameters(), config_files.BatchingParameters())
    written = text_format.Parse(manifests.config_texts(SETTINGS)[manifests.BATCHING_FILE],
                                config_files.BatchingParameters())
    assert written == benchmark  # num_batch_threads 2: one per core of --cpu 2, as on the benchmark's 2 cores


# --- the stand-in reads the files with the container's flags -------------------------------------

def standin_argv(args, config_dir, base):
    """The container's flags with the ConfigMap's mount at config_dir, the export at base on
    this machine and ports 0 (free ones): nothing else changed."""
    argv = []
    for arg in args:
        flag, _, value = arg.partition("=")
        value = {"--port": "0", "--rest_api_port": "0", "--model_base_path": str(base)}.get(flag, value)
        argv.append(f"{flag}={value.replace(manifests.CONFIG_DIR, str(config_dir))}")
    return argv


def write_config_map(config_map, directory):
    for name, text in config_map["data"].items():
        (directory / name).write_text(text)
    return directory


def get(port, path):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def as_written(objects):
    """objects as the command writes them and kubectl reads them: YAML text, parsed back."""
    return [yaml.safe_load(text) for text in output.render(objects, "python -m serving.k8s").values()]


def plain_server(settings):
    objects = by_kind(as_written(manifests.build_objects(settings)))
    pod = objects["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    return (objects["ConfigMap"], container["args"], container["readinessProbe"]["httpGet"]["path"],
            pod["metadata"]["annotations"]["prometheus.io/path"])


def kserve_server(settings):
    config_map, service = as_written(kserve.build_objects(settings))[1:3]
    model = service["spec"]["predictor"]["model"]
    args = [arg.format(name=service["metadata"]["name"]) for arg in KSERVE_RUNTIME_ARGS] + model["args"]
    return (config_map, args, model["readinessProbe"]["httpGet"]["path"],
            service["metadata"]["annotations"]["prometheus.kserve.io/path"])


@pytest.mark.parametrize("server_of", [plain_server, kserve_server], ids=["deployment", "kserve"])
def test_the_stand_in_reads_the_config_map_with_the_container_s_flags(server_of, tiny_export_base, tmp_path):
    config_map, args, probe_path, metrics_path = server_of(SETTINGS)
    argv = standin_argv(args, write_config_map(config_map, tmp_path), tiny_export_base)
    options = server.options_from_args(server.build_parser().parse_args(argv))
    assert (options.batching.max_batch_size, options.batching.batch_timeout_micros,
            options.batching.num_batch_threads) == (32, 5000, 2)
    running = server.start(options)
    try:
        status, body = get(running.rest_port, probe_path)
        assert status == 200 and json.loads(body)["model_version_status"][0]["state"] == "AVAILABLE"
        status, metrics = get(running.rest_port, metrics_path)
        assert status == 200 and ":tensorflow:serving:request_count" in metrics
    finally:
        running.stop()


def test_a_typo_in_the_config_map_fails_in_the_stand_in(tmp_path):
    config_map, args, _, _ = plain_server(SETTINGS)
    config_map["data"][manifests.BATCHING_FILE] = config_map["data"][manifests.BATCHING_FILE].replace(
        "max_batch_size", "max_batch_sise")
    argv = standin_argv(args, write_config_map(config_map, tmp_path), tmp_path / "image_classifier")
    with pytest.raises(config_files.ConfigFileError, match="max_batch_sise"):
        server.options_from_args(server.build_parser().parse_args(argv))


# --- the command --------------------------------------------------------------------------------

@pytest.fixture
def run_k8s(monkeypatch, capsys):
    """run_k8s(*argv) -> (exit code, stdout, stderr) of the command, in this process (the
    console's process-wide quieting left out)."""
    monkeypatch.setattr(console, "quiet_unless_verbose", lambda argv=None: 0)

    def run(*argv):
        try:
            code = k8s_main.main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


def upload_export(bucket, prefix, versions=(1,), tensorflow="2.15.1"):
    """gs://BUCKET/prefix/<version>/saved_model.pb recording `tensorflow`, and a variables file."""
    saved_model = export_tensorflow.SavedModel()
    saved_model.meta_graphs.add().meta_info_def.tensorflow_version = tensorflow
    for version in versions:
        bucket.blob(f"{prefix}/{version}/saved_model.pb").upload_from_string(saved_model.SerializeToString())
        bucket.blob(f"{prefix}/{version}/variables/variables.index").upload_from_string(b"index")
    return f"gs://{bucket.name}/{prefix}"


def read_objects(directory):
    return [yaml.safe_load((directory / name).read_text()) for name in sorted(os.listdir(directory))]


@pytest.mark.parametrize("tensorflow, image", [
    ("2.15.1", "tensorflow/serving:2.15.1"), ("2.20.0", "tensorflow/serving:2.20.0"),
    ("2.16.2", "tensorflow/serving:2.20.0")])
@pytest.mark.process
def test_the_image_follows_the_export_s_tensorflow(run_k8s, bucket, tmp_path, tensorflow, image):
    base = upload_export(bucket, "run/export/image_classifier", versions=(100, 2000), tensorflow=tensorflow)
    code, out, err = run_k8s("--model_base_path", base, "--output_dir", str(tmp_path / "k8s"))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith(
        f"serving.k8s: the export (version 2000) was written by TensorFlow {tensorflow}: image {image}")
    objects = read_objects(tmp_path / "k8s")
    assert sorted(os.listdir(tmp_path / "k8s")) == [
        "1-serviceaccount.yaml", "2-configmap.yaml", "3-deployment.yaml", "4-service.yaml",
        "5-horizontalpodautoscaler.yaml", "6-poddisruptionbudget.yaml"]
    assert by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == image
    assert "serving.k8s: the serving ports 8500 and 8501 are open to every pod of the cluster (no " \
           "NetworkPolicy); pass --allow_from ns:NAMESPACE or --allow_from pods:KEY=VALUE to admit only those" \
           in out.splitlines()
    for obj in objects:
        kubernetes_schemas.validate(obj, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.process
def test_the_kserve_variant_written_by_the_command_validates(run_k8s, bucket, tmp_path):
    base = upload_export(bucket, "run/export/image_classifier", tensorflow="2.20.0")
    code, out, err = run_k8s("--model_base_path", base, "--output_dir", str(tmp_path / "k8s"), "--kserve",
                             "--gcp_service_account", "tf-serving@proj.iam.gserviceaccount.com")
    assert (code, err) == (0, ""), err
    assert sorted(os.listdir(tmp_path / "k8s")) == [
        "1-serviceaccount.yaml", "2-configmap.yaml", "3-inferenceservice.yaml", "4-poddisruptionbudget.yaml"]
    account, config_map, service, budget = read_objects(tmp_path / "k8s")
    for obj in (account, config_map, budget):
        kubernetes_schemas.validate(obj, NEWEST, strict=True)
    assert kserve_problems(service, KSERVE["root"], definitions_registry(NEWEST)) == []
    model = service["spec"]["predictor"]["model"]
    assert (model["runtimeVersion"], model["storageUri"]) == ("2.20.0", base)
    assert service["spec"]["predictor"]["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.process
def test_allow_from_writes_a_network_policy_admitting_only_the_named_peers(run_k8s, bucket, tmp_path):
    base = upload_export(bucket, "run/export/image_classifier")
    code, out, err = run_k8s("--model_base_path", base, "--output_dir", str(tmp_path / "k8s"), "--kserve",
                             "--allow_from", "ns:frontend", "--allow_from", "pods:app=gateway")
    assert (code, err) == (0, ""), err
    assert "open to every pod" not in out
    policy = by_kind(read_objects(tmp_path / "k8s"))["NetworkPolicy"]
    kubernetes_schemas.validate(policy, NEWEST, strict=True)
    assert policy["spec"]["podSelector"] == {"matchLabels": {kserve.POD_LABEL: "image-classifier"}}
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "frontend"}}},
                            {"podSelector": {"matchLabels": {"app": "gateway"}}}]
    assert [port["port"] for port in rule["ports"]] == [9000, 8080]  # KServe's runtime's ports


@pytest.mark.process
def test_an_earlier_output_is_replaced_whole(run_k8s, bucket, tmp_path):
    base = upload_export(bucket, "run/export/image_classifier")
    out_dir = tmp_path / "k8s"
    assert run_k8s("--model_base_path", base, "--output_dir", str(out_dir), "--kserve")[0] == 0
    assert run_k8s("--model_base_path", base, "--output_dir", str(out_dir), "--max_replicas", "4")[0] == 0
    assert len(os.listdir(out_dir)) == 6  # the InferenceService is gone with the old output
    assert by_kind(read_objects(out_dir))["HorizontalPodAutoscaler"]["spec"]["maxReplicas"] == 4
    assert os.listdir(tmp_path) == ["k8s"]  # no staging or old folder left beside it


EXPORT_7 = {"run/export/image_classifier/7/saved_model.pb": "2.15.1"}


@pytest.mark.parametrize("layout, flags, expected", [
    ({}, ["run/export/image_classifier"],
     "holds no <version>/saved_model.pb (TF Serving would wait for one); pass"),
    (EXPORT_7, ["run/export"],
     "holds no numbered version directory, but gs://{b}/run/export/image_classifier does: did you "
     "mean --model_base_path=gs://{b}/run/export/image_classifier?"),
    (EXPORT_7, ["run/export/image_classifier/7"],
     "ends in a version number (7), and TF Serving takes the model's base of numbered versions: "
     "did you mean --model_base_path=gs://{b}/run/export/image_classifier?"),
    (EXPORT_7, ["run/export/image_classifier/7", "--model_name", "image_classifier"],
     "is one version of a model (it holds saved_model.pb), not the model's base of numbered "
     "versions: did you mean --model_base_path=gs://{b}/run/export/image_classifier?"),
    ({"run/export/image_classifier/7/saved_model.pb": "2.21.0"}, ["run/export/image_classifier"],
     "gs://{b}/run/export/image_classifier/7 was written by TensorFlow 2.21.0, newer than the newest "
     "TF Serving image known here (tensorflow/serving:2.20.0, TensorFlow 2.20); pass --docker_image"),
])
@pytest.mark.process
def test_an_export_that_cannot_be_served_is_one_line_and_nothing_written(
        run_k8s, bucket, tmp_path, layout, flags, expected):
    for path, tensorflow in layout.items():
        upload_export(bucket, path.rsplit("/", 2)[0], versions=(int(path.split("/")[-2]),), tensorflow=tensorflow)
    bucket.blob("run/export/notes.txt").upload_from_string("not an export")
    code, out, err = run_k8s("--model_base_path", f"gs://{bucket.name}/{flags[0]}", *flags[1:],
                             "--output_dir", str(tmp_path / "k8s"))
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert expected.format(b=bucket.name) in err
    assert not (tmp_path / "k8s").exists()


@pytest.mark.process
def test_a_tf_serving_version_older_than_the_export_is_refused(run_k8s, bucket, tmp_path):
    base = upload_export(bucket, "m/export/image_classifier", tensorflow="2.20.0")
    code, _, err = run_k8s("--model_base_path", base, "--output_dir", str(tmp_path / "k8s"),
                           "--tf_serving_version", "2.15")
    assert code == 2 and err == (
        "error: the export (version 1) was written by TensorFlow 2.20.0, newer than "
        "--tf_serving_version 2.15: TF Serving 2.15 may not load it; pass 2.20 or newer, or leave "
        "the flag out\n")
    assert not (tmp_path / "k8s").exists()


@pytest.mark.parametrize("flags, expected", [
    (["--model_base_path", "work/demo/run/export/image_classifier"],
     "--model_base_path='work/demo/run/export/image_classifier' is a path on this machine, which no "
     "pod of the cluster can read; copy the export to Cloud Storage"),
    (["--model_base_path", "s3://b/export/m"],
     "--model_base_path='s3://b/export/m': the pods read the export from Cloud Storage"),
    (["--min_replicas", "0"], "--min_replicas=0 must be at least 1"),
    (["--min_replicas", "5", "--max_replicas", "3"], "--max_replicas=3 is below --min_replicas=5"),
    (["--target_cpu_utilization", "100"], "--target_cpu_utilization=100 must be between 1 and 99"),
    (["--cpu", "two"], "--cpu='two' is not a positive CPU quantity"),
    (["--memory", "0Gi"], "--memory='0Gi' is not a positive memory quantity"),
    (["--name", "Image_Classifier"], "--name='Image_Classifier' is not a Kubernetes name"),
    (["--gcp_service_account", "me@example.com"], "--gcp_service_account='me@example.com' is not"),
    (["--tf_serving_version", "latest"], "--tf_serving_version='latest' is not a version"),
    (["--batch_timeout_micros", "-1"], "--batch_timeout_micros=-1 must be at least 0"),
    (["--docker_image", " tensorflow/serving:2.15.1"], "--docker_image=' tensorflow/serving:2.15.1' is not an image reference"),
    (["--docker_image", "tensorflow/serving:2.15.1 "], "--docker_image='tensorflow/serving:2.15.1 ' is not an image reference"),
    (["--docker_image", "tensorflow/ serving:2.15.1"], "--docker_image='tensorflow/ serving:2.15.1' is not an image reference"),
    (["--docker_image", "tensorflow/serving:"], "--docker_image='tensorflow/serving:' is not an image reference"),
    (["--allow_from", "frontend"], "--allow_from='frontend' is neither ns:NAMESPACE nor pods:KEY=VALUE"),
    (["--allow_from", "pods:app"], "--allow_from='pods:app' is neither ns:NAMESPACE nor pods:KEY=VALUE"),
    (["--kserve", "--name", "a" * 50], f"--name='{'a' * 50}' in namespace 'default': KServe derives "
     f"'{'a' * 50}-predictor-default' (68 characters) from it, over Kubernetes' 63; pass a --name of at "
     "most 45 characters"),
])
def test_bad_flags_are_one_line_and_nothing_written(run_k8s, tmp_path, flags, expected):
    argv = ["--model_base_path", "gs://my-bucket/run/export/image_classifier", "--tf_serving_version", "2.15",
            "--output_dir", str(tmp_path / "k8s"), *flags]
    code, out, err = run_k8s(*argv)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {expected}"), err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("image", ["tensorflow/serving:2.15.1", "us-docker.pkg.dev/p/repo/tf-serving:2.15.1-gpu",
                                   "localhost:5000/serving", "tensorflow/serving@sha256:" + "a" * 64])
def test_an_image_reference_kubernetes_pulls_passes(image):
    checks.check_docker_image(image)


def test_an_output_dir_under_a_file_is_one_line_and_nothing_written(run_k8s, tmp_path):
    (tmp_path / "notes.txt").write_text("a file")
    code, out, err = run_k8s("--model_base_path", "gs://my-bucket/run/export/image_classifier",
                             "--tf_serving_version", "2.15", "--output_dir", str(tmp_path / "notes.txt" / "k8s"))
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"error: --output_dir='{tmp_path}/notes.txt/k8s' is under {tmp_path}/notes.txt, "
                                "which is a file, not a folder; pass a folder elsewhere"]
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_an_output_dir_with_other_files_is_refused(run_k8s, tmp_path):
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "kustomization.yaml").write_text("resources: []\n")
    code, _, err = run_k8s("--model_base_path", "gs://my-bucket/m/export/m", "--tf_serving_version", "2.15",
                           "--output_dir", str(tmp_path / "k8s"))
    assert code == 2 and "holds files this command did not write (kustomization.yaml)" in err
    assert os.listdir(tmp_path / "k8s") == ["kustomization.yaml"]


def test_a_failed_rename_leaves_the_earlier_output_as_it_was(monkeypatch, tmp_path):
    """The new folder's rename into place fails (after the earlier one was moved aside): the
    earlier output is moved back, and nothing else is left beside it."""
    out_dir = tmp_path / "k8s"
    output.publish({"1-configmap.yaml": "old\n"}, str(out_dir))
    rename = os.rename

    def failing_rename(source, destination):
        if ".staging-" in str(source):
            raise OSError("disk full")
        rename(source, destination)
    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError, match="disk full"):
        output.publish({"1-configmap.yaml": "new\n", "2-deployment.yaml": "new\n"}, str(out_dir))
    assert os.listdir(tmp_path) == ["k8s"] and os.listdir(out_dir) == ["1-configmap.yaml"]
    assert (out_dir / "1-configmap.yaml").read_text() == "old\n"


def no_credentials_env(tmp_path):
    """No credentials of this machine's user and no metadata server (as tests/common/test_gcs_probe.py)."""
    dead = "127.0.0.1:9"
    return {"HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "GCE_METADATA_HOST": dead, "GCE_METADATA_IP": dead}


UNREAD_ARGV = ["--model_base_path", "gs://my-bucket/run/export/image_classifier"]


@pytest.mark.process
def test_an_unreadable_export_without_tf_serving_version_is_one_line(tmp_path):
    """The real command, as a user without credentials runs it: one line naming both fixes."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST")}
    refused = subprocess.run([sys.executable, "-m", "serving.k8s", *UNREAD_ARGV, "--output_dir",
                              str(tmp_path / "k8s")], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env=dict(env, **no_credentials_env(tmp_path)))
    assert refused.returncode == 2 and refused.stderr == (
        "error: --model_base_path='gs://my-bucket/run/export/image_classifier': no Google Cloud "
        "credentials on this machine: run `gcloud auth application-default login` (or set "
        "GOOGLE_APPLICATION_CREDENTIALS); or pass --tf_serving_version X.Y (the TensorFlow that "
        "wrote the export) to write the manifests without reading it\n")
    assert not (tmp_path / "k8s").exists()


def test_an_unreadable_export_with_tf_serving_version_is_written_saying_so(run_k8s, monkeypatch, tmp_path):
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in no_credentials_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    code, out, err = run_k8s(*UNREAD_ARGV, "--output_dir", str(tmp_path / "k8s"), "--tf_serving_version", "2.20")
    assert (code, err) == (0, "")
    first = out.splitlines()[0]
    assert first.startswith("serving.k8s: the export was not read (--model_base_path=")
    assert first.endswith("; --tf_serving_version 2.20: image tensorflow/serving:2.20.0")
    assert len(os.listdir(tmp_path / "k8s")) == 6


def test_a_mistyped_flag_gets_did_you_mean(run_k8s, tmp_path):
    code, _, err = run_k8s("--model_base_path", "gs://my-bucket/m", "--output_dir", str(tmp_path / "k8s"),
                           "--max_replica", "3")
    assert code == 2 and "did you mean --max_replicas?" in err
