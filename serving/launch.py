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
"""
import os
import shutil
import socket
import subprocess
import sys

from common import console, export_versions, signature
from common.user_errors import UserError

DOCKER_IMAGE = "tensorflow/serving:2.15.1"  # the TF version the trainer exports with
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
    parser.add_argument("--docker_image", default=DOCKER_IMAGE)
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


def build_command(args):
    """(server, reason, argv) for the parsed launcher flags."""
    base_path = os.path.abspath(args.model_base_path)  # TF Serving and Docker need absolute paths
    model_name = args.model_name or os.path.basename(base_path.rstrip("/")) or signature.DEFAULT_MODEL_NAME
    server, reason = choose_server(args.server)
    return server, reason, COMMANDS[server](args, base_path, model_name) + args.server_flags


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
    """(server, reason, argv) to run; LaunchError for a model path or a port that cannot work."""
    args.model_base_path, note = resolve_model_base(args.model_base_path)
    if note:
        print(f"serving.launch: {note}", flush=True)
    busy = None if args.dry_run else find_busy_port(args)
    if busy:
        raise LaunchError(busy)
    return build_command(args)


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
