"""Both batch routes as a user meets them: folders and globs of images (JPEG, PNG, GIF, BMP),
inputs that give nothing to classify (one line, exit 2, nothing written), and outputs that
appear only whole (a killed run leaves the earlier output as it was; gs:// too).

The routes run in this process on the session's trained_run; the real commands run only where
the process is the behaviour: a refusal's one line and exit code, and kill -9 midway.

    .venv/bin/python -m pytest tests/serving/test_batch_predict_inputs.py
"""
import glob
import json
import logging
import os
import signal
import subprocess
import time

import pytest

from common import prediction_inputs, prediction_records
from common.user_errors import UserError
from serving import batch_predict
from tests import user_commands
from tests.conftest import encode_image, pattern_image
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)
from tests.serving.test_batch_predict_routes import run_trainer_predict

FORMATS = {"a.jpg": "JPEG", "b.PNG": "PNG", "c.gif": "GIF", "sub/d.bmp": "BMP"}


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """One image of each format serving decodes (one in a sub-folder), a text file and a
    hidden file, both skipped by name. Read only."""
    folder = tmp_path_factory.mktemp("photos")
    (folder / "sub").mkdir()
    for seed, (name, fmt) in enumerate(FORMATS.items()):
        (folder / name).write_bytes(encode_image(pattern_image(20 + seed, 24, seed), fmt=fmt))
    (folder / "notes.txt").write_text("not an image")
    (folder / ".hidden.jpg").write_bytes(b"partial download")
    return folder


def beam_argv(model_dir, input_flag, path, output):
    return [f"{input_flag}={path}", f"--model_dir={model_dir}", f"--output={output}",
            "--max_batch_size=4"]


def trainer_argv(output_dir, path, predictions_dir):
    return [f"--output_dir={output_dir}", "--mode=predict", f"--predict_input={path}",
            f"--predict_output_dir={predictions_dir}"]


def route_outputs(route, out):
    """(the glob of a route's record files under out/, its summary file)."""
    if route == "beam":
        return f"{out}/p-*.jsonl", out / "p.summary.json"
    return f"{out}/predictions-*.jsonl", out / "summary.json"


def read_outputs(route, out):
    """(records, summary or None) a route left under out/."""
    shards, summary = route_outputs(route, out)
    records = [json.loads(line) for p in sorted(glob.glob(shards)) for line in open(p)]
    return records, json.loads(summary.read_text()) if summary.exists() else None


def predict_in_process(route, trained_run, path, out, input_flag="--input_images"):
    """(records, summary) of one route run in this process into out/; UserError as raised."""
    if route == "beam":
        batch_predict.run(beam_argv(trained_run[1], input_flag, path, out / "p"))
    else:
        run_trainer_predict(trained_run[0], path, out)
    return read_outputs(route, out)


def run_command(route, trained_run, path, out, input_flag="--input_images"):
    """The route's real command into out/, finished."""
    if route == "beam":
        return user_commands.run("serving.batch_predict",
                                 *beam_argv(trained_run[1], input_flag, path, out / "p"))
    return user_commands.run_trainer(*trainer_argv(trained_run[0], path, out))


@pytest.mark.trains
@pytest.mark.parametrize("route", ["beam", "trainer"])
@pytest.mark.parametrize("form", ["folder", "glob"])
def test_folders_and_globs_of_images_are_classified(route, form, trained_run, image_folder,
                                                    tmp_path, caplog):
    path = str(image_folder) if form == "folder" else f"{image_folder}/[abc].*"
    expected = sorted(FORMATS) if form == "folder" else sorted(FORMATS)[:3]
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        records, summary = predict_in_process(route, trained_run, path, out)
    assert sorted(os.path.relpath(r["uri"], image_folder) for r in records) == expected
    assert all("error" not in r and r["class"] in ("cat", "dog", "fish") for r in records)
    assert (summary["predicted"], summary["errors"]) == (len(expected), {})
    assert not [name for name in os.listdir(out) if name.startswith("_staging")]
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Skipped")]
    assert len(skipped) == (form == "folder") and (form == "glob" or "notes.txt" in skipped[0])


def write_csv(directory, name, text):
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text)
    return directory / name


# (route, input flag, how to make the input under tmp_path, the error line's text)
NOTHING_TO_CLASSIFY = [
    ("beam", "--input_images", lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
     "has no image files: expected files named .jpg, .jpeg, .png, .gif, .bmp (any case); found nothing"),
    ("beam", "--input_csv", lambda tmp: (tmp / "folder").mkdir() or tmp / "folder",
     "is a folder, not a CSV of 'uri[,label]' lines naming JPEG, PNG, GIF or BMP files; to "
     "classify the images in it, pass --input_images"),
    ("beam", "--input_csv", lambda tmp: write_csv(tmp / "in", "header.csv", "uri,label\n"),
     "none of the 1 input(s) of --input_csv"),
    ("beam", "--input_csv", lambda tmp: write_csv(tmp / "in", "blank.csv", "\n\n"),
     "gave no input rows or images"),
    ("trainer", None, lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "has no image files"),
    ("trainer", None, lambda tmp: write_csv(tmp / "in", "blank.csv", ""), "gave no input rows or images"),
    ("trainer", None, lambda tmp: write_csv(tmp / "in", "gone.csv", "missing.jpg\n"),
     "none of the 1 input(s) of --predict_input"),
    ("trainer", None, lambda tmp: tmp / "nothing-*", "matches no files"),
    ("beam", "--input_images", lambda tmp: tmp / "gone.jpg", "gone.jpg: no such file or folder"),
    ("trainer", None, lambda tmp: tmp / "gone.jpg", "gone.jpg: no such file or folder"),
]


@pytest.mark.trains
@pytest.mark.parametrize("route,input_flag,make_input,message", NOTHING_TO_CLASSIFY)
def test_nothing_to_classify_is_refused_writing_nothing(route, input_flag, make_input, message,
                                                        trained_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(prediction_inputs.NoUsableInput) as refused:
        predict_in_process(route, trained_run, str(make_input(tmp_path)), out, input_flag)
    assert message in str(refused.value)
    assert os.listdir(out) == []


# The real command of each route, refused after it has read its input through (Beam: the whole
# pipeline ran; the trainer: its predict call had no image): one line last, exit code 2.
@pytest.mark.process
@pytest.mark.trains
@pytest.mark.parametrize("route,input_flag,make_input,message",
                         [NOTHING_TO_CLASSIFY[2], NOTHING_TO_CLASSIFY[6]])
def test_nothing_to_classify_is_one_line_and_exit_code_2(route, input_flag, make_input, message,
                                                         trained_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = run_command(route, trained_run, str(make_input(tmp_path)), out, input_flag)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and errors[0] == result.stderr.splitlines()[-1]
    assert os.listdir(out) == [] and "predicted" not in result.stdout


def folder_refusal(tmp_path, output):
    return (f"--output {tmp_path}/{output} is a folder; give a file-name prefix in it, e.g. "
            f"--output {tmp_path}/out/predictions (writes {tmp_path}/out/predictions-00000-of-0000N"
            f".jsonl and {tmp_path}/out/predictions.summary.json)")


@pytest.mark.parametrize("output", ["out", "out/"])
def test_an_output_folder_is_refused_naming_a_prefix(tmp_path, output):
    """Before any model or input is looked at: no export and no CSV are needed."""
    (tmp_path / "out").mkdir()
    with pytest.raises(UserError) as refused:
        batch_predict.run(beam_argv(tmp_path / "model", "--input_csv", tmp_path / "images.csv",
                                    f"{tmp_path}/{output}"))
    assert str(refused.value) == folder_refusal(tmp_path, output)
    assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == []


@pytest.mark.process
def test_the_command_refuses_an_output_folder_in_one_line(tmp_path):
    (tmp_path / "out").mkdir()
    result = user_commands.run("serving.batch_predict", *beam_argv(
        tmp_path / "model", "--input_csv", tmp_path / "images.csv", f"{tmp_path}/out/"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"error: {folder_refusal(tmp_path, 'out/')}"]
    assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == []


def write_earlier_output(out):
    """An earlier finished Beam run under prefix out/p: one shard and its summary."""
    out.mkdir(exist_ok=True)
    (out / "p-00000-of-00001.jsonl").write_text('{"uri": "old.jpg"}\n')
    (out / "p.summary.json").write_text('{"images": 1, "predicted": 1}\n')
    return {name: (out / name).read_text() for name in os.listdir(out)}


def kill_once(process, has_started, timeout=120):
    """kill -9 of process (and its session) once has_started() is true, while it still runs."""
    deadline = time.monotonic() + timeout
    while not has_started() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None  # still running: killed midway
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def files_of(out, *besides):
    return {name: (out / name).read_text() for name in os.listdir(out)
            if not name.startswith("_staging") and name not in besides}


@pytest.mark.process
@pytest.mark.trains
def test_a_killed_run_leaves_the_earlier_output_whole(trained_run, input_csv, tmp_path, caplog):
    """SIGKILL once the run has started writing: only its staging folder exists, the earlier
    shard and summary are untouched; the next run replaces them whole and removes the folder."""
    out = tmp_path / "out"
    earlier = write_earlier_output(out)
    argv = beam_argv(trained_run[1], "--input_csv", input_csv, out / "p")
    process = user_commands.start("serving.batch_predict", *argv, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    kill_once(process, lambda: glob.glob(f"{out}/_staging-p-*/*"))
    staging = [name for name in os.listdir(out) if name.startswith("_staging-p-")]
    assert len(staging) == 1, os.listdir(out)
    assert files_of(out, "p.lock") == earlier  # and the dead run's lock
    with caplog.at_level(logging.INFO):
        summary = batch_predict.run(argv)  # not blocked by that lock
    assert sorted(os.listdir(out)) == ["p-00000-of-00001.jsonl", "p.summary.json"]
    assert "old.jpg" not in (out / "p-00000-of-00001.jsonl").read_text()
    assert json.loads((out / "p.summary.json").read_text())["images"] == summary["images"] == 14
    assert "Removed 1 staging folder(s) of earlier unfinished runs" in caplog.text


@pytest.mark.process
@pytest.mark.trains
def test_a_killed_trainer_predict_leaves_the_earlier_output_whole(trained_run, input_csv, tmp_path):
    """`trainer.task --mode predict` SIGKILLed once predicting has begun (its params.json
    rewritten): the earlier run's shard and summary.json stay as they were, no new file
    appears; the next run replaces them whole."""
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"predictions-00000-of-00002.jsonl": '{"uri": "old.jpg"}\n',
               "predictions-00001-of-00002.jsonl": '{"uri": "old2.jpg"}\n',
               "summary.json": '{"images": 2, "format": "jsonl"}\n'}
    for name, text in earlier.items():
        (out / name).write_text(text)
    params_file = trained_run[0] / "params.json"
    started = params_file.stat().st_mtime
    process = user_commands.start_trainer(
        *trainer_argv(trained_run[0], input_csv, out), "--predict_chunk_images=2",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    kill_once(process, lambda: params_file.stat().st_mtime != started)
    assert files_of(out, "predictions.lock") == earlier  # and the dead run's lock
    run_trainer_predict(trained_run[0], input_csv, out, "--predict_chunk_images=2")  # not blocked
    assert sorted(os.listdir(out)) == ["predictions-00000-of-00001.jsonl", "summary.json"]
    assert json.loads((out / "summary.json").read_text())["images"] == 14


# bucket: Beam's gcsio connects anonymously, without ~18 s of retries looking for credentials.
@pytest.mark.process  # gcs_bucket: the emulator's server
@pytest.mark.trains
@pytest.mark.usefixtures("bucket")
def test_gcs_output_is_published_whole(trained_run, input_csv, gcs_bucket):
    """--output gs://... on the emulator: shards and summary appear under the prefix, an
    earlier summary is replaced, and no staging object is left."""
    gcs_bucket.blob("preds/p.summary.json").upload_from_string('{"images": 99}')
    gcs_bucket.blob("preds/p-00000-of-00003.jsonl").upload_from_string('{"uri": "old.jpg"}\n')
    summary = batch_predict.run(beam_argv(trained_run[1], "--input_csv", input_csv,
                                          f"gs://{gcs_bucket.name}/preds/p"))
    names = sorted(blob.name for blob in gcs_bucket.list_blobs())
    shards = [name for name in names if name.endswith(".jsonl")]
    assert names == sorted(shards + ["preds/p.summary.json"]) and shards
    assert all(name.startswith("preds/p-") for name in shards)
    lines = b"".join(gcs_bucket.blob(name).download_as_bytes() for name in shards).splitlines()
    assert len(lines) == 14 and b"old.jpg" not in b"".join(lines)
    published = json.loads(gcs_bucket.blob("preds/p.summary.json").download_as_bytes())
    assert published == summary and published["predicted"] == 11


class InterruptedFiles(prediction_records.FileOps):
    """FileOps whose second rename fails, as a run killed while publishing."""
    renames = 0

    @classmethod
    def rename(cls, source, destination):
        cls.renames += 1
        if cls.renames == 2:
            raise KeyboardInterrupt
        super().rename(source, destination)


def test_a_run_stopped_while_publishing_leaves_no_summary(tmp_path):
    out = tmp_path / "out"
    write_earlier_output(out)
    staging = prediction_records.staging_dir(f"{out}/p", prediction_records.new_run_id())
    os.makedirs(staging)
    for name in ("p-00000-of-00002.jsonl", "p-00001-of-00002.jsonl", "summary.json"):
        (tmp_path / staging / name).write_text("{}\n")
    with pytest.raises(KeyboardInterrupt):
        prediction_records.publish(staging, f"{out}/p", "jsonl", f"{out}/p.summary.json",
                                   InterruptedFiles)
    assert sorted(n for n in os.listdir(out) if not n.startswith("_staging")) == ["p-00000-of-00002.jsonl"]
