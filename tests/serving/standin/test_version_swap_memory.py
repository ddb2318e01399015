"""Unloaded versions give their memory back: 40 real version swaps under requests.

A stand-in runs as its own process (`python -m serving.standin.server`) on a base path
holding version 1; each swap copies version N to N+1 (staged, then renamed in, as a
deployment publishes a version), waits until N+1 serves, deletes N and waits until N is
END, while two clients keep predicting. The server's RSS may not grow by 25 MB from swap
5 to swap 40 (issue 26's bound is 60 MB): without the full collection of unloaded versions
(served_version.collect_released) it grew 59-75 MB here (~2 MB per swap of the fixture model).

    .venv/bin/python -m pytest tests/serving/standin/test_version_swap_memory.py
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.serving.conftest import b64, wait_for

pytestmark = [pytest.mark.process]

SWAPS = 40
BASELINE_SWAP = 5  # the first swaps grow caches that then stay (TF's, Python's, the allocator's)
# Issue 26 asks for under 60 MB; without the fix this test measured +59 to +75 MB, with it
# +2 to +5 MB, so the bound sits where the test still fails without the fix.
MAX_GROWTH_MB = 25
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def request(port, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def states(port):
    status, body = request(port, "GET", "/v1/models/image_classifier")
    if status != 200:
        return {}
    return {int(v["version"]): v["state"] for v in body["model_version_status"]}


@pytest.fixture
def server_process(tmp_path, save_tiny_model, sample_jpegs):
    base = tmp_path / "image_classifier"
    save_tiny_model(base / "1", seed=0, warmup_jpegs=sample_jpegs[:2])
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.standin.server", "--model_base_path", str(base),
         "--rest_api_port", "0", "--port", "0", "--file_system_poll_wait_seconds", "0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()  # the start-up line names the REST port
        port = int(line.split("REST http://127.0.0.1:")[1].split()[0])
        yield process, port, base
    finally:
        process.terminate()
        process.wait(timeout=30)


def keep_predicting(port, body, stop, counts):
    while not stop.is_set():
        status, _ = request(port, "POST", "/v1/models/image_classifier:predict", body)
        counts["ok" if status == 200 else "failed"] += 1


def test_forty_swaps_under_requests_keep_memory_flat(server_process, sample_jpegs):
    process, port, base = server_process
    body = json.dumps({"instances": [b64(sample_jpegs[3])]})
    stop, counts = threading.Event(), {"ok": 0, "failed": 0}
    clients = [threading.Thread(target=keep_predicting, args=(port, body, stop, counts))
               for _ in range(2)]
    for client in clients:
        client.start()
    rss = {}
    try:
        for version in range(1, SWAPS + 1):
            staged = base.parent / f"staging-{version + 1}"
            shutil.copytree(base / str(version), staged)
            os.rename(staged, base / str(version + 1))
            assert wait_for(lambda: states(port).get(version + 1) == "AVAILABLE", seconds=60)
            shutil.rmtree(base / str(version))
            assert wait_for(lambda: states(port).get(version) == "END", seconds=60)
            if version in (BASELINE_SWAP, SWAPS):
                time.sleep(0.5)  # a poll or two after the last unload
                rss[version] = rss_mb(process.pid)
    finally:
        stop.set()
        for client in clients:
            client.join()
    print(f"RSS MB at swaps {sorted(rss)}: {[round(rss[k]) for k in sorted(rss)]}; requests {counts}")
    assert counts["failed"] == 0 and counts["ok"] > SWAPS  # no request saw a gap
    assert states(port)[SWAPS + 1] == "AVAILABLE"
    growth = rss[SWAPS] - rss[BASELINE_SWAP]
    assert growth < MAX_GROWTH_MB, f"RSS grew {growth:.0f} MB from swap 5 to swap 40: {rss}"
