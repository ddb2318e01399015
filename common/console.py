"""Quiet by default: what a person sees from every entry point, and -v to see everything.

TensorFlow, absl, Beam and Google's client libraries print hundreds of lines a
run (C++ start-up lines, cuDNN "E" lines on machines without a GPU, deprecation
blocks, Python-version notices). By default an entry point shows this project's
own lines (progress, summaries, warnings) and only errors of the libraries;
-v (or --verbosity 1) brings the libraries' INFO lines back, -vv adds debug and
TensorFlow's C++ logs. quiet_unless_verbose() must run before TensorFlow is
imported: its C++ logging reads TF_CPP_MIN_LOG_LEVEL once, at load.

    .venv/bin/python -m trainer.task --help          # no TensorFlow lines before the help
    .venv/bin/python -m trainer.task ... -v          # everything, as before
"""
import argparse
import contextlib
import ctypes
import difflib
import logging
import os
import re
import signal
import sys
import threading
import warnings

from common import first_import

# The packages of this project: their INFO lines are the ones a person reads.
PROJECT_PACKAGES = ("common", "preprocess", "trainer", "serving", "bench", "__main__")
VERBOSITY_FLAGS = {"-v": 1, "-vv": 2, "--verbose": 1}
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISY_WARNINGS = (DeprecationWarning, FutureWarning, PendingDeprecationWarning)


def verbosity_from_argv(argv=None):
    """0 (quiet), 1 (-v, --verbose, --verbosity 1) or 2 (-vv, --verbosity 2); argv unchanged."""
    argv = sys.argv[1:] if argv is None else argv
    level = 0
    for i, arg in enumerate(argv):
        if arg in VERBOSITY_FLAGS:
            level = max(level, VERBOSITY_FLAGS[arg])
        elif arg.startswith("--verbosity="):
            level = max(level, int(arg.split("=", 1)[1] or 0))
        elif arg == "--verbosity" and i + 1 < len(argv) and argv[i + 1].isdigit():
            level = max(level, int(argv[i + 1]))
    return level


def strip_verbosity_flags(argv):
    """argv without the flags verbosity_from_argv reads, for parsers that do not know them."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--verbosity":
            skip = True
        elif arg not in VERBOSITY_FLAGS and not arg.startswith("--verbosity="):
            out.append(arg)
    return out


def quiet_unless_verbose(argv=None):
    """Sets the environment (inherited by Beam's worker processes too) before TensorFlow loads."""
    verbosity = verbosity_from_argv(argv)
    quiet_libraries(verbosity)
    configure_logging(verbosity)  # import-time lines (Beam's crcmod notice, TF deprecations)
    return verbosity


def quiet_libraries(verbosity=0):
    """TensorFlow's C++ lines and the libraries' deprecation warnings off (at verbosity 0),
    the logging format left to the caller; must run before TensorFlow loads."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", {0: "3", 1: "1"}.get(verbosity, "0"))
    first_import.uncollected_imports()  # a third of TensorFlow's import time (common/first_import.py)
    _NATIVE_LINES["muted"] = verbosity == 0
    if verbosity == 0:
        silence_native_lines_of_import("tensorflow")
        os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore::FutureWarning")
        for category in NOISY_WARNINGS:
            warnings.filterwarnings("ignore", category=category)
        sys.unraisablehook = make_unraisable_hook(sys.unraisablehook)


def silence_native_lines_of_import(name):
    """The first import of module `name` runs with file descriptor 2 on /dev/null.

    TensorFlow 2.16 and later (.venv-keras) write their C++ start-up lines through absl before
    absl's logging is initialised ("WARNING: All log messages before absl::InitializeLog() ...",
    oneDNN, CUDA stubs), straight to the stderr file descriptor: TF_CPP_MIN_LOG_LEVEL does not
    reach them. A Python error of the import still surfaces, as an exception."""
    first_import.around_first_import(name, native_stderr_muted)


_NATIVE_LINES = {"muted": False}  # quiet_libraries(0) ran: a command's native lines are not shown


def native_lines_muted():
    """native_stderr_muted when the command is quiet (quiet_libraries at verbosity 0): for C++
    lines TF_CPP_MIN_LOG_LEVEL does not reach (TensorFlow 2.20's grappler through absl)."""
    return native_stderr_muted(_NATIVE_LINES["muted"])


@contextlib.contextmanager
def native_stderr_muted(is_muted=True):
    """File descriptor 2 on /dev/null while the block runs (when is_muted): for C++ lines
    written straight to it (TensorFlow's start-up, the TFLite converter's MLIR summary)."""
    if not is_muted:
        yield
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def make_unraisable_hook(default_hook):
    """Drops TensorFlow 2.15's AtomicFunction.__del__ errors at interpreter exit (a known TF
    bug printing one traceback per loaded function after a successful run); keeps the rest."""
    def hook(unraisable):
        if "AtomicFunction.__del__" not in repr(unraisable.object):
            default_hook(unraisable)
    return hook


class ProjectOrErrors(logging.Filter):
    """This project's records: warnings and errors wherever they are logged, INFO from the
    project's own loggers (the root logger's INFO lines, e.g. a params dump, are detail for
    -v); the libraries' records at ERROR and above."""

    def filter(self, record):
        if record.name.split(".")[0] in PROJECT_PACKAGES:
            return True
        if record.levelno >= logging.WARNING and is_project_file(record.pathname):
            return True
        return record.levelno >= logging.ERROR


def is_project_file(path):
    return (path.startswith(PROJECT_DIR + os.sep)
            and not path.startswith(os.path.join(PROJECT_DIR, ".venv") + os.sep))


def configure_logging(verbosity=None, fmt="%(message)s"):
    """One stderr handler on the root logger; quiet (0) filters the libraries to errors."""
    verbosity = verbosity_from_argv() if verbosity is None else verbosity
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        fmt if verbosity == 0 else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if verbosity == 0:
        handler.addFilter(ProjectOrErrors())
    root = logging.getLogger()
    # Replace plain stderr handlers (basicConfig's, Beam's, an earlier call's); keep others
    # (pytest's capture handlers are subclasses).
    root.handlers[:] = [h for h in root.handlers if type(h) is not logging.StreamHandler] + [handler]
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    for name in ("tensorflow", "absl", "apache_beam", "google", "urllib3"):
        library = logging.getLogger(name)
        library.setLevel(logging.INFO if verbosity else logging.ERROR)
        library.propagate = True
        library.handlers[:] = []
    return verbosity


class ArgumentParser(argparse.ArgumentParser):
    """argparse for every entry point: no abbreviations (--train_step is not --train_steps), and
    mistakes are one line and exit code 2, not a usage dump. An unknown flag gets the closest
    known one ("did you mean --train_steps?"); a path among the unrecognized arguments gets the
    hint to quote a glob the shell expanded."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.argv = []

    def parse_known_args(self, args=None, namespace=None):
        self.argv = list(sys.argv[1:] if args is None else args)  # for error()'s hint
        return super().parse_known_args(args, namespace)

    def error(self, message):
        if "arguments are required" in message and self.mistyped_flag():
            # a mistyped required flag (--output_di): the typo is the mistake to name
            message = f"unrecognized arguments: {self.mistyped_flag()}"
        hint = glob_hint(message)
        unknown = unrecognized_flag(message)
        if unknown:
            close = closest_flag(unknown, flag_names(self))
            hint = f"; did you mean {close}?" if close else hint
        self.exit(2, f"error: {message}{hint}; see {self.prog} --help\n")

    def mistyped_flag(self):
        """The first flag given that this parser does not know and that is a typo of one it
        knows (is_typo_of: strict, as a parse_known_args parser passes other flags on)."""
        known = flag_names(self)
        return next((flag for flag in (arg.split("=", 1)[0] for arg in self.argv)
                     if flag.startswith("-") and flag not in known
                     and any(is_typo_of(flag, name) for name in known)), None)


def flag_names(parser):
    """Every option string of parser (read from its public help text: argparse has no public
    list of them)."""
    return sorted(set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", parser.format_help())))


def is_typo_of(flag, known):
    """True when flag abbreviates known or is at most two keystrokes from it (Levenshtein).
    Stricter than closest_flag's "did you mean": where unknown flags go on to another
    program (Beam, TF Serving), theirs must pass (--ssl_config_file beside --model_config_file)."""
    if known.startswith(flag):
        return True
    previous = list(range(len(known) + 1))  # edit distances from flag[:i] to each known[:j]
    for i, char in enumerate(flag, 1):
        current = [i]
        for j, other in enumerate(known, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (char != other)))
        previous = current
    return previous[-1] <= 2


def unrecognized_flag(message):
    """The first flag named in argparse's 'unrecognized arguments: ...' message, or None."""
    if "unrecognized arguments:" not in message:
        return None
    flags = [arg for arg in message.split("unrecognized arguments:", 1)[1].split() if arg.startswith("-")]
    return flags[0].split("=", 1)[0] if flags else None


def closest_flag(flag, known_flags):
    """The known flag closest to a mistyped one, or None when nothing is close: the one flag
    it abbreviates (abbreviations are refused, so that is what was meant), else difflib's."""
    name = flag.split("=", 1)[0]
    extended = [known for known in known_flags if known.startswith(name)]
    if len(extended) == 1:
        return extended[0]
    close = difflib.get_close_matches(name, known_flags, n=1)
    return close[0] if close else None


GLOB_HINT = " (a glob the shell expanded into several files? quote it, e.g. --train_data_path 'DIR/train-*')"


def glob_hint(message):
    return GLOB_HINT if "unrecognized arguments" in message and "/" in message else ""


def unexpected_argument_error(arg):
    """The line for an argument no flag takes and that is no flag: a glob the shell expanded."""
    return f"unexpected argument {arg!r}{GLOB_HINT}"


def unknown_flag_error(flag, known_flags):
    """The one line for a flag that neither the command nor Beam knows, with the closest match."""
    name = flag.split("=", 1)[0]
    close = closest_flag(name, known_flags)
    hint = f"; did you mean {close}?" if close else ""
    return f"unknown flag {name}: not a flag of this command nor a Beam pipeline option{hint}"


def exit_with_error(err):
    """What a user can fix: one line on stderr and exit code 2, never a traceback."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
TERMINATED_EXIT_CODE = 143  # 128 + SIGTERM, as a shell reports a command SIGTERM ended


class Terminated(BaseException):
    """SIGTERM, raised by exit_on_interrupt's handler: the machine is being taken (a preempted
    or spot TPU VM, a Vertex AI or GKE job stopped or moved). A BaseException, as
    KeyboardInterrupt is: no `except Exception` on the way up swallows it."""


class TerminationState:
    """What this process knows of a stop signal: which one came ("SIGINT", "SIGTERM" or None),
    and how many blocks defer it (deferring_termination) to save their work first."""

    def __init__(self):
        self.requested = None
        self.deferring = 0


_TERMINATION = TerminationState()


def stop_error(name):
    """The exception that stands for stop signal `name`: KeyboardInterrupt or Terminated."""
    return KeyboardInterrupt() if name == "SIGINT" else Terminated("SIGTERM")  # Beam re-raises it, same type


def on_stop_signal(signum, frame):  # noqa: ARG001 - signal.signal's handler signature
    """Raises KeyboardInterrupt (Ctrl-C) or Terminated (SIGTERM) where the main thread is;
    inside deferring_termination only notes it (a second signal there does not wait)."""
    is_second = _TERMINATION.requested is not None
    _TERMINATION.requested = signal.Signals(signum).name
    if not _TERMINATION.deferring or is_second:
        raise stop_error(_TERMINATION.requested)


def is_termination_requested():
    """True once Ctrl-C or SIGTERM came (inside exit_on_interrupt): a deferring block saves and ends."""
    return _TERMINATION.requested is not None


def requested_stop():
    """"SIGINT", "SIGTERM" or None: the stop signal that came (inside exit_on_interrupt)."""
    return _TERMINATION.requested


def note_stop_signal(name):
    """Notes stop signal `name` as if it had come to this process (another process of the same
    run received it): the deferring_termination block under way ends as that signal would end it."""
    _TERMINATION.requested = _TERMINATION.requested or name


@contextlib.contextmanager
def deferring_termination():
    """Ctrl-C or SIGTERM inside the block is noted instead of raised: the block checks
    is_termination_requested() where its work is whole (between training calls), saves and
    returns; KeyboardInterrupt or Terminated is raised as the block ends. Nothing lands inside
    TensorFlow's own Python meanwhile (the Keras engine's training call can crash the process
    when it does). Outside exit_on_interrupt the signals keep their handlers, so the block
    changes nothing there."""
    _TERMINATION.deferring += 1
    try:
        yield
    finally:
        _TERMINATION.deferring -= 1
    if _TERMINATION.requested is not None:
        # Acted on: a later block of this process is not stopped by it.
        name, _TERMINATION.requested = _TERMINATION.requested, None
        raise stop_error(name)


@contextlib.contextmanager
def raising_on_stop_signals():
    """on_stop_signal is SIGTERM's handler for the block, and SIGINT's where Python's own was
    (an ignored Ctrl-C stays ignored); main thread only: Python runs signal handlers there.
    The handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _TERMINATION.requested = None
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_stop_signal)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_stop_signal)
    try:
        yield
    except BaseException as err:  # noqa: BLE001 - re-raised, as the stop it came from when it was one
        raise_as_the_stop_it_came_from(err)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _TERMINATION.requested = None  # the signal was this block's, and is answered


def raise_as_the_stop_it_came_from(err):
    """After a stop signal, an error that does not say so is the signal's (a C extension
    importing when it landed turns it into ImportError, e.g. numpy's "could not import module
    datetime"): raised as the signal's own exception, made from err."""
    if _TERMINATION.requested is not None and stop_signal_of(err) is None:
        raise stop_error(_TERMINATION.requested) from err


# What exit_on_interrupt prints before the state, and the exit code, per signal.
STOPPED_BY = {"SIGINT": ("interrupted (Ctrl-C)", INTERRUPTED_EXIT_CODE),
              "SIGTERM": ("terminated (SIGTERM)", TERMINATED_EXIT_CODE)}


@contextlib.contextmanager
def exit_on_interrupt(describe_state):
    """Ctrl-C or SIGTERM inside the block: one line saying what the stopped run left
    (describe_state(), called then) and exit code 130 (143 for SIGTERM), instead of a
    traceback from wherever the signal landed, or SIGTERM's silent end. A block inside it
    that saves work first (deferring_termination) gets either signal at its own end."""
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:  # a library that logs the interrupt it re-raises: not shown
        handler.addFilter(drop_interrupt_records)
    try:
        with raising_on_stop_signals():
            yield
    except BaseException as err:  # noqa: BLE001 - re-raised unless it is Ctrl-C or SIGTERM
        stopped_by = stop_signal_of(err)
        if stopped_by is None:
            raise
        words, exit_code = STOPPED_BY[stopped_by]
        print(f"{words}: {describe_state()}", file=sys.stderr, flush=True)
        forget_unhandled_ctrl_c()
        sys.exit(exit_code)
    finally:
        for handler in handlers:
            handler.removeFilter(drop_interrupt_records)


def forget_unhandled_ctrl_c():
    """Makes sys.exit's code the exit code after a Ctrl-C that was answered. CPython notes a
    KeyboardInterrupt that escapes code a C extension ran with PyRun_String (pybind11's eval,
    during TensorFlow's import) as unhandled, and then ends a `python -m` run by SIGINT whatever
    sys.exit said (a fresh clone's test-keras saw -2, not 130, 4bdfc1a). Every PyRun_* call
    clears that note first, so an empty one clears it."""
    pythonapi = getattr(ctypes, "pythonapi", None)  # CPython only
    if pythonapi is not None:
        pythonapi.PyRun_SimpleString(b"")


def drop_interrupt_records(record):
    """A logging filter: False for a record that carries a Ctrl-C or a SIGTERM (Beam logs the
    bundle's)."""
    return not (record.exc_info and is_interrupt(record.exc_info[1]))


def is_interrupt(err):
    """A Ctrl-C (KeyboardInterrupt) or a SIGTERM (Terminated), or an error made of one."""
    return stop_signal_of(err) is not None


def stop_signal_of(err):
    """"SIGINT", "SIGTERM" or None: what err, or an error it was made of, stands for. Beam's
    runner re-raises what lands in a transform with the step named, as the same type or as
    RuntimeError("KeyboardInterrupt [while running '...']")."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, Terminated) or (
                isinstance(err, RuntimeError) and "Terminated: SIGTERM" in str(err)):
            return "SIGTERM"
        if isinstance(err, KeyboardInterrupt) or (
                isinstance(err, RuntimeError) and str(err).startswith("KeyboardInterrupt")):
            return "SIGINT"
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def exit_on_user_error(run, *args, **kwargs):
    """run(*args, **kwargs); a UserError (common/user_errors.py) becomes one line and exit 2."""
    from common.user_errors import UserError
    try:
        return run(*args, **kwargs)
    except UserError as err:
        exit_with_error(err)


def add_verbosity_flags(parser):
    """-v/-vv and --verbosity N, as this module reads them before the libraries load."""
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="show the libraries' log lines (-vv: and debug)")
    parser.add_argument("--verbosity", type=int, default=0, help="0 quiet, 1 as -v, 2 as -vv")
