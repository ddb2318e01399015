"""The trainer lock and the eval-results lock on gs://: leases (common/gcs_lease.py) on the
suite's GCS emulator on 127.0.0.1, fake-gcs-server (tests/gcs_emulator.py; fixture gcs_bucket
gives each test a bucket of its own). It honours ifGenerationMatch, and every guarantee of a
lease rests on that precondition (the first test checks that it does).
TF's own gs:// filesystem cannot reach an emulator (TF 2.15 builds in www.googleapis.com and reads
no endpoint variable), so the trainer command runs through task.main with only its flag parsing
replaced (that would read OUT/params.json through TF); the lease refuses it before TF touches OUT.
The emulator's delete ignores ifGenerationMatch (GCS honours it), so "a lost lease is never released" is
checked as "its new holder's object is still there".

    .venv/bin/python -m pytest tests/trainer/test_output_lock_gcs.py
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from trainer import task
from trainer.settings import checks
from trainer import chain
from trainer.estimator import engine as estimator_engine
from trainer.run import driver, evaluations
from common import gcs_lease
from trainer.run import checkpoints, trainer_lock

HOLDER = f"pid {os.getpid()} on {socket.gethostname()} since "


def in_thread(function, timeout):
    """function() in a daemon thread: its result, or a failure if it still runs after timeout
    (a wait that never ends fails the test instead of hanging it)."""
    results = []
    thread = threading.Thread(target=lambda: results.append(function()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout} s"
    return results[0]


def wait_until(condition, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def bucket(gcs_bucket):
    return gcs_bucket


@pytest.fixture
def out(bucket):
    """A fresh gs:// output directory in the emulated bucket."""
    return f"gs://{bucket.name}/run-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def short_lease(monkeypatch):
    """A 1.8 s lease (renewed every 0.6 s) and a 0.05 s poll, so that tests see it turn over.

    A renewal may take a second on a loaded 2-core CI machine (the emulator is Python):
    a shorter lease there lapses between renewals and the test sees a takeover it did
    not cause.
    """
    monkeypatch.setattr(gcs_lease, "LEASE_SECONDS", 1.8)
    monkeypatch.setattr(gcs_lease, "POLL_SECONDS", 0.05)
    return 1.8


def lock_object(bucket, out, name=trainer_lock.LOCK_FILE):
    return bucket.get_blob(f"{out[len(f'gs://{bucket.name}/'):]}/{name}")


def read_body(blob):
    return json.loads(blob.download_as_bytes())


def write_foreign_lease(bucket, out, holder, expires, name=trainer_lock.LOCK_FILE):
    """Another process's lease, written as gcs_lease writes one."""
    blob = bucket.blob(f"{out[len(f'gs://{bucket.name}/'):]}/{name}")
    blob.upload_from_string(json.dumps({"holder": holder, "id": "other", "expires": expires,
                                        "lease_seconds": 90}))
    return blob


@pytest.mark.process
def test_the_emulator_enforces_generation_preconditions(bucket):
    from google.api_core import exceptions
    blob = bucket.blob(f"precondition-{uuid.uuid4().hex[:8]}")
    blob.upload_from_string("first", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        bucket.blob(blob.name).upload_from_string("second", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        bucket.blob(blob.name).upload_from_string("second", if_generation_match=blob.generation + 1)
    bucket.blob(blob.name).upload_from_string("second", if_generation_match=blob.generation)
    assert bucket.blob(blob.name).download_as_bytes() == b"second"


@pytest.mark.process
def test_a_second_trainer_is_refused_naming_the_holder(bucket, out):
    with trainer_lock.hold_output_dir(out):
        body = read_body(lock_object(bucket, out))
        assert body["holder"].startswith(HOLDER)
        assert 85 < body["expires"] - time.time() <= gcs_lease.LEASE_SECONDS
        with pytest.raises(trainer_lock.OutputDirBusy) as busy:
            with trainer_lock.hold_output_dir(out):
                pytest.fail("a second holder got the lease")
    message = str(busy.value)
    assert message.startswith(f"output_dir={out!r} is in use by another trainer ({HOLDER}")
    assert f"lease until {gcs_lease.format_time(body['expires'])}" in message
    assert lock_object(bucket, out) is None  # released on leaving the block


@pytest.mark.process
def test_the_trainer_command_refuses_a_held_output_dir(bucket, out, tiny_params, monkeypatch, capsys):
    """task.main -> cluster.run -> estimator_engine.run -> driver.run -> the lease: exit 2 and one line naming the holder.
    Only the settings chain and the checkpoint look are skipped: they read gs:// through TF."""
    holder = "pid 4242 on tpu-vm-7 since 2024-05-01T10:00:00+00:00"
    write_foreign_lease(bucket, out, holder, time.time() + 60)
    monkeypatch.setattr(chain, "resolve", lambda typed, config_file: dict(tiny_params, output_dir=out))
    # TF 2.15's gs:// file system cannot reach the emulator (its endpoint is compiled in), so the
    # read-only look at OUT's checkpoints (trainer/run/checkpoints.py) is skipped too.
    monkeypatch.setattr(checkpoints, "check_run_state", lambda output_dir, repair=True, say=True: (None, 0))
    monkeypatch.setattr(driver, "run_mode", lambda params, make_engine: pytest.fail("ran without the lease"))
    with pytest.raises(SystemExit) as exit_info:
        task.main([])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: output_dir={out!r} is in use by another "
                                                   f"trainer ({holder}, lease until ")
    assert read_body(lock_object(bucket, out))["holder"] == holder  # left alone


@pytest.mark.process
def test_an_expired_lease_is_taken_over(bucket, out):
    stale = write_foreign_lease(bucket, out, "pid 1 on preempted-vm since earlier", time.time() - 1)
    with trainer_lock.hold_output_dir(out):
        current = lock_object(bucket, out)
        assert current.generation != stale.generation
        assert read_body(current)["holder"].startswith(HOLDER)
    assert lock_object(bucket, out) is None


@pytest.mark.process
def test_the_heartbeat_renews_the_lease(bucket, out, short_lease):
    with gcs_lease.hold_lease(f"{out}/trainer.lock", "me", on_lost=pytest.fail) as lease:
        first = lock_object(bucket, out)
        first_expiry = read_body(first)["expires"]
        time.sleep(3 * short_lease)  # past the first expiry: held only if renewed
        current = lock_object(bucket, out)
        assert current.generation != first.generation and current.generation == lease.generation
        assert read_body(current)["expires"] > first_expiry + 2 * short_lease
        with pytest.raises(gcs_lease.LeaseHeld, match="held by me until"):
            with gcs_lease.hold_lease(f"{out}/trainer.lock", "another"):
                pass


@pytest.mark.process
def test_a_lost_lease_is_reported_and_never_released(bucket, out, short_lease):
    """After a stall someone took over: on_lost is told who, and the new holder's object stays."""
    lost = []
    with gcs_lease.hold_lease(f"{out}/trainer.lock", "me",
                              on_lost=lambda lease, reason: lost.append(reason)) as lease:
        write_foreign_lease(bucket, out, "pid 9 on the-new-holder", time.time() + 60)
        wait_until(lambda: lost, timeout=5 * short_lease, what="the heartbeat to notice")
        assert lease.is_lost
    assert lost == ["it is now held by pid 9 on the-new-holder"]
    assert read_body(lock_object(bucket, out))["holder"] == "pid 9 on the-new-holder"


HOLD_FOREVER = """
import sys, time
from common import gcs_lease
gcs_lease.LEASE_SECONDS = 0.9
with gcs_lease.hold_lease(sys.argv[1], "the stalled trainer"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.process
def test_a_process_that_lost_its_lease_stops_with_one_line(bucket, out):
    proc = subprocess.Popen([sys.executable, "-c", HOLD_FOREVER, f"{out}/trainer.lock"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        assert proc.stdout.readline() == "held\n"
        write_foreign_lease(bucket, out, "pid 9 on the-new-holder", time.time() + 60)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == gcs_lease.LOST_EXIT_CODE
    assert stderr.strip().splitlines() == [
        f"error: lost the lease {out}/trainer.lock (it is now held by pid 9 on the-new-holder); "
        f"stopping so as not to write beside its new holder"]


@pytest.mark.process
def test_recording_results_waits_for_the_holder(bucket, out, short_lease):
    events = []
    held = threading.Event()

    def other_recorder():
        with gcs_lease.hold_lease(f"{out}/{evaluations.RESULTS_LOCK_FILE}", "the trainer",
                                  on_lost=lambda lease, reason: events.append(reason)):
            held.set()
            time.sleep(2.5 * short_lease)  # longer than the lease: the heartbeat keeps it
            events.append("other done")

    def record():
        with evaluations.hold_results(out):
            events.append("ours")
            return read_body(lock_object(bucket, out, evaluations.RESULTS_LOCK_FILE))["holder"]

    thread = threading.Thread(target=other_recorder)
    thread.start()
    assert held.wait(10)
    assert in_thread(record, timeout=20).startswith(HOLDER)
    thread.join()
    assert events == ["other done", "ours"]
    assert lock_object(bucket, out, evaluations.RESULTS_LOCK_FILE) is None


@pytest.mark.process
def test_recording_results_takes_over_an_expired_holder(bucket, out, short_lease):
    write_foreign_lease(bucket, out, "a killed evaluator", time.time() - 1, evaluations.RESULTS_LOCK_FILE)

    def record():
        with evaluations.hold_results(out):
            return read_body(lock_object(bucket, out, evaluations.RESULTS_LOCK_FILE))["holder"]

    assert in_thread(record, timeout=10).startswith(HOLDER)


@pytest.mark.process
def test_a_missing_bucket_is_one_config_error(gcs_bucket):
    with pytest.raises(checks.ConfigError, match=r"^cannot write the lease gs://no-such-bucket/"
                                                 r"out/trainer.lock: its bucket does not exist$"):
        with trainer_lock.hold_output_dir("gs://no-such-bucket/out"):
            pass


def test_no_credentials_is_one_config_error(monkeypatch, tmp_path):
    """Without the emulator the client looks for credentials: none here (and no probe of the
    metadata server, which NO_GCE_CHECK would also turn off)."""
    from google.auth.compute_engine import _metadata
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login either
    with pytest.raises(checks.ConfigError, match=r"^no Google Cloud credentials to write the lease "
                                                 r"gs://b/out/trainer.lock: run `gcloud auth"):
        with trainer_lock.hold_output_dir("gs://b/out"):
            pass
