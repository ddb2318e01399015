"""Serving latency and throughput over REST and gRPC against the SavedModel called in-process.

    .venv/bin/python -m bench.bench_serving                     # ~2 minutes on 2 cores
    .venv/bin/python -m bench.bench_serving --quick             # ~1 minute: 1 round
    .venv/bin/python -m bench.bench_serving --model_base_path OUT/export/image_classifier

Without --model_base_path it trains the default small_cnn (32x32 input, the
demo's model) for one step on synthetic 32x32 digit JPEGs and exports it with
the trainer: the real serving graph, untrained weights (timing does not care).
The server is `python -m serving.standin.server` (the development stand-in) in its own
process, as it would be deployed; real TF Serving is not installable here.

In alternating rounds (the machine is shared: only same-run ratios mean much)
it measures, for in-process / REST / gRPC:
  single   one client, batch-1 requests back to back: p50 / p99 latency
  batch    one client, batch-32 requests: images per second
  load     8 concurrent clients, batch-1 requests: requests per second, p50 / p99
and, against a second stand-in started with --enable_batching (BATCHING_PARAMETERS),
REST and gRPC under 8 and 32 concurrent clients sending batch-1 requests (in-process
too at 32 clients). That table measures the server, so its clients are
bench/raw_clients.py's, which cost the 2 cores little (pre-encoded requests, each
answer still checked); the same clients against the server without batching show
what batching itself adds. It prints one table (bench/report.py): medians over rounds
plus each path's ratio to in-process at the same number of clients (the median of the
per-round ratios and their spread); the libraries' lines go to the log file it names.
No goal: issue 34 retired them (the stand-in's goal is fidelity to TF Serving).
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench import cli, report  # no TensorFlow: --help answers before it loads
from common import console


def build_parser():
    parser = cli.make_parser("bench_serving", __doc__, "1 round")
    cli.add_serving_flags(parser, rounds=3, requests=200, requests_help="batch-1 requests per round")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads
    cli.answer_flags_first(build_parser().parse_args)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from bench import loadgen, raw_clients  # noqa: E402

from common import export_versions, signature  # noqa: E402
from serving.grpc_client import GrpcClient  # noqa: E402
from serving.rest_client import RestClient, ServerError  # noqa: E402
from serving.standin import served_version  # noqa: E402

BATCH_SIZE = 32
LOAD_CLIENTS = 8
MANY_CLIENTS = 32
SERVER_START_SECONDS = 300
# The batching server's --batching_parameters_file on a 2-core machine: two batch threads,
# so one batch can run while the next fills; a batch that is not full waits 5 ms for more
# requests (as TF Serving, the stand-in starts no batch early); 64 batches in the queue:
# 32 clients never fill it.
BATCHING_PARAMETERS = """max_batch_size { value: 32 }
batch_timeout_micros { value: 5000 }
max_enqueued_batches { value: 64 }
num_batch_threads { value: 2 }
"""


class InProcessClient:
    """The baseline: the SavedModel's serving_default called directly (same interface).

    Called as the stand-in calls it (serving/standin/served_version.py's run_signature): the
    JPEGs as a tf.string tensor, served_version.call_signature (the signature's flat call), the
    outputs as numpy arrays.
    """

    def __init__(self, loaded):
        self.function = loaded.signatures[signature.SIGNATURE_DEFAULT]

    def predict(self, jpegs):
        outputs = served_version.call_signature(
            self.function, {signature.INPUT_IMAGE_BYTES: tf.constant(jpegs, dtype=tf.string)})
        return {name: value.numpy() for name, value in outputs.items()}

    def close(self):
        pass


def make_digit_jpegs(count):
    """32x32 JPEGs of scikit-learn digits, as the demo serves."""
    from sklearn.datasets import load_digits
    from preprocess.demo_data import digit_to_jpeg
    images = load_digits().images
    return [digit_to_jpeg(images[i % len(images)]) for i in range(count)]


def export_untrained_model(work_dir, jpegs):
    """Trains the default small_cnn one step with the trainer (mode train: nothing evaluated) and
    exports it; returns the export base path."""
    from common import dataset_files, record_schema
    from trainer import chain
    from trainer.estimator import engine as estimator_engine
    data = os.path.join(work_dir, "data")
    os.makedirs(data)
    labels = [str(d) for d in range(10)]
    for split in ("train", "eval"):
        with tf.io.TFRecordWriter(os.path.join(data, f"{split}-00000-of-00001.tfrecord")) as w:
            for i, jpeg in enumerate(jpegs[:40]):
                w.write(record_schema.make_example(jpeg, 32, 32, i % 10, labels[i % 10], f"{i}.jpg"))
    splits = {s: {"records": 40, "per_label": {l: 4 for l in labels}, "shards": 1}
              for s in ("train", "eval")}
    with open(os.path.join(data, dataset_files.LABELS_FILE), "w") as f:
        f.write(dataset_files.labels_to_text(labels))
    with open(os.path.join(data, dataset_files.METADATA_FILE), "w") as f:
        f.write(dataset_files.metadata_to_json(dataset_files.build_metadata(labels, splits, {}, 80)))
    out = os.path.join(work_dir, "out")
    # --mode train: no evaluation, whose graph and session cost as much as the step here.
    params = chain.parse_params(["--train_data_path", f"{data}/train-*", "--eval_data_path",
                            f"{data}/eval-*", "--output_dir", out, "--train_steps", "1", "--mode", "train",
                            "--steps_per_eval", "1", "--train_batch_size", "8", "--eval_batch_size", "8"])
    export_dir = estimator_engine.run(params)  # not task.main: it would switch on INFO logging
    return os.path.dirname(export_dir.decode() if isinstance(export_dir, bytes) else export_dir)


def model_under_test(work_dir, model_base_path, jpegs):
    """(base path, model name, version, loaded SavedModel): model_base_path's highest version,
    or a fresh 1-step export in work_dir when model_base_path is None; ExportNotFound (one
    line) when model_base_path holds no version."""
    base = model_base_path or export_untrained_model(work_dir, jpegs)
    version = export_versions.require_latest_version(base)
    loaded = tf.saved_model.load(export_versions.version_dir(base, version))
    return base, os.path.basename(os.path.abspath(base)), version, loaded


def write_batching_parameters(work_dir):
    """work_dir/batching_parameters.txt holding BATCHING_PARAMETERS; returns its path."""
    path = os.path.join(work_dir, "batching_parameters.txt")
    with open(path, "w") as f:
        f.write(BATCHING_PARAMETERS)
    return path


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server_process(model_base_path, model_name, extra_args=()):
    """`python -m serving.standin.server` on free loopback ports; returns (process, rest_url, grpc_target)."""
    rest_port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.standin.server", "--model_name", model_name,
         "--model_base_path", model_base_path, "--rest_api_port", str(rest_port),
         "--port", str(grpc_port), *extra_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rest = RestClient(f"http://127.0.0.1:{rest_port}", model_name, timeout=5)
    deadline = time.monotonic() + SERVER_START_SECONDS
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"serving.standin.server exited with code {process.returncode}")
        try:
            rest.status()
            break
        except ServerError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.5)
    rest.close()
    return process, f"http://127.0.0.1:{rest_port}", f"127.0.0.1:{grpc_port}"


def check_errors(*results):
    for result in results:
        if result.errors:
            raise RuntimeError(f"{len(result.errors)} failed requests, first: {result.errors[0]}")


def measure(make_client, jpegs, requests):
    """One round of the three measurements for one path; raises if any request failed."""
    single = loadgen.run_load(make_client, [[j] for j in jpegs], requests, 1)
    batches = [jpegs[i:i + BATCH_SIZE] for i in range(0, len(jpegs) - BATCH_SIZE + 1, BATCH_SIZE)]
    batch = loadgen.run_load(make_client, batches, max(requests // 8, 4), 1)
    check_errors(single, batch)
    return {"single_p50_ms": single.percentile_ms(50), "single_p99_ms": single.percentile_ms(99),
            "batch_images_per_s": batch.images_per_second,
            **measure_load(make_client, jpegs, requests * 4, LOAD_CLIENTS)}


def measure_load(make_client, jpegs, requests, clients):
    """Batch-1 requests from `clients` concurrent clients: requests/s, p50 and p99 (ms)."""
    load = loadgen.run_load(make_client, [[j] for j in jpegs], requests, clients)
    check_errors(load)
    return {f"load{clients}_requests_per_s": load.requests_per_second,
            f"load{clients}_p50_ms": load.percentile_ms(50),
            f"load{clients}_p99_ms": load.percentile_ms(99)}


def measure_path(path, make_client, jpegs, requests):
    """Every measurement a path takes part in: the batching table's paths only under load."""
    if path in FIRST_TABLE:
        figures = measure(make_client, jpegs, requests)  # its 8-client load: the common base
    else:
        figures = measure_load(make_client, jpegs, requests * 4, LOAD_CLIENTS)
    if path not in FIRST_TABLE or path == "in-process":
        figures.update(measure_load(make_client, jpegs, requests * 4, MANY_CLIENTS))
    return figures


def run_rounds(makers, jpegs, rounds, requests):
    """{path: {metric: [value per round]}}, the paths interleaved within every round."""
    for make_client in makers.values():  # untimed: first calls build caches and connections
        loadgen.run_load(make_client, [[j] for j in jpegs[:8]], 16, 2)
    figures = {path: {} for path in makers}
    for _ in range(rounds):
        for path, make_client in makers.items():
            for metric, value in measure_path(path, make_client, jpegs, requests).items():
                figures[path].setdefault(metric, []).append(value)
    return figures


def ratio_cell(figures, path, metric):
    """'1,234 (0.73x (0.70-0.75 over 3 rounds))': the median and its per-round ratio to in-process."""
    if metric not in figures[path]:
        return ""
    values = figures[path][metric]
    ratios = [v / b for v, b in zip(values, figures["in-process"][metric])]
    return f"{statistics.median(values):,.0f} ({report.ratio_figure(ratios)})"


def latency_cell(figures, path, metric):
    return f"{statistics.median(figures[path][metric]):.2f} ms" if metric in figures[path] else ""


def table_rows(figures):
    """A row per path: batch-1 latency, batch-32 images/s, and the load figures at 8 and 32
    clients (the batching paths: only under load)."""
    return [[path, latency_cell(figures, path, "single_p50_ms"), latency_cell(figures, path, "single_p99_ms"),
             ratio_cell(figures, path, "batch_images_per_s"),
             ratio_cell(figures, path, f"load{LOAD_CLIENTS}_requests_per_s"),
             latency_cell(figures, path, f"load{LOAD_CLIENTS}_p50_ms"),
             latency_cell(figures, path, f"load{LOAD_CLIENTS}_p99_ms"),
             ratio_cell(figures, path, f"load{MANY_CLIENTS}_requests_per_s"),
             latency_cell(figures, path, f"load{MANY_CLIENTS}_p99_ms")]
            for path in FIRST_TABLE + BATCHING_TABLE[1:]]


def print_report(header, figures):
    report.print_report(
        None, "bench_serving: the stand-in over REST and gRPC against in-process", header,
        ["path", "batch-1 p50", "batch-1 p99", "batch-32 img/s (x in-proc)",
         f"{LOAD_CLIENTS} clients req/s (x in-proc)", "p50", "p99",
         f"{MANY_CLIENTS} clients req/s (x in-proc)", "p99"],
        table_rows(figures), (),
        ["no goal (issue 34 retired them); in-process: the SavedModel called by the same number "
         "of threads, no batching; rest, grpc: the project's clients; -raw: bench/raw_clients.py's "
         "clients against the server without batching; +batching: the same clients against a "
         f"stand-in with --enable_batching ({' '.join(BATCHING_PARAMETERS.split())})"])


FIRST_TABLE = ("in-process", "rest", "grpc")  # the project's own clients, no batching
BATCHING_TABLE = ("in-process", "rest-raw", "rest+batching", "grpc-raw", "grpc+batching")


def make_makers(loaded, model_name, servers):
    """{path: client factory}; servers: {"": (rest_url, grpc_target), "+batching": (...)}."""
    (rest_url, grpc_target), (batching_url, batching_target) = servers[""], servers["+batching"]
    host, port = batching_url.rsplit("/", 1)[-1].split(":")
    plain_host, plain_port = rest_url.rsplit("/", 1)[-1].split(":")
    return {
        "in-process": lambda: InProcessClient(loaded),
        "rest": lambda: RestClient(rest_url, model_name, timeout=60),
        "grpc": lambda: GrpcClient(grpc_target, model_name, timeout=60),
        "rest-raw": lambda: raw_clients.RawRestClient(plain_host, int(plain_port), model_name),
        "grpc-raw": lambda: raw_clients.RawGrpcClient(grpc_target, model_name),
        "rest+batching": lambda: raw_clients.RawRestClient(host, int(port), model_name),
        "grpc+batching": lambda: raw_clients.RawGrpcClient(batching_target, model_name),
    }


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds = 1
    log_path = cli.log_path(args, "bench_serving")
    header = f"{report.machine_line()}; library lines: {log_path}"
    description, figures = console.exit_on_user_error(measure_quietly, args, log_path)
    print_report(f"{header}; {description}", figures)
    return figures


def measure_quietly(args, log_path):
    with report.libraries_to_log(log_path):
        return measure_all(args)


def measure_all(args):
    """(what was served, {path: {metric: [value per round]}})."""
    jpegs = make_digit_jpegs(256)
    with tempfile.TemporaryDirectory() as work_dir:
        base, model_name, version, loaded = model_under_test(work_dir, args.model_base_path, jpegs)
        batching_file = write_batching_parameters(work_dir)
        processes, servers = [], {}
        try:
            for suffix, extra in (("", ()), ("+batching", ("--enable_batching",
                                  "--batching_parameters_file", batching_file))):
                process, rest_url, grpc_target = start_server_process(base, model_name, extra)
                processes.append(process)
                servers[suffix] = (rest_url, grpc_target)
            figures = run_rounds(make_makers(loaded, model_name, servers), jpegs, args.rounds,
                                 args.requests)
        finally:
            for process in processes:
                process.terminate()
                process.wait(30)
    served = base if args.model_base_path else "a 1-step small_cnn export"
    return f"{model_name} v{version} from {served}, 32x32 JPEGs, stand-in in a subprocess", figures


if __name__ == "__main__":
    main()
