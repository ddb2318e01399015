"""One run at a time per output place: a lock taken before anything is written, held to the end.

Locally it is an flock(2) on DIR/NAME (created if absent) with its holder written in it
(pid, host, start time): the kernel drops it when the process ends, kill -9 included, so a
crashed run never blocks the next one. On gs:// it is the object DIR/NAME created only if
absent (ifGenerationMatch=0, which GCS decides atomically) and deleted when the run ends; a
run killed before it could delete it leaves it behind, so the busy message says to delete
it when that run is gone. Any other scheme: a warning, and no lock. A second run is refused
at once with one line naming the place, the run that holds it and the fix.

Who uses it: preprocessing (preprocess/output_dir.py, OUT/preprocess.lock), both
batch-prediction routes (common/prediction_records.py hold_prefix) and the trainer's local
lock (trainer/run/output_lock.py, which keeps its renewed lease on gs://).

    .venv/bin/python -m common.output_lock DIR NAME      # who holds DIR/NAME, if anyone
"""
import contextlib
import dataclasses
import datetime
import fcntl
import json
import logging
import os
import socket

from common import gcs_probe
from common.user_errors import UserError

_LOGGER = logging.getLogger(__name__)


class OutputBusy(UserError):
    """Another run holds the output place."""


class NotAFolder(UserError):
    """The folder a lock belongs in is a file, or lies below one."""


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

    def hold(self, directory, place=None):
        """A context manager holding directory's lock; OutputBusy naming the holder if it is
        taken. place: what the message calls it (the flag's value; default directory)."""
        place = place or directory
        if directory.startswith("gs://"):
            return hold_gcs(self, directory, place)
        if "://" in directory:
            _LOGGER.warning("No lock on %s (neither local nor gs://): run one %s at a time there",
                            directory, self.run_kind)
            return contextlib.nullcontext()
        path = os.path.join(directory or ".", self.lock_file)
        return self.hold_local(path, place)

    @contextlib.contextmanager
    def hold_local(self, path, place):
        try:
            with hold_flock(path, lambda holder: OutputBusy(self.busy_message(place, holder)),
                            self.is_removed_when_released):
                yield
        except NotAFolder as err:
            raise NotAFolder(f"{self.flag} {place}: {err}") from None


@contextlib.contextmanager
def hold_flock(path, make_busy_error, is_removed_when_released=False):
    """flock(2) on path, released by the kernel when this process ends; make_busy_error(holder)
    is raised when another process holds it. With is_removed_when_released the file is
    deleted (and a directory this call made, if left empty) before the lock is let go."""
    directory = os.path.dirname(path) or "."
    made_directory = not os.path.isdir(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotAFolder(f"{directory} is a file (or lies below one), not a folder: pass a "
                         f"new or existing folder") from None
    fd = lock_file_descriptor(path, make_busy_error)
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


def lock_file_descriptor(path, make_busy_error):
    """An open descriptor of path holding its flock. A lock won on a file that was deleted
    (or replaced) meanwhile by a releasing holder guards nothing: then it tries again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "holder unknown"
            os.close(fd)
            raise make_busy_error(holder) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)


@contextlib.contextmanager
def hold_gcs(lock, directory, place):
    """The object DIR/<lock.lock_file>, created only if absent and deleted at the end."""
    from google.api_core import exceptions
    url = f"{directory.rstrip('/')}/{lock.lock_file}"
    bucket, _, name = url[len("gs://"):].partition("/")
    blob = gcs_probe.make_client(place, lock.flag).bucket(bucket).blob(name)
    try:
        blob.upload_from_string(json.dumps({"holder": describe_this_run()}),
                                content_type="application/json", if_generation_match=0,
                                timeout=gcs_probe.TIMEOUT_SECONDS)
    except exceptions.PreconditionFailed:
        raise OutputBusy(lock.busy_message(place, read_gcs_holder(blob), (
            f"; if that run is gone (killed), delete {url}"))) from None
    try:
        yield
    finally:
        with contextlib.suppress(exceptions.NotFound, exceptions.PreconditionFailed):
            blob.delete(if_generation_match=blob.generation, timeout=gcs_probe.TIMEOUT_SECONDS)


def read_gcs_holder(blob):
    try:
        return json.loads(blob.download_as_bytes(timeout=gcs_probe.TIMEOUT_SECONDS))["holder"]
    except Exception:  # gone meanwhile, or not ours: the object's name is in the message
        return "holder unknown"


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
