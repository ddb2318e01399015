"""Batch-prediction throughput: the trainer route and the Beam route against the same work in-process.

    .venv/bin/python -m bench.bench_batch_predict     # ~3 minutes on 2 idle cores
    .venv/bin/python -m bench.bench_batch_predict --quick              # ~2 minutes: 1 round
    .venv/bin/python -m bench.bench_batch_predict --run_dir work/demo/run --input_csv work/demo/images/train.csv

Without --run_dir it makes the demo's images, TFRecords and a 100-step run in its temporary
directory first (~1 minute; the model's accuracy does not change its speed), so it needs
nothing but the environment.

Two input sets: the CSV as it is (the demo's train.csv, 1,457 images) and a large set
made from it in a temporary directory (--large_images, 30,000 by default: its images
over and over, each copy re-encoded at another JPEG quality, so every file differs),
the size batch prediction exists for: tens of thousands of images, where a route's
fixed cost per job no longer decides the ratio. On each, in every round, in rotating order and
each end to end from the CSV to its published files:
  in-process  bench/batch_baseline.py: the routes' work in one plain loop (the output's
              lock, read and check every image, load the export, serving_default in
              batches, one record per input, records and summary written and published)
  trainer     python -m trainer.task --mode predict (TPUEstimator.predict on CPU from the
              checkpoint; the same lock, records and summary)
  beam        python -m serving.batch_predict (RunInference, local FnApiRunner, batches
              of --batch_size; the same lock, records and summary)
Each route's ratio is taken against the in-process run of the same round; beside the
rate, the CPU seconds of the process (every thread) for one run, so that a fixed cost
shows as the same difference on both sets. Goals, on
the large set: beam >= 0.90x, trainer >= 0.80x (bench/report.py: MET when the median
across rounds is at or above the goal). Writes only into a temporary directory.
"""
import glob
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import cli, report
from common import console
from common.user_errors import UserError

GOALS = {"beam": 0.90, "trainer": 0.80}  # on the large set
ROUTES = ("in-process", "trainer", "beam")
DEMO_STEPS = 100  # the demo run made without --run_dir: enough for an export
WARM_UP_IMAGES = 64  # one untimed run of every route first, on this many images


def build_parser():
    parser = cli.make_parser("bench_batch_predict", __doc__, "one round")
    parser.add_argument("--run_dir", default=None,
                        help="a trained run with an export (default: a 100-step demo run made here)")
    parser.add_argument("--input_csv", default=None,
                        help="'uri[,label]' CSV; the large set is made from its images "
                             "(default: the demo's train.csv, 1,457 images)")
    parser.add_argument("--large_images", type=int, default=30000,
                        help="images in the large set (0: only the CSV as it is)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of every route on every set (a median of 5: one slow round on a shared host does not decide it)")
    parser.add_argument("--batch_size", type=int, default=64, help="predict batch of every route")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads
    cli.answer_flags_first(build_parser().parse_args)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from PIL import Image  # noqa: E402

from bench import batch_baseline  # noqa: E402
from common import export_versions, prediction_inputs, signature  # noqa: E402
from serving import batch_predict  # noqa: E402
from preprocess import demo_data, jpeg_to_tfrecord  # noqa: E402
from trainer import chain  # noqa: E402
from trainer.estimator import engine as estimator_engine  # noqa: E402


def make_large_set(input_csv, count, folder):
    """A CSV of count images under folder: input_csv's usable images (errors left out), over and
    over, each copy re-encoded at another JPEG quality (every file differs), with their labels."""
    sources = [prediction_inputs.load_uri(*item) for item in prediction_inputs.read_csv_uris(input_csv)
               if isinstance(item, tuple)]
    sources = [image for image in sources if not image.error]
    if not sources:
        raise prediction_inputs.NoUsableInput(f"--input_csv {input_csv} names no usable images")
    os.makedirs(folder, exist_ok=True)
    lines = []
    for number in range(count):
        source = sources[number % len(sources)]
        quality = 95 - (number // len(sources)) % 40
        path = os.path.join(folder, f"{number:06d}.jpg")
        Image.open(io.BytesIO(source.jpeg)).convert("RGB").save(path, quality=quality)
        lines.append(f"{path},{source.label}" if source.label else path)
    csv_path = os.path.join(folder, "images.csv")
    with open(csv_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return csv_path


def make_demo_run(folder):
    """(run dir, train.csv) of the demo data, trained DEMO_STEPS steps and exported, under
    folder, by a child process: the measuring process starts as a user's batch job does,
    without a training run's or a preprocessing pipeline's state (after both ran in this
    process, the trainer route ran its unchanged CPU on one core in 3 of 9 rounds on 100,000
    images, 1 of 24 without; docs/benchmarks.md)."""
    code = f"from bench.bench_batch_predict import build_demo_run; build_demo_run({folder!r})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=console.PROJECT_DIR)
    return f"{folder}/run", f"{folder}/images/train.csv"


def build_demo_run(folder):
    """make_demo_run's work, in the process that calls it."""
    demo_data.build_demo_data(f"{folder}/images")
    jpeg_to_tfrecord.run([f"--input_csv=train={folder}/images/train.csv",
                          f"--input_csv=eval={folder}/images/eval.csv", f"--output_dir={folder}/tfrecords"])
    estimator_engine.run(chain.parse_params([f"--train_data_path={folder}/tfrecords/train-*",
                                 f"--eval_data_path={folder}/tfrecords/eval-*",
                                 f"--output_dir={folder}/run", f"--train_steps={DEMO_STEPS}"]))


def run_in_process(setup, input_csv, out):
    batch_baseline.predict_in_process(setup["export_dir"], input_csv, out, setup["batch_size"])


def run_trainer(setup, input_csv, out):
    estimator_engine.run(chain.parse_params([
        f"--output_dir={setup['run_copy']}", "--mode=predict", f"--predict_input={input_csv}",
        f"--predict_batch_size={setup['batch_size']}", f"--predict_output_dir={out}"]))


def run_beam(setup, input_csv, out):
    size = setup["batch_size"]
    batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={setup['export_dir']}",
                       f"--output={out}/predictions", f"--min_batch_size={size}",
                       f"--max_batch_size={size}"])


RUNS = {"in-process": run_in_process, "trainer": run_trainer, "beam": run_beam}


def time_route(route, setup, input_csv, scratch):
    """(wall seconds, CPU seconds of this process) of one end-to-end run of route, into a
    fresh output folder (removed after)."""
    out = tempfile.mkdtemp(dir=scratch, prefix=f"{route}-")
    start, cpu_start = time.perf_counter(), cpu_seconds()
    RUNS[route](setup, input_csv, out)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    shutil.rmtree(out)
    return seconds, cpu


def cpu_seconds():
    times = os.times()
    return times.user + times.system


def latest_export(run_dir):
    """The highest version of run_dir/export/<model>/ (export_versions' rule); ExportNotFound
    (one line) when there is none."""
    bases = glob.glob(os.path.join(run_dir, signature.EXPORT_SUBDIR, "*"))
    found = [(export_versions.latest_version(base), base) for base in bases]
    found = [(version, base) for version, base in found if version is not None]
    if not found:
        raise export_versions.ExportNotFound(
            f"--run_dir={run_dir!r} has no export/<model>/<version>; run make demo")
    version, base = max(found)
    return export_versions.version_dir(base, version)


def count_inputs(input_csv):
    return sum(1 for _ in prediction_inputs.read_csv_uris(input_csv))


def measure(args, scratch):
    """{set name: (image count, {route: [seconds per round]})}."""
    if args.run_dir is None:
        made_run, made_csv = make_demo_run(os.path.join(scratch, "demo"))
        args.run_dir, args.input_csv = made_run, args.input_csv or made_csv
    if args.input_csv is None:
        raise UserError(f"--run_dir {args.run_dir} needs --input_csv, e.g. work/demo/images/train.csv")
    setup = {"export_dir": latest_export(args.run_dir), "batch_size": args.batch_size,
             "run_copy": os.path.join(scratch, "run")}
    shutil.copytree(args.run_dir, setup["run_copy"],
                    ignore=shutil.ignore_patterns("predictions", "eval"))
    sets = {"csv": args.input_csv}
    if args.large_images:
        sets["large"] = make_large_set(args.input_csv, args.large_images, os.path.join(scratch, "large"))
    times = {name: (count_inputs(path), {route: [] for route in ROUTES}) for name, path in sets.items()}
    warm_up = make_large_set(args.input_csv, WARM_UP_IMAGES, os.path.join(scratch, "warm-up"))
    for route in ROUTES:  # what only a process's first run pays (TensorFlow's and Beam's set-up)
        time_route(route, setup, warm_up, scratch)
    for number in range(1 if args.quick else args.rounds):
        order = ROUTES[number % 3:] + ROUTES[:number % 3]  # each route first in some round
        for name, path in sets.items():
            for route in order:
                times[name][1][route].append(time_route(route, setup, path, scratch))
    return times


def ratios_of(seconds, route):
    """Per-round rate ratios route / in-process (the same round's pair), by wall time."""
    return [base[0] / own[0] for own, base in zip(seconds[route], seconds["in-process"])]


def table_rows(times):
    rows = []
    for name, (count, seconds) in times.items():
        for route in ROUTES:
            rate = count / statistics.median(wall for wall, _ in seconds[route])
            cpu = statistics.median(cpu for _, cpu in seconds[route])
            ratio = "1.00x (the baseline)" if route == "in-process" else report.ratio_figure(
                ratios_of(seconds, route))
            rows.append([f"{name} ({count:,})", route, f"{rate:,.0f}", f"{cpu:.2f}", ratio])
    return rows


def goal_lines(times):
    name = "large" if "large" in times else "csv"
    count, seconds = times[name]
    return [report.goal_line(f"{route} / in-process on {count:,} images", ratios_of(seconds, route), goal)
            for route, goal in GOALS.items()]


def markdown_rows(times):
    """Rows to paste into docs/benchmarks.md's Latest figures."""
    name = "large" if "large" in times else "csv"
    count, seconds = times[name]
    figures = ", ".join(f"{route} {report.ratio_figure(ratios_of(seconds, route))}: "
                        f"**{report.verdict(ratios_of(seconds, route), goal)}**"
                        for route, goal in GOALS.items())
    return [f"docs row: | batch prediction | Beam >= 0.90x, trainer >= 0.80x the in-process loop "
            f"({count:,} images) | {figures} | `.venv/bin/python -m bench.bench_batch_predict` |"]


def main(argv=None):
    """The benchmark; a missing run, export or CSV is one "error:" line and exit code 2."""
    args = build_parser().parse_args(argv)
    log_path = cli.log_path(args, "bench_batch_predict")
    header = f"{report.machine_line()}; batch {args.batch_size}; library lines: {log_path}"
    with tempfile.TemporaryDirectory() as scratch:
        times = console.exit_on_user_error(measure_quietly, args, scratch, log_path)
    report.print_report(None, "bench_batch_predict: images/s, end to end from the CSV", header,
                        ["input", "route", "images/s (median)", "CPU s (median)",
                         "x in-process (same round)"],
                        table_rows(times), goal_lines(times), markdown_rows(times))
    return times


def measure_quietly(args, scratch, log_path):
    with report.libraries_to_log(log_path):  # the routes' printed summaries go there too
        return measure(args, scratch)


if __name__ == "__main__":
    main()
