"""One preprocessing run at a time per output directory, and a dataset that appears whole or not at all.

The lock: OUT/preprocess.lock, taken before anything is written. Locally it is an
flock(2) on that file (created if absent): the kernel drops it when the process ends,
kill -9 included, so a crashed run never blocks the next one. On gs:// it is an object
created only if absent (ifGenerationMatch=0, which GCS decides atomically) and deleted
when the run ends; a run killed before it could delete it leaves it behind, so the busy
message says to delete it when that run is gone. A second run is refused at once with
one line naming the directory and the run that holds it.

Staging: the pipeline writes into OUT/_staging-<run>/. Only a finished and checked
dataset is published into OUT (publish): the old metadata.json goes first, so that from
then on OUT does not look like a finished dataset, then the old shards, labels.txt and
dead letters; then the new files are moved in, metadata.json last. A run that fails
publishes nothing: an earlier dataset in OUT stays as it was, and the failed run's dead
letters stay in its staging folder (the next run removes it).

    .venv/bin/python -m preprocess.output_dir OUT      # who holds OUT, if anyone
"""
import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import uuid

from apache_beam.io.filesystems import FileSystems

from common import dataset_files, gcs_probe
from common.user_errors import UserError
from preprocess import shards

LOCK_FILE = "preprocess.lock"
STAGING_PREFIX = "_staging-"
# What a finished dataset of this pipeline consists of, besides metadata.json.
DATASET_GLOBS = ("*-?????-of-?????.tfrecord", dataset_files.LABELS_FILE, "errors-*.jsonl")
LEFTOVER_GLOBS = (f"{STAGING_PREFIX}*/**", "_temp-*/*")  # of crashed or failed runs
_LOGGER = logging.getLogger("preprocess")


class OutputDirBusy(UserError):
    """Another preprocessing run holds the output directory."""


def describe_this_run():
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()} since {since}"


def busy_message(output_dir, holder, fix="wait for it to end, or use another --output_dir"):
    return f"--output_dir {output_dir} is in use by another preprocessing run ({holder}): {fix}"


def hold(output_dir):
    """A context manager holding output_dir's lock; OutputDirBusy naming the holder if taken."""
    if output_dir.startswith("gs://"):
        return hold_gcs(output_dir)
    if "://" in output_dir:
        _LOGGER.warning("No lock on %s (neither local nor gs://): run one preprocessing job "
                        "per output directory", output_dir)
        return contextlib.nullcontext()
    return hold_local(output_dir)


@contextlib.contextmanager
def hold_local(output_dir):
    """flock(2) on OUT/preprocess.lock, released by the kernel when this process ends."""
    os.makedirs(output_dir, exist_ok=True)
    fd = os.open(os.path.join(output_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "holder unknown"
            raise OutputDirBusy(busy_message(output_dir, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, describe_this_run().encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def hold_gcs(output_dir):
    """The object OUT/preprocess.lock, created only if absent and deleted at the end."""
    from google.api_core import exceptions
    url = FileSystems.join(output_dir, LOCK_FILE)
    bucket, _, name = url[len("gs://"):].partition("/")
    blob = gcs_probe.make_client(output_dir, "--output_dir").bucket(bucket).blob(name)
    try:
        blob.upload_from_string(json.dumps({"holder": describe_this_run()}),
                                content_type="application/json", if_generation_match=0,
                                timeout=gcs_probe.TIMEOUT_SECONDS)
    except exceptions.PreconditionFailed:
        raise OutputDirBusy(busy_message(output_dir, read_gcs_holder(blob), (
            f"wait for it to end, or use another --output_dir; if that run is gone (killed), "
            f"delete {url}"))) from None
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


def new_staging_dir(output_dir):
    """OUT/_staging-<time>-<random>: this run's own folder for everything it writes."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return FileSystems.join(output_dir, f"{STAGING_PREFIX}{stamp}-{uuid.uuid4().hex[:6]}")


def remove_leftovers(output_dir):
    """Deletes earlier runs' staging and temporary files; call it only while holding the lock."""
    deleted = shards.delete_matching([FileSystems.join(output_dir, glob) for glob in LEFTOVER_GLOBS])
    remove_empty_local_dirs(output_dir, (STAGING_PREFIX, "_temp-"))
    return deleted


def remove_empty_local_dirs(output_dir, prefixes):
    if "://" in output_dir or not os.path.isdir(output_dir):
        return  # on GCS folders do not exist
    for entry in os.scandir(output_dir):
        if entry.is_dir() and entry.name.startswith(prefixes):
            for dirpath, _, _ in sorted(os.walk(entry.path), reverse=True):
                with contextlib.suppress(OSError):  # not empty: a file we did not write
                    os.rmdir(dirpath)


def has_dataset(output_dir):
    return FileSystems.exists(FileSystems.join(output_dir, dataset_files.METADATA_FILE))


def publish(staging, output_dir):
    """Replaces OUT's dataset (if any) with the staged one, metadata.json last; returns
    whether an earlier dataset was replaced."""
    metadata = FileSystems.join(output_dir, dataset_files.METADATA_FILE)
    replaced = FileSystems.exists(metadata)
    if replaced:
        FileSystems.delete([metadata])  # from here on OUT is not a finished dataset
    shards.delete_matching([FileSystems.join(output_dir, glob) for glob in DATASET_GLOBS])
    staged = [path for path in staged_files(staging)
              if posix_name(path) != dataset_files.METADATA_FILE]
    move_into(staged, output_dir)
    move_into([FileSystems.join(staging, dataset_files.METADATA_FILE)], output_dir)
    remove_leftovers(output_dir)
    return replaced


def staged_files(staging):
    return [metadata.path for result in FileSystems.match([FileSystems.join(staging, "*")])
            for metadata in result.metadata_list]


def posix_name(path):
    return path.rstrip("/").rsplit("/", 1)[-1]


def move_into(paths, output_dir):
    if paths:
        FileSystems.rename(paths, [FileSystems.join(output_dir, posix_name(p)) for p in paths])


def discard_keeping_dead_letters(staging):
    """A failed run: its staged dataset files go, its dead letters stay for the user to read."""
    shards.delete_matching([FileSystems.join(staging, glob) for glob in DATASET_GLOBS[:2]]
                           + [FileSystems.join(staging, dataset_files.METADATA_FILE),
                              FileSystems.join(staging, "_temp-*", "*")])


def main(argv=None):
    """Says whether a preprocessing run holds OUT; a local OUT that does not exist is not made."""
    from common import console
    parser = console.ArgumentParser(prog="python -m preprocess.output_dir",
                                    description="Whether a preprocessing run holds OUT, and which.")
    parser.add_argument("output_dir", metavar="OUT")
    output_dir = parser.parse_args(argv).output_dir
    if "://" not in output_dir and not os.path.isdir(output_dir):
        console.exit_with_error(f"{output_dir}: no such directory")
    try:
        with hold(output_dir):
            print(f"{output_dir}: free")
    except OutputDirBusy as err:
        print(err)


if __name__ == "__main__":
    main()
