"""One run per output directory, and a dataset published whole (preprocess/output_dir.py):
two real concurrent commands, a rerun over a finished dataset, a run that fails, leftovers
of a killed run, and the gs:// lock object on the GCS emulator. The pipeline runs in this
process except where two real commands race or the command's one-line refusal is the behaviour.

    .venv/bin/python -m pytest tests/preprocess/test_output_dir.py
"""
import json
import os
import time

import pytest

from preprocess import jpeg_to_tfrecord, output_dir, summary
from tests import user_commands
from tests.conftest import encode_image, pattern_image
from tests.preprocess.conftest import IN_PROCESS, read_split
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)


def write_csv(folder, labels, count, name="train.csv"):
    """count JPEGs in folder, labelled round-robin with labels; returns the CSV path."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        (folder / f"{i}.jpg").write_bytes(encode_image(pattern_image(24, 24, seed=i)))
        lines.append(f"{i}.jpg,{labels[i % len(labels)]}")
    (folder / name).write_text("\n".join(lines) + "\n")
    return folder / name


def preprocess_argv(csv_path, out, *extra):
    return ["--input_csv", str(csv_path), "--eval_fraction", "0", "--output_dir", str(out), *extra,
            *IN_PROCESS]


def command(csv_path, out, *extra):
    """The command line of `python -m preprocess.jpeg_to_tfrecord` into out (for Popen)."""
    return user_commands.command("preprocess.jpeg_to_tfrecord", *preprocess_argv(csv_path, out, *extra))


def dataset_files(out):
    return sorted(path.name for path in out.iterdir() if path.name != output_dir.LOCK_FILE)


def with_fifo(csv_path):
    """Adds a named pipe as one more image of the CSV: the run that reads it waits there until
    the test writes a JPEG into it, so it holds the output directory as long as the test needs."""
    fifo = csv_path.parent / "slow.jpg"
    os.mkfifo(fifo)
    with open(csv_path, "a") as f:
        f.write(f"slow.jpg,{csv_path.read_text().split(',')[1].split()[0]}\n")
    return fifo


def feed_fifo(fifo, deadline):
    """Writes a JPEG into the pipe once its reader has opened it."""
    while time.monotonic() < deadline:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it yet
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        os.write(fd, encode_image(pattern_image(24, 24, seed=99)))
        os.close(fd)
        return
    raise TimeoutError(f"nobody opened {fifo}")


@pytest.mark.process
def test_two_runs_started_0_3_s_apart_one_refused_at_once_the_other_published_whole(tmp_path):
    csvs = [write_csv(tmp_path / "a", ["cat", "dog"], 20), write_csv(tmp_path / "b", ["x", "y", "z"], 9)]
    fifos = [with_fifo(csv_path) for csv_path in csvs]
    out = tmp_path / "out"
    runs = []
    for csv_path in csvs:
        runs.append(user_commands.start("preprocess.jpeg_to_tfrecord", *preprocess_argv(csv_path, out)))
        time.sleep(0.3)
    deadline = time.monotonic() + 120
    while all(run.poll() is None for run in runs) and time.monotonic() < deadline:
        time.sleep(0.05)  # the refused one ends while the other waits on its pipe
    (loser,) = [i for i, run in enumerate(runs) if run.poll() is not None]
    winner = 1 - loser
    feed_fifo(fifos[winner], deadline)
    results = [run.communicate(timeout=300) for run in runs]
    assert runs[winner].returncode == 0, results[winner][1][-2000:]
    assert runs[loser].returncode == 2, results[loser][1][-2000:]
    last = results[loser][1].strip().splitlines()[-1]
    assert last.startswith(f"error: --output_dir {out} is in use by another preprocessing run "
                           f"(pid {runs[winner].pid} on ")
    assert "Traceback" not in results[loser][1]
    labels, count = [(["cat", "dog"], 21), (["x", "y", "z"], 10)][winner]
    meta = json.loads((out / "metadata.json").read_text())
    assert (meta["labels"], meta["splits"]["train"]["records"]) == (labels, count)
    assert len(read_split(out, "train")) == count
    assert (out / "labels.txt").read_text() == "".join(f"{label}\n" for label in labels)
    assert dataset_files(out) == ["errors-00000-of-00001.jsonl", "eval-00000-of-00001.tfrecord",
                                  "labels.txt", "metadata.json", "train-00000-of-00001.tfrecord"]


def run_in_process(csv_path, out, *extra):
    return jpeg_to_tfrecord.run(preprocess_argv(csv_path, out, *extra))


def test_a_rerun_replaces_an_earlier_dataset_whole(tmp_path):
    out = tmp_path / "out"
    run_in_process(write_csv(tmp_path / "a", ["cat", "dog"], 10), out, "--num_shards", "3")
    (out / "test-00000-of-00001.tfrecord").write_bytes(b"")  # an old split the new run lacks
    meta = run_in_process(write_csv(tmp_path / "b", ["x", "y", "z"], 6), out)
    assert meta["labels"] == ["x", "y", "z"]
    assert json.loads((out / "metadata.json").read_text()) == meta
    assert (out / "labels.txt").read_text() == "x\ny\nz\n"
    assert dataset_files(out) == ["errors-00000-of-00001.jsonl", "eval-00000-of-00001.tfrecord",
                                  "labels.txt", "metadata.json", "train-00000-of-00001.tfrecord"]
    assert sorted(r["image/class/text"].decode() for r in read_split(out, "train")) == list("xxyyzz")


def test_a_failed_rerun_leaves_the_earlier_dataset_as_it_was(tmp_path):
    out = tmp_path / "out"
    run_in_process(write_csv(tmp_path / "a", ["cat", "dog"], 6), out)
    before = {name: (out / name).read_bytes() for name in dataset_files(out)}
    no_labels = tmp_path / "no_labels.csv"
    no_labels.write_text("".join(f"{tmp_path / 'a'}/{i}.jpg\n" for i in range(6)))
    with pytest.raises(summary.NoUsableRows) as refused:
        run_in_process(no_labels, out)
    last = f"error: {refused.value}"
    assert last.startswith("error: no row of no_labels.csv could be used, all 6 were rejected "
                           "(malformed_csv_line: 6): expected 'uri,label' lines")
    assert {name: (out / name).read_bytes() for name in dataset_files(out) if "_staging" not in name
            } == before
    (letters,) = out.glob("_staging-*/errors-00000-of-00001.jsonl")
    assert str(letters) in last and not list(out.glob("_staging-*/*.tfrecord"))


@pytest.mark.process
def test_a_first_run_with_no_usable_row_leaves_nothing_like_a_dataset(tmp_path):
    """The real command on a CSV with no label column: one line, exit 2, nothing published."""
    csv_path = tmp_path / "images.csv"
    (tmp_path / "a.jpg").write_bytes(encode_image(pattern_image(8, 8, seed=1)))
    csv_path.write_text("a.jpg\na.jpg\n")
    out = tmp_path / "out"
    result = user_commands.run("preprocess.jpeg_to_tfrecord", *preprocess_argv(csv_path, out),
                               timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert "no row of images.csv could be used" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert [p.name for p in out.rglob("*") if p.is_file() and p.suffix != ".jsonl"] == [
        output_dir.LOCK_FILE]


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    out = tmp_path / "out"
    for leftover in ("_staging-20240101-000000-abcdef/train-00000-of-00001.tfrecord",
                     "_staging-20240101-000000-abcdef/_temp-1/piece", "_temp-2/piece"):
        (out / leftover).parent.mkdir(parents=True, exist_ok=True)
        (out / leftover).write_bytes(b"half written")
    run_in_process(write_csv(tmp_path / "a", ["cat", "dog"], 4), out)
    assert dataset_files(out) == ["errors-00000-of-00001.jsonl", "eval-00000-of-00001.tfrecord",
                                  "labels.txt", "metadata.json", "train-00000-of-00001.tfrecord"]


def test_the_local_lock_names_its_holder_and_is_free_after_the_holder_ends(tmp_path):
    with output_dir.hold(str(tmp_path)):
        with pytest.raises(output_dir.OutputDirBusy, match=f"pid {os.getpid()} on "):
            with output_dir.hold(str(tmp_path)):
                pass
    with output_dir.hold(str(tmp_path)):  # released: free again
        pass


@pytest.mark.process  # bucket: the GCS emulator's server
def test_gcs_lock_refuses_a_second_run_and_is_deleted_at_the_end(bucket, tmp_path):  # noqa: F811
    out = f"gs://{bucket.name}/out"
    csv_path = write_csv(tmp_path / "a", ["cat", "dog"], 4)
    with output_dir.hold(out):
        assert bucket.blob(f"out/{output_dir.LOCK_FILE}").exists()
        with pytest.raises(output_dir.OutputDirBusy, match=(
                f"in use by another preprocessing run \\(pid {os.getpid()} on .*if that run is "
                f"gone \\(killed\\), delete gs://{bucket.name}/out/preprocess.lock")):
            run_in_process(csv_path, out)
    meta = run_in_process(csv_path, out)
    assert meta["splits"]["train"]["records"] == 4
    names = sorted(blob.name for blob in bucket.list_blobs(prefix="out/"))
    assert names == [f"out/{name}" for name in ("errors-00000-of-00001.jsonl",
                                                "eval-00000-of-00001.tfrecord", "labels.txt",
                                                "metadata.json", "train-00000-of-00001.tfrecord")]


def test_no_usable_row_names_the_inputs_and_the_fix():
    meta = {"rows_read": 3, "rejected": {"missing_file": 2, "malformed_csv_line": 1},
            "splits": {"train": {"records": 0}}}
    with pytest.raises(summary.NoUsableRows, match=(
            r"no row of a.csv, b.csv could be used, all 3 were rejected \(missing_file: 2, "
            r"malformed_csv_line: 1\): no listed file exists .*: OUT/errors.jsonl")):
        summary.check_some_rows_usable(meta, summary.describe_inputs(["x/a.csv", "b.csv"], ""),
                                       "OUT/errors.jsonl")


@pytest.mark.process
def test_the_lock_query_command_reads_flags_and_makes_no_directory(tmp_path):
    """python -m preprocess.output_dir: --help and a path that is not there create nothing. Each
    answers before Beam and TensorFlow load: here neither could load."""
    env = user_commands.user_env_without_beam()
    env["PYTHONPATH"] += os.pathsep + str(user_commands.REPO_ROOT)  # run from tmp_path

    def query(*argv):  # run in tmp_path: a folder it made would show there
        return user_commands.run("preprocess.output_dir", *argv, cwd=tmp_path, timeout=120, env=env)
    assert query("--help").returncode == 0
    missing = query(str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'nowhere'}: no such directory"
    assert sorted(os.listdir(tmp_path)) == []  # no "--help" or "nowhere" folder
    (tmp_path / "out").mkdir()
    assert query(str(tmp_path / "out")).stdout.strip() == f"{tmp_path / 'out'}: free"
