"""Quiet by default: which lines pass, and the flags that bring the rest back.

    .venv/bin/python -m pytest tests/common/test_console.py
"""
import logging
import os
import signal
import subprocess
import time

import pytest

from common import console


def record(name, level, pathname):
    return logging.LogRecord(name, level, pathname, 1, "message", None, None)


@pytest.mark.parametrize("name, level, where, shown", [
    ("trainer.estimator.engine", logging.INFO, "project", True),
    ("root", logging.WARNING, "project", True),      # logging.warning(...) in this project
    ("root", logging.INFO, "project", False),        # logging.info(...): detail for -v
    ("tensorflow", logging.WARNING, "library", False),  # deprecation blocks
    ("root", logging.WARNING, "library", False),     # Beam's crcmod notice on the root logger
    ("apache_beam", logging.ERROR, "library", True),
])
def test_quiet_filter_keeps_the_project_and_library_errors(name, level, where, shown):
    path = (os.path.join(console.PROJECT_DIR, "trainer", "loop.py") if where == "project" else
            os.path.join(console.PROJECT_DIR, ".venv", "lib", "tensorflow", "x.py"))
    assert console.ProjectOrErrors().filter(record(name, level, path)) is shown


@pytest.mark.parametrize("argv, level", [
    ([], 0), (["-v"], 1), (["-vv"], 2), (["--verbose"], 1), (["--verbosity", "2"], 2),
    (["--verbosity=1", "--x"], 1)])
def test_verbosity_flags(argv, level):
    assert console.verbosity_from_argv(argv) == level
    assert not set(console.strip_verbosity_flags(argv)) & {"-v", "-vv", "--verbose", "--verbosity"}


def test_usage_errors_are_one_line_with_the_glob_hint(capsys):
    parser = console.ArgumentParser(prog="prog")
    parser.add_argument("--data")
    with pytest.raises(SystemExit) as caught:
        parser.parse_args(["--data", "d/a-1", "d/a-2"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quote it" in err and err.startswith("error: unrecognized")


@pytest.mark.parametrize("flag, known, is_typo", [
    ("--dry_rn", "--dry_run", True), ("--dry", "--dry_run", True),
    ("--output_di", "--output_dir", True), ("--rest_api_prot", "--rest_api_port", True),
    ("--region", "--resize", False),  # a Beam option, three keystrokes away
    ("--ssl_config_file", "--model_config_file", False),  # TF Serving's, not a typo of ours
    ("--max_num_workers", "--max_pixels", False)])
def test_is_typo_of(flag, known, is_typo):
    assert console.is_typo_of(flag, known) is is_typo


@pytest.mark.parametrize("argv, line", [
    (["--output_di", "o"], "error: unrecognized arguments: --output_di; did you mean --output_dir?"),
    (["--region", "r"], "error: the following arguments are required: --output_dir"),
])
def test_a_missing_required_flag_names_the_typo_behind_it(capsys, argv, line):
    parser = console.ArgumentParser(prog="p")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--resize", type=int)
    with pytest.raises(SystemExit, match="^2$"):
        parser.parse_known_args(argv)
    assert capsys.readouterr().err == f"{line}; see p --help\n"


NOISY_MODULE = """import os
os.write(2, b"I0000 00:00:1.0 port.cc:153] a C++ line at import\\n")
"""


@pytest.mark.process
def test_a_quiet_import_mutes_its_native_lines_and_only_them(tmp_path, repo_root):
    """TensorFlow 2.16+ writes start-up lines to descriptor 2 from C++ (absl before InitializeLog),
    which TF_CPP_MIN_LOG_LEVEL does not reach: its first import runs with the descriptor muted."""
    import subprocess
    import sys
    (tmp_path / "noisy.py").write_text(NOISY_MODULE)
    script = ("import os, sys; from common import console; console.silence_native_lines_of_import('noisy');"
              "os.write(2, b'before\\n'); import noisy; import noisy; os.write(2, b'after\\n');"
              "print(noisy.__spec__.loader.get_filename('noisy').endswith('noisy.py'))")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{repo_root}")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "before\nafter\n" and result.stdout == "True\n"
    unmuted = subprocess.run([sys.executable, "-c", "import noisy"], capture_output=True, text=True,
                             env=env, timeout=60, cwd=tmp_path)
    assert "a C++ line at import" in unmuted.stderr  # the check can fail


def beam_wrapped_interrupt():
    """What Beam's runner raises when the Ctrl-C lands in a transform (after logging it)."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            logging.getLogger("apache_beam.test").error("%s [while running 'T']", interrupt,
                                                        exc_info=True)
            raise RuntimeError("KeyboardInterrupt [while running 'T']") from interrupt
    except RuntimeError as err:
        return err


@pytest.mark.parametrize("raised", [KeyboardInterrupt, "beam"])
def test_an_interrupt_is_one_line_and_exit_code_130(raised, capsys):
    logging.getLogger().addHandler(logging.StreamHandler())  # where the project's lines go
    try:
        with pytest.raises(SystemExit) as exited:
            with console.exit_on_interrupt(lambda: "what the run left"):
                if raised == "beam":
                    raise beam_wrapped_interrupt()
                raise KeyboardInterrupt
    finally:
        logging.getLogger().handlers.pop()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): what the run left\n"


def test_other_errors_pass_through_the_interrupt_handler():
    with pytest.raises(RuntimeError, match="not an interrupt"):
        with console.exit_on_interrupt(lambda: pytest.fail("described")):
            raise RuntimeError("not an interrupt")


class UnhandledSigterm(Exception):
    pass


def raise_unhandled(signum, frame):
    raise UnhandledSigterm("SIGTERM reached the handler the test installed")


@pytest.fixture
def guarded_sigterm():
    """SIGTERM's handler during a test that raises it: an exception (the test fails), not the end
    of the test process, where exit_on_interrupt does not handle it."""
    previous = signal.signal(signal.SIGTERM, raise_unhandled)
    yield raise_unhandled
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_one_line_and_exit_code_143(capsys, guarded_sigterm):
    with pytest.raises(SystemExit) as exited:
        with console.exit_on_interrupt(lambda: "what the run left"):
            signal.raise_signal(signal.SIGTERM)
            pytest.fail("SIGTERM did not stop the block")
    assert exited.value.code == 143
    assert capsys.readouterr().err == "terminated (SIGTERM): what the run left\n"
    assert signal.getsignal(signal.SIGTERM) is guarded_sigterm  # restored after the block


@pytest.fixture
def python_ctrl_c():
    """Python's own SIGINT handler during the test (a test worker's may be another, or ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


STOPS = [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted (Ctrl-C)")]


@pytest.mark.parametrize("signum, code, words", STOPS)
def test_a_stop_signal_in_a_deferring_block_waits_for_its_end(signum, code, words, capsys,
                                                              guarded_sigterm, python_ctrl_c):
    """A training loop saves where it is first (trainer/keras/train.py), then the line: the
    signal never lands inside TensorFlow's own Python."""
    done = []
    with pytest.raises(SystemExit) as exited:
        with console.exit_on_interrupt(lambda: f"saved {done}"):
            with console.deferring_termination():
                signal.raise_signal(signum)
                assert console.is_termination_requested()
                done.append("the step reached")
            pytest.fail("the block's end did not raise")
    assert exited.value.code == code
    assert capsys.readouterr().err == f"{words}: saved ['the step reached']\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored after the block


@pytest.mark.parametrize("first, second, code, words", [
    (signal.SIGTERM, signal.SIGTERM, 143, "terminated (SIGTERM)"),
    (signal.SIGINT, signal.SIGINT, 130, "interrupted (Ctrl-C)"),
    (signal.SIGTERM, signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_a_second_stop_signal_in_a_deferring_block_does_not_wait(first, second, code, words, capsys,
                                                                 guarded_sigterm, python_ctrl_c):
    with pytest.raises(SystemExit) as exited:
        with console.exit_on_interrupt(lambda: "stopped"):
            with console.deferring_termination():
                signal.raise_signal(first)
                signal.raise_signal(second)
                pytest.fail("the second signal waited")
    assert exited.value.code == code and capsys.readouterr().err == f"{words}: stopped\n"
    # Answered: the process's next deferring block (a notebook, the next test) is not stopped by it.
    assert not console.is_termination_requested()
    with console.deferring_termination():
        pass


@pytest.mark.parametrize("signum, code, words", STOPS)
def test_a_stop_signal_that_an_import_turned_into_another_error_is_still_the_stop(
        signum, code, words, capsys, guarded_sigterm, python_ctrl_c):
    """numpy's C-extension import, when the signal lands in it, raises ImportError ("could not
    import module datetime") instead of the signal's exception (a fresh clone's CI, 85f1eed)."""
    with pytest.raises(SystemExit) as exited:
        with console.exit_on_interrupt(lambda: "nothing written"):
            try:
                signal.raise_signal(signum)
            except BaseException:  # noqa: BLE001 - as the C extension does
                raise ImportError("PyCapsule_Import could not import module \"datetime\"") from None
    assert exited.value.code == code and capsys.readouterr().err == f"{words}: nothing written\n"


# A `python -m` command whose Ctrl-C lands in code a C extension runs with PyRun_String (pybind11's
# eval in TensorFlow's import): CPython notes it as unhandled and would end the run by SIGINT.
CTRL_C_IN_PYRUN_MODULE = """import ctypes, signal
from common import console
run = ctypes.pythonapi.PyRun_String
run.restype, run.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object,
                                               ctypes.py_object]
with console.exit_on_interrupt(lambda: "nothing written"):
    run(b"import signal; signal.raise_signal(signal.SIGINT)", 257, {}, {})  # 257: Py_file_input
"""


@pytest.mark.process
def test_ctrl_c_inside_a_c_extensions_python_still_exits_130(tmp_path, repo_root):
    """A fresh clone's test-keras saw -2 (ended by SIGINT) after the right line, 4bdfc1a."""
    import sys
    (tmp_path / "ctrl_c_in_pyrun.py").write_text(CTRL_C_IN_PYRUN_MODULE)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{repo_root}")
    result = subprocess.run([sys.executable, "-m", "ctrl_c_in_pyrun"], capture_output=True,
                            text=True, env=env, timeout=60, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (130, "interrupted (Ctrl-C): nothing written\n")


def test_an_error_after_no_stop_signal_stays_itself(guarded_sigterm):
    with pytest.raises(ImportError, match="no numpy"):
        with console.exit_on_interrupt(lambda: pytest.fail("described")):
            raise ImportError("no numpy")


def test_an_ignored_ctrl_c_stays_ignored(guarded_sigterm):
    """A run started with SIGINT ignored (nohup, a background job of a script) keeps it so."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with console.exit_on_interrupt(lambda: pytest.fail("described")):
            with console.deferring_termination():
                signal.raise_signal(signal.SIGINT)
                assert not console.is_termination_requested()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.process
def test_sigterm_during_preprocessing_is_one_line_and_exit_code_143(tmp_path):
    """The real command (shared exit_on_interrupt), held mid-run by a named pipe as an image."""
    from tests.preprocess.test_output_dir import command, with_fifo, write_csv
    csv_path = write_csv(tmp_path / "images", ["cat", "dog"], 4)
    fifo = with_fifo(csv_path)
    out = tmp_path / "out"
    run = subprocess.Popen(command(csv_path, out), cwd=console.PROJECT_DIR, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    writer = open_when_read(fifo, run)
    run.send_signal(signal.SIGTERM)
    time.sleep(1)  # the signal is handled before the image thread reading the pipe gets its end
    os.close(writer)  # of file (a thread blocked on a read would keep the process from exiting)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"terminated (SIGTERM): nothing was published; whatever --output_dir {out} held before "
        f"is as it was, and the same command starts the run again")
    assert "metadata.json" not in os.listdir(out)


def open_when_read(fifo, run, timeout=120):
    """The write end of fifo, opened once the run reads it (it is then mid-pipeline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it yet
            time.sleep(0.05)
    raise AssertionError(f"the run never read {fifo} (exit code {run.poll()})")
