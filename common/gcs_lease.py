"""A lease on one gs:// object: at most one live holder, renewed while held, taken over once expired.

The gs:// half of common/output_lock.py, the one lock module every stage takes its locks
through (flock(2) needs a local file system). A lock on gs:// is one small object, e.g.
gs://B/OUT/trainer.lock or gs://B/OUT/preprocess.lock, whose JSON body names its holder
(pid, host, since) and the time its lease expires. Every write is conditional on the
object's generation, so two processes never both hold it:
  * take: create only if absent (ifGenerationMatch=0);
  * renew: a heartbeat thread rewrites it every LEASE_SECONDS / 3 (ifGenerationMatch=ours);
  * release: delete it (ifGenerationMatch=ours);
  * take over: a lease past its expiry (kill -9, a preempted VM) is rewritten with
    ifGenerationMatch=<the stale generation>, saying so in one line; of two contenders
    one wins, the other sees it live.
So a killed run blocks the next one for LEASE_SECONDS at most, whichever stage it was.
A holder whose renewal finds another generation, or none, has lost the lease: it stalled for
longer than the lease and someone took over. It must not write on beside the new holder, so
it prints one error line and ends the process (stop_process). Expiry times are compared with
the reader's clock: Cloud VMs keep theirs within milliseconds of each other (NTP).

    .venv/bin/python -m common.gcs_lease gs://BUCKET/OUT/trainer.lock   # its holder, if any
"""
import contextlib
import dataclasses
import datetime
import itertools
import json
import logging
import os
import sys
import threading
import time
import uuid

from common import gcs_probe
from common.user_errors import UserError

_LOGGER = logging.getLogger(__name__)

# 90 s, renewed every 30 s: a lease outlives two renewals lost to a GCS hiccup or a pause of
# the process, yet a killed run blocks the next one for 90 s at most (a preempted VM takes
# longer than that to come back). Tests shorten it by setting this attribute.
LEASE_SECONDS = 90.0
RENEWALS_PER_LEASE = 3
POLL_SECONDS = 2.0  # a waiting process (wait=True) looks at the lease again this often
TAKE_ATTEMPTS = 5  # rounds of a race for a free or stale lease; each round one contender wins
LOST_EXIT_CODE = 1


class LeaseHeld(Exception):
    """The lease is live and another process's."""

    def __init__(self, url, holder, expires):
        super().__init__(f"{url} is held by {holder} until {format_time(expires)}")
        self.url, self.holder, self.expires = url, holder, expires


class LeaseStoreError(UserError):
    """GCS cannot hold the lease (no credentials, no such bucket, no permission): one line."""


@dataclasses.dataclass
class Lease:
    url: str
    blob: object  # the google.cloud.storage.Blob of the lease object
    body: dict  # holder, id, lease_seconds, expires (time.time() seconds), expires_utc
    generation: int = 0  # the object generation we wrote last; 0 = not held
    expires: float = 0.0  # when the lease we hold lapses unless renewed (time.time() seconds)
    is_lost: bool = False


@dataclasses.dataclass
class SeenLease:
    generation: int
    holder: str
    lease_id: str
    expires: float


def is_gcs(path):
    return str(path).startswith("gs://")


def format_time(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%H:%M:%S UTC")


def make_blob(url):
    """The Blob of gs://BUCKET/NAME, through common/gcs_probe.py's client (anonymous on the
    emulator that STORAGE_EMULATOR_HOST names, else Application Default Credentials)."""
    bucket, _, name = url[len("gs://"):].partition("/")
    try:
        client = gcs_probe.make_client(url, "lease")
    except gcs_probe.GcsUnreachable:
        raise LeaseStoreError(f"no Google Cloud credentials to write the lease {url}: "
                              f"{gcs_probe.LOGIN_FIX}") from None
    return client.bucket(bucket).blob(name)


@contextlib.contextmanager
def explained_store_errors(url):
    """GCS errors that no retry will cure, as one LeaseStoreError line."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions
    try:
        yield
    except exceptions.NotFound:
        raise LeaseStoreError(f"cannot write the lease {url}: its bucket does not exist") from None
    except (exceptions.Forbidden, exceptions.Unauthorized, auth_exceptions.RefreshError) as err:
        raise LeaseStoreError(f"cannot write the lease {url}: {err}") from None


def write_lease(lease, if_generation_match):
    """Writes lease.body with a new expiry, only if the object's generation is as given."""
    seconds = lease.body["lease_seconds"]
    expires = time.time() + seconds
    body = dict(lease.body, expires=expires, expires_utc=format_time(expires))
    lease.blob.upload_from_string(json.dumps(body), content_type="application/json",
                                  if_generation_match=if_generation_match,
                                  timeout=seconds / RENEWALS_PER_LEASE)
    lease.body, lease.generation, lease.expires = body, lease.blob.generation, expires


def read_lease(blob):
    """The lease object as it is now (SeenLease), or None when there is none."""
    from google.api_core import exceptions
    current = blob.bucket.get_blob(blob.name)
    if current is None:
        return None
    try:
        body = json.loads(current.download_as_bytes(if_generation_match=current.generation))
    except (exceptions.NotFound, exceptions.PreconditionFailed):
        return read_lease(blob)  # rewritten between the two requests: look again
    except ValueError:  # not JSON
        body = {}
    body = body if isinstance(body, dict) else {}
    # Without an expiry (an older version's lock object, never renewed, or not ours) it
    # lapses LEASE_SECONDS after it was written.
    expires = float(body.get("expires", current.updated.timestamp() + LEASE_SECONDS))
    return SeenLease(current.generation, body.get("holder", "holder unknown"), body.get("id"),
                     expires)


def try_take(lease):
    """Takes the lease if it is free, expired or already ours; LeaseHeld otherwise."""
    from google.api_core import exceptions
    expected = 0  # first try: create it if absent
    for _ in range(TAKE_ATTEMPTS):
        try:
            return write_lease(lease, if_generation_match=expected)
        except exceptions.PreconditionFailed:
            pass
        seen = read_lease(lease.blob)
        if seen is None:
            expected = 0  # released meanwhile
        elif seen.lease_id == lease.body["id"]:  # our own create, resent after a lost reply
            lease.generation, lease.expires = seen.generation, seen.expires
            return None
        elif seen.expires > time.time():
            raise LeaseHeld(lease.url, seen.holder, seen.expires)
        else:
            _LOGGER.warning(take_over_line(lease.url, seen))
            expected = seen.generation
    raise LeaseHeld(lease.url, "other processes taking it in turn", time.time())


def take_over_line(url, seen):
    """The one line a run says when it takes over a lease its holder left to expire."""
    return (f"took over the lock on {url} left by {seen.holder} (lease expired "
            f"{format_age(time.time() - seen.expires)} ago)")


def format_age(seconds):
    """'4 s', '3 min', '2 h': how long ago, to the unit a person reads."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def take(lease, wait):
    """try_take; with wait, again every POLL_SECONDS until the holder releases it or it expires."""
    with explained_store_errors(lease.url):
        for polls in itertools.count():
            try:
                return try_take(lease)
            except LeaseHeld as held:
                if not wait:
                    raise
                if polls == 0:
                    _LOGGER.info("Waiting for %s (%s)", lease.url, held)
                time.sleep(POLL_SECONDS)


def keep_renewed(lease, stopped, on_lost):
    """The heartbeat: renews the lease until stopped; on_lost(lease, reason) once it is lost."""
    from google.api_core import exceptions
    while not stopped.wait(lease.body["lease_seconds"] / RENEWALS_PER_LEASE):
        try:
            write_lease(lease, if_generation_match=lease.generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            reason = lost_reason(lease)
            if reason is not None:
                lease.is_lost = True
                return on_lost(lease, reason)
        except Exception as err:  # GCS 5xx, a reset connection: the next beat tries again
            if time.time() >= lease.expires:
                lease.is_lost = True
                return on_lost(lease, f"it expired before it could be renewed ({err})")
            _LOGGER.warning("Could not renew %s, trying again: %s", lease.url, err)


def lost_reason(lease):
    """Why a renewal met another generation; None if that generation is ours after all (the
    client resent a renewal whose reply was lost, and the first one had been written)."""
    try:
        seen = read_lease(lease.blob)
    except Exception as err:  # cannot tell who holds it now: lost all the same
        return f"its generation changed ({err})"
    if seen is None:
        return "it was deleted"
    if seen.lease_id == lease.body["id"]:
        lease.generation, lease.expires = seen.generation, seen.expires
        return None
    return f"it is now held by {seen.holder}"


def stop_process(lease, reason):
    """Ends the process at once: os._exit, because the main thread may be inside TensorFlow's
    C++ session for a long time and could still write a checkpoint or a result beside the
    lease's new holder before a KeyboardInterrupt reached it."""
    print(f"error: lost the lease {lease.url} ({reason}); stopping so as not to write beside "
          f"its new holder", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(LOST_EXIT_CODE)


def release(lease):
    """Deletes the lease object if it is still ours; a failure only leaves it to expire."""
    from google.api_core import exceptions
    if lease.is_lost or not lease.generation:
        return
    try:
        lease.blob.delete(if_generation_match=lease.generation)
    except (exceptions.NotFound, exceptions.PreconditionFailed):
        pass  # no longer ours
    except Exception as err:  # the lease lapses by itself
        _LOGGER.warning("Could not release %s (%s); it expires at %s", lease.url, err,
                        format_time(lease.expires))


@contextlib.contextmanager
def hold_lease(url, holder, wait=False, on_lost=stop_process):
    """Holds the lease at url for the with-block, renewed by a heartbeat thread.

    LeaseHeld if another process holds it (with wait: waits until it is free or expired);
    LeaseStoreError if GCS cannot be used. on_lost(lease, reason) runs in the heartbeat thread.
    """
    lease = Lease(url, make_blob(url), {"holder": holder, "id": uuid.uuid4().hex,
                                        "lease_seconds": LEASE_SECONDS})
    take(lease, wait)
    stopped = threading.Event()
    heartbeat = threading.Thread(target=keep_renewed, args=(lease, stopped, on_lost),
                                 name=f"lease {url}", daemon=True)
    heartbeat.start()
    try:
        yield lease
    finally:
        stopped.set()
        heartbeat.join()
        release(lease)


def main(argv=None):
    """Prints who holds the lease at a gs:// URL, and until when."""
    from common import console
    parser = console.ArgumentParser(prog="python -m common.gcs_lease",
                                    description="Who holds the lease at a gs:// URL, and until when.")
    parser.add_argument("url", metavar="gs://BUCKET/OUT/trainer.lock")
    url = parser.parse_args(argv).url
    if not is_gcs(url):
        console.exit_with_error(f"{url}: not a gs:// URL (a local lock is an flock: "
                                f"python -m common.output_lock DIR NAME names its holder)")
    try:
        seen = read_lease(make_blob(url))
    except LeaseStoreError as err:
        print(err)
        return None
    if seen is None:
        print(f"{url}: free")
    else:
        state = "expired" if seen.expires <= time.time() else "held"
        print(f"{url}: {state} by {seen.holder} until {format_time(seen.expires)}")
    return seen


if __name__ == "__main__":
    main()
