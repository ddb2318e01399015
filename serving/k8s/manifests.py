"""TF Serving on Kubernetes as plain objects: ServiceAccount, ConfigMap, Deployment, Service and
HorizontalPodAutoscaler, as dicts ready for YAML (serving/k8s/kserve.py reuses the pieces).

The ConfigMap holds TF Serving's batching parameters and monitoring config, written from the
same message classes the stand-in parses them with (serving/standin/config_files.py), and
the container passes the flags that read them. The pods read the export straight from GCS
through Workload Identity (the ServiceAccount; no key files), are probed on TF Serving's
model-status URL, and carry Prometheus scrape annotations for the monitoring config's path.

    .venv/bin/python -c "from serving.k8s import manifests as m; print(m.config_texts(m.Settings('gs://b/m', 'tensorflow/serving:2.15.1', 'm', 'm')))"
"""
import dataclasses
import hashlib
import math

from google.protobuf import text_format

from serving import launch
from serving.k8s import placement
from serving.standin import config_files, server as standin

CONFIG_DIR = "/etc/tf-serving"  # where the ConfigMap is mounted, read-only
BATCHING_FILE = "batching_parameters.txt"
MONITORING_FILE = "monitoring_config.txt"
SERVER_BINARY = "/usr/bin/tensorflow_model_server"  # in every tensorflow/serving image
# The image defines no user (KServe's own TF Serving runtime sets the same uid for that reason).
RUN_AS_USER = 1000
SCRATCH_DIR, SCRATCH_SIZE = "/tmp", "1Gi"  # an emptyDir: the root file system is read-only
# TF Serving ends at once on SIGTERM (docs/serving.md: no handler in main.cc); while the pod
# leaves the Service's endpoints, requests still routed to it must be answered.
PRE_STOP_SLEEP_SECONDS = 10
EXIT_SECONDS = 5  # after the stand-in's grace: what is left closed, the process gone
# The pod's terminationGracePeriodSeconds counts the preStop sleep; then SIGTERM, which the
# stand-in (served with these flags in tests/serving/test_k8s.py) answers by finishing the
# requests it received within its default grace: 30 s in all, Kubernetes' default.
TERMINATION_GRACE_SECONDS = (PRE_STOP_SLEEP_SECONDS + standin.DEFAULT_SHUTDOWN_GRACE_SECONDS
                             + EXIT_SECONDS)
PART_OF = "tpu-image-classifier"
SERVING_PORTS = (launch.DEFAULT_GRPC_PORT, launch.DEFAULT_REST_API_PORT)  # gRPC, REST


def tunable(default, why):
    """A setting with a flag of its name (serving/k8s/__main__.py makes them): default and reason."""
    return dataclasses.field(default=default, metadata={"help": why})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the objects are made from, checked by serving/k8s/checks.py."""
    model_base_path: str   # gs://BUCKET/.../<model_name>: the base of numbered versions
    image: str             # the TF Serving image built on the export's TensorFlow
    name: str              # of every Kubernetes object
    model_name: str        # TF Serving's --model_name: the URL's /v1/models/NAME
    namespace: str = "default"
    gcp_service_account: str = None
    min_replicas: int = tunable(2, "a second replica keeps serving while a node is drained "
                                   "or a pod restarts")
    max_replicas: int = tunable(10, "set it to your peak requests/s over one replica's share "
                                    "(docs/serving.md, \"Serving on Kubernetes\")")
    target_cpu_utilization: int = tunable(
        60, "percent of the CPU request at which the autoscaler adds replicas; the serving "
            "benchmark's batching server saturated at 69-77%% of its cores, so the target sits "
            "below that (docs/serving.md)")
    cpu: str = tunable("2", "request = limit per pod; the batch threads are one per core")
    memory: str = tunable("2Gi", "request = limit per pod (the KServe TF Serving runtime's "
                                 "default); a larger network needs more")
    max_batch_size: int = tunable(32, "as the serving benchmark's batching parameters")
    batch_timeout_micros: int = tunable(5000, "as the serving benchmark's batching parameters")
    max_enqueued_batches: int = tunable(64, "as the serving benchmark's batching parameters")
    spread_zones: bool = False  # --spread_zones: spread across zones too (serving/k8s/placement.py)
    allow_from: tuple = ()  # --allow_from: the NetworkPolicy's peers; none: no NetworkPolicy
    file_system_poll_wait_seconds: int = tunable(
        30, "how often TF Serving lists the base path for a new version; each poll is a GCS "
            "listing per replica (TF Serving's default is 1 s)")


def cpu_cores(quantity):
    """Cores of a CPU quantity: "2" -> 2.0, "500m" -> 0.5."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def config_texts(settings):
    """{file name: text} of the ConfigMap: TF Serving's BatchingParameters and MonitoringConfig."""
    batching = config_files.BatchingParameters()
    batching.max_batch_size.value = settings.max_batch_size
    batching.batch_timeout_micros.value = settings.batch_timeout_micros
    batching.max_enqueued_batches.value = settings.max_enqueued_batches
    # One batch thread per core the pod may use: the pod gets no more (limit = request).
    batching.num_batch_threads.value = max(1, math.ceil(cpu_cores(settings.cpu)))
    monitoring = config_files.MonitoringConfig()
    monitoring.prometheus_config.enable = True
    monitoring.prometheus_config.path = config_files.DEFAULT_PROMETHEUS_PATH
    return {BATCHING_FILE: text_format.MessageToString(batching),
            MONITORING_FILE: text_format.MessageToString(monitoring)}


def config_flags():
    """The TF Serving flags that read the ConfigMap's files."""
    return ["--enable_batching=true", f"--batching_parameters_file={CONFIG_DIR}/{BATCHING_FILE}",
            f"--monitoring_config_file={CONFIG_DIR}/{MONITORING_FILE}"]


def labels(settings):
    return {"app.kubernetes.io/name": settings.name, "app.kubernetes.io/part-of": PART_OF}


def metadata(settings, name=None, annotations=None):
    meta = {"name": name or settings.name, "namespace": settings.namespace, "labels": labels(settings)}
    if annotations:
        meta["annotations"] = annotations
    return meta


def service_account(settings):
    """The pods' identity. With --gcp_service_account, Workload Identity lets it act as that
    Google service account (which may read the bucket); without, grant the bucket to this
    Kubernetes service account's own principal (docs/serving.md)."""
    annotations = ({"iam.gke.io/gcp-service-account": settings.gcp_service_account}
                   if settings.gcp_service_account else None)
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": metadata(settings, annotations=annotations)}


def config_map_name(settings):
    return f"{settings.name}-config"


def config_map(settings):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(settings, config_map_name(settings)), "data": config_texts(settings)}


def config_checksum(settings):
    """TF Serving reads the files once, at start: a pod-template annotation of their hash
    makes a changed ConfigMap roll the pods."""
    text = "".join(f"{name}\n{body}" for name, body in sorted(config_texts(settings).items()))
    return hashlib.sha256(text.encode()).hexdigest()


def model_status_path(model_name):
    """TF Serving's model-status URL (GetModelStatus over REST); it answers only once the
    server is up, which TF Serving starts after the model's first version has loaded."""
    return f"/v1/models/{model_name}"


def probes(model_name, port):
    """startupProbe (up to 10 minutes for the first load from GCS), then readiness (traffic)
    and liveness (restart), all on the model-status URL."""
    def probe(period, failures, timeout):
        return {"httpGet": {"path": model_status_path(model_name), "port": port},
                "periodSeconds": period, "failureThreshold": failures, "timeoutSeconds": timeout}
    return {"startupProbe": probe(10, 60, 5), "readinessProbe": probe(5, 2, 5),
            "livenessProbe": probe(10, 6, 5)}


def resources(settings):
    """Requests = limits (Guaranteed QoS): the autoscaler's utilization is then a share of
    cores the pod always has, as in the serving benchmark."""
    amounts = {"cpu": settings.cpu, "memory": settings.memory}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def pod_security_context():
    """The pod's part of Pod Security "restricted" (docs/serving.md): a non-root uid, the
    runtime's default seccomp profile."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"}}


def security_context():
    """The container's part of "restricted", and a root file system it cannot write (what it
    may write goes to the scratch volume)."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"}}


def config_volume(settings):
    """(the pod's volume, the container's mount) of the ConfigMap."""
    return ({"name": "tf-serving-config", "configMap": {"name": config_map_name(settings)}},
            {"name": "tf-serving-config", "mountPath": CONFIG_DIR, "readOnly": True})


def scratch_volume():
    """(the pod's volume, the container's mount) of SCRATCH_DIR, an emptyDir: the only place a
    read-only root file system leaves for temporary files (TF Serving's file-system clients)."""
    return ({"name": "tmp", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
            {"name": "tmp", "mountPath": SCRATCH_DIR})


def prometheus_annotations(port):
    """The prometheus.io/* convention a Prometheus' kubernetes_sd pod job reads."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
            "prometheus.io/path": config_files.DEFAULT_PROMETHEUS_PATH}


def server_args(settings):
    """tensorflow_model_server's flags in the Deployment: the ports, the model, the files."""
    return [f"--port={launch.DEFAULT_GRPC_PORT}", f"--rest_api_port={launch.DEFAULT_REST_API_PORT}",
            f"--model_name={settings.model_name}", f"--model_base_path={settings.model_base_path}",
            f"--file_system_poll_wait_seconds={settings.file_system_poll_wait_seconds}",
            *config_flags()]


def container(settings):
    mounts = [config_volume(settings)[1], scratch_volume()[1]]
    return {"name": "tf-serving", "image": settings.image, "command": [SERVER_BINARY],
            "args": server_args(settings),
            "ports": [{"name": "grpc", "containerPort": launch.DEFAULT_GRPC_PORT},
                      {"name": "http", "containerPort": launch.DEFAULT_REST_API_PORT}],
            "resources": resources(settings), "volumeMounts": mounts,
            **probes(settings.model_name, "http"),
            "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
            "securityContext": security_context()}


def deployment(settings):
    """No `replicas`: the autoscaler owns the count, and an apply must not reset it."""
    annotations = {**prometheus_annotations(launch.DEFAULT_REST_API_PORT),
                   "checksum/config": config_checksum(settings)}
    pod = {"serviceAccountName": settings.name, "securityContext": pod_security_context(),
           "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
           "topologySpreadConstraints": placement.spread_constraints(settings, pod_selector(settings)),
           "containers": [container(settings)],
           "volumes": [config_volume(settings)[0], scratch_volume()[0]]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(settings),
            "spec": {"selector": {"matchLabels": pod_selector(settings)},
                     # a new pod is ready before an old one goes: full capacity throughout
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels(settings), "annotations": annotations},
                                  "spec": pod}}}


def service(settings):
    ports = [{"name": "http", "port": launch.DEFAULT_REST_API_PORT, "targetPort": "http"},
             {"name": "grpc", "port": launch.DEFAULT_GRPC_PORT, "targetPort": "grpc"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(settings),
            "spec": {"type": "ClusterIP",
                     "selector": pod_selector(settings), "ports": ports}}


def autoscaler(settings):
    target = {"type": "Utilization", "averageUtilization": settings.target_cpu_utilization}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": metadata(settings),
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": settings.name},
                     "minReplicas": settings.min_replicas, "maxReplicas": settings.max_replicas,
                     "metrics": [{"type": "Resource",
                                  "resource": {"name": "cpu", "target": target}}]}}


def pod_selector(settings):
    """The label that picks the Deployment's pods (its selector, the Service's, the budget's)."""
    return {"app.kubernetes.io/name": settings.name}


def build_objects(settings):
    """The objects in the order kubectl should create them (the pods' identity and files first);
    the budget and the NetworkPolicy where they apply (serving/k8s/placement.py)."""
    guards = [placement.disruption_budget(settings, metadata(settings), pod_selector(settings)),
              placement.network_policy(settings, metadata(settings), pod_selector(settings), SERVING_PORTS)]
    return [service_account(settings), config_map(settings), deployment(settings),
            service(settings), autoscaler(settings), *filter(None, guards)]
