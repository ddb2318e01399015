"""TensorFlow's TPU build and the libtpu it runs with, checked before TensorFlow loads.

PyPI's tensorflow-tpu 2.20.0 asks only for libtpu~=0.0.14, which admits libtpu releases
that abort `import tensorflow` (0.0.52: a fatal "... not available in this library") or
make it hang; requirements-keras-tpu.lock pins the pair in LIBTPU_FOR_TF_TPU, and
tests/cloud/test_tpu_lock.py holds the two to each other. A mismatch is one line and
exit code 2 before TensorFlow loads, since after that the process may just die
(docs/cloud.md, "TensorFlow's TPU build and its libtpu"). Nothing is checked where
TensorFlow is not the TPU build (.venv, .venv-keras), nor with TPU_LOAD_LIBRARY=0,
which tells TensorFlow not to load libtpu at all.

    .venv-keras-tpu/bin/python -m trainer.cloud.libtpu_pair            # the installed pair
    .venv-keras-tpu/bin/python -m trainer.cloud.libtpu_pair --import   # ... and import TensorFlow
"""
import argparse
import os
import subprocess
import sys
import time
from importlib import metadata

from common.user_errors import UserError

# tensorflow-tpu version -> the libtpu release it is run with (requirements-keras-tpu.in).
LIBTPU_FOR_TF_TPU = {"2.20.0": "0.0.20"}
TPU_LOCK = "requirements-keras-tpu.lock"
IMPORT_SECONDS = 300  # a hung import (a libtpu that waits on a TPU) fails instead of hanging


def installed_version(distribution):
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def pair_problem(tf_tpu, libtpu, environ):
    """The one-line problem with tensorflow-tpu tf_tpu beside libtpu libtpu, or None."""
    wanted = LIBTPU_FOR_TF_TPU.get(tf_tpu)
    if tf_tpu is None or wanted is None or libtpu == wanted or environ.get("TPU_LOAD_LIBRARY") == "0":
        return None
    found = f"libtpu {libtpu} is installed" if libtpu else "libtpu is not installed"
    return (f"tensorflow-tpu {tf_tpu} runs with libtpu {wanted} ({TPU_LOCK}), but {found}: "
            f"`import tensorflow` could abort or hang; install the lock (pip install --no-deps "
            f"--require-hashes -r {TPU_LOCK}), or set TPU_LOAD_LIBRARY=0 to run without the TPU")


def check_installed_pair(environ=None):
    """UserError when the installed TPU build of TensorFlow and libtpu are not the pinned pair."""
    problem = pair_problem(installed_version("tensorflow-tpu"), installed_version("libtpu"),
                           os.environ if environ is None else environ)
    if problem:
        raise UserError(problem)


def time_import():
    """(seconds, TensorFlow version) of `import tensorflow` in a child process: an abort kills
    the child, not this one. RuntimeError when it fails or takes over IMPORT_SECONDS."""
    return time_child("import tensorflow as tf; print(tf.__version__)", "import tensorflow")


def time_child(code, what):
    """(seconds, last line printed) of `python -c code` in a child process, what it does named
    `what`; RuntimeError when it fails or takes over IMPORT_SECONDS."""
    start = time.monotonic()
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=IMPORT_SECONDS)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} did not finish in {IMPORT_SECONDS} s") from None
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{what} failed with exit code {child.returncode}: {last}")
    return time.monotonic() - start, child.stdout.strip().splitlines()[-1]


def describe_pair():
    """What is installed: the TPU build and its libtpu (checked), or TensorFlow's CPU build."""
    tf_tpu, libtpu = installed_version("tensorflow-tpu"), installed_version("libtpu")
    if tf_tpu is None:
        return f"tensorflow {installed_version('tensorflow')} (not the TPU build: nothing to pair)"
    return f"tensorflow-tpu {tf_tpu} with libtpu {libtpu}: the pinned pair"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m trainer.cloud.libtpu_pair",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--import", dest="do_import", action="store_true",
                        help="also import TensorFlow in a child process and time it")
    args = parser.parse_args(argv)
    from common import console
    console.exit_on_user_error(check_installed_pair)
    line = describe_pair()
    if args.do_import:
        try:
            seconds, version = time_import()
        except RuntimeError as err:
            print(f"error: {describe_pair()}, but {err}", file=sys.stderr, flush=True)
            return 1
        line += f"; import tensorflow ({version}) took {seconds:.1f} s"
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
