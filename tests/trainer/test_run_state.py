"""A trainer trusts no state it has not checked (trainer/run/checkpoints.py), through the real command.

One tiny run is trained once (4 steps, checkpoints at 0, 2 and 4, an eval record and
a best export at 2 and 4); each test copies it, damages it as users' tools do (a lost
`checkpoint` file, a truncated .index or .data file, checkpoints deleted, the
directory moved) and runs `python -m trainer.task` on the copy.

    .venv/bin/python -m pytest tests/trainer/test_run_state.py
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.run import checkpoints, eval_records

TRAIN_STEPS = 4


def run_trainer(*argv):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS")}
    return subprocess.run([sys.executable, "-m", "trainer.task", *map(str, argv)],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(dataset dir, run dir) of a finished 4-step run."""
    base = tmp_path_factory.mktemp("trained")
    data = write_dataset(base / "data", {"train": 24, "eval": 11}, size=20)
    out = base / "run"
    result = run_trainer(*argv_for(data, out))
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out


def argv_for(data, out, **overrides):
    return as_argv({**TINY_FLAGS, "train_data_path": f"{data}/train-*",
                    "eval_data_path": f"{data}/eval-*", "output_dir": out, **overrides})


@pytest.fixture
def run_copy(trained, tmp_path):
    """A copy of the trained run in tmp_path/run, and its dataset."""
    data, out = trained
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    return data, copy


def snapshot(out):
    """{relative path: (size, mtime)} of every file: what a refused run must leave as it was."""
    return {str(p.relative_to(out)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_lost_state_file_resumes_from_the_newest_checkpoint_and_says_so(run_copy):
    data, out = run_copy
    (out / checkpoints.STATE_FILE).unlink()
    result = run_trainer(*argv_for(data, out, train_steps=6))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"{out}/checkpoint is missing: resuming from model.ckpt-4 (step 4), the newest checkpoint "
            f"here, checked to restore") in result.stderr
    assert result.stderr.count("resuming from") == 1  # said once, not by each check
    assert checkpoints.latest_checkpoint(str(out))[1] == 6
    steps = [r["global_step"] for r in eval_records.read_eval_results(str(out))]
    assert steps == [2, 4, 6]  # one history: no second training from step 0


@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
@pytest.mark.parametrize("mode", ["train_and_eval", "evaluate", "export", "continuous_eval", "predict"])
def test_a_damaged_checkpoint_is_named_and_nothing_is_written(run_copy, suffix, mode, tmp_path):
    data, out = run_copy
    damaged = out / f"model.ckpt-4{suffix}"
    damaged.write_bytes(damaged.read_bytes()[:len(damaged.read_bytes()) // 2])
    before = snapshot(out)
    extra = {"predict_input": f"{data}/eval-*", "predict_output_dir": tmp_path / "preds"} if mode == "predict" else {}
    result = run_trainer(*argv_for(data, out, mode=mode, **extra))
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: checkpoint {out}/model.ckpt-4 (step 4) is damaged: ")
    assert lines[0].endswith(f"move {out}/model.ckpt-4.* out of the directory to resume from "
                             f"model.ckpt-2 (step 2), or restore the files from a copy")
    assert snapshot(out) == before
    assert not (tmp_path / "preds").exists()


def test_a_run_without_its_checkpoints_refuses_to_start_over(run_copy):
    data, out = run_copy
    for path in out.glob("model.ckpt-*"):
        path.unlink()
    (out / checkpoints.STATE_FILE).unlink()
    before = snapshot(out)
    result = run_trainer(*argv_for(data, out))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == (
        f"error: output_dir={str(out)!r} holds eval records (eval_results.jsonl); exports (export/); "
        f"exports (best_export/) of an earlier run but no checkpoint: training would start again "
        f"from step 0 beside them. Copy the model.ckpt-* files back, or use a new --output_dir")
    assert snapshot(out) == before


def test_a_state_naming_deleted_files_falls_back_to_the_newest_intact_one(run_copy):
    data, out = run_copy
    for path in out.glob("model.ckpt-4.*"):
        path.unlink()
    result = run_trainer(*argv_for(data, out, mode="export"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{out}/checkpoint names model.ckpt-4, whose files are gone: resuming from model.ckpt-2" in result.stderr
    assert (out / "export" / "image_classifier" / "2" / "saved_model.pb").exists()
    assert 'model_checkpoint_path: "model.ckpt-2"' in (out / checkpoints.STATE_FILE).read_text()
    # The lost checkpoint's version 4 stays the one TF Serving serves: said in one line.
    base = out / "export" / "image_classifier"
    assert (f"{base}/4 stays the highest version, exported from model.ckpt-4, which {out} no longer "
            f"holds, so TF Serving keeps serving it, not this run's version 2: move {base}/4 out of "
            f"{base} to serve 2") in result.stderr.splitlines()


@pytest.mark.parametrize("mode", ["train_and_eval", "export"])
def test_a_lost_index_of_the_newest_checkpoint_is_refused_as_lost_data_is(run_copy, mode):
    """Its .data is here and the state names it: never a quiet fallback to model.ckpt-2."""
    data, out = run_copy
    (out / "model.ckpt-4.index").unlink()
    before = snapshot(out)
    result = run_trainer(*argv_for(data, out, mode=mode, train_steps=6))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: checkpoint {out}/model.ckpt-4 (step 4) is damaged: model.ckpt-4.index is missing (its "
        f"data is here); move {out}/model.ckpt-4.* out of the directory to resume from model.ckpt-2 "
        f"(step 2), or restore the files from a copy"]
    assert snapshot(out) == before


def test_a_save_killed_before_its_index_resumes_from_the_checkpoint_the_state_names(run_copy):
    """TensorFlow moves a save's .data into place, then writes its .index, then the state: killed
    between the two, the state still names the last whole checkpoint, which is the run's."""
    _, out = run_copy
    checkpoints.write_state(str(out), checkpoints.list_checkpoints(str(out)), 2)
    (out / "model.ckpt-4.index").unlink()
    assert checkpoints.check_run_state(str(out), repair=False) == (f"{out}/model.ckpt-2", 2)


def test_a_save_killed_midway_leaves_no_temp_directory_behind(run_copy):
    """model.ckpt-<step>_temp/ (where a save writes its shards before moving them into place) is
    removed under the run's lock and said at -v; nothing else that looks like it is touched."""
    data, out = run_copy
    leftover = out / "model.ckpt-6_temp"
    leftover.mkdir()
    for path in out.glob("model.ckpt-4.*"):  # a save's shards, as the kill left them
        (leftover / path.name.replace("model.ckpt-4", "part-00000-of-00001")).write_bytes(path.read_bytes())
    (out / "notes_temp").mkdir()
    (out / "model.ckpt-8_temp").write_text("a file, not a save's directory")
    result = run_trainer(*argv_for(data, out, mode="export"), "-v")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Removed {leftover}, left by a checkpoint save that was killed midway" in result.stderr
    assert not leftover.exists()
    assert (out / "notes_temp").is_dir() and (out / "model.ckpt-8_temp").is_file()


def test_a_job_beside_the_trainer_leaves_a_save_s_temp_directory_alone(run_copy):
    """Without the lock (continuous_eval, predict) a _temp directory may be the trainer's live save."""
    _, out = run_copy
    (out / "model.ckpt-6_temp").mkdir()
    assert checkpoints.check_run_state(str(out), repair=False)[1] == 4
    assert (out / "model.ckpt-6_temp").is_dir()


def test_a_moved_run_resumes_and_reports_where_it_is_now(run_copy, tmp_path):
    data, out = run_copy
    # Records written by an older version held absolute paths of the old place.
    records = eval_records.read_eval_results(str(out))
    for record in records:
        if "best_export" in record:
            record["best_export"] = f"/old/place/run/best_export/image_classifier/{record['global_step']}"
    (out / eval_records.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    moved = tmp_path / "moved"
    out.rename(moved)
    result = run_trainer(*argv_for(data, moved, train_steps=6, early_stopping_patience=1))
    assert result.returncode == 0, result.stderr[-3000:]
    best_line = next(line for line in result.stdout.splitlines() if line.startswith("best export: "))
    assert best_line.startswith(f"best export: {moved}/best_export/image_classifier/")
    assert os.path.isdir(best_line.split(": ", 1)[1])
    assert "best eval (by accuracy)" in result.stdout
    for record in eval_records.read_eval_results(str(moved)):
        assert not record.get("best_export", "").startswith(str(moved))  # recorded relative


def test_the_closing_best_eval_is_picked_by_the_early_stopping_metric(tmp_path):
    from trainer.report import summary
    from trainer.settings import table
    for record in ({"global_step": 2, "accuracy": 0.9, "loss": 0.5, "best_export": "best_export/m/2"},
                   {"global_step": 4, "accuracy": 0.8, "loss": 0.3}):
        eval_records.append_eval_result(str(tmp_path), record)
    params = dict(table.DEFAULTS, output_dir=str(tmp_path), mode="evaluate")
    by_loss = summary.summarize_run(dict(params, early_stopping_metric="loss"), None).splitlines()
    by_accuracy = summary.summarize_run(params, None).splitlines()
    assert by_loss[1] == "best eval (by loss): step 4: accuracy 0.8000, loss 0.3000"
    assert by_accuracy[1:3] == ["best eval (by accuracy): step 2: accuracy 0.9000, loss 0.5000",
                                f"best export: {tmp_path}/best_export/m/2"]


@pytest.mark.parametrize("recorded, expected", [
    ("best_export/m/4", "gs://b/run2/best_export/m/4"),
    ("gs://b/run/best_export/m/4", "gs://b/run2/best_export/m/4"),
    ("/home/u/run/export/m/4", "gs://b/run2/export/m/4"),
])
def test_recorded_paths_follow_the_run_to_gs(recorded, expected):
    assert eval_records.path_in_run("gs://b/run2", recorded) == expected
    assert eval_records.relative_to_run("gs://b/run2", "gs://b/run2/best_export/m/4") == "best_export/m/4"


def test_train_mode_refuses_early_stopping_settings(trained, tmp_path):
    data, _ = trained
    result = run_trainer(*argv_for(data, tmp_path / "out", mode="train", early_stopping_patience=3))
    assert result.returncode == 2
    assert "early_stopping_patience=3 (flag --early_stopping_patience) needs evaluations, and " \
           "mode='train' (flag --mode) does not evaluate" in result.stderr
    assert not (tmp_path / "out").exists()


def test_evaluating_on_the_training_files_is_said_loudly(trained, tmp_path, caplog):
    data, _ = trained
    from trainer import chain
    params = chain.parse_params(argv_for(data, tmp_path / "out", eval_data_path=f"{data}/train-*"))
    assert params["num_eval_examples"] == 24
    assert f"eval_data_path='{data}/train-*' reads 2 of the training files" in caplog.text


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare for a small tmpfs")
def test_a_full_disk_is_one_line_and_the_same_command_resumes_after_freeing_space(trained, tmp_path):
    """A 1.2 MB tmpfs (in a private mount namespace) fills up during the first checkpoint save;
    after it grows, the same command trains to the end."""
    data, _ = trained
    mount, out = tmp_path / "disk", tmp_path / "disk" / "out"
    mount.mkdir()
    command = " ".join(f"'{arg}'" for arg in [sys.executable, "-m", "trainer.task", *argv_for(data, out)])
    script = (f"mount -t tmpfs -o size=1200k tmpfs {mount} || exit 99\n"
              f"{command} > {tmp_path}/first.out 2> {tmp_path}/first.err; echo $? > {tmp_path}/first.rc\n"
              f"mount -o remount,size=20m {mount}\n"
              f"{command} > {tmp_path}/second.out 2> {tmp_path}/second.err; echo $? > {tmp_path}/second.rc\n"
              f"ls {out} > {tmp_path}/files\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS")}
    namespace = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, timeout=600,
                               capture_output=True, text=True)
    if namespace.returncode == 99:
        pytest.skip(f"no tmpfs in a user namespace here: {namespace.stderr.strip()}")
    first_err = (tmp_path / "first.err").read_text().strip().splitlines()
    assert (tmp_path / "first.rc").read_text().strip() == "2", first_err[-20:]
    assert first_err == [f"error: no space left on device while writing to {out}: nothing written "
                         f"before is lost; free space there and run the same command again to resume "
                         f"from the last checkpoint"]
    assert (tmp_path / "second.rc").read_text().strip() == "0", (tmp_path / "second.err").read_text()[-3000:]
    assert "model.ckpt-4.index" in (tmp_path / "files").read_text().split()


def test_predict_with_a_lost_state_file_uses_the_newest_checkpoint_not_fresh_weights(run_copy, tmp_path):
    data, out = run_copy

    def predict(output):
        result = run_trainer(*argv_for(data, out, mode="predict", predict_input=f"{data}/eval-*",
                                       predict_output_dir=output))
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stderr, sorted(p.read_text() for p in output.glob("predictions-*.jsonl"))

    _, with_state = predict(tmp_path / "with_state")
    (out / checkpoints.STATE_FILE).unlink()
    stderr, without_state = predict(tmp_path / "without_state")
    assert "checkpoint is missing: resuming from model.ckpt-4 (step 4)" in stderr
    assert stderr.count("resuming from") == 1  # said once, not by each check
    assert without_state == with_state and with_state
