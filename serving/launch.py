"""Start TF Serving on an export directory: Docker, else tensorflow_model_server, else the stand-in.

    .venv/bin/python -m serving.launch --model_base_path OUT/export/image_classifier
    .venv/bin/python -m serving.launch --model_base_path OUT/export/image_classifier --dry_run

Says which server it starts and why, then replaces itself with that server
(so its pid is the server's: stop it with SIGTERM or Ctrl-C). REST on 8501 and
gRPC on 8500 bound to 127.0.0.1 unless --host says otherwise. With --server
you force one choice. A port another server already holds is a one-line error
and exit code 2: a client would otherwise talk to that server, not this one.
Flags it does not know go to the server; one close to a flag of its own or of
the stand-in (TF Serving's) is a typo, answered with "did you mean".

Docker runs the TF Serving image built on the TensorFlow that wrote the served version
(the highest; its saved_model.pb records that TensorFlow, serving/export_tensorflow.py):
the oldest of TF_SERVING_IMAGES built on that TensorFlow's major.minor or a newer one, so
an export from TensorFlow 2.15 (.venv) gets tensorflow/serving:2.15.1 and one from 2.16 to
2.20 (.venv-keras has 2.20) gets tensorflow/serving:2.20.0. An export from a TensorFlow
newer than every image listed is one line and exit code 2, as a saved_model.pb that cannot
be parsed is; --docker_image overrides the choice. tensorflow_model_server's TensorFlow is
not known here (a note says which it should be); the stand-in loads the export with this
environment's TensorFlow. docs/serving.md, "Serving on CPU", has the details.
"""
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys

from common import console, export_versions, signature
from common.user_errors import UserError
from serving import export_tensorflow

# TF Serving's Docker images by the TensorFlow (major, minor) each is built on: TF Serving
# X.Y.Z is built on TensorFlow X.Y.Z (https://github.com/tensorflow/serving/releases; the
# images are the tags of https://hub.docker.com/r/tensorflow/serving). One per TensorFlow of
# the two environments (requirements.lock, requirements-keras.lock: checked by
# tests/serving/test_launch_image.py); only tags that exist.
TF_SERVING_IMAGES = {(2, 15): "tensorflow/serving:2.15.1", (2, 20): "tensorflow/serving:2.20.0"}
# An export that records no TensorFlow predates the field: the oldest image is the nearest.
DEFAULT_DOCKER_IMAGE = TF_SERVING_IMAGES[min(TF_SERVING_IMAGES)]
SERVERS = ("auto", "docker", "tensorflow_model_server", "standin")
DEFAULT_REST_API_PORT = 8501  # TF Serving's own defaults, so its documented commands work
DEFAULT_GRPC_PORT = 8500
# (flag, what it serves) of each port, in the order they are checked.
PORT_FLAGS = (("rest_api_port", "REST"), ("port", "gRPC"))


def build_parser():
    parser = console.ArgumentParser(
        prog="python -m serving.launch", description=__doc__.split("\n\n")[0],
        epilog="Other --flags go to the server as they are, e.g. --enable_batching "
               "--batching_parameters_file F or --monitoring_config_file F (TF Serving's own "
               "flags, which the stand-in also takes; with Docker, paths must exist in the container).")
    parser.add_argument("--model_base_path", required=True, help="OUT/export/<model_name>")
    parser.add_argument("--model_name", default=None,
                        help="default: the last directory of --model_base_path")
    parser.add_argument("--rest_api_port", type=int, default=DEFAULT_REST_API_PORT)
    parser.add_argument("--port", type=int, default=DEFAULT_GRPC_PORT, help="gRPC port")
    parser.add_argument("--host", default="127.0.0.1", help="address the ports are bound to")
    parser.add_argument("--server", choices=SERVERS, default="auto")
    parser.add_argument("--docker_image", default=None,
                        help="default: the TF Serving image built on the export's TensorFlow")
    parser.add_argument("--dry_run", action="store_true", help="print the command, do not run it")
    return parser


class LaunchError(UserError):
    """A launcher flag, path or port that cannot work: one line, exit code 2."""


def parse_args(argv=None):
    """The launcher's flags, args.server_flags the rest (for the server); a typo exits 2."""
    parser = build_parser()
    args, args.server_flags = parser.parse_known_args(argv)
    check_server_flags(parser, args.server_flags)
    return args


def check_server_flags(parser, server_flags):
    """parser.error (one line, exit 2) for a stray path, or for a pass-through flag that is
    neither the launcher's nor the stand-in's (TF Serving's) but a typo of one
    (console.is_typo_of).
    Other flags pass: TF Serving has more than the stand-in takes (--rest_api_num_threads)."""
    from serving.standin import server  # its parser loads no TensorFlow
    if server_flags and not server_flags[0].startswith("-"):  # a stray path, not a flag
        parser.error(f"unrecognized arguments: {' '.join(server_flags)}")
    known = console.flag_names(parser) + console.flag_names(server.build_parser())
    for flag in (arg.split("=", 1)[0] for arg in server_flags if arg.startswith("-")):
        if flag not in known and any(console.is_typo_of(flag, name) for name in known):
            parser.error(f"unrecognized arguments: {flag}")



def is_port_free(port, host="127.0.0.1"):
    """True when a server could listen on host:port now, i.e. nothing else listens there.

    The probe binds with SO_REUSEADDR, as servers do, so a port whose last
    connections are in TIME_WAIT counts as free; it never sets SO_REUSEPORT, so
    a gRPC server holding the port (gRPC sets SO_REUSEPORT) makes it busy.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # --host ::1 is IPv6
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_busy_port(args):
    """The error line for the first of args' ports that is not free, else None."""
    if args.rest_api_port == args.port:
        return f"--rest_api_port and --port are both {args.port}; give them different ports"
    for flag, side in PORT_FLAGS:
        port = getattr(args, flag)
        if not is_port_free(port, args.host):
            return (f"{side} port {port} on {args.host} is already in use by another server; "
                    f"stop it or pass --{flag} N")
    return None


def is_docker_usable():
    """True when a docker CLI is on PATH and its engine answers (`docker info`)."""
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_server(requested):
    """(server, reason): the requested one, or the first usable of docker, binary, stand-in."""
    if requested != "auto":
        return requested, "chosen with --server"
    if is_docker_usable():
        return "docker", "the Docker engine answers"
    if shutil.which("tensorflow_model_server"):
        return "tensorflow_model_server", "it is on PATH"
    return "standin", ("no Docker engine and no tensorflow_model_server on PATH; this is the "
                       "development stand-in, not TF Serving")


def docker_command(args, base_path, model_name):
    return ["docker", "run", "--rm", "--init",
            "-p", f"{args.host}:{args.rest_api_port}:8501", "-p", f"{args.host}:{args.port}:8500",
            "--mount", f"type=bind,source={base_path},target=/models/{model_name},readonly",
            "-e", f"MODEL_NAME={model_name}", args.docker_image]


def binary_command(args, base_path, model_name):
    return ["tensorflow_model_server", f"--port={args.port}", f"--rest_api_port={args.rest_api_port}",
            f"--model_name={model_name}", f"--model_base_path={base_path}"]


def standin_command(args, base_path, model_name):
    return [sys.executable, "-m", "serving.standin.server", f"--port={args.port}",
            f"--rest_api_port={args.rest_api_port}", f"--model_name={model_name}",
            f"--model_base_path={base_path}", f"--host={args.host}"]


COMMANDS = {"docker": docker_command, "tensorflow_model_server": binary_command,
            "standin": standin_command}


def build_command(args, server):
    """The argv that starts server with the parsed launcher flags (args.docker_image chosen)."""
    base_path = os.path.abspath(args.model_base_path)  # TF Serving and Docker need absolute paths
    model_name = args.model_name or os.path.basename(base_path.rstrip("/")) or signature.DEFAULT_MODEL_NAME
    return COMMANDS[server](args, base_path, model_name) + args.server_flags


def tensorflow_minor(version):
    """(major, minor) of a TensorFlow version ("2.20.0", "2.21.0-rc1"); None if it is not one."""
    match = re.match(r"(\d+)\.(\d+)(?!\d)", version)
    return (int(match[1]), int(match[2])) if match else None


def read_written_by(base):
    """(version, TensorFlow that wrote it: "" if unrecorded) of the version TF Serving serves
    in base (the highest), or None while base holds none; UnreadableSavedModel (exit 2)."""
    version = export_versions.latest_version(base)
    if version is None:
        return None
    version_dir = export_versions.version_dir(base, version)
    return version, export_tensorflow.read_tensorflow_version(version_dir)


def describe_written_by(base, written_by):
    if written_by is None:
        return f"{base} holds no version yet"
    version, tensorflow = written_by
    if not tensorflow:
        return f"the export (version {version}) records no TensorFlow version"
    if not tensorflow_minor(tensorflow):
        return f"the export (version {version}) records TensorFlow {tensorflow!r}, not a version number"
    return f"the export (version {version}) was written by TensorFlow {tensorflow}"


def choose_docker_image(tensorflow, export):
    """(image, why) for an export written by TensorFlow `tensorflow` ("" if unrecorded): the
    oldest image built on its major.minor or a newer one, as TensorFlow promises no forward
    compatibility (an older TF Serving may not load a newer export); LaunchError naming
    export when every image is older."""
    minor = tensorflow_minor(tensorflow)
    if minor is None:
        return DEFAULT_DOCKER_IMAGE, " (the oldest known; pass --docker_image to choose another)"
    fitting = [key for key in sorted(TF_SERVING_IMAGES) if key >= minor]
    if fitting and fitting[0] == minor:
        return TF_SERVING_IMAGES[minor], ""
    if fitting:
        nearest = " (the oldest known built on TensorFlow %d.%d or newer)" % minor
        return TF_SERVING_IMAGES[fitting[0]], nearest
    newest = max(TF_SERVING_IMAGES)
    raise LaunchError(
        f"{export} was written by TensorFlow {tensorflow}, newer than the newest TF Serving image "
        f"known here ({TF_SERVING_IMAGES[newest]}, TensorFlow %d.%d); pass --docker_image "
        "tensorflow/serving:TAG of a release built on TensorFlow %d.%d or newer "
        "(github.com/tensorflow/serving/releases), or export it again with TensorFlow %d.%d "
        "(.venv-keras, --engine keras)" % (newest + minor + newest))


def describe_docker_image(args, written_by):
    """The line for Docker; sets args.docker_image, unless given, to the image for the export."""
    line = describe_written_by(args.model_base_path, written_by)
    if args.docker_image:
        return f"{line}: image {args.docker_image} (--docker_image)"
    if written_by is None:  # TF Serving waits for a version, which no one has written yet
        args.docker_image, why = choose_docker_image("", args.model_base_path)
    else:
        version, tensorflow = written_by
        export = export_versions.version_dir(args.model_base_path, version)
        args.docker_image, why = choose_docker_image(tensorflow, export)
    return f"{line}: image {args.docker_image}{why}"


def describe_binary(args, written_by):
    """The line for tensorflow_model_server, whose TensorFlow the launcher cannot see."""
    line = describe_written_by(args.model_base_path, written_by)
    minor = tensorflow_minor(written_by[1]) if written_by else None
    if minor is None:
        return line
    return (f"{line}; note: the TensorFlow of tensorflow_model_server is not checked: it should "
            "be %d.%d or newer (tensorflow_model_server --version says)" % minor)


def describe_standin(args, written_by):
    """The line for the stand-in, which loads the export with this environment's TensorFlow."""
    try:
        here = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        here = "(not installed)"
    line = (f"{describe_written_by(args.model_base_path, written_by)}; the stand-in runs this "
            f"environment's TensorFlow {here}")
    written, running = (tensorflow_minor(written_by[1]) if written_by else None), tensorflow_minor(here)
    if written and running and running < written:
        line += (", older than the export's: TensorFlow promises no forward compatibility "
                 "(docs/serving.md, \"An export from TensorFlow 2.20 on TF Serving 2.15\")")
    return line


# server -> the line saying which TensorFlow wrote the export and what that means there.
DESCRIBE_TENSORFLOW = {"docker": describe_docker_image, "tensorflow_model_server": describe_binary,
                       "standin": describe_standin}


def resolve_model_base(path):
    """(export base, note): TF Serving takes the base and serves its highest version. A
    version directory is accepted when it is that highest version (the note says so);
    otherwise LaunchError naming the fix. Anything else that is not a directory: LaunchError."""
    path = path.rstrip("/")
    if not os.path.isdir(path):
        raise LaunchError(f"--model_base_path={path!r} is not a directory; pass OUT/export/<model_name>")
    if not export_versions.has_saved_model(path):
        return path, None
    base, version = os.path.dirname(path), os.path.basename(path)
    highest = export_versions.latest_version(base)
    if not export_versions.is_version_name(version) or int(version) != highest:
        raise LaunchError(f"{path} is a version directory, and TF Serving serves the highest version "
                         f"of its base ({highest} in {base}); pass {base}, or copy version "
                         f"{version} into a base of its own")
    return base, f"{path} is version {version}, the highest of {base}: serving {base}"


def plan_launch(args):
    """(server, reason, argv) to run; LaunchError (or UnreadableSavedModel) for a model path,
    an export or a port that cannot work."""
    args.model_base_path, note = resolve_model_base(args.model_base_path)
    if note:
        print(f"serving.launch: {note}", flush=True)
    busy = None if args.dry_run else find_busy_port(args)
    if busy:
        raise LaunchError(busy)
    server, reason = choose_server(args.server)
    written_by = read_written_by(args.model_base_path)
    print(f"serving.launch: {DESCRIBE_TENSORFLOW[server](args, written_by)}", flush=True)
    return server, reason, build_command(args, server)


def main(argv=None):
    """The command: a mistake is one "error:" line and exit code 2 (SystemExit)."""
    console.quiet_unless_verbose([])  # the server started here inherits the quiet environment
    args = parse_args(argv)
    server, reason, command = console.exit_on_user_error(plan_launch, args)
    print(f"serving.launch: starting {server} ({reason}): {' '.join(command)}", flush=True)
    if server == "tensorflow_model_server" and args.host != "0.0.0.0":
        print("serving.launch: note: tensorflow_model_server has no bind-address flag and listens "
              f"on all interfaces, not only {args.host}; use Docker or a firewall to restrict it",
              flush=True)
    if args.dry_run:
        return 0
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
