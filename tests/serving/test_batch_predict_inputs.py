"""Both batch routes as a user meets them: folders and globs of images (JPEG, PNG, GIF, BMP),
inputs that give nothing to classify (one line, exit 2, nothing written), and outputs that
appear only whole (a killed run leaves the earlier output as it was; gs:// too).

    .venv/bin/python -m pytest tests/serving/test_batch_predict_inputs.py
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from common import prediction_records
from serving import batch_predict
from tests.conftest import encode_image, pattern_image
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)

FORMATS = {"a.jpg": "JPEG", "b.PNG": "PNG", "c.gif": "GIF", "sub/d.bmp": "BMP"}


@pytest.fixture
def image_folder(tmp_path):
    """One image of each format serving decodes (one in a sub-folder), a text file and a
    hidden file, both skipped by name."""
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    for seed, (name, fmt) in enumerate(FORMATS.items()):
        (folder / name).write_bytes(encode_image(pattern_image(20 + seed, 24, seed), fmt=fmt))
    (folder / "notes.txt").write_text("not an image")
    (folder / ".hidden.jpg").write_bytes(b"partial download")
    return folder


def user_env():
    """The environment a user's shell has: without the suite's TF_CPP_MIN_LOG_LEVEL, so the
    command's own quiet default applies."""
    return {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}


def command(module, argv, repo_root, timeout=300):
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=repo_root, capture_output=True,
                          text=True, timeout=timeout, env=user_env())


def beam_argv(model_dir, input_flag, path, output):
    return [f"{input_flag}={path}", f"--model_dir={model_dir}", f"--output={output}",
            "--max_batch_size=4"]


def trainer_argv(output_dir, path, predictions_dir):
    return [f"--output_dir={output_dir}", "--mode=predict", f"--predict_input={path}",
            f"--predict_output_dir={predictions_dir}"]


def run_route(route, trained_run, path, out, repo_root, input_flag="--input_images"):
    """(completed process, records, summary or None) of one route's real command into out/."""
    if route == "beam":
        result = command("serving.batch_predict",
                         beam_argv(trained_run[1], input_flag, path, out / "p"), repo_root)
        shards, summary = f"{out}/p-*.jsonl", out / "p.summary.json"
    else:
        result = command("trainer.task", trainer_argv(trained_run[0], path, out), repo_root)
        shards, summary = f"{out}/predictions-*.jsonl", out / "summary.json"
    records = [json.loads(line) for p in sorted(glob.glob(shards)) for line in open(p)]
    return result, records, json.loads(summary.read_text()) if summary.exists() else None


@pytest.mark.parametrize("route", ["beam", "trainer"])
@pytest.mark.parametrize("form", ["folder", "glob"])
def test_folders_and_globs_of_images_are_classified(route, form, trained_run, image_folder,
                                                    tmp_path, repo_root):
    path = str(image_folder) if form == "folder" else f"{image_folder}/[abc].*"
    expected = sorted(FORMATS) if form == "folder" else sorted(FORMATS)[:3]
    out = tmp_path / "out"
    result, records, summary = run_route(route, trained_run, path, out, repo_root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(os.path.relpath(r["uri"], image_folder) for r in records) == expected
    assert all("error" not in r and r["class"] in ("cat", "dog", "fish") for r in records)
    assert (summary["predicted"], summary["errors"]) == (len(expected), {})
    assert not [name for name in os.listdir(out) if name.startswith("_staging")]
    skipped = [line for line in result.stderr.splitlines() if line.startswith("Skipped")]
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


@pytest.mark.parametrize("route,input_flag,make_input,message", NOTHING_TO_CLASSIFY)
def test_nothing_to_classify_is_one_line_and_writes_nothing(route, input_flag, make_input, message,
                                                            trained_run, tmp_path, repo_root):
    out = tmp_path / "out"
    out.mkdir()
    result, records, summary = run_route(route, trained_run, str(make_input(tmp_path)), out,
                                         repo_root, input_flag)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and errors[0] == result.stderr.splitlines()[-1]
    assert os.listdir(out) == [] and "predicted" not in result.stdout


@pytest.mark.parametrize("output", ["out", "out/"])
def test_an_output_folder_is_refused_naming_a_prefix(trained_run, input_csv, tmp_path, repo_root,
                                                     output):
    (tmp_path / "out").mkdir()
    result = command("serving.batch_predict", beam_argv(trained_run[1], "--input_csv", input_csv,
                                                        f"{tmp_path}/{output}"), repo_root)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --output {tmp_path}/{output} is a folder; give a file-name prefix in it, e.g. "
        f"--output {tmp_path}/out/predictions (writes {tmp_path}/out/predictions-00000-of-0000N.jsonl "
        f"and {tmp_path}/out/predictions.summary.json)"]
    assert os.listdir(tmp_path / "out") == []


def write_earlier_output(out):
    """An earlier finished Beam run under prefix out/p: one shard and its summary."""
    out.mkdir(exist_ok=True)
    (out / "p-00000-of-00001.jsonl").write_text('{"uri": "old.jpg"}\n')
    (out / "p.summary.json").write_text('{"images": 1, "predicted": 1}\n')
    return {name: (out / name).read_text() for name in os.listdir(out)}


def test_a_killed_run_leaves_the_earlier_output_whole(trained_run, input_csv, tmp_path, repo_root):
    """SIGKILL once the run has started writing: only its staging folder exists, the earlier
    shard and summary are untouched; the next run replaces them whole and removes the folder."""
    out = tmp_path / "out"
    earlier = write_earlier_output(out)
    argv = beam_argv(trained_run[1], "--input_csv", input_csv, out / "p")
    process = subprocess.Popen([sys.executable, "-m", "serving.batch_predict", *argv], cwd=repo_root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 120
    while not glob.glob(f"{out}/_staging-p-*/*") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None  # still running: killed midway
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    staging = [name for name in os.listdir(out) if name.startswith("_staging-p-")]
    assert len(staging) == 1, os.listdir(out)
    assert {name: (out / name).read_text() for name in os.listdir(out)  # and the dead run's lock
            if name not in staging and name != "p.lock"} == earlier
    result = command("serving.batch_predict", argv, repo_root)  # not blocked by that lock
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["p-00000-of-00001.jsonl", "p.summary.json"]
    assert "old.jpg" not in (out / "p-00000-of-00001.jsonl").read_text()
    assert json.loads((out / "p.summary.json").read_text())["images"] == 14
    assert "Removed 1 staging folder(s) of earlier unfinished runs" in result.stderr


def test_a_killed_trainer_predict_leaves_the_earlier_output_whole(trained_run, input_csv, tmp_path,
                                                                  repo_root):
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
    argv = trainer_argv(trained_run[0], input_csv, out) + ["--predict_chunk_images=2"]
    process = subprocess.Popen([sys.executable, "-m", "trainer.task", *argv], cwd=repo_root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env=user_env())
    deadline = time.monotonic() + 120
    while params_file.stat().st_mtime == started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None  # still running: killed midway
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert {name: (out / name).read_text() for name in os.listdir(out)  # and the dead run's lock
            if not name.startswith("_staging") and name != "predictions.lock"} == earlier
    result = command("trainer.task", argv, repo_root)  # not blocked by the killed run's lock
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["predictions-00000-of-00001.jsonl", "summary.json"]
    assert json.loads((out / "summary.json").read_text())["images"] == 14


# bucket: Beam's gcsio connects anonymously, without ~18 s of retries looking for credentials.
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
