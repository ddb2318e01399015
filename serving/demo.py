"""End of the demo: start a server on an export, classify a few JPEGs with the client, stop it.

    .venv/bin/python -m serving.demo --model_base_path OUT/export/image_classifier a.jpg b.jpg

The server comes from serving.launch (TF Serving when it can, else the
development stand-in; it says which). It is stopped however the client ends.

Ports: free ones the OS picks, printed in a line, never TF Serving's fixed 8501/8500,
so a TF Serving already running or the demo of a second checkout never collides; a
server that loses a picked port to another process before binding it is started again
on new ones. A port given with --rest_api_port or --port must be free, or the demo
stops with one "error:" line and exit code 2. The client runs only once the server
this demo started answers, its process alive, for the model name and the latest
version under --model_base_path: a server that was already running (one started from
the README, say) is never used in its place.
"""
import os
import socket
import subprocess
import sys
import time

from common import console, export_versions
from common.user_errors import UserError
from serving import client, launch
from serving.rest_client import RestClient, ServerError

STARTUP_SECONDS = 180  # TF import + model load on a busy 2-core machine; docker may also pull
STOP_SECONDS = 30
HOST = "127.0.0.1"  # serving.launch's default --host: where the ports are checked and served
PORT_FLAGS = ("rest_api_port", "port")
# Starts on new free ports after a picked one was taken before the server bound it
# (another program's bind between the pick and the server's, a rare race).
PORT_ATTEMPTS = 3


class DemoError(UserError):
    """Why the demo stops: printed as one "error:" line, exit code 2."""


class PortLost(DemoError):
    """The server could not bind a port this demo picked: another process took it meanwhile."""


def build_parser():
    parser = console.ArgumentParser(prog="python -m serving.demo",
                                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_base_path", required=True, help="OUT/export/<model_name>")
    parser.add_argument("--model_name", default=None, help="default: last directory of the path")
    parser.add_argument("--rest_api_port", type=int, default=None,
                        help="default: a free port the OS picks (printed)")
    parser.add_argument("--port", type=int, default=None,
                        help="gRPC port; default: a free port the OS picks (printed)")
    parser.add_argument("--server", default="auto", help="passed to serving.launch")
    parser.add_argument("--labels", help="labels.txt, to name every class in the top k")
    parser.add_argument("images", nargs="+")
    return parser


def latest_version(model_base_path):
    """The highest N with N/saved_model.pb: the version TF Serving (and the stand-in) serve."""
    if not os.path.isdir(model_base_path):
        raise DemoError(f"--model_base_path={model_base_path} is not a directory; pass "
                        "OUT/export/<model_name> of a trainer run")
    version = export_versions.latest_version(model_base_path)
    if version is None:
        raise DemoError(f"--model_base_path={model_base_path} holds no N/saved_model.pb; "
                        "export a model there first (python -m trainer.task ...)")
    return version


def find_free_port(taken):
    """A loopback port the OS reports free (bind to port 0), not one of `taken`."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def choose_ports(args):
    """{flag: port}: a port typed on the command line must be free; the others are free
    ports the OS picks (never a typed one), printed in one line."""
    typed = {flag: getattr(args, flag) for flag in PORT_FLAGS if getattr(args, flag) is not None}
    if len(set(typed.values())) < len(typed):
        raise DemoError(f"--rest_api_port and --port are both {args.port}; give them different ports")
    for flag, port in typed.items():
        if not launch.is_port_free(port, HOST):
            raise DemoError(f"port {port} (--{flag}) on {HOST} is already in use by another server; "
                            f"stop it, pass another port, or leave --{flag} out to let the demo "
                            "choose a free one")
    chosen = dict(typed)
    for flag in PORT_FLAGS:
        chosen.setdefault(flag, find_free_port(set(chosen.values())))
    picked = [flag for flag in PORT_FLAGS if flag not in typed]
    if picked:
        print(f"serving.demo: REST on {HOST}:{chosen['rest_api_port']}, gRPC on {HOST}:{chosen['port']} "
              f"(free port(s) picked for {', '.join('--' + flag for flag in picked)})", flush=True)
    return chosen


def check_alive(process, when, ports=None):
    """DemoError once the started server has exited; PortLost when it exited before serving
    and one of the ports it was given is held by another process now."""
    if process.poll() is None:
        return
    if ports and not all(launch.is_port_free(port, HOST) for port in ports.values()):
        raise PortLost(f"a port of {ports} was taken by another process before the server bound it")
    raise DemoError(f"the server this demo started exited with code {process.returncode} "
                    f"{when}; see its lines above")


def is_version_available(status, version, port):
    """True once `version` is AVAILABLE; DemoError when the answer lists other versions only."""
    states = {str(v.get("version")): v.get("state") for v in status.get("model_version_status", [])}
    if str(version) not in states:
        raise DemoError(f"the server on port {port} serves version(s) {sorted(states)}, not version "
                        f"{version} of --model_base_path: it is not the server this demo started")
    return states[str(version)] == "AVAILABLE"


def check_metadata(metadata, model_name, version, port):
    spec = metadata.get("model_spec", {})
    if spec.get("name") != model_name or str(spec.get("version")) != str(version):
        raise DemoError(f"the server on port {port} describes model {spec.get('name')!r} version "
                        f"{spec.get('version')}, not {model_name!r} version {version}: it is not "
                        "the server this demo started")


def wait_for_model(process, rest, version, seconds, ports):
    """Returns once the started server serves `version` of rest.model_name, its process alive.

    DemoError if the process exits (PortLost if it lost one of ports), another server
    answers, or `seconds` pass.
    """
    deadline = time.monotonic() + seconds
    while True:
        check_alive(process, "before serving", ports)
        try:
            if is_version_available(rest.status(), version, rest.port):
                check_metadata(rest.metadata(version), rest.model_name, version, rest.port)
                check_alive(process, "before serving")
                return
            problem = f"version {version} is not AVAILABLE yet"
        except ServerError as e:
            problem = str(e)
        if time.monotonic() > deadline:
            raise DemoError(f"the model was not available after {seconds}s: {problem}")
        time.sleep(0.5)


def stop(process):
    process.terminate()
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    print(f"serving.demo: server stopped (exit code {process.returncode})", flush=True)


def launch_command(args, model_name, ports):
    return [sys.executable, "-m", "serving.launch", "--model_base_path", args.model_base_path,
            "--model_name", model_name, "--rest_api_port", str(ports["rest_api_port"]),
            "--port", str(ports["port"]), "--host", HOST, "--server", args.server]


def serve_and_classify(args, model_name, version, ports):
    """Starts the server, classifies args.images once it is the one answering, stops it."""
    process = subprocess.Popen(launch_command(args, model_name, ports))
    server_url = f"http://{HOST}:{ports['rest_api_port']}"
    rest = RestClient(server_url, model_name, timeout=10)
    try:
        wait_for_model(process, rest, version, STARTUP_SECONDS, ports)
        labels = ["--labels", args.labels] if args.labels else []
        code = client.main(["--server", server_url, "--model", model_name] + labels + args.images)
        check_alive(process, "while the client ran: the answers above may come from another server")
        return code
    finally:
        rest.close()
        stop(process)


def serve_on_free_ports(args, model_name, version):
    """serve_and_classify on the chosen ports; picked ones lost to a race are picked again."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return serve_and_classify(args, model_name, version, choose_ports(args))
        except PortLost as err:
            if attempt == PORT_ATTEMPTS or args.rest_api_port is not None and args.port is not None:
                raise
            print(f"serving.demo: {err}; picking new ports", flush=True)


def run(args):
    args.model_base_path = launch.resolve_model_base(args.model_base_path)[0]
    model_name = args.model_name or args.model_base_path.rstrip("/").split("/")[-1]
    return serve_on_free_ports(args, model_name, latest_version(args.model_base_path))


def main(argv=None):
    console.quiet_unless_verbose([])  # the server started here inherits the quiet environment
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (UserError, ValueError) as e:  # ValueError: serving.launch's own mistakes, one line
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
