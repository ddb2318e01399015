"""Entry point: batch prediction on many CPU machines with Beam's RunInference.

Reads the image URIs of a CSV ('uri[,label]', the pipeline's format), the images of a
folder or glob (--input_images) or the images of TFRecords (--input_tfrecord GLOB),
loads and checks each image (common/prediction_inputs.py; bad ones become error records
and counters), runs the exported SavedModel through apache_beam.ml.inference's
RunInference (serving/batch_transforms.py), and writes one JSON line (or CSV row) per
input image (common/prediction_records.py, the same records as the trainer's --mode
predict) and OUTPUT.summary.json.

One run at a time per --output: the job holds OUTPUT.lock beside its outputs
(common/prediction_records.py hold_prefix; locally an flock the kernel drops even on
kill -9, on gs:// a lease a killed run leaves to expire) from before the model loads to
the end, and a second run into the same prefix is refused at once in one line (exit 2). The
trainer's --mode predict into OUT takes OUT/predictions.lock: the same lock as
--output OUT/predictions, whose shards it would write too.

Outputs appear only when complete: the job writes into a staging folder beside
--output (DIR/_staging-<name>-<run>/), and only a finished run with at least one
classified image is moved into place, replacing the earlier run's files of the same
--format and its summary whole (files of the other format are kept, and a warning
names them). No usable input (an empty folder, a folder given as --input_csv, a CSV
without image rows, only unreadable images) is one "error:" line, exit code 2, and
nothing written.

    .venv/bin/python -m serving.batch_predict --input_csv work/demo/images/eval.csv \\
        --model_dir work/demo/run/export/image_classifier/1500 --output /tmp/preds/predictions
    .venv/bin/python -m serving.batch_predict --input_images 'photos/*.png' \\
        --model_dir work/demo/run/export/image_classifier --output /tmp/preds/photos
    .venv/bin/python -m serving.batch_predict --input_csv gs://B/images.csv \\
        --model_dir gs://B/run/export/image_classifier/1500 --output gs://B/preds/predictions \\
        --runner DataflowRunner --project P --region us-central1 --temp_location gs://B/tmp

Runs offline on every local core by default, configured exactly as the
preprocessing pipeline (common/beam_pipeline.py); every option not
defined here is a Beam pipeline option (--runner, --max_num_workers, ...).
Only the flags and a local --output's lock are checked before Beam and TensorFlow load, so
--help, typos and a local --output held by another run answer at once.
"""
import json
import logging
import posixpath
import sys

from common import beam_command, console, prediction_records, signature
from common.user_errors import UserError

console.quiet_unless_verbose()  # before Beam and TensorFlow load: they read the environment once

# RunInference's largest batch: 128 images of ~100 KB keep a batch near 13 MB,
# the size the trainer's evaluation batches have, and fill a CPU's cores.
DEFAULT_MAX_BATCH_SIZE = 128
SUMMARY_SUFFIX = prediction_records.SUMMARY_SUFFIX  # OUTPUT.summary.json, beside its shards
_LOGGER = logging.getLogger(__name__)


def make_parser():
    parser = console.ArgumentParser(prog="python -m serving.batch_predict",
                                    description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="count", dest="verbosity",
                        help="also show Beam's and TensorFlow's INFO lines (-vv: debug)")
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--input_csv", help="CSV of 'uri[,label]' lines")
    inputs.add_argument("--input_images", help="a folder (every image file below it) or a quoted "
                        "glob of image files (.jpg, .jpeg, .png, .gif, .bmp)")
    inputs.add_argument("--input_tfrecord", help="glob of TFRecords (common/record_schema.py schema)")
    parser.add_argument("--model_dir", required=True,
                        help="OUT/export/<model_name> (its highest version) or a version directory")
    parser.add_argument("--output", required=True,
                        help="output path prefix: OUTPUT-NNNNN-of-NNNNN.jsonl or OUTPUT.csv, "
                             "and OUTPUT.summary.json")
    parser.add_argument("--format", default="jsonl", choices=signature.PREDICTION_FORMATS)
    parser.add_argument("--top_k", type=int, default=signature.DEFAULT_TOP_K)
    parser.add_argument("--min_batch_size", type=int, default=1,
                        help="smallest batch Beam's adaptive batching forms of --input_tfrecord's "
                             "records (a CSV or images are cut into lists of whole --max_batch_size "
                             "batches as read)")
    parser.add_argument("--max_batch_size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                        help="images per model call")
    return parser


def parse_args(argv):
    """(args, Beam pipeline args); UserError naming a bad value, and OutputBusy for a local
    --output another run holds, before Beam loads. Imports Beam (flag check)."""
    parser = make_parser()
    args, pipeline_args = parser.parse_known_args(argv)
    if args.top_k < 1:
        raise UserError(f"--top_k={args.top_k} must be >= 1")
    if not 1 <= args.min_batch_size <= args.max_batch_size:
        raise UserError(f"--min_batch_size={args.min_batch_size} must be in "
                        f"[1, --max_batch_size={args.max_batch_size}]")
    # A gs:// --output is not probed here: its lease is judged under the lock (run_job), after
    # Beam's options and credentials, so that a machine without credentials is refused at once.
    prediction_records.check_prefix_free(args.output, "--output", args.output)
    from common import beam_pipeline
    beam_pipeline.check_pipeline_args(parser, pipeline_args)  # Beam loads here, after our flags
    return args, pipeline_args


def resolve_model(args):
    from common import export_versions
    base = args.model_dir
    args.model_dir, version = export_versions.resolve_export_dir(base)
    _LOGGER.info("Model: version %s of %s (%s)", version, base.rstrip("/"), args.model_dir)


def check_output(output, files):
    """UserError for an --output that names a folder instead of a file-name prefix in one."""
    example = f"{output.rstrip('/')}/predictions"
    if output.endswith("/") or files.isdir(output):
        raise UserError(f"--output {output} is a folder; give a file-name prefix in it, e.g. "
                        f"--output {example} (writes {example}-00000-of-0000N.jsonl and "
                        f"{example}{SUMMARY_SUFFIX})")


def check_inputs(args, files):
    """NoUsableInput, before any model loads, for an input that can give no image."""
    from common import prediction_inputs
    if args.input_csv:
        prediction_inputs.check_csv_path(args.input_csv, "--input_csv", files.exists, files.isdir)
    elif args.input_images:  # listed once, here; the pipeline classifies this list
        args.image_files = prediction_inputs.list_image_files(args.input_images)
    elif not files.glob(args.input_tfrecord):
        raise prediction_inputs.NoUsableInput(
            f"--input_tfrecord {args.input_tfrecord} matches no files")


def input_name(args):
    for flag in ("input_csv", "input_images", "input_tfrecord"):
        if getattr(args, flag):
            return f"--{flag} {getattr(args, flag)}"


def run(argv=None):
    """Runs the job to completion; returns the summary dict it prints. UserError for a
    mistake the user can fix (nothing is written then)."""
    return run_job(*parse_args(argv))


def run_job(args, pipeline_args):
    """The checks, then the job under --output's lock (OutputBusy at once if another run
    into that prefix holds it): no model loads and no image is read before it is held."""
    from common import prediction_records
    files = prediction_records.FileOps
    check_output(args.output, files)
    check_inputs(args, files)
    with prediction_records.hold_prefix(args.output, "--output", args.output):
        return run_locked_job(args, pipeline_args, files)


def run_locked_job(args, pipeline_args, files):
    from common import beam_pipeline, prediction_records
    from serving import batch_transforms
    resolve_model(args)
    options = beam_pipeline.build_pipeline_options(pipeline_args)
    staging = prediction_records.staging_dir(args.output, prediction_records.new_run_id())
    staged_prefix = posixpath.join(staging, posixpath.basename(args.output))
    result = beam_pipeline.run_to_completion(
        lambda pipeline: batch_transforms.build_pipeline(pipeline, args, staged_prefix), options)
    summary = dict(batch_transforms.summarize_metrics(result), format=args.format)
    try:
        publish(args, staging, summary, files)
    finally:
        files.remove_tree(staging)  # published: already gone; refused: its partial files
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


def publish(args, staging, summary, files):
    """Moves the finished job's files into place, or raises NoUsableInput when nothing was
    classified (the staged files are then discarded)."""
    from common import prediction_inputs, prediction_records
    prediction_inputs.check_some_usable(input_name(args), summary["images"], summary["errors"])
    files.write_text(posixpath.join(staging, prediction_records.SUMMARY_FILE),
                     json.dumps(summary, sort_keys=True) + "\n", "application/json")
    prediction_records.publish(staging, args.output, args.format, args.output + SUMMARY_SUFFIX,
                               files)


def stopped_state(args):
    return (f"nothing was published; the files of an earlier run into --output {args.output} "
            f"are as they were, and the same command starts the job again")


def main(argv=None):
    """The command: run(), with a mistake the user can fix as one "error:" line and exit code 2."""
    beam_command.run_beam_command(parse_args, run_job, stopped_state, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
