"""Pipeline throughput (images/s) against a plain loop and a multiprocessing pool, in one run.

All three parse the CSV with the pipeline's parser and number the labels
inside their time, do the same per-image work through the same function,
preprocess.transforms.process_row (read the file, decode + validate, convert
if needed, serialize the Example), and write the same TFRecord framing.
Datasets: the bundled demo digits (32x32) and synthetic photo-sized JPEGs
(427x640 variations of scikit-learn's two sample photos). The pipeline runs in
its local default (one in-process worker whose image work runs in a pool of a
thread per core; PIL releases the GIL while it decodes) and in Beam's two
other local modes with --workers workers: threads (multi_threading, sharing
the same pool) and processes (multi_processing, no pool).
Each method runs --repeats times, interleaved; a goal's figure is the median of the
per-round ratios (bench/report.py: MET when it is at or above the goal), the images/s
columns the medians. Datasets and outputs go to a temporary directory, removed at the
end, unless --work_dir names where to keep them (~1 GB for 10,000 photos).

    python -m bench.bench_preprocess                      # demo digits + 10000 photos, ~6 minutes
    python -m bench.bench_preprocess --quick              # 2000 photos, 1 round, ~1 minute
    python -m bench.bench_preprocess --photos 3000 --repeats 1 --work_dir /tmp/bench
    python -m bench.bench_preprocess --quick --modes default,threads   # no worker processes
"""
import collections
import multiprocessing
import os
import statistics
import tempfile
import time

from bench import cli, report

MODES = ("default", "threads", "processes")  # the pipeline's local runs compared (BEAM_MODES)


def build_parser():
    parser = cli.make_parser("bench_preprocess", __doc__, "2000 photos, 1 round")
    parser.add_argument("--work_dir", default=None,
                        help="keep the datasets and outputs here (default: a temporary directory, "
                             "removed at the end)")
    # Enough photos that Beam's ~1 s start-up is a small part of the job, as in real use.
    parser.add_argument("--photos", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--digits", type=int, default=0,
                        help="the first N images of the demo's train split (default 0: all 1,457)")
    parser.add_argument("--job_runs", type=int, default=15,
                        help="runs of the smallest Beam job, timed for its start-up cost")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated Beam local modes to run, of {', '.join(MODES)} "
                             f"(the goals are the default mode's)")
    return parser


def parse_args(argv=None):
    """build_parser's flags, --modes checked and split: a mistake is one line, exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if "default" not in modes or not set(modes) <= set(MODES) or len(set(modes)) != len(modes):
        parser.error(f"--modes={args.modes!r} must be distinct names of {', '.join(MODES)}, "
                     f"default among them (the goals are its)")
    args.modes = [mode for mode in MODES if mode in modes]
    return args


if __name__ == "__main__":  # --help and flag mistakes answer before Beam loads
    cli.answer_flags_first(parse_args)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")

import apache_beam as beam  # noqa: E402
import numpy as np  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import fn_runner  # noqa: E402
from PIL import Image  # noqa: E402

from preprocess import (demo_data, images, jpeg_to_tfrecord, shards, sources,  # noqa: E402
                        transforms)
from common import beam_pipeline, dataset_files, image_uris  # noqa: E402

# Goals from the issue, on a 2-core machine.
GOAL_VS_LOOP = 1.6
GOAL_VS_POOL = 0.8
PHOTO_QUALITY = 90  # a typical camera/web JPEG quality
# The pipeline's local runs compared: name -> extra flags ({workers} filled in).
BEAM_MODES = {
    "default": [],
    "threads": ["--direct_running_mode", "multi_threading", "--direct_num_workers", "{workers}"],
    "processes": ["--direct_running_mode", "multi_processing",
                  "--direct_num_workers", "{workers}"],
}


def sample_photos():
    """scikit-learn's two bundled 427x640 photos: {label: [h, w, 3] uint8}."""
    import sklearn
    folder = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
    return {name: np.asarray(Image.open(os.path.join(folder, f"{name}.jpg")).convert("RGB"))
            for name in ("china", "flower")}


def vary_photo(photo, index):
    """A distinct, still photo-like image per index: shifted, maybe mirrored, re-lit."""
    varied = np.roll(photo, shift=(index * 7) % photo.shape[1], axis=1)
    if index % 2:
        varied = varied[:, ::-1]
    gain = 0.8 + 0.4 * ((index * 37) % 100) / 100.0
    return np.clip(varied.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def make_photo_dataset(root, count):
    """root/<label>/<i>.jpg + root/photos.csv; reuses the files of an earlier run."""
    csv_path = os.path.join(root, f"photos-{count}.csv")
    if os.path.exists(csv_path):
        return csv_path
    photos = sample_photos()
    lines = []
    for index in range(count):
        label = sorted(photos)[index % len(photos)]
        path = os.path.join(root, label, f"{index:05d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(vary_photo(photos[label], index)).save(path, quality=PHOTO_QUALITY)
        lines.append(f"{path},{label}\n")
    with open(csv_path, "w") as f:
        f.writelines(lines)
    return csv_path


def read_rows(csv_path):
    """The CSV's rows through the pipeline's own parser; split 'train' for all."""
    rows = []
    for origin, line in sources.read_csv_lines(csv_path):
        rows.append(sources.parse_csv_line(line, origin, os.path.dirname(csv_path), "train"))
    return rows


def read_rows_and_label_ids(csv_path):
    """What the pipeline does before any image, done by the baselines too (timed):
    parse the CSV, then number the sorted labels."""
    rows = read_rows(csv_path)
    return rows, dataset_files.label_ids(sorted({row.label for row in rows}))


def do_row(job):
    """One image's work for the loop and the pool: Row -> serialized Example or None."""
    row, label_ids = job
    try:
        return transforms.process_row(row, label_ids, images.DEFAULT_MAX_PIXELS, 0,
                                      images.DEFAULT_JPEG_QUALITY).example
    except image_uris.InputRejected:
        return None


def write_output(output_dir, examples):
    """Streams the examples (None: rejected) into one TFRecord file, as the pipeline
    streams into its pieces: none are held in memory. Returns how many were written."""
    os.makedirs(output_dir, exist_ok=True)
    kept = (example for example in examples if example is not None)
    return shards.write_records(shards.shard_path(output_dir, "train", 0, 1), kept)


def run_loop(csv_path, output_dir):
    rows, label_ids = read_rows_and_label_ids(csv_path)
    return write_output(output_dir, (do_row((row, label_ids)) for row in rows))


def run_pool(csv_path, output_dir, workers):
    rows, label_ids = read_rows_and_label_ids(csv_path)
    # fork: the workers start with TensorFlow already imported, as a pool usually does.
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        jobs = ((row, label_ids) for row in rows)
        return write_output(output_dir, pool.imap(do_row, jobs, chunksize=32))


def run_independent(csv_path, output_dir, workers):
    """The cores' ceiling: ``workers`` forked processes each run the loop on their own
    share of the rows, with nothing handed between them; returns the records written."""
    context = multiprocessing.get_context("fork")
    counts = context.Queue()
    processes = [context.Process(target=run_loop_share,
                                 args=(csv_path, output_dir, share, workers, counts))
                 for share in range(workers)]
    for process in processes:
        process.start()
    total = sum(counts.get() for _ in processes)
    for process in processes:
        process.join()
    return total


def run_loop_share(csv_path, output_dir, share, shares, counts):
    rows, label_ids = read_rows_and_label_ids(csv_path)
    mine = (do_row((row, label_ids)) for row in rows[share::shares])
    counts.put(write_output(os.path.join(output_dir, str(share)), mine))


def smallest_beam_job_seconds(runs=15):
    """(fastest, median seconds, runs) of Create([1]) | Map on the local runner: the least any
    Beam pipeline costs here, whatever its work."""
    def run_once():
        with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions([])) as pipeline:
            _ = pipeline | beam.Create([1]) | beam.Map(abs)
    run_once()  # the first run pays for imports
    times = [timed(run_once)[1] for _ in range(runs)]
    return min(times), statistics.median(times), runs


def run_pipeline(csv_path, output_dir, workers, mode):
    flags = [flag.format(workers=workers) for flag in BEAM_MODES[mode]]
    meta = jpeg_to_tfrecord.run(["--input_csv", f"train={csv_path}", "--output_dir",
                                 output_dir] + flags)
    return meta["splits"]["train"]["records"]


def timed(function, *args):
    start = time.perf_counter()
    count = function(*args)
    return count, time.perf_counter() - start


def bench_dataset(name, csv_path, work_dir, workers, repeats, modes=MODES):
    """-> (images, {method: [seconds per round]}), after checking every method wrote every image.

    Methods: loop, pool, independent (the cores' ceiling: run_independent), and
    per Beam mode of modes the job itself and the same job on 2 images (its start-up:
    worker start and stage scheduling, no real work).
    """
    rows = read_rows(csv_path)
    out = os.path.join(work_dir, "out", name)
    tiny_csv = write_tiny_csv(csv_path, rows[:2])
    methods = {"loop": (run_loop, csv_path, os.path.join(out, "loop")),
               "pool": (run_pool, csv_path, os.path.join(out, "pool"), workers),
               "independent": (run_independent, csv_path, os.path.join(out, "independent"),
                               workers)}
    for mode in modes:
        methods[mode] = (run_pipeline, csv_path, os.path.join(out, mode), workers, mode)
        methods[f"{mode} start-up"] = (run_pipeline, tiny_csv, os.path.join(out, "tiny"),
                                       workers, mode)
    seconds = collections.defaultdict(list)
    for _ in range(repeats):
        for method, (function, *args) in methods.items():
            count, elapsed = timed(function, *args)
            expected = 2 if method.endswith("start-up") else len(rows)
            if count != expected:
                raise RuntimeError(f"{name}: {method} wrote {count} records, not {expected}")
            seconds[method].append(elapsed)
    return len(rows), dict(seconds)


def first_rows(csv_path, count):
    """csv_path, or (count > 0) a CSV beside it of its first count rows."""
    if count <= 0:
        return csv_path
    with open(csv_path) as f:
        lines = f.readlines()[:count]
    path = csv_path.replace(".csv", f"-first{count}.csv")
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def write_tiny_csv(csv_path, rows):
    path = csv_path.replace(".csv", "-tiny.csv")
    with open(path, "w") as f:
        f.writelines(f"{row.source},{row.label}\n" for row in rows)
    return path


def ratios(seconds, method, base):
    """Per-round rate ratios method / base (the same round's pair)."""
    return [b / m for m, b in zip(seconds[method], seconds[base])]


def table_rows(name, count, seconds):
    """One row per Beam mode measured: end to end, then steady state (start-up taken off)."""
    rate = {method: count / statistics.median(times) for method, times in seconds.items()}
    rows = []
    for mode in (mode for mode in BEAM_MODES if mode in seconds):
        startup = statistics.median(seconds[f"{mode} start-up"])
        # Throughput once the workers are up (n/a when the 2-image run was the slower one).
        work = statistics.median(seconds[mode]) - startup
        steady = count / work if work > 0 else float("nan")
        # p/loop: what 2 processes without Beam make of this dataset, the yardstick for the
        # loop goal (tiny images: IPC costs about as much as the image).
        rows.append([name, f"{count:,}", f"{rate['loop']:,.0f}", f"{rate['pool']:,.0f}",
                     f"{rate['pool'] / rate['loop']:.2f}x", f"{rate['independent'] / rate['loop']:.2f}x",
                     mode, f"{rate[mode]:,.0f}", report.ratio_figure(ratios(seconds, mode, "loop")),
                     report.ratio_figure(ratios(seconds, mode, "pool")), f"{startup:.2f} s",
                     f"{steady:,.0f}"])
    return rows


def goal_lines(name, seconds):
    """The goals on the default mode: >= GOAL_VS_LOOP x the loop and >= GOAL_VS_POOL x the pool."""
    return [report.goal_line(f"{name}: pipeline / {base}", ratios(seconds, "default", base), goal)
            for base, goal in (("loop", GOAL_VS_LOOP), ("pool", GOAL_VS_POOL))]


def print_results(header, results, workers, smallest_job):
    rows, goals = [], []
    for name, count, seconds in results:
        rows += table_rows(name, count, seconds)
        goals += goal_lines(name, seconds)
    photos = next(seconds for name, _, seconds in results if name.startswith("photos"))
    figures = ", ".join(f"x {base} {report.ratio_figure(ratios(photos, 'default', base))}"
                        for base in ("loop", "pool"))
    report.print_report(
        None, "bench_preprocess: images/s, end to end", header,
        ["dataset", "images", "loop", "pool", "p/loop", "i/loop", "beam mode", "beam",
         "x loop", "x pool", "start-up", "steady"], rows, goals,
        [f"pool, threads, processes: {workers} workers; default: 1 worker + a thread per core. "
         f"start-up: the same job on 2 images; steady: images / (beam s - start-up); "
         f"i/loop: {workers} independent processes / loop (the cores' ceiling)",
         f"smallest Beam job (Create([1]) | Map) on this runner: {smallest_job[0] * 1000:.0f} ms "
         f"fastest, {smallest_job[1] * 1000:.0f} ms median of {smallest_job[2]}",
         f"docs row: | preprocessing | >= {GOAL_VS_LOOP}x a loop and >= {GOAL_VS_POOL}x a pool "
         f"(photos) | {figures} | `.venv/bin/python -m bench.bench_preprocess` |"])


def main(argv=None):
    args = parse_args(argv)
    if args.quick:
        args.photos, args.repeats = 2000, 1
    log_path = cli.log_path(args, "bench_preprocess")
    header = (f"{report.machine_line()}; medians of {args.repeats} round(s); "
              f"library lines: {log_path}")
    if args.work_dir:
        results, smallest = measure_quietly(args, args.work_dir, log_path)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_preprocess-") as work_dir:
            results, smallest = measure_quietly(args, work_dir, log_path)
    print_results(header, results, args.workers, smallest)


def measure_quietly(args, work_dir, log_path):
    """([(dataset name, images, {method: [seconds per round]})], the smallest Beam job's
    (fastest, median seconds, runs)), the libraries' lines in the log."""
    with report.libraries_to_log(log_path):
        beam_pipeline.configure_logging()
        results = []
        for name, folder, count in [("demo digits 32x32", os.path.join(work_dir, "digits"), None),
                                    ("photos 427x640", os.path.join(work_dir, "photos"), args.photos)]:
            if count is None:
                demo_data.build_demo_data(folder)
                csv_path = first_rows(os.path.join(folder, "train.csv"), args.digits)
            else:
                csv_path = make_photo_dataset(folder, count)
            results.append((name, *bench_dataset(name.split()[0], csv_path, work_dir,
                                                 args.workers, args.repeats, args.modes)))
        return results, smallest_beam_job_seconds(args.job_runs)


if __name__ == "__main__":
    main()
