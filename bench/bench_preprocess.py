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
Each method runs --repeats times, interleaved, and the fastest run counts: on a
shared machine the other users' load only ever slows a run down.

    python -m bench.bench_preprocess                      # demo digits + 10000 photos
    python -m bench.bench_preprocess --photos 3000 --repeats 1 --work_dir /tmp/bench
"""
import collections
import multiprocessing
import os
import statistics
import time

from common import console


def build_parser():
    parser = console.ArgumentParser(prog="python -m bench.bench_preprocess",
                                    description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default="work/bench")
    # Enough photos that Beam's ~1 s start-up is a small part of the job, as in real use.
    parser.add_argument("--photos", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=2)
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before Beam loads;
    build_parser().parse_args()  # the entry point below parses them again
    console.quiet_unless_verbose([])  # the libraries' start-up and deprecation lines off


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
    """(fastest, median) seconds of Create([1]) | Map on the local runner: the least any
    Beam pipeline costs here, whatever its work."""
    def run_once():
        with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions([])) as pipeline:
            _ = pipeline | beam.Create([1]) | beam.Map(abs)
    run_once()  # the first run pays for imports
    times = [timed(run_once)[1] for _ in range(runs)]
    return min(times), statistics.median(times)


def run_pipeline(csv_path, output_dir, workers, mode):
    flags = [flag.format(workers=workers) for flag in BEAM_MODES[mode]]
    meta = jpeg_to_tfrecord.run(["--input_csv", f"train={csv_path}", "--output_dir",
                                 output_dir] + flags)
    return meta["splits"]["train"]["records"]


def timed(function, *args):
    start = time.perf_counter()
    count = function(*args)
    return count, time.perf_counter() - start


def bench_dataset(name, csv_path, work_dir, workers, repeats):
    """-> (images, {method: fastest seconds}), after checking every method wrote every image.

    Methods: loop, pool, independent (the cores' ceiling: run_independent), and
    per Beam mode the job itself and the same job on 2 images (its start-up:
    worker start and stage scheduling, no real work).
    """
    rows = read_rows(csv_path)
    out = os.path.join(work_dir, "out", name)
    tiny_csv = write_tiny_csv(csv_path, rows[:2])
    methods = {"loop": (run_loop, csv_path, os.path.join(out, "loop")),
               "pool": (run_pool, csv_path, os.path.join(out, "pool"), workers),
               "independent": (run_independent, csv_path, os.path.join(out, "independent"),
                               workers)}
    for mode in BEAM_MODES:
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
    return len(rows), {method: min(times) for method, times in seconds.items()}


def write_tiny_csv(csv_path, rows):
    path = csv_path.replace(".csv", "-tiny.csv")
    with open(path, "w") as f:
        f.writelines(f"{row.source},{row.label}\n" for row in rows)
    return path


def format_rows(name, count, seconds):
    """One table line per Beam mode: end to end, then steady state (start-up taken off)."""
    loop, pool = count / seconds["loop"], count / seconds["pool"]
    ceiling = count / seconds["independent"]
    lines = []
    for mode in BEAM_MODES:
        beam = count / seconds[mode]
        startup = seconds[f"{mode} start-up"]
        # Throughput once the workers are up (n/a when the 2-image run was the slower one).
        work = seconds[mode] - startup
        steady = count / work if work > 0 else float("nan")
        # pool/loop: what 2 processes without Beam make of this dataset, the
        # yardstick for the loop goal (tiny images: IPC costs about as much as the image).
        lines.append(
            f"{name:<16}{count:>7}{loop:>8.0f}{pool:>8.0f}{pool / loop:>7.2f}x"
            f"{ceiling / loop:>7.2f}x  {mode:<11}"
            f"{beam:>8.0f}{beam / loop:>7.2f}x{beam / pool:>7.2f}x "
            f"{verdict(beam / loop, beam / pool):<6}{startup:>9.2f}{steady:>8.0f}"
            f"{steady / loop:>7.2f}x{steady / pool:>7.2f}x {verdict(steady / loop, steady / pool)}")
    return lines


def verdict(vs_loop, vs_pool):
    return "met" if vs_loop >= GOAL_VS_LOOP and vs_pool >= GOAL_VS_POOL else "missed"


def print_table(lines, workers, repeats, smallest_job):
    print(f"\n{os.cpu_count()} cores; pool, threads, processes: {workers} workers; default: 1 "
          f"worker + a thread per core; images/s, the fastest of {repeats} run(s) each; "
          f"goal: beam >= {GOAL_VS_LOOP}x loop and >= {GOAL_VS_POOL}x pool")
    print("end to end: start-up included; start-up: the same job on 2 images (s); "
          "steady: images / (beam seconds - start-up); p/loop: pool / loop; "
          f"i/loop: {workers} independent processes / loop (the cores' ceiling)")
    print(f"smallest Beam job (Create([1]) | Map) on this runner: {smallest_job[0] * 1000:.0f} ms "
          f"fastest, {smallest_job[1] * 1000:.0f} ms median of 15")
    print(f"{'dataset':<16}{'images':>7}{'loop':>8}{'pool':>8}{'p/loop':>8}{'i/loop':>8}"
          f"  {'beam mode':<11}"
          f"{'beam':>8}{'/loop':>8}{'/pool':>8} {'goal':<6}{'start-up':>9}{'steady':>8}"
          f"{'/loop':>8}{'/pool':>8} goal")
    print("\n".join(lines))


def main(argv=None):
    args = build_parser().parse_args(argv)
    beam_pipeline.configure_logging()
    datasets = [("demo digits", os.path.join(args.work_dir, "digits"), None),
                ("photos 427x640", os.path.join(args.work_dir, "photos"), args.photos)]
    lines = []
    for name, folder, count in datasets:
        if count is None:
            demo_data.build_demo_data(folder)
            csv_path = os.path.join(folder, "train.csv")
        else:
            csv_path = make_photo_dataset(folder, count)
        size, seconds = bench_dataset(name.split()[0], csv_path, args.work_dir, args.workers,
                                      args.repeats)
        lines.extend(format_rows(name, size, seconds))
    print_table(lines, args.workers, args.repeats, smallest_beam_job_seconds())


if __name__ == "__main__":
    main()
