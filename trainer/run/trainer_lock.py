"""One live trainer per output directory: an exclusive lock held for the whole run.

Two trainers on one --output_dir would overwrite each other's checkpoints and
record every evaluation twice, both exiting 0. The lock is OUT/trainer.lock, taken
through common/output_lock.py as every stage's: an flock(2) on a local disk (the
kernel drops it when its process ends, kill -9 included), a lease on gs:// (renewed
while the trainer runs, taken over at most gcs_lease.LEASE_SECONDS after a trainer
was killed), none on other remote file systems (the run says so once). In a
parameter-server cluster only the chief takes it (workers share the directory by
design). This module holds only the trainer's words for it.

    .venv/bin/python -m trainer.run.trainer_lock OUT     # who holds OUT, if anyone
"""
import contextlib
import os
import sys

from common import output_lock as common_lock
from trainer.settings import checks

LOCK_FILE = "trainer.lock"


class OutputDirBusy(common_lock.OutputBusy):
    """Another live trainer holds the output directory."""


class LeaseStoreError(checks.ConfigError):
    """GCS cannot hold the trainer's lease (no credentials, no such bucket): a setting's fault."""


class TrainerLock(common_lock.OutputLock):
    """OUT/trainer.lock, in the trainer's words."""

    def busy_error(self, place, holder, fix=""):
        return OutputDirBusy(busy_message(place, holder))

    def no_lock_warning(self, directory):
        return (f"No trainer lock on {directory} (remote file system): run one trainer per "
                f"output directory")


LOCK = TrainerLock(LOCK_FILE, "trainer", "--output_dir")


@contextlib.contextmanager
def hold_output_dir(output_dir):
    """Holds output_dir's lock for the with-block; OutputDirBusy naming the holder if taken."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(LOCK.hold(output_dir))
        except common_lock.LeaseStoreError as err:
            raise LeaseStoreError(str(err)) from None
        yield


def busy_message(output_dir, holder):
    return (f"output_dir={output_dir!r} is in use by another trainer ({holder}); "
            f"wait for it to end, or use another --output_dir")


def main(argv):
    path = os.path.join(argv[1], LOCK_FILE)
    try:
        with hold_output_dir(argv[1]):
            print(f"{argv[1]}: free")
    except (OutputDirBusy, LeaseStoreError) as err:
        print(err)
    return path


if __name__ == "__main__":
    main(sys.argv)
