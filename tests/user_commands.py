"""The one way the tests run a command as a user does: `python -m MODULE ARGS` in a child process.

Used where the behaviour is the process (an exit code, a one-line refusal, a signal, what the
terminal shows, two processes racing); everything else calls the function in the test's process.
The child's environment is the user's: without the tests' TF_CPP_MIN_LOG_LEVEL and PYTHONWARNINGS,
so the command's own quieting (common/console.py) decides what TensorFlow prints.

    .venv/bin/python -c "from tests import user_commands as u; print(u.run_trainer('--help').returncode)"
"""
import os
import pathlib
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TEST_ONLY_ENV = ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS")
# A directory holding a `tensorflow` that cannot be imported: a command run with it proves that
# what it answered (a refusal, --help) came before TensorFlow loads.
NO_TENSORFLOW_DIR = pathlib.Path(__file__).resolve().parent / "no_tensorflow"
# Inside it, in a folder of its own, an `apache_beam` that cannot be imported, for the commands
# that answer before Beam loads too (user_env_without_beam); apart, so that the other commands
# run without TensorFlow may still load Beam.
NO_BEAM_DIR = NO_TENSORFLOW_DIR / "no_beam"


def user_env(drop=(), without_tensorflow=False, **extra):
    """os.environ without the tests' own settings (and drop), plus extra (NAME=value)."""
    env = {k: v for k, v in os.environ.items() if k not in TEST_ONLY_ENV + tuple(drop)}
    if without_tensorflow:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NO_TENSORFLOW_DIR), env.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def user_env_without_beam(**extra):
    """user_env(without_tensorflow=True, **extra) where `apache_beam` cannot be imported either."""
    env = user_env(without_tensorflow=True, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(NO_BEAM_DIR), env["PYTHONPATH"]])
    return env


def command(module, *argv):
    return [sys.executable, "-m", module, *map(str, argv)]


def run(module, *argv, env=None, timeout=600, cwd=REPO_ROOT, **run_args):
    """The finished command (text stdout/stderr captured); env defaults to user_env()."""
    return subprocess.run(command(module, *argv), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=user_env() if env is None else env, **run_args)


def start(module, *argv, env=None, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          **popen_args):
    """The command started (a Popen, text mode); the caller waits for it, signals or kills it."""
    return subprocess.Popen(command(module, *argv), cwd=cwd, env=user_env() if env is None else env,
                            stdout=stdout, stderr=stderr, text=True, **popen_args)


def run_trainer(*argv, **run_args):
    """`python -m trainer.task ARGV`, finished."""
    return run("trainer.task", *argv, **run_args)


def start_trainer(*argv, **popen_args):
    """`python -m trainer.task ARGV`, started."""
    return start("trainer.task", *argv, **popen_args)


def error_lines(result):
    """The lines of a finished command's stderr."""
    return result.stderr.strip().splitlines()


def wait_until_it_catches(process, signum, timeout=60):
    """Returns once the process has a handler for signum (Linux: /proc/PID/status's SigCgt)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.02)
    raise AssertionError(f"no handler for signal {signum} within {timeout} s (exit code {process.poll()})")
