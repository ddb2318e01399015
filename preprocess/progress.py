"""The progress line of the image work: done of the total, rejected, the rate and the time left.

One tracker per worker process, fed by every DoFn instance and thread of that process, so
that a local run (one process does every image: the default) reports the whole job. The
job's total is the number of rows to process, known once the CSVs are read or the folder
is listed (a side input of the image step). Where several local worker processes share
the work (--direct_running_mode multi_processing), each reports its own count and
estimates the job's from it; on a remote runner the number of processes is unknown, so
the line gives counts and the total without a share or an ETA.

    .venv/bin/python -m preprocess.progress        # sample lines
"""
import logging
import threading
import time

LOGGER_NAME = "preprocess"
_LOGGER = logging.getLogger(LOGGER_NAME)
# A worker logs how far it got at most this often, so a long local run is never silent.
PROGRESS_EVERY_SECONDS = 15.0
UNKNOWN = 0  # the number of worker processes on a remote runner

_TRACKERS = {}
_TRACKERS_LOCK = threading.Lock()


def process_tracker(job, what):
    """This process's tracker of ``what`` ("images") in one pipeline ``job`` (an id: a process
    that runs several pipelines, a test session or the benchmark, counts each apart)."""
    with _TRACKERS_LOCK:
        if (job, what) not in _TRACKERS:
            _TRACKERS[job, what] = Progress(what)
        return _TRACKERS[job, what]


class Progress:
    """Counts outcomes; every_seconds after the first one, logs a line and starts a new wait."""

    def __init__(self, what, every_seconds=None, clock=time.monotonic):
        self._what, self._clock = what, clock
        self._every = PROGRESS_EVERY_SECONDS if every_seconds is None else every_seconds
        self._lock = threading.Lock()
        self._start = self._last = None
        self._done = self._rejected = 0

    def add(self, rejected, total=0, processes=1):
        """One outcome; returns the line logged now, or None."""
        with self._lock:
            now = self._clock()
            if self._start is None:
                self._start = self._last = now
            self._done += 1
            self._rejected += int(rejected)
            if now - self._last < self._every:
                return None
            self._last = now
            line = format_line(self._what, self._done, self._rejected, now - self._start,
                               total, processes)
        _LOGGER.info(line)
        return line


def format_line(what, done, rejected, seconds, total, processes):
    """'progress: 3,200 of 10,000 images (32%), 12 rejected, 410/s, about 17 s left'."""
    rate = done / seconds if seconds > 0 else 0.0
    if not total or processes == UNKNOWN:
        of_total = f" (the job has {total:,})" if total else ""
        return (f"worker progress: {done:,} {what} done{of_total}, {rejected:,} rejected, "
                f"{rate:,.0f}/s")
    job_done = min(total, done * processes)  # other processes assumed at this one's pace
    estimated = "" if processes == 1 else f", estimated from 1 of {processes} worker processes"
    left = (total - job_done) / (rate * processes) if rate else float("inf")
    return (f"progress: {job_done:,} of {total:,} {what} ({100 * job_done / total:.0f}%"
            f"{estimated}), {rejected:,} rejected, {rate * processes:,.0f}/s, "
            f"about {format_seconds(left)} left")


def format_seconds(seconds):
    """'17 s', '4 min 05 s', '2 h 03 min'."""
    if seconds == float("inf"):
        return "an unknown time"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


if __name__ == "__main__":
    print(format_line("images", 3200, 12, 7.8, 10000, 1))
    print(format_line("images", 1600, 5, 7.8, 10000, 2))
    print(format_line("images", 1600, 5, 7.8, 10000, UNKNOWN))
