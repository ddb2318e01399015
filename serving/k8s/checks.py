"""The flags of `python -m serving.k8s` checked before anything is read or written: each
mistake is one line naming the flag, its value and the fix (ManifestError, exit 2).

A cluster cannot read this machine's files, so --model_base_path must be on Cloud Storage;
names must be what Kubernetes accepts (DNS-1035 labels); quantities Kubernetes' forms; the
replica bounds must make sense for a HorizontalPodAutoscaler; --output_dir must be new,
empty or this command's own earlier output, which it replaces whole.

    .venv/bin/python -m serving.k8s --model_base_path OUT/export/image_classifier --output_dir k8s/   # refused
"""
import dataclasses
import os
import re

from common import export_versions, signature
from common.user_errors import UserError
from serving.k8s import manifests, placement

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # Services and KServe names
MAX_NAME_LENGTH = 63
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # one segment of /v1/models/NAME
CPU = re.compile(r"([0-9]+(\.[0-9]+)?|[0-9]+m)\Z")  # "2", "0.5", "500m"
MEMORY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\Z")  # "2Gi", "512Mi", "2G"
GCS_PATH = re.compile(r"gs://[a-z0-9][-a-z0-9_.]{1,220}[a-z0-9](/.*)?\Z")
GCP_SERVICE_ACCOUNT = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9.:]+\.iam\.gserviceaccount\.com\Z")
# Docker's reference grammar (distribution/reference): lowercase path components, a tag of at most
# 128 word characters, dots and dashes, an optional sha256 digest.
DOCKER_IMAGE = re.compile(r"(?:[a-zA-Z0-9][-a-zA-Z0-9.]*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                          r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?"
                          r"(?:@sha256:[0-9a-f]{64})?\Z")
OUTPUT_FILE = re.compile(r"[0-9]+-[a-z]+\.yaml\Z")  # what this command writes (output.file_name)


class ManifestError(UserError):
    """A flag the manifests cannot be made from: one line, exit code 2."""


def check_args(args):
    """Every flag alone and with the others; ManifestError for the first mistake."""
    check_model_base_path(args.model_base_path)
    model_name = model_name_of(args)
    check_name("--name", name_of(args, model_name))
    check_name("--namespace", args.namespace)
    if args.kserve:
        check_kserve_names(name_of(args, model_name), args.namespace)
    for allowed in args.allow_from:
        check_allow_from(allowed)
    check_replicas(args.min_replicas, args.max_replicas, args.target_cpu_utilization)
    check_quantities(args.cpu, args.memory)
    check_server_numbers(args)
    if args.gcp_service_account and not GCP_SERVICE_ACCOUNT.match(args.gcp_service_account):
        raise ManifestError(f"--gcp_service_account={args.gcp_service_account!r} is not a Google "
                            "service account's email; pass NAME@PROJECT.iam.gserviceaccount.com")
    if args.docker_image is not None:
        check_docker_image(args.docker_image)
    check_output_dir(args.output_dir)


def check_docker_image(image):
    """An image reference Kubernetes pulls: [registry[:port]/]path[:tag][@sha256:digest], nothing
    else (a space or an empty tag would be written into the pod and fail only at the pull)."""
    if not DOCKER_IMAGE.match(image):
        raise ManifestError(f"--docker_image={image!r} is not an image reference; pass "
                            "[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST], e.g. tensorflow/serving:2.15.1")


def check_model_base_path(path):
    if path.startswith("gs://") and GCS_PATH.match(path.rstrip("/")):
        return
    if path.startswith("gs://"):
        raise ManifestError(f"--model_base_path={path!r} is not gs://BUCKET/PATH with a valid bucket "
                            "name; pass gs://BUCKET/run/export/<model_name>")
    if "://" in path:
        raise ManifestError(f"--model_base_path={path!r}: the pods read the export from Cloud Storage "
                            "through Workload Identity; copy it to gs://BUCKET/... and pass that")
    raise ManifestError(
        f"--model_base_path={path!r} is a path on this machine, which no pod of the cluster can read; "
        f"copy the export to Cloud Storage (gcloud storage cp -r {path.rstrip('/')} "
        "gs://BUCKET/run/export/) and pass gs://BUCKET/run/export/<model_name>")


def model_name_of(args):
    """--model_name, else the base path's last folder (as serving.launch names it)."""
    base, _, last = args.model_base_path.rstrip("/").rpartition("/")
    if not args.model_name and export_versions.is_version_name(last):
        raise ManifestError(
            f"--model_base_path={args.model_base_path} ends in a version number ({last}), and TF "
            f"Serving takes the model's base of numbered versions: did you mean --model_base_path={base}?")
    name = args.model_name or last or signature.DEFAULT_MODEL_NAME
    if not MODEL_NAME.match(name):
        raise ManifestError(f"--model_name={name!r} cannot be one segment of TF Serving's URL "
                            "/v1/models/NAME; pass letters, digits, '_', '-' or '.'")
    return name


def name_of(args, model_name):
    """--name, else the model's name as Kubernetes spells names (image_classifier -> image-classifier)."""
    return args.name or model_name.lower().replace("_", "-").replace(".", "-")


def check_name(flag, name):
    if not DNS_1035_LABEL.match(name) or len(name) > MAX_NAME_LENGTH:
        raise ManifestError(
            f"{flag}={name!r} is not a Kubernetes name: at most {MAX_NAME_LENGTH} lowercase letters, "
            "digits and '-', starting with a letter and ending with a letter or digit"
            + ("; pass --name" if flag == "--name" else ""))


def check_kserve_names(name, namespace):
    """KServe names the predictor's Deployment, Service and autoscaler <name>-predictor and its
    host <name>-predictor-<namespace>.<domain> (its default domainTemplate): each a label of at
    most 63 characters, or KServe fails after the apply (docs/serving.md cites the source)."""
    for derived in (f"{name}-predictor", f"{name}-predictor-{namespace}"):
        if len(derived) > MAX_NAME_LENGTH:
            raise ManifestError(
                f"--name={name!r} in namespace {namespace!r}: KServe derives {derived!r} "
                f"({len(derived)} characters) from it, over Kubernetes' {MAX_NAME_LENGTH}; pass a "
                f"--name of at most {MAX_NAME_LENGTH - len(derived) + len(name)} characters")


def check_allow_from(allowed):
    if not (placement.ALLOW_NAMESPACE.match(allowed) or placement.ALLOW_PODS.match(allowed)):
        raise ManifestError(f"--allow_from={allowed!r} is neither ns:NAMESPACE nor pods:KEY=VALUE; "
                            "pass e.g. --allow_from ns:frontend or --allow_from pods:app=gateway")


def check_replicas(min_replicas, max_replicas, target):
    if min_replicas < 1:
        raise ManifestError(f"--min_replicas={min_replicas} must be at least 1: a "
                            "HorizontalPodAutoscaler does not scale to zero")
    if max_replicas < min_replicas:
        raise ManifestError(f"--max_replicas={max_replicas} is below --min_replicas={min_replicas}; "
                            "pass bounds with min <= max")
    if not 1 <= target <= 99:
        raise ManifestError(
            f"--target_cpu_utilization={target} must be between 1 and 99 (percent of the CPU "
            "request): the limit equals the request, so usage never passes 100% and such a "
            "target would never add a replica")


def check_quantities(cpu, memory):
    if not CPU.match(cpu) or manifests.cpu_cores(cpu) <= 0:
        raise ManifestError(f"--cpu={cpu!r} is not a positive CPU quantity; pass e.g. 2, 0.5 or 500m")
    if not MEMORY.match(memory) or float(re.match(r"[0-9.]+", memory)[0]) <= 0:
        raise ManifestError(f"--memory={memory!r} is not a positive memory quantity; pass e.g. "
                            "2Gi or 512Mi")


def check_server_numbers(args):
    for flag, value, least in (("--max_batch_size", args.max_batch_size, 1),
                               ("--batch_timeout_micros", args.batch_timeout_micros, 0),
                               ("--max_enqueued_batches", args.max_enqueued_batches, 1),
                               ("--file_system_poll_wait_seconds",
                                args.file_system_poll_wait_seconds, 1)):
        if value < least:
            raise ManifestError(f"{flag}={value} must be at least {least}")


def check_output_dir(path):
    """New, empty, or holding only this command's files (replaced whole)."""
    if "://" in path:
        raise ManifestError(f"--output_dir={path!r}: kubectl applies local files; pass a local folder")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ManifestError(f"--output_dir={path!r} is a file; pass a folder")
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ManifestError(f"--output_dir={path!r} is under {above}, which is a file, not a folder; "
                            "pass a folder elsewhere")
    foreign = sorted(name for name in (os.listdir(path) if os.path.isdir(path) else ())
                     if not OUTPUT_FILE.match(name))
    if foreign:
        raise ManifestError(f"--output_dir={path!r} holds files this command did not write "
                            f"({', '.join(foreign[:3])}); pass a new or empty folder")


def settings_from_args(args, image):
    """The checked flags as manifests.Settings, with the image chosen for the export."""
    model_name = model_name_of(args)
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(manifests.Settings)
              if field.name not in ("image", "name", "model_name", "model_base_path", "allow_from")}
    return manifests.Settings(model_base_path=args.model_base_path.rstrip("/"), image=image,
                              name=name_of(args, model_name), model_name=model_name,
                              allow_from=tuple(args.allow_from), **values)
