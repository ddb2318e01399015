"""A trainer trusts no state it has not checked (trainer/run/checkpoints.py).

The session's tiny run (tests/trainer/conftest.py's tiny_run_of: 4 steps, checkpoints at 0, 2
and 4, an eval record and a best export at 2 and 4) is copied per test, damaged as users' tools
do (a lost `checkpoint` file, a truncated .index or .data file, checkpoints deleted, the
directory moved) and run on again in this process, as `python -m trainer.task` runs it. The real
command runs where the behaviour is the process: a damaged checkpoint's one line and exit code 2,
a refusal before TensorFlow loads, a disk that fills up.

    .venv/bin/python -m pytest tests/trainer/test_run_state.py
"""
import json
import logging
import os
import re
import shlex
import shutil
import subprocess

import pytest

from common import console
from common.user_errors import UserError
from tests import user_commands
from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.run import checkpoints, eval_records


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A dataset like the tiny run's, for the tests that need no trained run (read only)."""
    return write_dataset(tmp_path_factory.mktemp("run_state") / "data", {"train": 24, "eval": 11}, size=20)


@pytest.fixture
def run_copy(copy_of_tiny_run):
    """(dataset dir, this test's copy of the finished tiny Estimator run)."""
    return copy_of_tiny_run("estimator")


def argv_for(data, out, **overrides):
    return as_argv({**TINY_FLAGS, "train_data_path": f"{data}/train-*",
                    "eval_data_path": f"{data}/eval-*", "output_dir": out, **overrides})


def run_in_process(argv):
    """(params, result) of `python -m trainer.task ARGV`, run in this process: the chain, then the
    engine (trainer.task.main without its console, so a UserError is raised, not printed)."""
    from trainer import chain, task
    params = chain.parse_params(argv)
    return params, task.load_engine(params["engine"])(params)


def refusal(argv):
    """The one line `python -m trainer.task ARGV` prints for its refusal (console.exit_with_error
    prints "error: " and the UserError), run in this process."""
    with pytest.raises(UserError) as refused:
        run_in_process(argv)
    assert "\n" not in str(refused.value)
    return f"error: {refused.value}"


def said(caplog):
    """The warnings this project logged: lines the command shows at its default verbosity."""
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING and console.is_project_file(record.pathname)]


def snapshot(out):
    """{relative path: (size, mtime)} of every file: what a refused run must leave as it was."""
    return {str(p.relative_to(out)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(out.rglob("*")) if p.is_file()}


def cut_in_half(path):
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


def damaged_line_start_and_end(out):
    return (f"error: checkpoint {out}/model.ckpt-4 (step 4) is damaged: ",
            f"move {out}/model.ckpt-4.* out of the directory to resume from model.ckpt-2 (step 2), "
            f"or restore the files from a copy")


@pytest.mark.trains
def test_a_lost_state_file_resumes_from_the_newest_checkpoint_and_says_so(run_copy, caplog):
    data, out = run_copy
    (out / checkpoints.STATE_FILE).unlink()
    run_in_process(argv_for(data, out, train_steps=6))
    assert (f"{out}/checkpoint is missing: resuming from model.ckpt-4 (step 4), the newest checkpoint "
            f"here, checked to restore") in said(caplog)
    assert sum("resuming from" in line for line in said(caplog)) == 1  # said once, not by each check
    assert checkpoints.latest_checkpoint(str(out))[1] == 6
    steps = [r["global_step"] for r in eval_records.read_eval_results(str(out))]
    assert steps == [2, 4, 6]  # one history: no second training from step 0


@pytest.mark.trains
@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
@pytest.mark.parametrize("mode", ["train_and_eval", "evaluate", "export", "continuous_eval", "predict"])
def test_a_damaged_checkpoint_is_named_and_nothing_is_written(run_copy, suffix, mode, tmp_path, caplog):
    data, out = run_copy
    cut_in_half(out / f"model.ckpt-4{suffix}")
    before = snapshot(out)
    extra = {"predict_input": f"{data}/eval-*", "predict_output_dir": tmp_path / "preds"} if mode == "predict" else {}
    line = refusal(argv_for(data, out, mode=mode, **extra))
    start, end = damaged_line_start_and_end(out)
    assert line.startswith(start) and line.endswith(end), line
    assert said(caplog) == []  # the refusal is the only line
    assert snapshot(out) == before
    assert not (tmp_path / "preds").exists()


@pytest.mark.process
@pytest.mark.trains
def test_a_damaged_checkpoint_is_one_line_and_exit_code_2_from_the_command(run_copy):
    """The refusals above, as the user's terminal shows them: one line, no traceback, exit 2."""
    data, out = run_copy
    cut_in_half(out / "model.ckpt-4.index")
    before = snapshot(out)
    result = user_commands.run_trainer(*argv_for(data, out))
    assert result.returncode == 2, result.stderr[-3000:]
    lines = user_commands.error_lines(result)
    assert len(lines) == 1, lines
    start, end = damaged_line_start_and_end(out)
    assert lines[0].startswith(start) and lines[0].endswith(end), lines
    assert snapshot(out) == before


@pytest.mark.trains
def test_a_run_without_its_checkpoints_refuses_to_start_over(run_copy):
    data, out = run_copy
    for path in out.glob("model.ckpt-*"):
        path.unlink()
    (out / checkpoints.STATE_FILE).unlink()
    before = snapshot(out)
    assert refusal(argv_for(data, out)) == (
        f"error: output_dir={str(out)!r} holds eval records (eval_results.jsonl); exports (export/); "
        f"exports (best_export/) of an earlier run but no checkpoint: training would start again "
        f"from step 0 beside them. Copy the model.ckpt-* files back, or use a new --output_dir")
    assert snapshot(out) == before


@pytest.mark.trains
def test_a_state_naming_deleted_files_falls_back_to_the_newest_intact_one(run_copy, caplog):
    data, out = run_copy
    for path in out.glob("model.ckpt-4.*"):
        path.unlink()
    run_in_process(argv_for(data, out, mode="export"))
    assert any(f"{out}/checkpoint names model.ckpt-4, whose files are gone: resuming from model.ckpt-2"
               in line for line in said(caplog))
    assert (out / "export" / "image_classifier" / "2" / "saved_model.pb").exists()
    assert 'model_checkpoint_path: "model.ckpt-2"' in (out / checkpoints.STATE_FILE).read_text()
    # The lost checkpoint's version 4 stays the one TF Serving serves: said in one line.
    base = out / "export" / "image_classifier"
    assert (f"{base}/4 stays the highest version, exported from model.ckpt-4, which {out} no longer "
            f"holds, so TF Serving keeps serving it, not this run's version 2: move {base}/4 out of "
            f"{base} to serve 2") in said(caplog)


@pytest.mark.trains
@pytest.mark.parametrize("mode", ["train_and_eval", "export"])
def test_a_lost_index_of_the_newest_checkpoint_is_refused_as_lost_data_is(run_copy, mode):
    """Its .data is here and the state names it: never a quiet fallback to model.ckpt-2."""
    data, out = run_copy
    (out / "model.ckpt-4.index").unlink()
    before = snapshot(out)
    assert refusal(argv_for(data, out, mode=mode, train_steps=6)) == (
        f"error: checkpoint {out}/model.ckpt-4 (step 4) is damaged: model.ckpt-4.index is missing (its "
        f"data is here); move {out}/model.ckpt-4.* out of the directory to resume from model.ckpt-2 "
        f"(step 2), or restore the files from a copy")
    assert snapshot(out) == before


@pytest.mark.trains
def test_a_save_killed_before_its_index_resumes_from_the_checkpoint_the_state_names(run_copy):
    """TensorFlow moves a save's .data into place, then writes its .index, then the state: killed
    between the two, the state still names the last whole checkpoint, which is the run's."""
    _, out = run_copy
    checkpoints.write_state(str(out), checkpoints.list_checkpoints(str(out)), 2)
    (out / "model.ckpt-4.index").unlink()
    assert checkpoints.check_run_state(str(out), repair=False) == (f"{out}/model.ckpt-2", 2)


@pytest.mark.trains
def test_a_save_killed_midway_leaves_no_temp_directory_behind(run_copy, caplog):
    """model.ckpt-<step>_temp/ (where a save writes its shards before moving them into place) is
    removed under the run's lock and said at -v (INFO); nothing else that looks like it is touched."""
    data, out = run_copy
    leftover = out / "model.ckpt-6_temp"
    leftover.mkdir()
    for path in out.glob("model.ckpt-4.*"):  # a save's shards, as the kill left them
        (leftover / path.name.replace("model.ckpt-4", "part-00000-of-00001")).write_bytes(path.read_bytes())
    (out / "notes_temp").mkdir()
    (out / "model.ckpt-8_temp").write_text("a file, not a save's directory")
    caplog.set_level(logging.INFO)
    run_in_process(argv_for(data, out, mode="export"))
    assert f"Removed {leftover}, left by a checkpoint save that was killed midway" in caplog.messages
    assert not leftover.exists()
    assert (out / "notes_temp").is_dir() and (out / "model.ckpt-8_temp").is_file()


@pytest.mark.trains
def test_an_export_killed_at_another_step_leaves_nothing_once_the_run_exports(run_copy):
    """A killed export of step 1 left its staging folder among the versions TF Serving scans;
    the run's next export (here --mode export of its last step, under OUT's lock) clears it."""
    data, out = run_copy
    versions = out / "export" / "image_classifier"
    shutil.rmtree(versions)  # so that --mode export writes the last step again
    (versions / ".1.staging-0badf00d" / "1700000000").mkdir(parents=True)
    run_in_process(argv_for(data, out, mode="export"))
    assert [path.name for path in versions.iterdir()] == [tf_latest_step(out)]


def tf_latest_step(out):
    import tensorflow as tf
    return tf.train.latest_checkpoint(str(out)).rsplit("-", 1)[1]


def test_the_first_save_killed_midway_leaves_no_temp_directory_behind(tmp_path):
    """Killed while its first checkpoint was written, a run leaves only model.ckpt-N_temp/: the
    same command starts afresh (nothing to resume) and removes it under the lock."""
    leftover = tmp_path / "model.ckpt-0_temp"
    leftover.mkdir()
    (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"half a save")
    assert checkpoints.check_run_state(str(tmp_path), repair=False) == (None, 0)
    assert leftover.is_dir()  # beside a trainer (no lock) it may be that trainer's live save
    assert checkpoints.check_run_state(str(tmp_path)) == (None, 0)
    assert not leftover.exists()


@pytest.mark.trains
def test_a_job_beside_the_trainer_leaves_a_save_s_temp_directory_alone(run_copy):
    """Without the lock (continuous_eval, predict) a _temp directory may be the trainer's live save."""
    _, out = run_copy
    (out / "model.ckpt-6_temp").mkdir()
    assert checkpoints.check_run_state(str(out), repair=False)[1] == 4
    assert (out / "model.ckpt-6_temp").is_dir()


@pytest.mark.trains
def test_a_moved_run_resumes_and_reports_where_it_is_now(run_copy, tmp_path):
    from trainer.report import summary
    data, out = run_copy
    # Records written by an older version held absolute paths of the old place.
    records = eval_records.read_eval_results(str(out))
    for record in records:
        if "best_export" in record:
            record["best_export"] = f"/old/place/run/best_export/image_classifier/{record['global_step']}"
    (out / eval_records.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    moved = tmp_path / "moved"
    out.rename(moved)
    params, result = run_in_process(argv_for(data, moved, train_steps=6, early_stopping_patience=1))
    stdout = summary.summarize_run(params, result).splitlines()  # what the command prints last
    best_line = next(line for line in stdout if line.startswith("best export: "))
    assert best_line.startswith(f"best export: {moved}/best_export/image_classifier/")
    assert os.path.isdir(best_line.split(": ", 1)[1])
    assert any(line.startswith("best eval (by accuracy)") for line in stdout)
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


@pytest.mark.process
def test_train_mode_refuses_early_stopping_settings_before_tensorflow_loads(data, tmp_path):
    """A rule of the settings alone: the command answers with a tensorflow that cannot be imported."""
    result = user_commands.run_trainer(*argv_for(data, tmp_path / "out", mode="train", early_stopping_patience=3),
                                       env=user_commands.user_env(without_tensorflow=True))
    assert result.returncode == 2, result.stderr[-3000:]
    assert "early_stopping_patience=3 (flag --early_stopping_patience) needs evaluations, and " \
           "mode='train' (flag --mode) does not evaluate" in result.stderr
    assert not (tmp_path / "out").exists()


def test_evaluating_on_the_training_files_is_said_loudly(data, tmp_path, caplog):
    from trainer import chain
    params = chain.parse_params(argv_for(data, tmp_path / "out", eval_data_path=f"{data}/train-*"))
    assert params["num_eval_examples"] == 24
    assert f"eval_data_path='{data}/train-*' reads 2 of the training files" in caplog.text


def full_disk_script(mount, out, argv, logs):
    """sh: a 1.2 MB tmpfs at mount, the trainer command run on it, the tmpfs grown to 20 MB, the
    same command again; each run's stdout, stderr and exit code in logs/first.* and logs/second.*."""
    command = shlex.join(user_commands.command("trainer.task", *argv))
    return (f"mount -t tmpfs -o size=1200k tmpfs {mount} || exit 99\n"
            f"{command} > {logs}/first.out 2> {logs}/first.err; echo $? > {logs}/first.rc\n"
            f"mount -o remount,size=20m {mount}\n"
            f"{command} > {logs}/second.out 2> {logs}/second.err; echo $? > {logs}/second.rc\n"
            f"ls {out} > {logs}/files\n")


@pytest.mark.process
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare for a small tmpfs")
def test_a_full_disk_is_one_line_and_the_same_command_resumes_after_freeing_space(data, tmp_path):
    """A 1.2 MB tmpfs (in a private mount namespace) fills up during a checkpoint save;
    after it grows, the same command trains to the end. The command runs in a shell inside
    unshare (the mount needs its namespace), as user_commands builds it, in user_env()."""
    mount, out = tmp_path / "disk", tmp_path / "disk" / "out"
    mount.mkdir()
    script = full_disk_script(mount, out, argv_for(data, out, mode="train"), tmp_path)  # train: no evals
    namespace = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=user_commands.user_env(),
                               cwd=user_commands.REPO_ROOT, timeout=600, capture_output=True, text=True)
    if namespace.returncode == 99:
        pytest.skip(f"no tmpfs in a user namespace here: {namespace.stderr.strip()}")
    # The progress lines of the steps it trained, then the one line (the disk fills at a save).
    first_err = [line for line in (tmp_path / "first.err").read_text().strip().splitlines()
                 if not re.fullmatch(r"step \d+/4  loss .*", line)]
    assert (tmp_path / "first.rc").read_text().strip() == "2", first_err[-20:]
    assert first_err == [f"error: no space left on device while writing to {out}: nothing written "
                         f"before is lost; free space there and run the same command again to resume "
                         f"from the last checkpoint"]
    assert (tmp_path / "second.rc").read_text().strip() == "0", (tmp_path / "second.err").read_text()[-3000:]
    assert "model.ckpt-4.index" in (tmp_path / "files").read_text().split()


@pytest.mark.trains
def test_predict_with_a_lost_state_file_uses_the_newest_checkpoint_not_fresh_weights(run_copy, tmp_path, caplog):
    data, out = run_copy

    def predict(output):
        caplog.clear()
        run_in_process(argv_for(data, out, mode="predict", predict_input=f"{data}/eval-*",
                                predict_output_dir=output))
        return said(caplog), sorted(p.read_text() for p in output.glob("predictions-*.jsonl"))

    _, with_state = predict(tmp_path / "with_state")
    (out / checkpoints.STATE_FILE).unlink()
    lines, without_state = predict(tmp_path / "without_state")
    assert any("checkpoint is missing: resuming from model.ckpt-4 (step 4)" in line for line in lines)
    assert sum("resuming from" in line for line in lines) == 1  # said once, not by each check
    assert without_state == with_state and with_state
