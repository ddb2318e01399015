"""The batching stand-in against the floor, the least a Python REST server can do per request.

The figure: with --enable_batching, the requests/s 8 concurrent REST clients sending
batch-1 requests get from the stand-in, against the floor server under the same clients,
with both load generators. It is a figure, not a goal (issue 26's 0.9x was retired by
issue 34: the stand-in's goal is fidelity to TF Serving). This measures, in interleaved
rounds (medians), both servers and the in-process baseline (bench/bench_serving.py's
InProcessClient):

  floor     bench/floor_server.py: one asyncio thread, head + JSON + base64, the
            stand-in's BatchScheduler and model call, a ready-made answer; the
            least work any :predict server does per request
  stand-in  python -m serving.standin.server --enable_batching

each loaded by 8 clients: bench/raw_clients.py's (Python threads over
bench/loadgen.py, what bench_serving uses; no tool outside the project). Both servers
get bench_serving.BATCHING_PARAMETERS. Also printed: the server process's CPU per
request (/proc/PID/stat) and how busy the 2 cores were. With --steps it prints instead
where the stand-in's extra Python time goes, step by step (bench/serving_steps.py). One
table either way, bench/report.py's; the libraries' lines go to the log file it names.

    .venv/bin/python -m bench.bench_serving_floor          # ~1 minute on 2 cores
    .venv/bin/python -m bench.bench_serving_floor --quick  # ~30 seconds: 2 rounds of 1000
    .venv/bin/python -m bench.bench_serving_floor --steps  # ~20 seconds: the Python work per step
    .venv/bin/python -m bench.bench_serving_floor --model_base_path OUT/export/image_classifier
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import cli, report  # no TensorFlow: --help answers before it loads
from common import console


def build_parser():
    parser = cli.make_parser("bench_serving_floor", __doc__, "2 rounds of 1000 requests")
    cli.add_serving_flags(parser, rounds=5, requests=2000, requests_help="per path and round")
    parser.add_argument("--steps", action="store_true",
                        help="instead: the Python work per request, step by step, in process")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads
    cli.answer_flags_first(build_parser().parse_args)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import bench_serving, floor_server, loadgen, raw_clients, serving_steps  # noqa: E402

CLIENTS = bench_serving.LOAD_CLIENTS  # the same load as bench_serving's


def process_cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_ticks():
    """(busy, total) clock ticks of all cores since boot."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def start_floor_server(model_base_path, batching_file, answer_jpeg):
    """bench/floor_server.py in its own process; returns (process, port)."""
    port = bench_serving.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_server", "--port", str(port), "--model_base_path",
         model_base_path, "--batching_parameters_file", batching_file, "--answer_jpeg",
         answer_jpeg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + bench_serving.SERVER_START_SECONDS
    for line in process.stdout:
        if line.startswith(floor_server.READY_LINE):
            return process, port
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError(f"bench.floor_server did not start (exit code {process.poll()})")


def measure(run, pid, requests):
    """(requests/s, server CPU ms per request, cores busy share) of one run() -> requests/s."""
    cpu_before = process_cpu_seconds(pid) if pid else 0.0
    busy_before, total_before = machine_busy_ticks()
    rate = run()
    cpu = (process_cpu_seconds(pid) - cpu_before) / requests * 1000 if pid else float("nan")
    busy_after, total_after = machine_busy_ticks()
    return rate, cpu, (busy_after - busy_before) / max(1, total_after - total_before)


def load_run(make_client, jpegs, requests):
    """run() -> requests/s of CLIENTS clients from make_client() sending batch-1 requests;
    RuntimeError if any request failed."""
    def run():
        result = loadgen.run_load(make_client, [[j] for j in jpegs], requests, CLIENTS)
        bench_serving.check_errors(result)
        return result.requests_per_second
    return run


def make_runs(loaded, servers, jpegs, requests):
    """{path: (run, server pid or None)}; servers: {name: (process, port, model name)}."""
    runs = {"in-process": (load_run(lambda: bench_serving.InProcessClient(loaded), jpegs,
                                    requests), None)}
    for name, (process, port, model) in servers.items():
        raw_client = lambda p=port, m=model: raw_clients.RawRestClient("127.0.0.1", p, m)  # noqa: E731
        runs[f"{name}, Python clients"] = (load_run(raw_client, jpegs, requests), process.pid)
    return runs


def run_rounds(runs, rounds, requests):
    """{path: [(requests/s, server CPU ms, busy share) per round]}, paths interleaved."""
    for run, _ in runs.values():  # untimed: connections, caches, the model's first calls
        run()
    figures = {path: [] for path in runs}
    for _ in range(rounds):
        for path, (run, pid) in runs.items():
            figures[path].append(measure(run, pid, requests))
    return figures


def table_rows(figures):
    """A row per path: req/s (median), x in-process and x floor (medians of per-round ratios,
    with their spread), server CPU per request, how busy the cores were."""
    rows = []
    for path, rounds in figures.items():
        rates = [rate for rate, _, _ in rounds]
        cpu = statistics.median(c for _, c, _ in rounds)
        busy = statistics.median(b for _, _, b in rounds)
        floor = figures.get(path.replace("stand-in", "floor")) if path.startswith("stand-in") else None
        rows.append([path, f"{statistics.median(rates):,.0f}",
                     report.ratio_figure(per_round(rounds, figures["in-process"])),
                     report.ratio_figure(per_round(rounds, floor)) if floor else "",
                     "" if cpu != cpu else f"{cpu:.2f} ms", f"{busy:.0%}"])
    return rows


def per_round(rounds, base_rounds):
    return [own[0] / base[0] for own, base in zip(rounds, base_rounds)]


def print_report(out, header, figures):
    ratio = report.ratio_figure(per_round(figures["stand-in, Python clients"],
                                          figures["floor, Python clients"]))
    report.print_report(
        out, f"bench_serving_floor: {CLIENTS} clients, batch-1 REST requests, with batching",
        header, ["path", "req/s (median)", "x in-process", "x floor", "server CPU/req", "cores busy"],
        table_rows(figures),
        [f"figure (no goal: issue 34 retired it): stand-in / floor {ratio}"],
        [f"docs row: | serving | none (the figure stays) | stand-in / floor {ratio} | "
         f"`.venv/bin/python -m bench.bench_serving_floor` |"])


def start_servers(base, model_name, work_dir, jpeg):
    """{name: (process, port, model name)} for the floor and the batching stand-in."""
    batching_file = bench_serving.write_batching_parameters(work_dir)
    answer_jpeg = os.path.join(work_dir, "answer.jpg")
    with open(answer_jpeg, "wb") as f:
        f.write(jpeg)
    floor, floor_port = start_floor_server(base, batching_file, answer_jpeg)
    try:
        standin, rest_url, _ = bench_serving.start_server_process(
            base, model_name, ("--enable_batching", "--batching_parameters_file", batching_file))
    except Exception:  # no floor server left running behind a failed start
        floor.kill()
        raise
    return {"floor": (floor, floor_port, model_name),
            "stand-in": (standin, int(rest_url.rsplit(":", 1)[1]), model_name)}


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds, args.requests = 2, 1000
    log_path = cli.log_path(args, "bench_serving_floor")
    header = f"{report.machine_line()}; library lines: {log_path}"
    measured = console.exit_on_user_error(measure_quietly, args, log_path)
    if args.steps:
        serving_steps.print_report(sys.stdout, header, measured)
    else:
        print_report(sys.stdout, header, measured)


def measure_quietly(args, log_path):
    with report.libraries_to_log(log_path):
        return measure_all(args)


def measure_all(args):
    """The figures of run_rounds, or with --steps serving_steps' rows."""
    jpegs = bench_serving.make_digit_jpegs(256)
    with tempfile.TemporaryDirectory() as work_dir:
        base, model_name, _, loaded = bench_serving.model_under_test(
            work_dir, args.model_base_path, jpegs)
        if args.steps:
            return serving_steps.measure(base, model_name, jpegs[0], args.rounds)
        servers = start_servers(base, model_name, work_dir, jpegs[0])
        try:
            return run_rounds(make_runs(loaded, servers, jpegs, args.requests),
                              args.rounds, args.requests)
        finally:
            for process, _, _ in servers.values():
                process.terminate()
                process.wait(30)


if __name__ == "__main__":
    main()
