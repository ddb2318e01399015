"""What every bench script prints, and where the libraries' lines go instead.

One table per script, in markdown (it pastes into docs/benchmarks.md as it is): a header
line with the date, the machine's load before the run and the log file; rows of figures;
then one line per goal with the rule for MET beside it. A goal's figure is a ratio of
like-for-like measurements paired in the same round, given as the median across rounds
and its spread (min-max); the goal is MET when that median is at or above it
(docs/benchmarks.md says the same). Everything the libraries print (TensorFlow's C++
lines, absl, Beam, warnings, a pipeline's own summary) goes to the log file the header
names, not to the terminal.

    .venv/bin/python -m bench.report      # prints an example table
"""
import contextlib
import datetime
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

MET_RULE = "MET when the median across rounds is at or above the goal"


def median(values):
    return statistics.median(values)


def ratio_figure(ratios):
    """'0.93x (0.88-0.97 over 3 rounds)': the median of the per-round ratios and their spread."""
    ratios = list(ratios)
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}x (1 round)"
    return f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} rounds)"


def verdict(ratios, goal):
    """"MET" when the median of ratios is at or above goal (rounded as printed), else "NOT MET"."""
    return "MET" if round(median(ratios), 2) >= goal else "NOT MET"


def goal_line(name, ratios, goal):
    """One line per goal: its figure, its verdict and the rule beside it."""
    return (f"goal: {name} >= {goal:.2f}x: {ratio_figure(ratios)}: **{verdict(ratios, goal)}** "
            f"({MET_RULE})")


def load_average():
    """'1.07 / 1.63 / 2.06': the 1, 5 and 15 minute load averages (how busy the cores are)."""
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def commit():
    """The checkout's short commit, or '?' outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine_line():
    """The run's date, commit, cores and load average, taken before the run starts."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{now}, {commit()}, {os.cpu_count()} cores, load before the run {load_average()} (1/5/15 min)"


def format_table(columns, rows):
    """A markdown table, its columns padded to line up in a terminal."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def print_report(out, title, header, columns, rows, goals=(), notes=()):
    """The one table a script prints: title, header (machine_line() and the log file), the
    rows, then one line per goal (goal_line) and any notes."""
    text = [f"\n## {title}", "", header, "", format_table(columns, rows)]
    text += [""] + list(goals) if goals else []
    text += [""] + list(notes) if notes else []
    print("\n".join(text), file=out, flush=True)


def default_log_path(script):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(tempfile.gettempdir(), f"{script}-{stamp}-{os.getpid()}.log")


@contextlib.contextmanager
def libraries_to_log(log_path):
    """Sends everything written to stdout and stderr (file descriptors 1 and 2 too: TensorFlow's
    C++ lines, Beam's and absl's logging, warnings, a pipeline's printed summary, subprocesses)
    to log_path for the with-block; yields the stream the table goes to (stdout as it was).
    Restored on the way out, before an exception reaches the caller's error handling."""
    out = sys.stdout
    out.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed in finally
    old_streams = sys.stdout, sys.stderr
    old_handlers = [(h, h.stream) for h in logging.getLogger().handlers
                    if isinstance(h, logging.StreamHandler) and h.stream in old_streams]
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    for handler, _ in old_handlers:
        handler.setStream(log)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # shown once each, in the log
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: (
                log.write(warnings.formatwarning(message, category, filename, lineno, line)))
            yield out
    finally:
        log.flush()
        sys.stdout, sys.stderr = old_streams
        for handler, stream in old_handlers:
            handler.setStream(stream)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        log.close()


def main():
    header = f"{machine_line()}; log: (none)"
    print_report(sys.stdout, "example", header, ["route", "images/s", "x baseline"],
                 [["baseline", "1000", "1.00x"], ["route", "930", "0.93x"]],
                 [goal_line("route / baseline", [0.93, 0.91, 0.95], 0.9)])


if __name__ == "__main__":
    main()
