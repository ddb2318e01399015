"""Classify images with a TF Serving model (or the stand-in) over REST or gRPC.

    .venv/bin/python -m serving.client --server http://127.0.0.1:8501 --model image_classifier a.jpg b.jpg
    .venv/bin/python -m serving.client --grpc 127.0.0.1:8500 --model image_classifier --json a.jpg

Prints the top-k class names with probabilities per image. Images are sent as the
export decodes them (JPEG, PNG, GIF, BMP); files that cannot be read or are none of
those get an error line each, the others are still sent (exit code 1 if any failed).
Names for classes other than the top one come from --labels (the dataset's
labels.txt) when given, else they print as #<class id>; a labels file whose number
of names is not the model's class count is refused (one line, exit code 2).
Mistakes a user can fix (a bad flag, URL or labels file, an unreachable server or
unknown model) are one "error:" line and exit code 2.
"""
import json
import sys
import time

from common import console, signature
from common.user_errors import UserError
from serving.classify import ImageResult, classify_files, read_labels
from serving.rest_client import RestClient, ServerError


def build_parser():
    parser = console.ArgumentParser(prog="python -m serving.client",
                                    description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="REST base URL, e.g. http://127.0.0.1:8501")
    target.add_argument("--grpc", help="gRPC host:port, e.g. 127.0.0.1:8500")
    parser.add_argument("--model", default=signature.DEFAULT_MODEL_NAME, help="model name")
    parser.add_argument("--version", type=int, help="model version (default: the latest)")
    parser.add_argument("--top_k", type=int, default=3)
    parser.add_argument("--labels", help="labels.txt, to name every class in the top k")
    parser.add_argument("--batch_size", type=int, default=32, help="images per request")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--wait_seconds", type=float, default=0.0,
                        help="first wait up to this long for the model to be AVAILABLE")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    return parser


def make_client(args):
    """The REST or gRPC client; UserError for a malformed address."""
    try:
        return connect(args)
    except ValueError as err:
        raise UserError(str(err)) from None


def connect(args):
    if args.server:
        return RestClient(args.server, args.model, args.timeout)
    console.quiet_unless_verbose([])  # TensorFlow reads its log level once, when it loads
    from serving.grpc_client import GrpcClient  # imports TensorFlow: only when asked for
    return GrpcClient(args.grpc, args.model, args.timeout)


GRPC_STATE_AVAILABLE = 30  # tensorflow_serving ModelVersionStatus.State.AVAILABLE


def has_available_version(status):
    """True when a status (REST dict or gRPC GetModelStatusResponse) lists an AVAILABLE version:
    a server answers status for versions that failed to load too (state END)."""
    if isinstance(status, dict):
        return any(v.get("state") == "AVAILABLE" for v in status.get("model_version_status", []))
    return any(v.state == GRPC_STATE_AVAILABLE for v in status.model_version_status)


def wait_until_available(client, seconds):
    """Polls the model status until a version is AVAILABLE or `seconds` pass; raises the last error."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            status = client.status()
            if has_available_version(status):
                return status
            problem = ServerError(f"no version of the model is AVAILABLE yet: {status}")
        except ServerError as err:
            problem = err
        if time.monotonic() >= deadline:
            raise problem
        time.sleep(0.5)


def format_result(result):
    if result.error:
        return f"{result.file}: ERROR: {result.error}"
    return f"{result.file}: " + ", ".join(f"{name} {prob:.4f}" for name, _, prob in result.top)


def load_labels(args):
    """The --labels names, or None; UserError when the file cannot be read."""
    if not args.labels:
        return None
    try:
        return read_labels(args.labels)
    except OSError as err:
        raise UserError(f"--labels {args.labels}: {err.strerror or err}") from None
    except ValueError as err:  # blank or duplicate names: the message names the file
        raise UserError(str(err)) from None


def classify(args):
    """Results of classifying args.images, or UserError (bad flag, labels, server answer)."""
    if args.top_k < 1 or args.batch_size < 1:
        raise UserError(f"--top_k={args.top_k} and --batch_size={args.batch_size} must be >= 1")
    labels = load_labels(args)
    client = make_client(args)
    try:
        if args.wait_seconds > 0:
            wait_until_available(client, args.wait_seconds)
        return classify_files(client, args.images, args.top_k, labels, args.batch_size,
                              args.version, labels_source=f"--labels {args.labels}")
    except ServerError as err:  # unreachable, unknown model or version: the user's to fix
        raise UserError(str(err)) from None
    finally:
        client.close()


def main(argv=None):
    """Prints the results; returns 0, 1 (some files failed) or 2 (one "error:" line)."""
    args = build_parser().parse_args(argv)
    try:
        results = classify(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    if args.json:
        print(json.dumps([ImageResult.to_json(r) for r in results], indent=1))
    else:
        print("\n".join(format_result(r) for r in results))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
