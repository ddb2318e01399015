"""One batch prediction at a time per output prefix (common/prediction_records.py hold_prefix):
the real serving.batch_predict command refused in one line while another run holds the prefix
(a run of either route: the same lock), not blocked by a killed holder, and a held gs:// lock
on the emulator; leftover staging folders of dead runs removed under the lock, another
prefix's kept.

    .venv/bin/python -m pytest tests/serving/test_batch_predict_lock.py
"""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from common import output_lock, prediction_records
from serving import batch_predict
from tests import user_commands
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)
from tests.serving.test_batch_predict_inputs import beam_argv

HOLDER = f"pid {os.getpid()} on {socket.gethostname()} since "
# A second process holding --output's lock until it is killed (prints "held" once it holds it).
HOLDING_PROCESS = ("import sys, time\nfrom common import prediction_records\n"
                   "with prediction_records.hold_prefix(sys.argv[1], '--output', sys.argv[1]):\n"
                   "    print('held', flush=True); time.sleep(300)\n")


def busy_line(output, holder=HOLDER):
    return f"error: --output {output} is in use by another batch prediction ({holder}"


def held_by(holder, out):
    """out/predictions held as a Beam job with --output out/predictions holds it, or as a
    trainer --mode predict with --predict_output_dir out does."""
    if holder == "beam":
        return prediction_records.hold_prefix(f"{out}/predictions", "--output", f"{out}/predictions")
    return prediction_records.hold_prefix(prediction_records.prediction_prefix(str(out)),
                                          "--predict_output_dir", str(out))


@pytest.mark.process
@pytest.mark.trains
def test_a_held_prefix_refuses_the_command_at_once_writing_nothing(trained_run, input_csv, tmp_path):
    """Held by a trainer --mode predict into out: the command's one line, exit code 2, before
    Beam and TensorFlow load (neither can be imported in its environment)."""
    out = tmp_path / "out"
    out.mkdir()
    with held_by("trainer", out):
        result = user_commands.run("serving.batch_predict", *beam_argv(
            trained_run[1], "--input_csv", input_csv, f"{out}/predictions"),
            env=user_commands.user_env_without_beam())
        assert os.listdir(out) == ["predictions.lock"]  # the holder's, nothing of the refused run
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(busy_line(f"{out}/predictions")), result.stderr
    assert lines[0].endswith("): wait for it to end, or use another --output")
    assert os.listdir(out) == []


@pytest.mark.trains
@pytest.mark.parametrize("holder", ["beam", "trainer"])
def test_a_held_prefix_refuses_the_job_writing_nothing(holder, trained_run, input_csv, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with held_by(holder, out):
        with pytest.raises(output_lock.OutputBusy) as busy:
            batch_predict.run(beam_argv(trained_run[1], "--input_csv", input_csv, f"{out}/predictions"))
        assert os.listdir(out) == ["predictions.lock"]
    assert f"error: {busy.value}".startswith(busy_line(f"{out}/predictions"))
    assert str(busy.value).endswith("): wait for it to end, or use another --output")
    assert os.listdir(out) == []


@pytest.mark.trains
def test_another_prefix_in_the_same_folder_is_not_blocked(trained_run, input_csv, tmp_path):
    out = tmp_path / "out"
    with prediction_records.hold_prefix(f"{out}/other", "--output", f"{out}/other"):
        summary = batch_predict.run(beam_argv(trained_run[1], "--input_csv", input_csv,
                                              f"{out}/predictions"))
    assert summary["predicted"] == 11
    assert sorted(os.listdir(out)) == ["predictions-00000-of-00001.jsonl",
                                       "predictions.summary.json"]


@pytest.mark.process
@pytest.mark.trains
def test_a_killed_holder_does_not_block_the_next_run(trained_run, input_csv, tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDING_PROCESS, f"{out}/predictions"],
                              cwd=user_commands.REPO_ROOT, env=user_commands.user_env(),
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert os.listdir(out) == ["predictions.lock"]  # left by the killed run, and free
    capsys.readouterr()
    summary = batch_predict.run(beam_argv(trained_run[1], "--input_csv", input_csv,
                                          f"{out}/predictions"))
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == summary  # what it prints
    assert summary["predicted"] == 11
    assert sorted(os.listdir(out)) == ["predictions-00000-of-00001.jsonl",
                                       "predictions.summary.json"]


@pytest.mark.process  # gcs_bucket: the emulator's server
@pytest.mark.trains
@pytest.mark.usefixtures("bucket")
def test_a_held_gcs_prefix_refuses_the_job(trained_run, input_csv, gcs_bucket, capsys):
    output = f"gs://{gcs_bucket.name}/preds/p"
    with prediction_records.hold_prefix(output, "--output", output):
        with pytest.raises(SystemExit) as exit_code:
            batch_predict.main(beam_argv(trained_run[1], "--input_csv", input_csv, output))
        assert [blob.name for blob in gcs_bucket.list_blobs()] == ["preds/p.lock"]
    assert exit_code.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(busy_line(output)) and line.endswith(
        f"if that run is gone (killed), delete {output}.lock")
    assert list(gcs_bucket.list_blobs()) == []


def test_under_the_lock_every_other_staging_folder_of_the_prefix_goes(tmp_path):
    """Later-started ones too (their runs are dead: the lock is held), not another prefix's."""
    prefix = f"{tmp_path}/p"
    own = prediction_records.staging_dir(prefix, "20240102-000000-aaaaaa")
    dead = [prediction_records.staging_dir(prefix, run) for run in ("20240101-000000-bbbbbb",
                                                                    "20240103-000000-cccccc")]
    other_prefix = prediction_records.staging_dir(f"{tmp_path}/p-2", "20240101-000000-dddddd")
    for folder in [own, *dead, other_prefix]:
        os.makedirs(folder)
        open(f"{folder}/p-00000-of-00001.jsonl", "w").close()
    prediction_records.remove_leftover_staging(prefix, own, prediction_records.FileOps)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) for f in (own, other_prefix))


def test_the_lock_is_named_so_a_readers_glob_never_matches_it(tmp_path):
    with prediction_records.hold_prefix(f"{tmp_path}/predictions", "--output", "x"):
        assert os.listdir(tmp_path) == ["predictions.lock"]
        assert prediction_records.FileOps.glob(f"{tmp_path}/predictions-*") == []
