"""Entry point: an export -> float32 and int8 TFLite models, their metadata, and their check.

The export is a run's served one (OUT/export/<model>/<highest version>) or any export given by
--export_dir; the int8 model is calibrated on the first --calibration_images eval images; both
models are then checked against the export on every eval record (trainer/export/tflite_check.py)
and written, with tflite_metadata.json (the preprocessing they need) and tflite_check.json,
to OUT/tflite/<model>/<version>/ (trainer/export/tflite_files.py). A run with checkpoints but
no export is refused, naming the command that exports it (`trainer.task --mode export`: the
engine's own export path, so the TFLite models are cut from what TF Serving would serve). A
mistake (trainer/export/tflite_sources.py) is one line,
exit code 2, nothing written; a float32 model that agrees with its export on fewer than 99.5%
of the eval images is written, said in one line, and exit code 1.

    .venv/bin/python -m trainer.export_tflite --output_dir work/demo/run
    .venv-keras/bin/python -m trainer.export_tflite --export_dir OUT/best_export/image_classifier \\
        --eval_data_path 'DIR/eval-*' --tflite_dir /tmp/tflite
"""
import sys

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once

from common.user_errors import UserError  # noqa: E402

DEFAULT_CALIBRATION_IMAGES = 300  # TFLite's guide: a few hundred samples calibrate the ranges


def make_parser():
    parser = console.ArgumentParser(
        prog="python -m trainer.export_tflite",
        description="Convert an export to float32 and int8 (full-integer) TFLite models, write "
                    "the preprocessing they need beside them and check both against the export "
                    "on the eval records.")
    parser.add_argument("--output_dir", metavar="OUT", help="a trainer.task run: its served export "
                        "(OUT/export/<model>/<highest version>), its eval data, OUT/tflite/")
    parser.add_argument("--export_dir", help="an export base or version directory (default: the run's)")
    parser.add_argument("--eval_data_path", metavar="GLOB",
                        help="eval TFRecords for calibration and the check (default: the run's)")
    parser.add_argument("--tflite_dir", help="where the models go (default: OUT/tflite/<model>/<version>); "
                                             "must not exist")
    parser.add_argument("--calibration_images", type=int, default=DEFAULT_CALIBRATION_IMAGES,
                        help="eval images that calibrate the int8 model "
                             f"(default: {DEFAULT_CALIBRATION_IMAGES})")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="show the libraries' log lines (-vv: and debug)")
    parser.add_argument("--verbosity", type=int, default=0, help="0 quiet, 1 as -v, 2 as -vv")
    return parser


def main(argv=None):
    console.configure_logging(VERBOSITY)
    args = make_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from trainer.export import tflite, tflite_check, tflite_files, tflite_sources  # TensorFlow loads now
    try:
        plan = tflite_sources.plan(args)
        # The converter's MLIR summary and the interpreter's delegate line are C++ lines
        # written straight to stderr's descriptor; -v shows them.
        with console.native_stderr_muted(VERBOSITY == 0):
            check = tflite.export_tflite(plan.export_dir, plan.eval_paths, plan.tflite_dir,
                                         args.calibration_images, plan.source)
    except UserError as err:  # no run or export, no eval data, too few images, no signature
        console.exit_with_error(err)
    print(tflite_sources.format_check(check, plan), flush=True)
    problem = tflite_check.shortfall(check, tflite_files.FLOAT32_FILE)
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(1)
    return plan.tflite_dir


if __name__ == "__main__":
    main()
