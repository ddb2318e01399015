"""The same serving as one KServe InferenceService (serving.kserve.io/v1beta1), plus the
ServiceAccount and ConfigMap it uses (serving/k8s/manifests.py).

KServe's TF Serving runtime (ClusterServingRuntime kserve-tensorflow-serving, modelFormat
tensorflow) starts `tensorflow_model_server --model_name=<InferenceService name> --port=9000
--rest_api_port=8080 --model_base_path=/mnt/models --rest_api_timeout_in_ms=60000` on the image
`tensorflow/serving:<runtimeVersion>` (its default, 2.6.2, predates this project's TensorFlow), after
its storage initializer has copied storageUri into /mnt/models. So the model's URL name is the
InferenceService's name, and the flags here only add the ConfigMap's files. Standard mode
(plain Deployment + HorizontalPodAutoscaler, no Knative) scales on CPU between the replica
bounds, as the plain manifests do.

    .venv/bin/python -m serving.k8s --model_base_path gs://BUCKET/run/export/image_classifier --output_dir k8s/ --kserve
"""
from serving.k8s import manifests, placement
from serving.standin import config_files

RUNTIME = "kserve-tensorflow-serving"
IMAGE_REPOSITORY = "tensorflow/serving"  # the runtime's image; runtimeVersion sets its tag
REST_API_PORT = 8080  # the runtime's --rest_api_port, where probes and metrics are read
SERVING_PORTS = (9000, REST_API_PORT)  # the runtime's --port (gRPC) and --rest_api_port
# The label KServe puts on every pod of an InferenceService, its name the value (KServe's
# constants.InferenceServicePodLabelKey).
POD_LABEL = "serving.kserve.io/inferenceservice"


def model_name(settings):
    """The name TF Serving serves the model under: the runtime passes --model_name={{.Name}}."""
    return settings.name


def image_fields(image):
    """runtimeVersion for a tag of the runtime's own image, else the whole image."""
    repository, _, tag = image.rpartition(":")
    if repository == IMAGE_REPOSITORY and tag:
        return {"runtimeVersion": tag}
    return {"image": image}


def annotations():
    """Standard mode with KServe's HorizontalPodAutoscaler (scaleMetric cpu needs the hpa
    class), and Prometheus scraping of TF Serving's metrics path on the REST port."""
    return {"serving.kserve.io/deploymentMode": "Standard",
            "serving.kserve.io/autoscalerClass": "hpa",
            "serving.kserve.io/enable-prometheus-scraping": "true",
            "prometheus.kserve.io/port": str(REST_API_PORT),
            "prometheus.kserve.io/path": config_files.DEFAULT_PROMETHEUS_PATH}


def model(settings):
    mounts = [manifests.config_volume(settings)[1], manifests.scratch_volume()[1]]
    return {"modelFormat": {"name": "tensorflow", "version": "2"}, "runtime": RUNTIME,
            **image_fields(settings.image), "storageUri": settings.model_base_path,
            "args": manifests.config_flags(), "resources": manifests.resources(settings),
            "volumeMounts": mounts, **manifests.probes(model_name(settings), REST_API_PORT),
            "lifecycle": {"preStop": {"sleep": {"seconds": manifests.PRE_STOP_SLEEP_SECONDS}}},
            "securityContext": manifests.security_context()}


def inference_service(settings):
    predictor = {"serviceAccountName": settings.name, "minReplicas": settings.min_replicas,
                 "maxReplicas": settings.max_replicas, "scaleMetric": "cpu",
                 "scaleTarget": settings.target_cpu_utilization,
                 "securityContext": manifests.pod_security_context(),
                 "terminationGracePeriodSeconds": manifests.TERMINATION_GRACE_SECONDS,
                 "topologySpreadConstraints": placement.spread_constraints(settings, pod_selector(settings)),
                 "volumes": [manifests.config_volume(settings)[0], manifests.scratch_volume()[0]],
                 "model": model(settings)}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": manifests.metadata(settings, annotations=annotations()),
            "spec": {"predictor": predictor}}


def pod_selector(settings):
    """The label KServe puts on an InferenceService's pods (constants.InferenceServicePodLabelKey)."""
    return {POD_LABEL: settings.name}


def build_objects(settings):
    meta = manifests.metadata(settings)
    guards = [placement.disruption_budget(settings, meta, pod_selector(settings)),
              placement.network_policy(settings, meta, pod_selector(settings), SERVING_PORTS)]
    return [manifests.service_account(settings), manifests.config_map(settings),
            inference_service(settings), *filter(None, guards)]
