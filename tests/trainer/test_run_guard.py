"""The trainer command refuses, in one line with exit code 2 and before writing anything,
what would silently give a wrong model: another dataset or network on an existing run, a
second trainer on one output directory, data that does not match its metadata.json.

    .venv/bin/python -m pytest tests/trainer/test_run_guard.py
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.settings import table
from trainer.run import eval_records
from trainer import chain
from trainer.estimator import loop


def run_task(*argv, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "trainer.task", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def error_line(result):
    """The last stderr line, after checking it is the only report (no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def data_argv(data, out):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                        eval_data_path=f"{data}/eval-*", output_dir=out))


@pytest.fixture
def finished_run(tiny_dataset, tmp_path):
    """(argv, output_dir) of a tiny run trained to its end, in this process."""
    argv = data_argv(tiny_dataset, tmp_path / "out")
    loop.run(chain.parse_params(argv))
    return argv, tmp_path / "out"


def test_resuming_with_another_class_count_is_refused(finished_run, write_tfrecord_dataset):
    argv, out = finished_run
    params_before = (out / table.PARAMS_FILE).read_bytes()
    four = write_tfrecord_dataset({"train": 24, "eval": 11}, labels=("cat", "dog", "fish", "owl"),
                                  size=20, shards=2, name="four")
    result = run_task(*data_argv(four, out))
    assert result.returncode == 2
    line = error_line(result)
    assert "holds checkpoints of a run built with other settings" in line
    assert "labels +['owl'] -[]" in line and "num_classes 3 -> 4" in line
    assert (out / table.PARAMS_FILE).read_bytes() == params_before  # not rewritten


def test_changing_the_network_is_refused_but_steps_may_change(finished_run):
    argv, out = finished_run
    params_before = (out / table.PARAMS_FILE).read_bytes()
    result = run_task(*argv, "--cnn_filters=8,16", "--image_size=24")
    assert result.returncode == 2
    line = error_line(result)
    assert "image_size 16 -> 24" in line and "cnn_filters [4, 8] -> [8, 16]" in line
    assert (out / table.PARAMS_FILE).read_bytes() == params_before
    assert chain.parse_params(argv + ["--train_steps=6", "--steps_per_eval=3"])["train_steps"] == 6


def wait_for_lock_holder(out, process, seconds=120):
    path = out / "trainer.lock"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists() and path.read_text().startswith("pid"):
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"the first trainer took no lock (exit code {process.poll()})")


def test_one_trainer_per_output_dir_and_a_killed_one_does_not_block(tiny_dataset, tmp_path):
    out = tmp_path / "out"
    argv = data_argv(tiny_dataset, out)
    first = subprocess.Popen([sys.executable, "-m", "trainer.task", *argv, "--train_steps=1000000",
                              "--steps_per_eval=1000000", "--save_checkpoints_steps=1000000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        holder = wait_for_lock_holder(out, first)
        second = run_task(*argv)
        assert second.returncode == 2
        line = error_line(second)
        assert line.startswith(f"error: output_dir='{out}' is in use by another trainer")
        assert f"pid {first.pid} on " in line and holder in line
        assert not (out / eval_records.RESULTS_FILE).exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = run_task(*argv)
    assert third.returncode == 0, third.stderr[-3000:]
    assert (out / eval_records.RESULTS_FILE).read_text().count("\n") == 2  # steps 2 and 4, once each


def rewrite_records(path, keep):
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records[:keep]:
            writer.write(record)


def test_an_eval_split_shorter_than_its_metadata_fails_before_training(tiny_dataset, tmp_path):
    rewrite_records(tiny_dataset / "eval-00001-of-00002.tfrecord", keep=4)  # 5 -> 4 records
    result = run_task(*data_argv(tiny_dataset, tmp_path / "out"))
    assert result.returncode == 2
    assert (f"eval_data_path='{tiny_dataset}/eval-*' holds 10 records, but metadata.json beside "
            f"it counts 11") in error_line(result)
    assert not (tmp_path / "out" / table.PARAMS_FILE).exists()


@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_truncated_shard_is_named(tiny_dataset, tmp_path, split):
    shard = tiny_dataset / f"{split}-00000-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-100])
    result = run_task(*data_argv(tiny_dataset, tmp_path / "out"))
    assert result.returncode == 2
    assert error_line(result).startswith(f"error: {shard}: truncated or corrupt TFRecord")


def test_label_ids_beyond_labels_txt_name_both_files(write_tfrecord_dataset, tmp_path):
    two = write_tfrecord_dataset({"train": 24, "eval": 11}, labels=("cat", "dog"), name="two")
    three = write_tfrecord_dataset({"train": 24, "eval": 11}, labels=("cat", "dog", "fish"),
                                   name="three")
    for shard in three.glob("*.tfrecord"):  # ids 0..2 beside a labels.txt of two labels
        shutil.copy(shard, two / shard.name)
    result = run_task(*data_argv(two, tmp_path / "out"))
    assert result.returncode == 2
    line = error_line(result)
    assert (f"a record of {two}/train-* has a label id outside [0, 2), the ids of "
            f"{two}/labels.txt") in line


def test_tpu_without_credentials_is_one_line_within_seconds(tiny_dataset, tmp_path):
    """No Application Default Credentials: the TPU lookup fails at start, not in training."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
               TF_CPP_MIN_LOG_LEVEL="3")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "trainer.task", *data_argv(tiny_dataset, tmp_path / "out"),
         "--use_tpu", "--tpu=my-tpu", "--tpu_zone=us-central1-b", "--gcp_project=p"],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2
    assert error_line(result).startswith(
        "error: use_tpu: no Google Cloud credentials to look up --tpu='my-tpu': run "
        "`gcloud auth application-default login`")
    assert time.monotonic() - start < 60
    assert not (tmp_path / "out" / table.PARAMS_FILE).exists()


@pytest.mark.parametrize("key", ["output_dir", "predict_output_dir"])
def test_a_file_where_a_directory_belongs_is_one_line(tiny_dataset, tmp_path, key):
    """It was a FileExistsError traceback from taking the lock (output_dir)."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    argv = data_argv(tiny_dataset, a_file if key == "output_dir" else tmp_path / "out")
    if key == "predict_output_dir":
        argv += ["--mode=predict", f"--predict_input={tiny_dataset}/eval-*",
                 f"--predict_output_dir={a_file}"]
    result = run_task(*argv)
    assert result.returncode == 2
    assert error_line(result) == (f"error: {key}={str(a_file)!r} is a file, not a directory: "
                                  "pass a new or existing directory")
    assert a_file.read_text() == "not a directory\n"
    assert not (tmp_path / "out").exists()
