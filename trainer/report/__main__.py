"""Entry point: python -m trainer.report OUT writes OUT/report.html (trainer/report/page.py).

The flags parse, and a local OUT that is no run directory is refused, before TensorFlow loads,
so --help and a typo answer at once.

    .venv/bin/python -m trainer.report work/demo/run            # -> work/demo/run/report.html
    .venv/bin/python -m trainer.report OUT --output /tmp/r.html --eval_data_path 'DIR/eval-*'
"""
import os
import sys

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once

from common.user_errors import UserError  # noqa: E402
from trainer.report import check_run_directory  # noqa: E402

REPORT_FILE = "report.html"


def make_parser():
    parser = console.ArgumentParser(
        prog="python -m trainer.report",
        description="Write one self-contained HTML page about a training run: curves, confusion "
                    "matrix, per-class precision/recall and misclassified eval images.")
    parser.add_argument("output_dir", metavar="OUT", help="the --output_dir of a trainer.task run")
    parser.add_argument("--output", help=f"where to write the page (default: OUT/{REPORT_FILE})")
    parser.add_argument("--eval_data_path", metavar="GLOB",
                        help="eval TFRecords to evaluate on (default: the run's eval_data_path)")
    parser.add_argument("--max_images", type=int, default=64,
                        help="misclassified images shown, most confident first (default: 64)")
    console.add_verbosity_flags(parser)
    return parser


def main(argv=None):
    console.configure_logging(VERBOSITY)
    args = make_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.max_images < 0:
        console.exit_with_error(f"--max_images={args.max_images} must be 0 or more")
    if "://" not in args.output_dir:  # gs://: build_page judges it through TensorFlow
        console.exit_on_user_error(check_run_directory, args.output_dir, os.path.exists)
    from trainer.objective import confusion
    from trainer.report import html as report_html, page as report_page
    try:
        page = report_page.build_page(args.output_dir, args.eval_data_path, args.max_images)
    except UserError as err:  # ReportError, ExportNotFound: named, with the fix
        console.exit_with_error(err)
    output = args.output or os.path.join(args.output_dir, REPORT_FILE)
    url = report_page.write_text(output, report_html.render_page(page))
    accuracy = confusion.accuracy(page.matrix)
    print(f"report: {output} (step {page.export_step}, {int(page.matrix.sum())} eval images, "
          f"accuracy {accuracy:.4f}, {page.num_mistakes} misclassified); open {url}", flush=True)
    return output


if __name__ == "__main__":
    main()
