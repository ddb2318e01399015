"""One preprocessing run at a time per output directory, and a dataset that appears whole or not at all.

The lock: OUT/preprocess.lock, taken before anything is written (common/output_lock.py:
locally an flock(2) that the kernel drops even on kill -9, and the file stays; on gs:// a
lease renewed while the run lives, deleted at the end and taken over once a killed run's
has expired). A second run is refused at once with one line naming the directory and the
run that holds it.

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
import os
import uuid

from common import dataset_files, output_lock
from preprocess import shards

LOCK_FILE = "preprocess.lock"
STAGING_PREFIX = "_staging-"
# What a finished dataset of this pipeline consists of, besides metadata.json.
DATASET_GLOBS = ("*-?????-of-?????.tfrecord", dataset_files.LABELS_FILE, "errors-*.jsonl")
LEFTOVER_GLOBS = (f"{STAGING_PREFIX}*/**", "_temp-*/*")  # of crashed or failed runs


OutputDirBusy = output_lock.OutputBusy  # another preprocessing run holds the output directory
LOCK = output_lock.OutputLock(LOCK_FILE, "preprocessing run", "--output_dir")


def hold(output_dir):
    """A context manager holding output_dir's lock; OutputDirBusy naming the holder if taken
    (common/output_lock.py)."""
    return LOCK.hold(output_dir)


def new_staging_dir(output_dir):
    """OUT/_staging-<time>-<random>: this run's own folder for everything it writes."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return shards.filesystems().join(output_dir, f"{STAGING_PREFIX}{stamp}-{uuid.uuid4().hex[:6]}")


def remove_leftovers(output_dir):
    """Deletes earlier runs' staging and temporary files; call it only while holding the lock."""
    files = shards.filesystems()
    deleted = shards.delete_matching([files.join(output_dir, glob) for glob in LEFTOVER_GLOBS])
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


def publish(staging, output_dir):
    """Replaces OUT's dataset (if any) with the staged one, metadata.json last; returns
    whether an earlier dataset was replaced."""
    files = shards.filesystems()
    metadata = files.join(output_dir, dataset_files.METADATA_FILE)
    replaced = files.exists(metadata)
    if replaced:
        files.delete([metadata])  # from here on OUT is not a finished dataset
    shards.delete_matching([files.join(output_dir, glob) for glob in DATASET_GLOBS])
    staged = [path for path in staged_files(staging)
              if posix_name(path) != dataset_files.METADATA_FILE]
    move_into(staged, output_dir)
    move_into([files.join(staging, dataset_files.METADATA_FILE)], output_dir)
    remove_leftovers(output_dir)
    return replaced


def staged_files(staging):
    files = shards.filesystems()
    return [metadata.path for result in files.match([files.join(staging, "*")])
            for metadata in result.metadata_list]


def posix_name(path):
    return path.rstrip("/").rsplit("/", 1)[-1]


def move_into(paths, output_dir):
    if paths:
        files = shards.filesystems()
        files.rename(paths, [files.join(output_dir, posix_name(p)) for p in paths])


def discard_keeping_dead_letters(staging):
    """A failed run: its staged dataset files go, its dead letters stay for the user to read."""
    files = shards.filesystems()
    shards.delete_matching([files.join(staging, glob) for glob in DATASET_GLOBS[:2]]
                           + [files.join(staging, dataset_files.METADATA_FILE),
                              files.join(staging, "_temp-*", "*")])


def main(argv=None):
    """Says whether a preprocessing run holds OUT; a local OUT that does not exist is not made."""
    from common import console
    parser = console.ArgumentParser(prog="python -m preprocess.output_dir",
                                    description="Whether a preprocessing run holds OUT, and which.")
    parser.add_argument("output_dir", metavar="OUT")
    print(output_lock.query(LOCK, parser.parse_args(argv).output_dir))


if __name__ == "__main__":
    main()
