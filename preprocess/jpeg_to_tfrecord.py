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
This module holds the flags and their checks and imports no Beam: --help answers at once, and
Beam's side (preprocess/pipeline.py) loads at the first check that needs it (a Beam pipeline
option, a glob or gs:// CSV, --input_dir, --labels_file), so the mistakes judged before it (a
stray path, a number out of range, a local CSV that is a folder or not there) answer at once.
"""
import os
import re

from common import console

console.quiet_unless_verbose()  # before Beam and TensorFlow load: they read the environment once

from common import beam_command, gcs_probe  # noqa: E402
from common.user_errors import UserError  # noqa: E402
from preprocess import images, shards  # noqa: E402

# Used when the split comes from hashing (one CSV or --input_dir) and no
# --eval_fraction was given: 10% held out, the usual choice for the flowers data.
DEFAULT_EVAL_FRACTION = 0.1
# More threads than this per process only queue behind the GIL.
MAX_IMAGE_THREADS = 64
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class ConfigError(UserError):
    """A flag that cannot work, alone or with the others: one line naming it and the fix."""


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
    """argv -> (validated pipeline.Config, the remaining Beam pipeline args)."""
    parser = make_parser()
    args, pipeline_args = parser.parse_known_args(argv)  # --help exits here, before Beam loads
    check_leftover_arguments(parser, pipeline_args)
    check_numbers(args, shards.MAX_SHARDS)
    check_gcs_paths(args)
    csv_inputs = expand_csv_inputs(parse_csv_inputs(args.input_csv))
    is_hash_split = bool(args.input_dir) or (len(csv_inputs) == 1 and csv_inputs[0][0] is None)
    eval_fraction = check_eval_fraction(args.eval_fraction, is_hash_split)
    pipeline = import_pipeline()
    if args.input_dir:
        pipeline.check_folder_has_files(args.input_dir)
    labels = tuple(pipeline.read_labels_file(args.labels_file)) if args.labels_file else ()
    config = pipeline.Config(
        args.output_dir.rstrip("/"), tuple(csv_inputs), args.input_dir.rstrip("/"), eval_fraction,
        labels, args.num_shards, args.resize, args.max_pixels, args.jpeg_quality, args.image_threads)
    return config, pipeline_args


def check_leftover_arguments(parser, pipeline_args):
    """Every argument the command's parser left over must be a Beam pipeline option, which Beam
    judges (common/beam_pipeline.py check_pipeline_args). A path first among them is refused
    before Beam loads, in the words Beam's check would use first too (no flag before it can take
    it as its value): a glob the shell expanded."""
    leftovers = console.strip_verbosity_flags(pipeline_args)
    if leftovers and not leftovers[0].startswith("-"):
        raise ConfigError(console.unexpected_argument_error(leftovers[0]))
    if leftovers:
        import_pipeline().check_pipeline_args(parser, pipeline_args)


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


def check_numbers(args, max_shards):
    if bool(args.input_csv) == bool(args.input_dir):
        raise ConfigError("give either --input_csv (one or more) or --input_dir, not "
                         f"{'both' if args.input_dir else 'neither'}")
    checks = [("num_shards", args.num_shards, 0, max_shards),
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
    """Expands globs; a path or glob that matches no file, or matches a folder, is an error
    naming it."""
    expanded = []
    for split, pattern in csv_inputs:
        paths = match_csv_files(pattern)
        if not paths:
            raise ConfigError(f"--input_csv {pattern} matches no file")
        folders = [path for path in paths if "://" not in path and os.path.isdir(path)]
        if folders:  # Beam's local match lists a folder as a match of its own name
            raise ConfigError(f"--input_csv {pattern}: {folders[0]} is a folder; pass a CSV "
                              f"file of uri,label lines, or --input_dir {folders[0]} for a "
                              f"folder of images in one folder per label")
        expanded.extend((split, path) for path in paths)
    return expanded


def match_csv_files(pattern):
    """The sorted paths Beam's FileSystems.match finds for pattern (preprocess/pipeline.py
    match_files). A local path without wildcards is matched as Beam matches it, without Beam:
    itself if it exists (a folder too), else nothing."""
    if "://" in pattern or re.search(r"[[*?]", pattern) or pattern.endswith(("/", "\\")):
        return import_pipeline().match_files(pattern)
    return [pattern] if os.path.exists(pattern) else []


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


def run(argv=None):
    """Runs the job to completion; returns the metadata dict it published."""
    return run_config(*parse_config(argv))


def run_config(config, pipeline_args):
    """run() once the flags have parsed into a Config and the Beam pipeline args."""
    return import_pipeline().run_config(config, pipeline_args)


def import_pipeline():
    """preprocess/pipeline.py, the Beam side, imported here alone: Beam takes seconds to import,
    so the command imports it only at the first check that needs it (parse_config)."""
    from preprocess import pipeline
    return pipeline


def stopped_state(config):
    return (f"nothing was published; whatever --output_dir {config.output_dir} held before is as "
            f"it was, and the same command starts the run again")


def main(argv=None):
    """The command: a user's mistake is one line on stderr and exit code 2, not a traceback."""
    beam_command.run_beam_command(parse_config, run_config, stopped_state, argv)


if __name__ == "__main__":
    main()
