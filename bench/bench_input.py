"""Benchmark: input_fn images/second against raw decode+resize and a naive pipeline.

    .venv/bin/python -m bench.bench_input            # from the repo root; ~2 minutes
    .venv/bin/python -m bench.bench_input --quick    # ~30 seconds: 2 rounds of 1 s
    .venv/bin/python -m bench.bench_input --rounds 7 --seconds 3

Two datasets are written as real TFRecords in a temp dir: scikit-learn's 8x8
digits upscaled to 32x32 JPEGs (the demo data, model input 32), and
photo-sized JPEGs cropped from scikit-learn's two sample photos (model input
224). On each, in the same process and in alternating rounds (the machine is
shared, so only same-round ratios mean anything), it times:

  raw        the same JPEG bytes held in memory: decode_jpeg + resize only,
             with parallel map and prefetch; the compute ceiling for one image.
  train      trainer.data.input's TRAIN input_fn: files, interleave, shuffle, parse,
             random crop (decodes only the window), resize, batch, prefetch.
  eval       trainer.data.input's EVAL input_fn, repeated: full decode, center
             crop, resize; the same pixel work as raw plus reading and parsing.
  naive      TRAIN's exact preprocessing, but sequential reads, a serial map
             and no prefetch.
  train_randaugment (photos only) TRAIN with --augment randaugment
             (trainer/data/augment.py; the table's number of ops and magnitude).

Goal: train >= 0.90 x raw by images/s, the median of the per-round ratios
(bench/report.py: MET when it is at or above the goal). Prints median images/second,
the per-round ratios' medians and spreads, and CPU microseconds per image (all
threads), the steadier comparison when other jobs share the cores. Second goal,
on photos: train_randaugment >= 0.70 x raw by images/s (issue 35). One table; the
libraries' lines go to the log file it names.
"""
import statistics
import sys
import tempfile
import time

from bench import cli, report as report_lib

BATCH_SIZE = 64

def build_parser():
    parser = cli.make_parser("bench_input", __doc__, "2 rounds of 1 s")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--seconds", type=float, default=2.0, help="per pipeline per round")
    parser.add_argument("--digits", type=int, default=512, help="32x32 digit JPEGs")
    parser.add_argument("--photos", type=int, default=256, help="photo-sized JPEGs")
    parser.add_argument("--batch_size", type=int, default=BATCH_SIZE,
                        help="images per batch of every pipeline (its first 5 batches are not timed)")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads
    cli.answer_flags_first(build_parser().parse_args)


import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from preprocess.demo_data import digit_to_jpeg  # noqa: E402
from common import image_ops, record_schema  # noqa: E402
from trainer.settings import table  # noqa: E402
from trainer.data import input as input_lib  # noqa: E402

PHOTOS = ("china.jpg", "flower.jpg")  # 427x640 each, inside sklearn/datasets/images
SHARDS = 4


def make_digit_jpegs(count):
    """(jpeg bytes, label) of the first `count` scikit-learn digits, 32x32 like the demo."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    return [(digit_to_jpeg(digits.images[i]), int(digits.target[i])) for i in range(count)]


def make_photo_jpegs(count, seed=0):
    """(jpeg bytes, label) of random crops (side 240..427 px) of the sample photos."""
    import io
    from sklearn.datasets import load_sample_image
    photos = [load_sample_image(name) for name in PHOTOS]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        height, width = rng.integers(240, 428, size=2)
        y = rng.integers(0, photo.shape[0] - height + 1)
        x = rng.integers(0, photo.shape[1] - width + 1)
        buffer = io.BytesIO()
        Image.fromarray(photo[y:y + height, x:x + width]).save(buffer, "JPEG", quality=90)
        out.append((buffer.getvalue(), i % len(photos)))
    return out


def write_records(directory, name, examples):
    """Writes examples as SHARDS TFRecord files; returns their glob."""
    writers = [tf.io.TFRecordWriter(f"{directory}/{name}-{i:05d}-of-{SHARDS:05d}")
               for i in range(SHARDS)]
    for i, (jpeg, label) in enumerate(examples):
        height, width = tf.image.extract_jpeg_shape(jpeg).numpy()[:2]
        writers[i % SHARDS].write(record_schema.make_example(
            jpeg, height, width, label, str(label), f"{name}/{i}.jpg"))
    for writer in writers:
        writer.close()
    return f"{directory}/{name}-*"


def make_raw_dataset(jpegs, image_size, batch_size):
    """decode_jpeg + resize of in-memory bytes, as parallel and prefetched as tf.data allows."""
    def decode_and_resize(image_bytes):
        image = tf.io.decode_jpeg(image_bytes, channels=3)
        return tf.image.resize(image, [image_size, image_size])
    return (tf.data.Dataset.from_tensor_slices(jpegs).repeat()
            .map(decode_and_resize, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def make_naive_dataset(file_pattern, params):
    """TRAIN's preprocessing with sequential reads, a serial map and no prefetch."""
    def parse(record):
        parsed = record_schema.parse_example(record)
        image = image_ops.preprocess_for_train(
            parsed[record_schema.ENCODED], params["image_size"],
            min_crop_area=params["min_crop_area"], random_flip=params["random_flip"])
        return {"image": image}, tf.cast(parsed[record_schema.LABEL], tf.int32)
    files = input_lib.list_files(file_pattern)
    return (tf.data.TFRecordDataset(files).shuffle(params["shuffle_buffer"]).repeat()
            .map(parse).batch(params["batch_size"], drop_remainder=True))


def time_batches(dataset, seconds, batch_size, warmup_batches=5):
    """(images/second, CPU microseconds/image) of a fresh iterator over ~`seconds`.

    A fresh iterator per measurement, deleted afterwards: an idle pipeline's
    threads would otherwise keep filling its buffers while another is timed.
    CPU time (all threads of this process) is the steadier figure on a
    shared machine: it does not count time the cores spent on other jobs.
    """
    iterator = iter(dataset)
    for _ in range(warmup_batches):  # fills the shuffle buffer, starts the threads
        next(iterator)
    batches, cpu_start, start = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(iterator)
        batches += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    del iterator
    images = batches * batch_size
    return images / wall, cpu / images * 1e6


def make_pipelines(file_pattern, jpegs, image_size, batch_size):
    """name -> dataset; input params from trainer/settings/table.py's defaults."""
    params = dict({k: table.DEFAULTS[k] for k in (
        "min_crop_area", "random_flip", "shuffle_buffer", "transpose_input",
        "use_bfloat16", "cache_dataset")}, batch_size=batch_size, image_size=image_size,
        num_classes=10)  # the digits; every label is checked to be below it
    eval_fn = input_lib.make_input_fn(file_pattern, tf.estimator.ModeKeys.EVAL, len(jpegs))
    return {
        "raw": make_raw_dataset(jpegs, image_size, batch_size),
        "train": input_lib.make_input_fn(file_pattern, tf.estimator.ModeKeys.TRAIN)(params),
        "eval": eval_fn(params).repeat(),
        "naive": make_naive_dataset(file_pattern, params),
    }


def add_randaugment_pipeline(datasets, file_pattern, image_size, batch_size):
    """datasets plus "train_randaugment": TRAIN with --augment randaugment (the table's
    num_ops and magnitude), the other input settings as make_pipelines sets them."""
    params = dict({k: table.DEFAULTS[k] for k in (
        "min_crop_area", "random_flip", "shuffle_buffer", "transpose_input", "use_bfloat16",
        "cache_dataset", "randaugment_num_ops", "randaugment_magnitude")},
        augment="randaugment", batch_size=batch_size, image_size=image_size, num_classes=10)
    train_fn = input_lib.make_input_fn(file_pattern, tf.estimator.ModeKeys.TRAIN)
    return dict(datasets, train_randaugment=train_fn(params))


def measure(datasets, rounds, seconds, batch_size):
    """Alternating rounds; returns {name: [(images/s, cpu us/image) per round]}."""
    results = {name: [] for name in datasets}
    for _ in range(rounds):
        for name, dataset in datasets.items():
            results[name].append(time_batches(dataset, seconds, batch_size))
    return results


GOAL_TRAIN_VS_RAW = 0.90
GOAL_RANDAUGMENT_VS_RAW = 0.70  # on photos


def ratios(values, baseline):
    return [v / b for v, b in zip(values, baseline)]


def table_rows(title, results):
    """A row per pipeline: median images/s, x raw and x naive (per-round ratios), CPU per image."""
    rates = {name: [r for r, _ in values] for name, values in results.items()}
    cpu = {name: [c for _, c in values] for name, values in results.items()}
    return [[title, name, f"{statistics.median(rates[name]):,.0f}",
             report_lib.ratio_figure(ratios(rates[name], rates["raw"])),
             report_lib.ratio_figure(ratios(rates[name], rates["naive"])),
             f"{statistics.median(cpu[name]):.0f}",
             # Rate-equivalent CPU figure: raw's CPU per image / this pipeline's.
             report_lib.ratio_figure(ratios(cpu["raw"], cpu[name]))] for name in results]


def train_vs_raw(results, pipeline="train"):
    return ratios([r for r, _ in results[pipeline]], [r for r, _ in results["raw"]])


def run(argv=None):
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 2, 1.0
    log_path = cli.log_path(args, "bench_input")
    header = (f"{report_lib.machine_line()}; TensorFlow {tf.__version__}, batch {args.batch_size}, "
              f"{args.rounds} rounds x {args.seconds} s per pipeline; library lines: {log_path}")
    with report_lib.libraries_to_log(log_path):
        results = measure_all(args)
    rows = [row for title, result in results.items() for row in table_rows(title, result)]
    goals = [report_lib.goal_line(f"{title}: input_fn train / raw, images/s", train_vs_raw(result),
                                  GOAL_TRAIN_VS_RAW) for title, result in results.items()]
    goals += [report_lib.goal_line(f"{title}: input_fn train --augment randaugment / raw, images/s",
                                   train_vs_raw(result, "train_randaugment"), GOAL_RANDAUGMENT_VS_RAW)
              for title, result in results.items() if "train_randaugment" in result]
    figures = ", ".join(f"{title.split(':')[0]} {report_lib.ratio_figure(train_vs_raw(result))}"
                        for title, result in results.items())
    report_lib.print_report(
        None, "bench_input: images/s of the input pipelines", header,
        ["data", "pipeline", "images/s", "x raw", "x naive", "CPU us/img", "raw CPU / CPU"], rows,
        goals, [f"docs row: | input pipeline | `input_fn` train >= {GOAL_TRAIN_VS_RAW:.2f}x raw "
                f"decode+resize | {figures} | `.venv/bin/python -m bench.bench_input` |"])
    return {title: train_vs_raw(result) for title, result in results.items()}


def measure_all(args):
    """{"name: N JPEGs -> SxS": {pipeline: [(images/s, CPU us/image) per round]}}."""
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for name, examples, image_size in (
                ("digits", make_digit_jpegs(args.digits), 32),
                ("photos", make_photo_jpegs(args.photos), 224)):
            pattern = write_records(directory, name, examples)
            datasets = make_pipelines(pattern, [jpeg for jpeg, _ in examples], image_size, args.batch_size)
            if name == "photos":
                datasets = add_randaugment_pipeline(datasets, pattern, image_size, args.batch_size)
            results[f"{name}: {len(examples)} JPEGs -> {image_size}x{image_size}"] = measure(
                datasets, args.rounds, args.seconds, args.batch_size)
    return results


if __name__ == "__main__":
    run(sys.argv[1:])
