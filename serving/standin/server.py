"""DEVELOPMENT STAND-IN for TF Serving: serves export directories over REST and gRPC.

Use real TF Serving (`python -m serving.launch` picks it when Docker or
`tensorflow_model_server` is available); this is for machines with neither. It takes
TF Serving's flags and config files and answers its REST API and gRPC services with
its codes and words; docs/serving.md lists what it implements and where it differs.
A bad flag, config file or busy port is one "error:" line and exit code 2; --help and
a mistyped flag answer before TensorFlow loads. SIGTERM or Ctrl-C: new requests are refused,
those received are answered (--shutdown_grace_seconds at most), then exit code 0.

    .venv/bin/python -m serving.standin.server --model_name image_classifier \
        --model_base_path OUT/export/image_classifier --rest_api_port 8501 --port 8500
"""
import argparse
import dataclasses
import errno
import logging
import os
import signal
import socket
import threading

from tensorflow_serving.config import model_server_config_pb2

from common import console, signature
from common.user_errors import UserError

# No TensorFlow here: rest_server, grpc_server and server_core load it, and are imported
# where a server starts: --help, flag mistakes, a base a level off and a busy port answer at once.
from serving.standin import batching, config_files, metrics as metrics_lib, version_policy

NAME = "serving.standin.server"  # starts each line it prints, as serving.launch's and serving.demo's
STANDIN_BANNER = f"TF Serving development stand-in ({NAME}), not TF Serving"
# --shutdown_grace_seconds' default: with the preStop sleep of the Deployment serving.k8s writes
# and time to exit, it fits Kubernetes' default termination grace, 30 s (manifests.py adds them up).
DEFAULT_SHUTDOWN_GRACE_SECONDS = 15


def build_parser():
    parser = console.ArgumentParser(
        prog="python -m serving.standin.server",
        description=f"{STANDIN_BANNER}: serves OUT/export/<model_name>/<version>/ with TF "
                    "Serving's REST API and gRPC PredictionService on CPU, for development on "
                    "machines without TF Serving. Not a replacement for TF Serving.")
    add_model_flags(parser)
    add_server_flags(parser)
    return parser


def add_model_flags(parser):
    group = parser.add_argument_group("models (TF Serving's flags)")
    group.add_argument("--model_name", default=signature.DEFAULT_MODEL_NAME)
    group.add_argument("--model_base_path",
                       help="directory of integer version subdirectories (TF Serving layout)")
    group.add_argument("--model_config_file", help="a ModelServerConfig text proto: several "
                       "models, version policies, version labels (replaces the two flags above)")
    group.add_argument("--model_config_file_poll_wait_seconds", type=float, default=0,
                       help="re-read --model_config_file this often; 0 (TF's default): never")
    group.add_argument("--allow_version_labels_for_unavailable_models", type=parse_bool,
                       nargs="?", const=True, default=False, metavar="BOOL",
                       help="let a label name a version that is not loaded yet (needed for "
                            "labels at start-up, as in TF Serving)")
    group.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                       help="how often to look for new or deleted versions")
    group.add_argument("--enable_model_warmup", type=parse_bool, nargs="?", const=True,
                       default=True, metavar="BOOL",
                       help="replay assets.extra/tf_serving_warmup_requests on load")
    group.add_argument("--enable_batching", type=parse_bool, nargs="?", const=True,
                       default=False, metavar="BOOL",
                       help="merge concurrent requests into one model call")
    group.add_argument("--batching_parameters_file",
                       help="a BatchingParameters text proto (needs --enable_batching)")
    group.add_argument("--monitoring_config_file", help="a MonitoringConfig text proto; "
                       "prometheus_config { enable: true } serves Prometheus metrics over REST")


def add_server_flags(parser):
    group = parser.add_argument_group("ports")
    group.add_argument("--port", type=int, default=8500, help="gRPC port; 0 picks a free one")
    group.add_argument("--rest_api_port", type=int, default=8501,
                       help="REST port; 0 picks a free one (TF Serving's default 0 disables "
                            "REST; the stand-in always serves it)")
    group.add_argument("--host", default="127.0.0.1",
                       help="address to bind (stand-in only); 0.0.0.0 exposes the server")
    group.add_argument("--max_request_bytes", type=int,
                       help="larger REST bodies get HTTP 413 and gRPC messages RESOURCE_EXHAUSTED "
                            "(stand-in only; default: rest_server.DEFAULT_MAX_REQUEST_BYTES, 16 MiB)")
    group.add_argument("--shutdown_grace_seconds", type=float,
                       default=DEFAULT_SHUTDOWN_GRACE_SECONDS, help="on SIGTERM or Ctrl-C, how "
                       "long requests received get to be answered (stand-in only: TF Serving "
                       "ends at once); a second signal ends it at once")


def parse_bool(text):
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


@dataclasses.dataclass
class ServerOptions:
    """Everything start() needs; main() builds it from the flags and config files."""
    model_config: model_server_config_pb2.ModelServerConfig
    host: str = "127.0.0.1"
    rest_api_port: int = 0
    port: int = 0
    poll_seconds: float = 1.0
    enable_warmup: bool = True
    max_request_bytes: int = None                    # None: rest_server's default
    model_config_file: str = None
    config_poll_seconds: float = 0.0
    allow_unavailable_labels: bool = False
    batching: config_files.BatchingOptions = None  # None: no server-side batching
    prometheus_path: str = None                      # None: no metrics page


class RunningServer:
    """The models, REST and gRPC servers of one stand-in; stop() shuts all three down."""

    def __init__(self, core, rest_server, grpc_server, grpc_port, metrics):
        self.core, self.rest_server, self.grpc_server = core, rest_server, grpc_server
        self.metrics = metrics
        self.host = rest_server.server_address[0]
        self.rest_port, self.grpc_port = rest_server.server_port, grpc_port

    def stop(self, grace_seconds=DEFAULT_SHUTDOWN_GRACE_SECONDS):
        """Refuses new requests at once, answers those received within grace_seconds, closes the
        rest: returns how many. Returns once no model call runs (TF's exit handlers unmap the
        oneDNN kernels a running call executes: a segmentation fault)."""
        grpc_stopped = self.grpc_server.stop(grace_seconds)
        unanswered = self.rest_server.shutdown(grace_seconds)
        grpc_stopped.wait()
        unanswered += len(self.grpc_server.in_flight)  # cancelled; their model calls still run
        self.core.stop()  # the batch threads run what is queued first
        self.rest_server.server_close()  # joins every connection's thread
        self.grpc_server.executor.shutdown()  # and every RPC's
        return unanswered


class UsageError(UserError):
    """Flags that do not go together; main() prints it as one line, exit 2."""


class PortUnavailableError(UserError):
    """A REST or gRPC port the server cannot bind; main() prints it as one line, exit 2."""


def describe_bind_error(side, flag, host, port, error):
    """One line naming the port and the fix, for an OSError from binding it."""
    if error.errno == errno.EADDRINUSE:
        return (f"{side} port {port} on {host} is already in use; stop the other server "
                f"or pass {flag} N")
    return (f"{side} port {port} on {host} cannot be bound ({error.strerror or error}); "
            f"check --host or pass {flag} N")


def probe_port(host, port):
    """Raises the EADDRINUSE OSError of binding host:port (gRPC's bind failure does not say why);
    port 0 and other failures (no IPv6 for "localhost") are left to the real bind."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return
    for family, kind, proto, _, address in addresses if port else ():
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise


def check_ports(options):
    """PortUnavailableError for a port another server holds, before any model loads."""
    for side, flag, port in (("REST", "--rest_api_port", options.rest_api_port),
                             ("gRPC", "--port", options.port)):
        try:
            probe_port(options.host, port)
        except OSError as e:
            raise PortUnavailableError(describe_bind_error(side, flag, options.host, port, e)) from e


def start_server(model_name=None, model_base_path=None, *args, model_config=None, **options):
    """start() for one model (or model_config); the other ServerOptions in their order."""
    config = model_config or config_files.single_model_config(model_name, model_base_path)
    return start(ServerOptions(config, *args, **options))


def start(options):
    """Loads the configured models, then starts REST, gRPC and the pollers.

    Raises ConfigFileError for a label the config may not set yet, PortUnavailableError
    when either port cannot be bound; nothing keeps running then.
    """
    check_ports(options)  # before TensorFlow and the models load: a port in use answers at once
    from serving.standin import server_core
    metrics = metrics_lib.Metrics(is_batching=options.batching is not None)
    scheduler = batching.BatchScheduler(options.batching, metrics) if options.batching else None
    core = server_core.ServerCore(options.enable_warmup, options.allow_unavailable_labels,
                                  scheduler)
    try:
        core.apply_config(options.model_config)
        rest, grpc, grpc_port = start_endpoints(core, metrics, options)
    except (config_files.ConfigFileError, PortUnavailableError):
        core.stop()
        raise
    core.start_polling(options.poll_seconds, options.model_config_file,
                       options.config_poll_seconds)
    return RunningServer(core, rest, grpc, grpc_port, metrics)


def start_endpoints(core, metrics, options):
    """(REST server, gRPC server, gRPC port); PortUnavailableError if a port is taken."""
    from serving.standin import grpc_server, rest_server
    host = options.host
    max_request_bytes = options.max_request_bytes or rest_server.DEFAULT_MAX_REQUEST_BYTES
    try:
        rest = rest_server.start_rest_server(core, host, options.rest_api_port,
                                             max_request_bytes, metrics, options.prometheus_path)
    except OSError as e:
        raise PortUnavailableError(describe_bind_error(
            "REST", "--rest_api_port", host, options.rest_api_port, e)) from e
    try:
        probe_port(host, options.port)  # again: taken while the models loaded?
        grpc, grpc_port = grpc_server.start_grpc_server(core, host, options.port,
                                                        max_request_bytes, metrics)
    except OSError as e:
        rest.shutdown()
        rest.server_close()
        raise PortUnavailableError(describe_bind_error("gRPC", "--port", host, options.port,
                                                       e)) from e
    return rest, grpc, grpc_port


def options_from_args(args):
    """ServerOptions from the parsed flags; UsageError or ConfigFileError for a bad one."""
    if not 0 <= args.shutdown_grace_seconds < float("inf"):  # NaN too
        raise UsageError(f"--shutdown_grace_seconds={args.shutdown_grace_seconds:g} must be a "
                         "finite number >= 0")
    if args.model_config_file:
        config = config_files.read_model_server_config(args.model_config_file)
    elif args.model_base_path:
        version_policy.check_model_base(args.model_base_path)  # OUT/export, not OUT/export/m?
        if not os.path.isdir(args.model_base_path):
            logging.warning("--model_base_path=%s does not exist yet; waiting for a version",
                            args.model_base_path)
        config = config_files.single_model_config(args.model_name, args.model_base_path)
    else:
        raise UsageError("--model_base_path and --model_config_file are both empty; pass one")
    if args.batching_parameters_file and not args.enable_batching:
        raise UsageError("--batching_parameters_file is set without --enable_batching=true")
    options = ServerOptions(
        config, args.host, args.rest_api_port, args.port, args.file_system_poll_wait_seconds,
        args.enable_model_warmup, args.max_request_bytes, args.model_config_file,
        args.model_config_file_poll_wait_seconds, args.allow_version_labels_for_unavailable_models)
    if args.enable_batching:
        options.batching = (config_files.read_batching_parameters(args.batching_parameters_file)
                            if args.batching_parameters_file else config_files.BatchingOptions())
    if args.monitoring_config_file:
        options.prometheus_path = config_files.read_prometheus_path(args.monitoring_config_file)
    return options


def describe(running, options):
    """The start-up line: the models and their served versions, the endpoints, the extras."""
    served = running.core.refresh()
    models = "; ".join(
        f"model {name!r} " + (f"version {version.version}" if version is not None
                              else "no version yet (waiting for one)")
        for name, version in served.items())
    extras = "".join([
        f"; batching (max_batch_size {options.batching.max_batch_size})" if options.batching else "",
        f"; metrics at {options.prometheus_path}" if options.prometheus_path else ""])
    return (f"{STANDIN_BANNER}: {models}; REST http://{running.host}:{running.rest_port}  "
            f"gRPC {running.host}:{running.grpc_port}{extras}")


def main(argv=None):
    args = build_parser().parse_args(argv)  # --help and flag mistakes: before TensorFlow loads
    console.quiet_libraries()  # TensorFlow's C++ start-up lines and Google's notices
    logging.basicConfig(level=logging.WARNING, format=f"{NAME}: %(message)s")
    logging.getLogger("serving").setLevel(logging.INFO)  # version loads; TF's own INFO stays off
    # SIGTERM before the server starts: a client served at once may stop it at once (the demo
    # does), and that stop must still be graceful and come after the start-up line.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        options = options_from_args(args)
        running = start(options)
    except (UserError, config_files.ConfigFileError) as err:  # one line, exit code 2
        console.exit_with_error(err)
    signal.signal(signal.SIGINT, lambda *_: stop.set())  # Ctrl-C while loading: KeyboardInterrupt
    print(describe(running, options), flush=True)
    # Timed: the kernel may hand the signal to another thread (gRPC's, TensorFlow's); Python
    # then runs the handler only once the main thread runs Python again.
    while not stop.wait(0.5):
        pass
    for name in (signal.SIGTERM, signal.SIGINT):  # a second signal ends the process at once
        signal.signal(name, signal.SIG_DFL)
    unanswered = running.stop(args.shutdown_grace_seconds)
    closed = (f"; {unanswered} requests still in flight after --shutdown_grace_seconds were "
              "closed") if unanswered else ""
    print(f"{NAME}: stopped{closed}", flush=True)


if __name__ == "__main__":
    main()
