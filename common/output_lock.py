"""Every lock of every stage: one run at a time per place, a lock taken before anything is written.

THE lock module: preprocessing (preprocess/output_dir.py, OUT/preprocess.lock), both
batch-prediction routes (common/prediction_records.py hold_prefix, PREFIX.lock), the
trainer's run directory (trainer/run/trainer_lock.py, OUT/trainer.lock) and its evaluation
records (trainer/run/evaluations.py, OUT/eval_results.lock) all take theirs through
OutputLock.hold. One rule for all, so that a killed run never blocks the next one for long:
  * locally an flock(2) on DIR/NAME (created if absent) with its holder written in it (pid,
    host, start time): the kernel drops it when the process ends, kill -9 included;
  * on gs://, which has no flock, a lease on the object DIR/NAME (common/gcs_lease.py): created
    only if absent, renewed by a heartbeat thread while held, deleted at the end; a killed
    run's lease expires (gcs_lease.LEASE_SECONDS) and the next run takes it over, saying so
    in one line ("took over the lock on gs://... left by <holder> (lease expired 2 min ago)");
  * any other scheme: a warning, and no lock.
A second run is refused at once with one line naming the place, the run that holds it and
the fix; with wait=True (the evaluation records, held for seconds) it waits instead.

    .venv/bin/python -m common.output_lock DIR NAME      # who holds DIR/NAME, if anyone
"""
import contextlib
import dataclasses
import datetime
import fcntl
import logging
import os
import socket

from common import gcs_lease
from common.user_errors import UserError

_LOGGER = logging.getLogger(__name__)


class OutputBusy(UserError):
    """Another run holds the output place."""


class NotAFolder(UserError):
    """The folder a lock belongs in is a file, or lies below one."""


LeaseStoreError = gcs_lease.LeaseStoreError  # GCS cannot hold a gs:// lock: no credentials, no bucket


def describe_this_run():
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()} since {since}"


@dataclasses.dataclass(frozen=True)
class OutputLock:
    """The lock of one kind of run: its file name and the words its messages use."""

    lock_file: str  # its name in the directory it guards, e.g. "preprocess.lock"
    run_kind: str  # the holder in a message: "another <run_kind>", e.g. "preprocessing run"
    flag: str  # the flag naming the place, in the message and its fix, e.g. "--output_dir"
    # A local lock file deleted on release (safe: see hold_flock), so that a run, even a
    # refused or failed one, leaves no file behind; the preprocessing lock file stays.
    is_removed_when_released: bool = False

    def busy_message(self, place, holder, fix=""):
        return (f"{self.flag} {place} is in use by another {self.run_kind} ({holder}): "
                f"wait for it to end, or use another {self.flag}{fix}")

    def busy_error(self, place, holder, fix=""):
        """The error refusing a second run; a subclass may name its own type and words."""
        return OutputBusy(self.busy_message(place, holder, fix))

    def no_lock_warning(self, directory):
        """The warning for a place neither local nor gs:// (None: say nothing)."""
        return (f"No lock on {directory} (neither local nor gs://): run one {self.run_kind} "
                f"at a time there")

    def hold(self, directory, place=None, wait=False):
        """A context manager holding directory's lock; OutputBusy naming the holder if it is
        taken (with wait: waits until it is free, or its gs:// lease expired). place: what
        the message calls it (the flag's value; default directory)."""
        place = place or directory
        if directory.startswith("gs://"):
            return self.hold_gcs(directory, place, wait)
        if "://" in directory:
            warning = self.no_lock_warning(directory)
            if warning:
                _LOGGER.warning(warning)
            return contextlib.nullcontext()
        path = os.path.join(directory or ".", self.lock_file)
        return self.hold_local(path, place, wait)

    @contextlib.contextmanager
    def hold_local(self, path, place, wait=False):
        try:
            with hold_flock(path, lambda holder: self.busy_error(place, holder),
                            self.is_removed_when_released, wait):
                yield
        except NotAFolder as err:
            raise NotAFolder(f"{self.flag} {place}: {err}") from None

    @contextlib.contextmanager
    def hold_gcs(self, directory, place, wait=False):
        """The lease on DIR/<lock_file> (common/gcs_lease.py); a lost lease ends the process."""
        url = f"{directory.rstrip('/')}/{self.lock_file}"
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(gcs_lease.hold_lease(url, describe_this_run(), wait=wait))
            except gcs_lease.LeaseHeld as held:  # its expiry: when a killed holder stops blocking
                holder = f"{held.holder}, lease until {gcs_lease.format_time(held.expires)}"
                raise self.busy_error(place, holder, (
                    f"; if that run is gone (killed), delete {url}")) from None
            yield


@contextlib.contextmanager
def hold_flock(path, make_busy_error, is_removed_when_released=False, wait=False):
    """flock(2) on path, released by the kernel when this process ends; make_busy_error(holder)
    is raised when another process holds it (with wait: waits for it instead). With
    is_removed_when_released the file is deleted (and a directory this call made, if left
    empty) before the lock is let go."""
    directory = os.path.dirname(path) or "."
    made_directory = not os.path.isdir(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotAFolder(f"{directory} is a file (or lies below one), not a folder: pass a "
                         f"new or existing folder") from None
    fd = lock_file_descriptor(path, make_busy_error, wait)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, describe_this_run().encode(), 0)
        yield
    finally:
        if is_removed_when_released:  # a failed run's too
            with contextlib.suppress(FileNotFoundError):  # deleted by hand meanwhile
                os.unlink(path)  # still held: a process that opened this inode retries (below)
            if made_directory:
                with contextlib.suppress(OSError):  # not empty: the run's outputs
                    os.rmdir(directory)
        os.close(fd)  # releases the lock


def lock_file_descriptor(path, make_busy_error, wait=False):
    """An open descriptor of path holding its flock. A lock won on a file that was deleted
    (or replaced) meanwhile by a releasing holder guards nothing: then it tries again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "holder unknown"
            os.close(fd)
            raise make_busy_error(holder) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)


def main(argv=None):
    """Says whether a run holds DIR/NAME; a local DIR that does not exist is not made."""
    from common import console
    parser = console.ArgumentParser(prog="python -m common.output_lock",
                                    description="Whether a run holds the lock DIR/NAME, and which.")
    parser.add_argument("directory", metavar="DIR")
    parser.add_argument("lock_file", metavar="NAME", help="e.g. preprocess.lock, predictions.lock")
    args = parser.parse_args(argv)
    print(query(OutputLock(args.lock_file, "run", "directory"), args.directory))


def query(lock, directory):
    """'DIR: free', or the busy message. A local DIR that does not exist is not made, and a
    lock file this query made is deleted again."""
    from common import console
    if "://" not in directory:
        if not os.path.isdir(directory):
            console.exit_with_error(f"{directory}: no such directory")
        is_new = not os.path.exists(os.path.join(directory, lock.lock_file))
        lock = dataclasses.replace(lock, is_removed_when_released=is_new)
    try:
        with lock.hold(directory):
            return f"{directory}: free"
    except OutputBusy as err:
        return str(err)


if __name__ == "__main__":
    main()
