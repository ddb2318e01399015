"""The trainer refuses, in one line and before writing anything, what would silently give a
wrong model: another dataset or network on an existing run, a second trainer on one output
directory, data that does not match its metadata.json. A resume that changes how the run
learns (the table's on_resume="record") goes on, says each change and records it.

The refusals are UserErrors, checked here in this process (the command prints one such line
and exits 2: tests/trainer/test_run_state.py checks that through the real command); a second
trainer racing the first is two real commands.

    .venv/bin/python -m pytest tests/trainer/test_run_guard.py
"""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import tensorflow as tf

from common.user_errors import UserError
from tests import user_commands
from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer import chain, task
from trainer.run import checkpoints, eval_records, params_file
from trainer.settings import table


def data_argv(data, out):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                        eval_data_path=f"{data}/eval-*", output_dir=out))


@pytest.fixture(scope="module")
def clean_data(tmp_path_factory):
    """24 train and 11 eval records (3 classes, 2 shards a split); read only."""
    return write_dataset(tmp_path_factory.mktemp("guard") / "data", {"train": 24, "eval": 11}, size=20)


@pytest.fixture
def own_data(clean_data, tmp_path):
    """This test's copy of clean_data, to damage."""
    return shutil.copytree(clean_data, tmp_path / "data")


def run_in_process(argv):
    """`python -m trainer.task ARGV` in this process: the chain, then the engine (a UserError is
    raised here where the command prints it as one line and exits 2)."""
    params = chain.parse_params(argv)
    return task.load_engine(params["engine"])(params)


def refusal(argv):
    """str() of the UserError the trainer refuses argv with: the command's one line after "error: "."""
    with pytest.raises(UserError) as refused:
        run_in_process(argv)
    assert "\n" not in str(refused.value)
    return str(refused.value)


@pytest.mark.trains
def test_resuming_with_another_class_count_is_refused(copy_of_tiny_run, tmp_path):
    _, out = copy_of_tiny_run()
    params_before = (out / table.PARAMS_FILE).read_bytes()
    four = write_dataset(tmp_path / "four", {"train": 24, "eval": 11}, labels=("cat", "dog", "fish", "owl"),
                         size=20, shards=2)
    line = refusal(data_argv(four, out))
    assert "holds checkpoints of a run built with other settings" in line
    assert "labels +['owl'] -[]" in line and "num_classes 3 -> 4" in line
    assert (out / table.PARAMS_FILE).read_bytes() == params_before  # not rewritten


@pytest.mark.trains
def test_changing_the_network_is_refused_but_steps_may_change(copy_of_tiny_run):
    data, out = copy_of_tiny_run()
    argv = data_argv(data, out)
    params_before = (out / table.PARAMS_FILE).read_bytes()
    line = refusal(argv + ["--cnn_filters=8,16", "--image_size=24"])
    assert "image_size 16 -> 24" in line and "cnn_filters [4, 8] -> [8, 16]" in line
    assert (out / table.PARAMS_FILE).read_bytes() == params_before
    assert chain.parse_params(argv + ["--train_steps=6", "--steps_per_eval=3"])["train_steps"] == 6


@pytest.mark.trains
def test_a_resume_with_other_recipe_settings_says_each_in_one_line_and_records_them(copy_of_tiny_run, capsys):
    """Issue 46 point 10: the command names every change (the eval loss's loudly: weight_decay's
    L2 term is in it) and params.json keeps which settings applied from which step. The finished
    run's rerun trains nothing, so the command takes a second, not the 10 of two more steps."""
    data, out = copy_of_tiny_run()
    capsys.readouterr()
    task.main(data_argv(data, out) + ["--weight_decay=0", "--augment=randaugment"])
    said = [line for line in capsys.readouterr().err.splitlines() if "with other settings" in line]
    assert said == [
        f"WARNING: output_dir='{out}' goes on from step 4 with other settings (recorded in params.json's "
        f"recipe_changes): augment 'none' -> 'randaugment', weight_decay 0.0001 -> 0.0; the eval loss "
        f"is made with weight_decay, so eval losses before and after step 4 do not compare "
        f"(cross_entropy's do)"]
    saved = json.loads((out / table.PARAMS_FILE).read_text())
    first = {"step": 4, "changed": {"augment": ["none", "randaugment"], "weight_decay": [0.0001, 0.0]}}
    assert saved["recipe_changes"] == [first] and saved["weight_decay"] == 0.0
    # The next command reads the settings back (the history is no setting) and adds its own entry.
    params = chain.parse_params(data_argv(data, out) + ["--gradient_clip_norm=1", "--train_steps=6"])
    assert (params["weight_decay"], params["augment"]) == (0.0, "randaugment")
    history = params_file.record_recipe_changes(params, checkpoints.checked_state(str(out), repair=False))
    assert history == [first, {"step": 4, "changed": {"train_steps": [4, 6], "gradient_clip_norm": [0.0, 1.0]}}]


@pytest.mark.trains
def test_a_resume_changing_the_eval_loss_is_refused_while_early_stopping_compares_losses(copy_of_tiny_run):
    data, out = copy_of_tiny_run()
    argv = data_argv(data, out) + ["--label_smoothing=0.1"]
    params_before = (out / table.PARAMS_FILE).read_bytes()
    assert refusal(argv + ["--early_stopping_metric=loss"]) == (
        f"label_smoothing 0.0 -> 0.1 changes what the eval loss measures from the checkpoints of "
        f"output_dir='{out}' on, and early_stopping_metric='loss' would compare eval losses across them "
        f"to pick the best export and stop early: pass --early_stopping_metric cross_entropy (the loss "
        f"without label smoothing or weight decay) or accuracy, or keep label_smoothing=0.0")
    assert (out / table.PARAMS_FILE).read_bytes() == params_before
    assert chain.parse_params(argv + ["--early_stopping_metric=cross_entropy"])["label_smoothing"] == 0.1


@pytest.mark.process
@pytest.mark.trains
def test_a_resume_with_other_settings_says_so_from_the_command_and_its_refusal_is_exit_code_2(
        copy_of_tiny_run):
    """The real command: the refusal is one line and exit 2, nothing written, before TensorFlow
    loads (trainer/settings/early_check.py: here it could not load it); the same resume with a
    comparable metric trains on, its recipe line on stderr, its change in params.json."""
    data, out = copy_of_tiny_run()
    argv = [*data_argv(data, out), "--label_smoothing=0.1"]
    params_before = (out / table.PARAMS_FILE).read_bytes()
    refused = user_commands.run_trainer(*argv, "--early_stopping_metric=loss",
                                        env=user_commands.user_env(without_tensorflow=True))
    assert refused.returncode == 2 and len(user_commands.error_lines(refused)) == 1, refused.stderr
    assert user_commands.error_lines(refused)[0].startswith("error: label_smoothing 0.0 -> 0.1 changes")
    assert (out / table.PARAMS_FILE).read_bytes() == params_before
    resumed = user_commands.run_trainer(*argv, "--early_stopping_metric=cross_entropy", "--train_steps=6")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "label_smoothing 0.0 -> 0.1" in resumed.stderr
    history = json.loads((out / table.PARAMS_FILE).read_text())["recipe_changes"]
    assert history[-1]["changed"]["label_smoothing"] == [0.0, 0.1]


def wait_for_lock_holder(out, process, seconds=240):
    path = out / "trainer.lock"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists() and path.read_text().startswith("pid"):
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"the first trainer took no lock (exit code {process.poll()})")


@pytest.mark.process
@pytest.mark.trains
def test_one_trainer_per_output_dir_and_a_killed_one_does_not_block(clean_data, tmp_path):
    """Two real commands race for one output_dir; after kill -9 of the first, a run here (in this
    process) takes the directory: the kernel released the killed one's flock."""
    out = tmp_path / "out"
    argv = data_argv(clean_data, out)
    first = user_commands.start_trainer(*argv, "--train_steps=1000000", "--steps_per_eval=1000000",
                                        "--save_checkpoints_steps=1000000", stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
    try:
        holder = wait_for_lock_holder(out, first)
        # Stopped, it still holds the lock (a live process's flock) but no longer takes the CPU
        # the second command needs to start.
        first.send_signal(signal.SIGSTOP)
        second = user_commands.run_trainer(*argv)
        assert second.returncode == 2, second.stderr[-3000:]
        lines = user_commands.error_lines(second)
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"error: output_dir='{out}' is in use by another trainer")
        assert f"pid {first.pid} on " in lines[0] and holder in lines[0]
        assert not (out / eval_records.RESULTS_FILE).exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    run_in_process(argv)
    assert (out / eval_records.RESULTS_FILE).read_text().count("\n") == 2  # steps 2 and 4, once each


def rewrite_records(path, keep):
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records[:keep]:
            writer.write(record)


def test_an_eval_split_shorter_than_its_metadata_fails_before_training(own_data, tmp_path):
    rewrite_records(own_data / "eval-00001-of-00002.tfrecord", keep=4)  # 5 -> 4 records
    assert (f"eval_data_path='{own_data}/eval-*' holds 10 records, but metadata.json beside "
            f"it counts 11") in refusal(data_argv(own_data, tmp_path / "out"))
    assert not (tmp_path / "out" / table.PARAMS_FILE).exists()


# A truncated training shard is named when training reads it (trains); an eval shard when the
# check before the run counts the eval split.
@pytest.mark.parametrize("split", [pytest.param("train", marks=pytest.mark.trains), "eval"])
def test_a_truncated_shard_is_named(own_data, tmp_path, split):
    shard = own_data / f"{split}-00000-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-100])
    assert refusal(data_argv(own_data, tmp_path / "out")).startswith(f"{shard}: truncated or corrupt TFRecord")


@pytest.mark.trains
def test_label_ids_beyond_labels_txt_name_both_files(clean_data, tmp_path):
    two = write_dataset(tmp_path / "two", {"train": 24, "eval": 11}, labels=("cat", "dog"))
    for shard in clean_data.glob("*.tfrecord"):  # ids 0..2 beside a labels.txt of two labels
        shutil.copy(shard, two / shard.name)
    assert (f"a record of {two}/train-* has a label id outside [0, 2), the ids of "
            f"{two}/labels.txt") in refusal(data_argv(two, tmp_path / "out"))


def test_tpu_without_credentials_is_one_line_within_seconds(clean_data, tmp_path, monkeypatch):
    """No Application Default Credentials: the TPU lookup fails at start, not in training."""
    for key in [k for k in os.environ if k.startswith(("GOOGLE_", "CLOUDSDK_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    start = time.monotonic()
    line = refusal(data_argv(clean_data, tmp_path / "out") + [
        "--use_tpu", "--tpu=my-tpu", "--tpu_zone=us-central1-b", "--gcp_project=p"])
    assert line.startswith("use_tpu: no Google Cloud credentials to look up --tpu='my-tpu': run "
                           "`gcloud auth application-default login`")
    assert time.monotonic() - start < 60
    assert not (tmp_path / "out" / table.PARAMS_FILE).exists()


@pytest.mark.parametrize("key", ["output_dir", "predict_output_dir"])
def test_a_file_where_a_directory_belongs_is_one_line(clean_data, tmp_path, key):
    """It was a FileExistsError traceback from taking the lock (output_dir)."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    argv = data_argv(clean_data, a_file if key == "output_dir" else tmp_path / "out")
    if key == "predict_output_dir":
        argv += ["--mode=predict", f"--predict_input={clean_data}/eval-*", f"--predict_output_dir={a_file}"]
    assert refusal(argv) == f"{key}={str(a_file)!r} is a file, not a directory: pass a new or existing directory"
    assert a_file.read_text() == "not a directory\n"
    assert not (tmp_path / "out").exists()
