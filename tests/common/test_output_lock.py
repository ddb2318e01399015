"""The one lock module (common/output_lock.py): a holder named in one line, a lock free
again once its holder is killed (kill -9: at once locally, once its lease expired on gs://,
taken over with one line), a lock file that may be deleted on release without two holders
at once, the gs:// lease on the suite's GCS emulator, the query command, and no other
module taking a lock of its own.

    .venv/bin/python -m pytest tests/common/test_output_lock.py
"""
import ast
import importlib
import json
import logging
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from common import gcs_lease, output_lock
from tests import user_commands

ROOT = str(user_commands.REPO_ROOT)
HOLDER = f"pid {os.getpid()} on {socket.gethostname()} since "
LOCK = output_lock.OutputLock("things.lock", "thing run", "--out")
REMOVED = output_lock.OutputLock("things.lock", "thing run", "--out", is_removed_when_released=True)
# A process holding LOCK on the directory argv[1] until it is killed: prints "held" once it holds it.
HOLDING_PROCESS = ("import sys, time\nfrom common import output_lock\n"
                   "with output_lock.OutputLock('things.lock', 'thing run', '--out').hold(sys.argv[1]):\n"
                   "    print('held', flush=True); time.sleep(300)\n")


def query(directory, name="things.lock"):
    """`python -m common.output_lock DIRECTORY NAME`, finished."""
    return user_commands.run("common.output_lock", directory, name, timeout=120)


def start_python(code, *argv):
    """`python -c CODE ARGV` in the repository (a test's own second process), stdout a pipe."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], cwd=ROOT,
                            env=user_commands.user_env(), stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("lock", [LOCK, REMOVED], ids=["kept", "removed"])
def test_a_second_holder_is_refused_naming_the_first(lock, tmp_path):
    with lock.hold(str(tmp_path), "OUT"):
        assert (tmp_path / "things.lock").read_text().startswith(HOLDER)
        with pytest.raises(output_lock.OutputBusy) as busy:
            with lock.hold(str(tmp_path), "OUT"):
                pytest.fail("two holders")
    assert str(busy.value).startswith(f"--out OUT is in use by another thing run ({HOLDER}")
    assert str(busy.value).endswith("): wait for it to end, or use another --out")
    assert os.listdir(tmp_path) == ([] if lock.is_removed_when_released else ["things.lock"])
    with lock.hold(str(tmp_path)):  # released: free again
        pass


def test_a_lock_that_made_its_directory_removes_it_when_left_empty(tmp_path):
    with REMOVED.hold(str(tmp_path / "new")):
        assert os.listdir(tmp_path / "new") == ["things.lock"]
    assert os.listdir(tmp_path) == []
    with REMOVED.hold(str(tmp_path / "kept")):
        (tmp_path / "kept" / "output").write_text("done")
    assert os.listdir(tmp_path / "kept") == ["output"]


def test_a_lock_won_on_a_deleted_file_is_taken_again_on_the_new_one(tmp_path, monkeypatch):
    """A process that opened the lock file just before its holder deleted it and let go
    must not hold a lock on the deleted file while a third one locks the new file."""
    path = str(tmp_path / "things.lock")
    stale = os.open(path, os.O_RDWR | os.O_CREAT)  # this inode is gone from the directory ...
    os.unlink(path)
    opened = []
    real_open = os.open

    def open_stale_first(*args):
        opened.append(args[0])
        return os.dup(stale) if len(opened) == 1 else real_open(*args)

    monkeypatch.setattr(os, "open", open_stale_first)
    fd = output_lock.lock_file_descriptor(path, AssertionError)
    monkeypatch.undo()
    os.close(stale)
    assert len(opened) == 2 and os.fstat(fd).st_ino == os.stat(path).st_ino
    os.close(fd)


@pytest.mark.process
def test_a_killed_holder_does_not_block_the_next_run(tmp_path):
    holder = start_python(HOLDING_PROCESS, tmp_path)
    try:
        assert holder.stdout.readline() == "held\n"
        busy = query(tmp_path)
        assert busy.returncode == 0 and busy.stdout.startswith(
            f"directory {tmp_path} is in use by another run (pid {holder.pid} on ")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert query(tmp_path).stdout == f"{tmp_path}: free\n"
    with LOCK.hold(str(tmp_path)):  # the dead holder's file is still there, and free
        assert (tmp_path / "things.lock").read_text().startswith(HOLDER)


@pytest.mark.process
def test_the_query_command_makes_no_lock_file_and_no_directory(tmp_path):
    assert query(tmp_path).stdout == f"{tmp_path}: free\n"
    missing = query(tmp_path / "nowhere")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'nowhere'}: no such directory"
    assert os.listdir(tmp_path) == []


def test_another_scheme_is_a_warning_and_no_lock(caplog):
    with caplog.at_level(logging.WARNING):
        with LOCK.hold("hdfs://namenode/out"):
            with LOCK.hold("hdfs://namenode/out"):
                pass
    assert [r.getMessage() for r in caplog.records] == [
        "No lock on hdfs://namenode/out (neither local nor gs://): run one thing run at a time there"] * 2


@pytest.mark.process  # gcs_bucket: the emulator's server
def test_gcs_lock_refuses_a_second_holder_and_is_deleted_at_the_end(gcs_bucket):
    out = f"gs://{gcs_bucket.name}/out"
    started = time.time()
    with REMOVED.hold(out):
        assert gcs_bucket.blob("out/things.lock").exists()
        with pytest.raises(output_lock.OutputBusy) as busy:
            with REMOVED.hold(out):
                pytest.fail("two holders")
    assert str(busy.value).startswith(f"--out {out} is in use by another thing run ({HOLDER}")
    assert str(busy.value).endswith(
        f"wait for it to end, or use another --out; if that run is gone (killed), delete "
        f"{out}/things.lock")
    assert not gcs_bucket.blob("out/things.lock").exists()
    with REMOVED.hold(out):  # free again
        pass
    assert time.time() - started < 30


def a_file_where_the_folder_belongs(tmp_path, make_jpeg, below):
    """(the folder the commands are given, {flag: (module, argv)} of each command that takes
    this lock, into it): the folder is a file, or lies below one."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    folder = a_file / "sub" if below else a_file
    (tmp_path / "a.jpg").write_bytes(make_jpeg())
    (tmp_path / "all.csv").write_text(f"{tmp_path / 'a.jpg'},cat\n")
    return folder, {
        "--output_dir": ("preprocess.jpeg_to_tfrecord",
                         ["--input_csv", tmp_path / "all.csv", "--output_dir", folder]),
        "--output": ("serving.batch_predict", ["--input_csv", tmp_path / "all.csv", "--model_dir",
                                               tmp_path / "model", "--output", folder / "p"])}


def not_a_folder(flag, folder):
    place = folder if flag == "--output_dir" else folder / "p"
    return (f"{flag} {place}: {folder} is a file (or lies below one), not a folder: pass a new "
            "or existing folder")


@pytest.mark.parametrize("below", [False, True], ids=["the_folder", "a_parent"])
def test_a_file_where_the_output_folder_belongs_is_refused(tmp_path, make_jpeg, below):
    """Each command that takes this lock, in this process: it was a FileExistsError."""
    folder, commands = a_file_where_the_folder_belongs(tmp_path, make_jpeg, below)
    for flag, (module, argv) in commands.items():
        with pytest.raises(output_lock.NotAFolder) as refused:
            importlib.import_module(module).run([str(arg) for arg in argv])
        assert str(refused.value) == not_a_folder(flag, folder)
    assert (tmp_path / "notes.txt").read_text() == "not a folder\n"
    assert sorted(os.listdir(tmp_path)) == ["a.jpg", "all.csv", "notes.txt"]


@pytest.mark.process
def test_a_file_where_the_output_folder_belongs_is_one_line(tmp_path, make_jpeg):
    """The real command: it was a FileExistsError traceback. (Preprocessing's: it refuses before
    TensorFlow loads; batch_predict's one-line refusals are tests/serving's.)"""
    folder, commands = a_file_where_the_folder_belongs(tmp_path, make_jpeg, below=True)
    module, argv = commands["--output_dir"]
    result = user_commands.run(module, *argv, timeout=300)
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2, [f"error: {not_a_folder('--output_dir', folder)}"]), result.stderr[-2000:]
    assert (tmp_path / "notes.txt").read_text() == "not a folder\n"
    assert sorted(os.listdir(tmp_path)) == ["a.jpg", "all.csv", "notes.txt"]


# A process holding a lock through this module, with a short lease (the default is 90 s).
SHORT_LEASE_HOLDER = """
import sys, time
from common import gcs_lease, output_lock
gcs_lease.LEASE_SECONDS = float(sys.argv[2])
with output_lock.OutputLock("things.lock", "thing run", "--out").hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(300)
"""
SHORT_LEASE_SECONDS = 4.0  # renewed every 1.3 s: long enough for a loaded 2-core machine


@pytest.mark.process
def test_a_killed_gcs_holder_blocks_the_next_run_until_its_lease_expires(gcs_bucket):
    """As locally (test_a_killed_holder_does_not_block_the_next_run), a run killed with
    kill -9 blocks no one for long on gs://: the next run is refused while the dead run's
    lease is fresh, then the real command takes it over, saying so in one line."""
    out = f"gs://{gcs_bucket.name}/out"
    holder = start_python(SHORT_LEASE_HOLDER, out, SHORT_LEASE_SECONDS)
    try:
        assert holder.stdout.readline() == "held\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    killed = f"pid {holder.pid} on {socket.gethostname()} since "
    with pytest.raises(output_lock.OutputBusy) as busy:  # its lease is fresh: refused at once
        with LOCK.hold(out):
            pytest.fail("took over a live lease")
    assert str(busy.value).startswith(f"--out {out} is in use by another thing run ({killed}")
    assert ", lease until " in str(busy.value)
    expires = json.loads(gcs_bucket.blob("out/things.lock").download_as_bytes())["expires"]
    assert expires - time.time() <= SHORT_LEASE_SECONDS
    time.sleep(max(0.0, expires - time.time()) + 0.5)
    result = query(out)
    assert (result.returncode, result.stdout) == (0, f"{out}: free\n"), result.stderr[-2000:]
    took_over = [line for line in result.stderr.splitlines() if line.startswith("took over")]
    assert len(took_over) == 1 and re.fullmatch(
        rf"took over the lock on {re.escape(out)}/things\.lock left by {re.escape(killed)}\S+ "
        rf"\(lease expired \d+ s ago\)", took_over[0]), result.stderr[-2000:]
    assert list(gcs_bucket.list_blobs()) == []  # the query released it


@pytest.mark.process
def test_a_killed_holder_of_a_waiting_lock_releases_its_waiter(tmp_path):
    """The evaluation records' lock waits (wait=True) instead of refusing: a waiter blocked
    by a holder that is then killed (kill -9) gets the lock from the kernel."""
    holder = start_python(HOLDING_PROCESS, tmp_path)
    got = []
    try:
        assert holder.stdout.readline() == "held\n"

        def wait_for_it():
            with LOCK.hold(str(tmp_path), wait=True):
                got.append((tmp_path / "things.lock").read_text())

        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        waiter.join(1.0)
        assert got == []  # still waiting: the holder lives
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    waiter.join(20)
    assert len(got) == 1 and got[0].startswith(HOLDER)


@pytest.mark.process  # gcs_bucket: the emulator's server
def test_an_older_lock_object_without_an_expiry_lapses_a_lease_after_it_was_written(gcs_bucket):
    """A lock object written by an earlier version ({"holder": ...}, never renewed)."""
    blob = gcs_bucket.blob("out/things.lock")
    blob.upload_from_string(json.dumps({"holder": "pid 7 on old-version"}))
    seen = gcs_lease.read_lease(gcs_lease.make_blob(f"gs://{gcs_bucket.name}/out/things.lock"))
    assert seen.holder == "pid 7 on old-version"
    assert abs(seen.expires - (gcs_bucket.get_blob("out/things.lock").updated.timestamp()
                               + gcs_lease.LEASE_SECONDS)) < 1


def lock_calls(path):
    """The lock primitives a module calls or imports itself: flock, and the gs:// lease."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("flock", "lockf", "hold_lease"):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "common":
            found |= {alias.name for alias in node.names if alias.name == "gcs_lease"}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name == "fcntl"}
    return found


def test_every_lock_of_every_stage_is_taken_through_this_module():
    root = pathlib.Path(ROOT)
    takers = {str(path.relative_to(root)): lock_calls(path)
              for package in ("common", "preprocess", "trainer", "serving")
              for path in sorted((root / package).rglob("*.py"))}
    assert {path: calls for path, calls in takers.items() if calls} == {
        "common/output_lock.py": {"flock", "fcntl", "gcs_lease", "hold_lease"}}
