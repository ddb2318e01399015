"""The command line every bench script shares: --quick, --log_file, and flags answered before
TensorFlow or Beam loads (so --help and a typo answer at once, in one line).

Each script builds its parser with make_parser and adds its own flags; its `__main__` block
calls answer_flags_first before its heavy imports; its run takes log_path(args, script).

    .venv/bin/python -m bench.bench_input --help
"""
import os
import sys

from bench import report
from common import console


def make_parser(script, doc, quick):
    """`python -m bench.<script>`'s parser, described by doc's first line, with the shared flags:
    --quick (quick: what it shortens the run to) and --log_file."""
    parser = console.ArgumentParser(prog=f"python -m bench.{script}", description=doc.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{quick} (a first look; make bench-quick)")
    parser.add_argument("--log_file", default=None,
                        help="where TensorFlow's, Beam's and absl's lines go "
                             "(default: a new file in the temporary directory, named in the table)")
    return parser


def add_serving_flags(parser, rounds, requests, requests_help):
    """The flags of the serving benchmarks: the export to serve, and how much load how often."""
    parser.add_argument("--model_base_path", help="OUT/export/<model_name>; default: export one")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--requests", type=int, default=requests, help=requests_help)


def answer_flags_first(parse_args):
    """For a script's `__main__` block, before its heavy imports: parse_args(argv) answers --help
    and refuses a mistake (exit 2) now; then the libraries' start-up lines are turned off."""
    parse_args(sys.argv[1:])
    console.quiet_unless_verbose([])


def log_path(args, script):
    """--log_file, else a new file in the temporary directory named after the script."""
    return os.path.abspath(args.log_file or report.default_log_path(script))
