"""Entry point: JPEGs listed in CSVs (or a label-folder tree) -> sharded TFRecords.

Writes DIR/<split>-NNNNN-of-NNNNN.tfrecord, DIR/labels.txt, DIR/metadata.json
and the dead letters DIR/errors-00000-of-00001.jsonl, then prints a summary. One run
at a time per DIR; the dataset is staged and published whole, replacing an earlier
one (preprocess/output_dir.py); a run with no usable row publishes nothing.

    python -m preprocess.jpeg_to_tfrecord --input_csv train=work/demo/images/train.csv \
        --input_csv eval=work/demo/images/eval.csv --output_dir work/demo/tfrecords
    python -m preprocess.jpeg_to_tfrecord --input_dir photos/ --eval_fraction 0.1 --output_dir out/
    python -m preprocess.jpeg_to_tfrecord \
        --input_csv train=gs://cloud-ml-data/img/flower_photos/train_set.csv \
        --input_csv eval=gs://cloud-ml-data/img/flower_photos/eval_set.csv \
        --output_dir gs://BUCKET/flowers --runner DataflowRunner --project P \
        --region us-central1 --temp_location gs://BUCKET/tmp

Every option this module does not define is a Beam pipeline option and is
passed through (--runner, --project, --max_num_workers, --setup_file, ...).
Beam loads only once the flags have parsed: --help and a typo answer at once.
"""
import dataclasses
import logging
import os
import re

from common import console

console.quiet_unless_verbose()  # before Beam and TensorFlow load: they read the environment once

from common import beam_command, dataset_files, gcs_probe  # noqa: E402
from common.user_errors import UserError  # noqa: E402
from preprocess import images, progress, splits, summary  # noqa: E402

# Used when the split comes from hashing (one CSV or --input_dir) and no
# --eval_fraction was given: 10% held out, the usual choice for the flowers data.
DEFAULT_EVAL_FRACTION = 0.1
# More threads than this per process only queue behind the GIL.
MAX_IMAGE_THREADS = 64
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_LOGGER = logging.getLogger(progress.LOGGER_NAME)


@dataclasses.dataclass(frozen=True)
class Config:
    output_dir: str
    csv_inputs: tuple          # ((split or None, csv path), ...), globs expanded
    input_dir: str             # or "" when reading CSVs
    eval_fraction: float
    labels: tuple              # from --labels_file, or () = derive from the data
    num_shards: int            # 0 = choose by size
    resize: int                # 0 = keep the size
    max_pixels: int
    jpeg_quality: int
    image_threads: int         # 0 = choose by runner (choose_image_threads)
    worker_processes: int = 1  # sharing the image work; progress.UNKNOWN on a remote runner

    @property
    def splits(self):
        named = [split for split, _ in self.csv_inputs if split]
        return tuple(dict.fromkeys(named)) or (splits.TRAIN, splits.EVAL)


class ConfigError(UserError):
    """A flag, a path or an input that cannot work: one line naming it and the fix."""


def make_parser():
    parser = console.ArgumentParser(prog="python -m preprocess.jpeg_to_tfrecord",
                                    description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="count", dest="verbosity",
                        help="also show Beam's and TensorFlow's INFO lines (-vv: debug)")
    parser.add_argument("--input_csv", action="append", default=[],
                        help="SPLIT=PATH (repeat per split), or one PATH split by "
                             "--eval_fraction. Lines are 'uri,label'; PATH may be a glob.")
    parser.add_argument("--input_dir", default="",
                        help="ROOT with ROOT/<label>/<image> files, split by --eval_fraction")
    parser.add_argument("--eval_fraction", type=float, default=None,
                        help=f"hash-split share of eval rows (default {DEFAULT_EVAL_FRACTION})")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--labels_file", default="",
                        help="one label per line; default: the sorted labels of the data")
    parser.add_argument("--num_shards", type=int, default=0,
                        help="shards per split; default: one per ~100 MB")
    parser.add_argument("--resize", type=int, default=0,
                        help="scale the longest side down to this many pixels (0 = keep)")
    parser.add_argument("--max_pixels", type=int, default=images.DEFAULT_MAX_PIXELS,
                        help="reject images with more pixels (decompression bombs)")
    parser.add_argument("--jpeg_quality", type=int, default=images.DEFAULT_JPEG_QUALITY,
                        help="quality of re-encoded JPEGs")
    parser.add_argument("--image_threads", type=int, default=0,
                        help="threads per worker process doing the image work; default: one "
                             "per core when the local runner runs in this process, else 1")
    return parser


def parse_config(argv):
    """argv -> (validated Config, the remaining Beam pipeline args)."""
    parser = make_parser()
    args, pipeline_args = parser.parse_known_args(argv)  # --help exits here, before Beam loads
    from common import beam_pipeline
    beam_pipeline.check_pipeline_args(parser, pipeline_args)
    check_numbers(args)
    check_gcs_paths(args)
    csv_inputs = expand_csv_inputs(parse_csv_inputs(args.input_csv))
    is_hash_split = bool(args.input_dir) or (len(csv_inputs) == 1 and csv_inputs[0][0] is None)
    eval_fraction = check_eval_fraction(args.eval_fraction, is_hash_split)
    if args.input_dir:
        check_folder_has_files(args.input_dir)
    labels = tuple(read_labels_file(args.labels_file)) if args.labels_file else ()
    config = Config(args.output_dir.rstrip("/"), tuple(csv_inputs), args.input_dir.rstrip("/"),
                    eval_fraction, labels, args.num_shards, args.resize, args.max_pixels,
                    args.jpeg_quality, args.image_threads)
    return config, pipeline_args


def check_gcs_paths(args):
    """Every gs:// path, one listing per bucket with a short timeout, before Beam's client
    would retry for minutes: no network or no credentials is one line at once."""
    checked = set()
    paths = [("--input_csv", value.partition("=")[2] if SPLIT_NAME.match(value.partition("=")[0])
              else value) for value in args.input_csv]
    paths += [("--input_dir", args.input_dir), ("--labels_file", args.labels_file),
              ("--output_dir", args.output_dir)]
    for flag, path in paths:
        gcs_probe.check_readable(path, flag, checked)


def check_numbers(args):
    from preprocess import shards
    if bool(args.input_csv) == bool(args.input_dir):
        raise ConfigError("give either --input_csv (one or more) or --input_dir, not "
                         f"{'both' if args.input_dir else 'neither'}")
    checks = [("num_shards", args.num_shards, 0, shards.MAX_SHARDS),
              ("resize", args.resize, 0, None), ("max_pixels", args.max_pixels, 1, None),
              ("jpeg_quality", args.jpeg_quality, 1, 100),
              ("image_threads", args.image_threads, 0, MAX_IMAGE_THREADS)]
    for name, value, low, high in checks:
        if value < low or (high is not None and value > high):
            bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ConfigError(f"--{name}={value} must be {bound}")


def parse_csv_inputs(values):
    """['train=a.csv', 'eval=b.csv'] or ['all.csv'] -> [(split or None, path)]."""
    parsed = []
    for value in values:
        name, sep, path = value.partition("=")
        if sep and SPLIT_NAME.match(name):
            parsed.append((name, path))
        else:
            parsed.append((None, value))
    unnamed = [path for split, path in parsed if split is None]
    if unnamed and len(parsed) > 1:
        raise ConfigError(f"--input_csv {unnamed[0]} has no SPLIT= prefix; with several "
                         "CSVs each needs one, e.g. --input_csv train=PATH")
    names = [split for split, _ in parsed if split]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"--input_csv split {duplicates[0]!r} is given more than once")
    return parsed


def expand_csv_inputs(csv_inputs):
    """Expands globs; a path or glob that matches no file is an error naming it."""
    from apache_beam.io.filesystems import FileSystems
    expanded = []
    for split, pattern in csv_inputs:
        paths = sorted(m.path for result in FileSystems.match([pattern])
                       for m in result.metadata_list)
        if not paths:
            raise ConfigError(f"--input_csv {pattern} matches no file")
        folders = [path for path in paths if "://" not in path and os.path.isdir(path)]
        if folders:  # Beam's local match lists a folder as a match of its own name
            raise ConfigError(f"--input_csv {pattern}: {folders[0]} is a folder; pass a CSV "
                              f"file of uri,label lines, or --input_dir {folders[0]} for a "
                              f"folder of images in one folder per label")
        expanded.extend((split, path) for path in paths)
    return expanded


def check_eval_fraction(eval_fraction, is_hash_split):
    if not is_hash_split:
        if eval_fraction is not None:
            raise ConfigError(f"--eval_fraction={eval_fraction} applies only to one unnamed "
                             "--input_csv or --input_dir; named CSVs already give the split")
        return 0.0
    value = DEFAULT_EVAL_FRACTION if eval_fraction is None else eval_fraction
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"--eval_fraction={value} must be in [0, 1)")
    return value


def check_folder_has_files(root):
    from apache_beam.io.filesystems import FileSystems
    from preprocess import sources
    if "://" in root:
        pattern = FileSystems.join(root.rstrip("/"), "**")
        found = FileSystems.match([pattern], limits=[1])[0].metadata_list
    elif not os.path.isdir(root):
        raise ConfigError(f"--input_dir {root}: no such folder")
    else:
        found = next(iter(sources.list_folder_files(root.rstrip("/"))), None)
    if not found:
        raise ConfigError(f"--input_dir {root} has no files in label folders (ROOT/<label>/<image>)")


def read_labels_file(path):
    from preprocess import shards
    try:
        text = shards.read_text(path)
    except OSError as err:  # Beam's BeamIOError too
        raise ConfigError(f"--labels_file {path}: cannot read it ({err})") from None
    return dataset_files.parse_labels(text, source=path)


def choose_image_threads(requested, options):
    """--image_threads if given; else one per core when the local runner keeps its
    workers in this one process (threads or in_memory: one shared pool then
    balances the cores), and 1 (inline) elsewhere: local worker processes, and
    remote runners, which run a worker process per core and rebalance work themselves.
    """
    from apache_beam.options.pipeline_options import DirectOptions
    from common import beam_pipeline
    if requested:
        return requested
    mode = options.view_as(DirectOptions).direct_running_mode
    if beam_pipeline.runner_name(options) == beam_pipeline.LOCAL_RUNNER and mode != "multi_processing":
        return os.cpu_count() or 1
    return 1


def choose_worker_processes(options):
    """How many worker processes share the image work, for the progress line's estimate:
    1 when the local runner works in this process, its workers in multi_processing, and
    progress.UNKNOWN on other runners."""
    from apache_beam.options.pipeline_options import DirectOptions
    from common import beam_pipeline
    if beam_pipeline.runner_name(options) != beam_pipeline.LOCAL_RUNNER:
        return progress.UNKNOWN
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        return direct.direct_num_workers or os.cpu_count() or 1
    return 1


def build_pipeline(pipeline, config):
    """Wires the transforms; returns the PCollection holding the final metadata dict."""
    import apache_beam as beam
    from preprocess import transforms
    if config.input_dir:
        read = pipeline | "ReadRows" >> transforms.ReadFolderRows(
            config.input_dir, config.eval_fraction)
    else:
        read = pipeline | "ReadRows" >> transforms.ReadCsvRows(
            config.csv_inputs, config.eval_fraction)
    if config.labels:
        labels = pipeline | "GivenLabels" >> beam.Create([list(config.labels)])
    else:
        labels = read["rows"] | "DeriveLabels" >> transforms.DeriveLabels()
    total = read["rows"] | "CountRows" >> transforms.CountRows()
    processed = read["rows"] | "ProcessImages" >> transforms.ProcessImages(
        labels, config.max_pixels, config.resize, config.jpeg_quality, config.image_threads,
        total, config.worker_processes)
    shard_stats = processed["records"] | "WriteShards" >> transforms.WriteShards(
        config.output_dir, labels, config.num_shards or None, config.splits)
    errors = ((read[transforms.ERRORS], processed[transforms.ERRORS])
              | "AllErrors" >> beam.Flatten())
    return ({"labels": labels, "shard_stats": shard_stats, "errors": errors,
             "rows_read": read["rows_read"]}
            | "WriteDatasetFiles" >> transforms.WriteDatasetFiles(
                config.output_dir, config.splits))


def log_local_workers(options):
    from apache_beam.options.pipeline_options import DirectOptions
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        workers = direct.direct_num_workers or os.cpu_count()
        # Say why the first seconds are quiet: each worker process imports Beam first.
        _LOGGER.info("Starting %d local worker processes (start-up takes 10-15 s)", workers)


def run(argv=None):
    """Runs the job to completion; returns the metadata dict it published."""
    return run_config(*parse_config(argv))


def run_config(config, pipeline_args):
    """run() once the flags have parsed into a Config and the Beam pipeline args."""
    from apache_beam.options.pipeline_options import StandardOptions
    from common import beam_pipeline
    from preprocess import output_dir
    options = beam_pipeline.build_pipeline_options(pipeline_args, [progress.LOGGER_NAME])
    config = dataclasses.replace(
        config, image_threads=choose_image_threads(config.image_threads, options),
        worker_processes=choose_worker_processes(options))
    with output_dir.hold(config.output_dir):
        output_dir.remove_leftovers(config.output_dir)
        staging = output_dir.new_staging_dir(config.output_dir)
        _LOGGER.info("Runner %s; %d image thread(s) per worker process; writing to %s "
                     "(published to %s when complete); splits %s",
                     options.view_as(StandardOptions).runner, config.image_threads, staging,
                     config.output_dir, ", ".join(config.splits))
        try:
            meta = run_and_check(dataclasses.replace(config, output_dir=staging), options)
        except BaseException:
            output_dir.discard_keeping_dead_letters(staging)
            raise
        if output_dir.publish(staging, config.output_dir):
            _LOGGER.info("Replaced the earlier dataset in %s", config.output_dir)
    return meta


def run_and_check(config, options):
    """Runs the pipeline into config.output_dir (the staging folder) and refuses a dataset
    that would be silently wrong (preprocess/summary.py); returns its metadata."""
    from apache_beam.io.filesystems import FileSystems
    from common import beam_pipeline
    from preprocess import shards, transforms
    log_local_workers(options)
    beam_pipeline.run_to_completion(lambda pipeline: build_pipeline(pipeline, config), options)
    meta = dataset_files.parse_metadata(
        shards.read_text(FileSystems.join(config.output_dir, dataset_files.METADATA_FILE)))
    errors_path = FileSystems.join(config.output_dir, transforms.ERRORS_FILE)
    summary.check_some_rows_usable(meta, summary.describe_inputs(
        [path for _, path in config.csv_inputs], config.input_dir), errors_path)
    print(summary.format_summary(meta), flush=True)
    if not config.labels:
        summary.check_every_label_has_records(meta, errors_path)
    return meta


def stopped_state(config):
    return (f"nothing was published; whatever --output_dir {config.output_dir} held before is as "
            f"it was, and the same command starts the run again")


def main(argv=None):
    """The command: a user's mistake is one line on stderr and exit code 2, not a traceback."""
    beam_command.run_beam_command(parse_config, run_config, stopped_state, argv)


if __name__ == "__main__":
    main()
