"""Records written by other tools, both engines: PNG, GIF and BMP images (grayscale and RGBA too)
train, evaluate and serve; junk bytes are refused before anything is written, in one line naming
the shard and the record, and a junk record deeper in a shard than the pre-run sample reads ends
the run in one line naming them too. Runs in this process, as `python -m trainer.task` runs
them; the real command shows the mid-run line once (a refusal's one line before the run is
tests/trainer/test_refused_before_writing.py's).

    .venv/bin/python -m pytest tests/trainer/test_image_records.py
    .venv-keras/bin/python -m pytest tests/trainer/test_image_records.py   # Keras engine only
"""
import io
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from common import record_schema, signature
from common.user_errors import UserError
from tests import user_commands
from tests.conftest import encode_image, write_dataset
from tests.engines import KERAS, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.run_checks import served_predictions
from trainer.data import data_checks, input as input_lib
from trainer.run import eval_records
from trainer.settings import table

ENGINES = [pytest.param("estimator", marks=needs_estimator), KERAS]
# (PIL mode, format) of each record in turn: batches of 8 mix them all with JPEGs.
FORMATS = (("RGB", "PNG"), ("L", "PNG"), ("RGBA", "PNG"), ("RGB", "GIF"), ("RGB", "BMP"),
           ("RGB", "JPEG"))
JUNK = b"\x00\x01junk that no image decoder reads" * 4


def reencode(jpeg, mode, fmt):
    """The JPEG's pixels in another format and colour mode, as another tool might write them."""
    buffer = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).convert(mode).save(buffer, format=fmt)
    return buffer.getvalue()


def rewrite_images(path, replace):
    """Rewrites one TFRecord file in place; record i's image becomes replace(i, image bytes)."""
    records = [bytes(r) for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index, record in enumerate(records):
            example = tf.train.Example.FromString(record)
            images = example.features.feature[record_schema.ENCODED].bytes_list.value
            images[0] = replace(index, images[0])
            writer.write(example.SerializeToString())


def in_other_formats(index, jpeg):
    return reencode(jpeg, *FORMATS[index % len(FORMATS)])


def junk_at(bad_index):
    return lambda index, image: JUNK if index == bad_index else image


@pytest.fixture(scope="module")
def png_data(tmp_path_factory):
    """24 train and 11 eval records, 2 shards each, their images in FORMATS."""
    data = write_dataset(tmp_path_factory.mktemp("formats") / "data", {"train": 24, "eval": 11}, size=20)
    for path in data.glob("*.tfrecord"):
        rewrite_images(path, in_other_formats)
    return data


@pytest.fixture(scope="module")
def clean_data(tmp_path_factory):
    """24 train and 11 eval JPEG records, 2 shards each; read only (data copies it)."""
    return write_dataset(tmp_path_factory.mktemp("jpegs") / "data", {"train": 24, "eval": 11}, size=20)


@pytest.fixture
def data(clean_data, tmp_path):
    """This test's copy of clean_data, to damage."""
    return shutil.copytree(clean_data, tmp_path / "data")


def trainer_argv(data, out, **flags):
    return as_argv({**TINY_FLAGS, "train_data_path": f"{data}/train-*",
                    "eval_data_path": f"{data}/eval-*", "output_dir": out, **flags})


def train_in_process(data, out, **flags):
    """`python -m trainer.task` on data in this process: the chain, then the engine (trainer.task.main
    without its console: a UserError is raised here where the command prints its one line)."""
    from trainer import chain, task
    params = chain.parse_params(trainer_argv(data, out, **flags))
    return task.load_engine(params["engine"])(params)


def refusal(data, out, **flags):
    """The one line (after "error: ") the trainer command stops with, run in this process."""
    with pytest.raises(UserError) as refused:
        train_in_process(data, out, **flags)
    assert "\n" not in str(refused.value)
    return f"error: {refused.value}"


def error_line(result):
    """The one error line of a run that failed mid-run: after it, nothing; before it, only
    the progress lines of the steps it trained (no traceback)."""
    assert result.returncode == 2, result.stderr[-3000:]
    *before, last = user_commands.error_lines(result)
    assert all(line.startswith("step ") for line in before), before
    return last


def not_an_image(path, index):
    return f"error: record {index} of {path}{input_lib.NOT_AN_IMAGE}"


@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_records_of_other_formats_train_evaluate_and_serve(png_data, tmp_path, engine):
    out = tmp_path / "out"
    train_in_process(png_data, out, engine=engine)
    assert [r["global_step"] for r in eval_records.read_eval_results(out)] == [2, 4]
    export_dir = out / "export" / "image_classifier" / "4"
    records = tf.data.TFRecordDataset(str(png_data / "eval-00000-of-00002.tfrecord"))
    images = [record_schema.decode_example_proto(r)[record_schema.ENCODED]
              for r in records.as_numpy_iterator()]
    assert {image[:2] for image in images} == {b"\x89P", b"GI", b"BM", b"\xff\xd8"}
    served = served_predictions(str(export_dir), signature.SIGNATURE_DEFAULT, images)
    assert served[signature.OUTPUT_CLASS_IDS].shape == (len(images),)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("split,shard,index", [("train", 1, 1), ("eval", 0, 0)])
def test_junk_bytes_are_refused_before_anything_is_written(data, tmp_path, engine, split, shard, index):
    path = data / f"{split}-{shard:05d}-of-00002.tfrecord"
    rewrite_images(path, junk_at(index))
    out = tmp_path / "out"
    assert refusal(data, out, engine=engine) == not_an_image(path, index)
    assert not out.exists()  # no params.json, no lock, no model.ckpt-0


def junk_deeper_than_the_sample(data):
    """(path, index): record 7 of a 12-record shard made junk; the pre-run check reads the first 3."""
    index = data_checks.SAMPLE_RECORDS + 4
    path = data / "train-00000-of-00002.tfrecord"
    rewrite_images(path, junk_at(index))
    return path, index


@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_junk_deeper_than_the_pre_run_sample_ends_the_run_in_one_line(data, tmp_path, engine):
    """One training call of 4 steps of 8 reads every one of the 24 training records (shuffled,
    then repeated), so the junk record is always reached."""
    path, index = junk_deeper_than_the_sample(data)
    out = tmp_path / "out"
    assert refusal(data, out, engine=engine, mode="train", steps_per_eval=4) == not_an_image(path, index)
    assert (out / table.PARAMS_FILE).exists()  # failed mid-run: the same command resumes


@pytest.mark.process
def test_junk_deeper_than_the_sample_ends_the_command_in_one_line_after_its_progress(data, tmp_path):
    """The mid-run failure as the user's terminal shows it: progress lines, then the one error
    line, no traceback, exit 2 (the Keras engine: both venvs)."""
    path, index = junk_deeper_than_the_sample(data)
    out = tmp_path / "out"
    result = user_commands.run_trainer(*trainer_argv(data, out, engine="keras", mode="train", steps_per_eval=4))
    assert error_line(result) == not_an_image(path, index)
    assert (out / table.PARAMS_FILE).exists()


def damaged_png(image):
    """Starts as a PNG (the format check passes); the decoder refuses the rest."""
    return b"\x89PNG\r\n\x1a\n" + image[8:]


@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_image_deeper_than_the_sample_ends_the_run_in_one_line(data, tmp_path, engine):
    """The decode op names no record: the line names the globs and the command that finds it."""
    rewrite_images(data / "train-00001-of-00002.tfrecord",
                   lambda index, image: damaged_png(image) if index == 9 else image)
    # One training call of 4 steps (32 images) reads the whole first epoch of 24, so the
    # damaged record is always reached: rounds of 2 steps each start a new shuffled order
    # and read 16, which missed it in about one run in nine (the Estimator engine).
    line = refusal(data, tmp_path / "out", engine=engine, mode="train", steps_per_eval=4)
    assert line.startswith(f"error: a record of '{data}/train-*' holds an image that does not decode (")
    assert line.endswith(f"): find it with python -m trainer.data.data_checks PATTERN --decode, "
                         f"then {input_lib.REWRITE}")


@pytest.mark.parametrize("replace,problem", [
    (damaged_png, ": its image does not decode ("),
    (lambda image: encode_image(np.zeros((10, 30, 3)), fmt="PNG"),
     " states image/height/image/width 20x20, but its image is 10x30: "),
], ids=["damaged", "wrong_size"])
def test_pre_run_check_names_a_damaged_image_and_a_wrong_stated_size(data, replace, problem):
    """Bytes that start as a PNG but do not decode, and an image whose size is not the one
    its record states (the training crop would fail mid-run): named with the record."""
    files = input_lib.list_files(f"{data}/train-*")
    rewrite_images(files[1], lambda index, image: replace(image) if index == 2 else image)
    with pytest.raises(data_checks.DatasetError, match="^" + re.escape(f"record 2 of {files[1]}{problem}")):
        data_checks.check_images(files, data_checks.SAMPLE_RECORDS)
