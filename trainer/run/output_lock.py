"""One live trainer per output directory: an exclusive lock held for the whole run.

Two trainers on one --output_dir would overwrite each other's checkpoints and
record every evaluation twice, both exiting 0. The lock is an flock(2) on
OUT/trainer.lock: the kernel drops it when its process ends, kill -9 included,
so a crashed run never blocks the next one. In a parameter-server cluster only
the chief takes it (workers share the directory by design). flock needs a local
file system: on gs:// the lock is a lease on the object OUT/trainer.lock instead
(trainer/run/gcs_lease.py), renewed while the trainer runs and free at most
gcs_lease.LEASE_SECONDS after a trainer was killed; on other remote file systems
no lock is taken, and the run says so once.

    .venv/bin/python -m trainer.run.output_lock OUT     # who holds OUT, if anyone
"""
import contextlib
import logging
import os
import sys

from common import output_lock as common_lock
from common.user_errors import UserError

from trainer.run import gcs_lease

LOCK_FILE = "trainer.lock"


class OutputDirBusy(UserError):
    """Another live trainer holds the output directory."""


def is_local(output_dir):
    return "://" not in output_dir


def hold_output_dir(output_dir):
    """Holds output_dir's lock for the with-block; OutputDirBusy naming the holder if taken."""
    if gcs_lease.is_gcs(output_dir):
        return hold_gcs_output_dir(output_dir)
    if not is_local(output_dir):
        logging.warning("No trainer lock on %s (remote file system): run one trainer per "
                        "output directory", output_dir)
        return contextlib.nullcontext()
    return hold_local_output_dir(output_dir)


@contextlib.contextmanager
def hold_gcs_output_dir(output_dir):
    """The lease on gs://.../OUT/trainer.lock; a lost lease ends the process (gcs_lease)."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(gcs_lease.hold_lease(os.path.join(output_dir, LOCK_FILE),
                                                     describe_this_process()))
        except gcs_lease.LeaseHeld as held:  # its expiry: when a killed holder stops blocking OUT
            until = gcs_lease.format_time(held.expires)
            raise OutputDirBusy(busy_message(output_dir, f"{held.holder}, lease until {until}")) from None
        yield


def hold_local_output_dir(output_dir):
    """flock(2) on OUT/trainer.lock, released by the kernel when this process ends
    (common/output_lock.py hold_flock; the file stays)."""
    return common_lock.hold_flock(os.path.join(output_dir, LOCK_FILE),
                                  lambda holder: OutputDirBusy(busy_message(output_dir, holder)))


def busy_message(output_dir, holder):
    return (f"output_dir={output_dir!r} is in use by another trainer ({holder}); "
            f"wait for it to end, or use another --output_dir")


describe_this_process = common_lock.describe_this_run


def main(argv):
    path = os.path.join(argv[1], LOCK_FILE)
    try:
        with hold_output_dir(argv[1]):
            print(f"{argv[1]}: free")
    except (OutputDirBusy, gcs_lease.LeaseStoreError) as err:
        print(err)
    return path


if __name__ == "__main__":
    main(sys.argv)
