"""Kubernetes manifests for TF Serving on an export on GCS, ready to apply (the entry point).

    .venv/bin/python -m serving.k8s --model_base_path gs://BUCKET/run/export/image_classifier --output_dir k8s/
    .venv/bin/python -m serving.k8s --model_base_path gs://BUCKET/run/export/image_classifier --output_dir k8s/ --kserve
    kubectl apply -f k8s/

Writes a ServiceAccount (Workload Identity), a ConfigMap (TF Serving's batching parameters
and monitoring config), then either a Deployment, Service and HorizontalPodAutoscaler
(serving/k8s/manifests.py) or, with --kserve, one KServe InferenceService
(serving/k8s/kserve.py). The image is the TF Serving release built on the export's
TensorFlow, as serving.launch chooses it (serving/k8s/export_image.py). Every flag is
checked, and the export read, before anything is written (serving/k8s/checks.py); a
mistake is one "error:" line and exit code 2. docs/serving.md, "Serving on Kubernetes".
"""
import dataclasses
import sys

from common import console
from serving.k8s import checks, export_image, kserve, manifests, output, placement

# Objects' minimum Kubernetes release: the preStop `sleep` action is beta, on by default, from 1.30.
KUBERNETES = "Kubernetes 1.30 or newer"
KSERVE = "KServe 0.21, Standard mode"


def build_parser():
    parser = console.ArgumentParser(prog="python -m serving.k8s", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_base_path", required=True,
                        help="gs://BUCKET/run/export/<model_name>: the export's base of numbered versions")
    parser.add_argument("--output_dir", required=True,
                        help="a new or empty folder (or this command's earlier output, replaced whole)")
    parser.add_argument("--kserve", action="store_true",
                        help="one KServe InferenceService instead of Deployment, Service and autoscaler")
    parser.add_argument("--tf_serving_version", help="X.Y: the TensorFlow that wrote the export, "
                        "when this machine cannot read it (TF Serving X.Y is built on TensorFlow X.Y)")
    parser.add_argument("--docker_image", help="default: the TF Serving image built on the "
                        "export's TensorFlow (a mirror of it, e.g. in Artifact Registry, here)")
    parser.add_argument("--name", help="of the Kubernetes objects; default: the model name, "
                        "'_' as '-' (with --kserve also the model's name in TF Serving's URLs)")
    parser.add_argument("--model_name", help="default: the last folder of --model_base_path")
    parser.add_argument("--namespace", default=field_default("namespace"))
    parser.add_argument("--gcp_service_account", help="NAME@PROJECT.iam.gserviceaccount.com that "
                        "may read the bucket; default: none (grant the bucket to the Kubernetes "
                        "service account's own principal)")
    parser.add_argument("--allow_from", action="append", default=[], metavar="ns:NAME|pods:KEY=VALUE",
                        help="admit the serving ports only from this namespace's pods, or from the pods "
                             "of the serving namespace with this label (repeatable; a NetworkPolicy); "
                             "default: open to the cluster")
    parser.add_argument("--spread_zones", action="store_true",
                        help="spread the replicas across zones too, not only across nodes")
    add_tunable_flags(parser)
    return parser


def field_default(name):
    return next(field.default for field in dataclasses.fields(manifests.Settings) if field.name == name)


def add_tunable_flags(parser):
    """A flag per manifests.Settings field that carries a reason: its type, default and help."""
    group = parser.add_argument_group("replicas, resources and TF Serving's settings")
    for field in dataclasses.fields(manifests.Settings):
        if "help" in field.metadata:
            group.add_argument(f"--{field.name}", type=type(field.default), default=field.default,
                               help=f"{field.metadata['help']} (default: %(default)s)")


def run(args, argv):
    """Checks, reads the export, writes the files; returns the lines to print."""
    checks.check_args(args)
    image, image_line = export_image.choose_image(args)
    settings = checks.settings_from_args(args, image)
    objects = (kserve if args.kserve else manifests).build_objects(settings)
    texts = output.render(objects, output.command_line(argv))
    output.publish(texts, args.output_dir)
    applies_to = f"{KUBERNETES}, {KSERVE}" if args.kserve else KUBERNETES
    open_ports = placement.open_ports_line(settings, (kserve if args.kserve else manifests).SERVING_PORTS)
    return [image_line, f"wrote {args.output_dir.rstrip('/')}/: {', '.join(texts)} ({applies_to})",
            *filter(None, [open_ports]),
            f"next: kubectl apply -f {args.output_dir.rstrip('/')}/ (docs/serving.md, "
            "\"Serving on Kubernetes\", grants the bucket first)"]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    console.quiet_unless_verbose(argv)
    argv = console.strip_verbosity_flags(argv)
    args = build_parser().parse_args(argv)
    for line in console.exit_on_user_error(run, args, argv):
        print(f"serving.k8s: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
