"""The shared output lock (common/output_lock.py): a holder named in one line, a lock free
again once its holder is killed (kill -9), a lock file that may be deleted on release
without two holders at once, the gs:// lock object on the suite's GCS emulator, and the
query command.

    .venv/bin/python -m pytest tests/common/test_output_lock.py
"""
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from common import output_lock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDER = f"pid {os.getpid()} on {socket.gethostname()} since "
LOCK = output_lock.OutputLock("things.lock", "thing run", "--out")
REMOVED = output_lock.OutputLock("things.lock", "thing run", "--out", is_removed_when_released=True)


def query(directory, name="things.lock"):
    return subprocess.run([sys.executable, "-m", "common.output_lock", str(directory), name],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


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


def test_a_killed_holder_does_not_block_the_next_run(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom common import output_lock\n"
         "with output_lock.OutputLock('things.lock', 'thing run', '--out').hold(sys.argv[1]):\n"
         "    print('held', flush=True); time.sleep(300)\n", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
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


def run_command(module, *argv):
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("below", [False, True], ids=["the_folder", "a_parent"])
def test_a_file_where_the_output_folder_belongs_is_one_line(tmp_path, make_jpeg, below):
    """Each command that takes this lock, run for real: it was a FileExistsError traceback."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    folder = a_file / "sub" if below else a_file
    (tmp_path / "a.jpg").write_bytes(make_jpeg())
    (tmp_path / "all.csv").write_text(f"{tmp_path / 'a.jpg'},cat\n")
    runs = {"--output_dir": run_command("preprocess.jpeg_to_tfrecord", "--input_csv",
                                        tmp_path / "all.csv", "--output_dir", folder),
            "--output": run_command("serving.batch_predict", "--input_csv", tmp_path / "all.csv",
                                    "--model_dir", tmp_path / "model", "--output", folder / "p")}
    for flag, result in runs.items():
        place = folder if flag == "--output_dir" else folder / "p"
        assert (result.returncode, result.stderr.strip().splitlines()) == (2, [
            f"error: {flag} {place}: {folder} is a file (or lies below one), not a folder: "
            "pass a new or existing folder"]), result.stderr[-2000:]
    assert a_file.read_text() == "not a folder\n"
    assert sorted(os.listdir(tmp_path)) == ["a.jpg", "all.csv", "notes.txt"]
