"""A spreadsheet's CSV through the pipeline: header lines, a byte-order mark, unbalanced quotes
and a label seen only on rejected rows never become classes or lose a row. The pipeline runs in
this process; the real command only for its one-line refusal of a bad flag.

    .venv/bin/python -m pytest tests/preprocess/test_csv_mistakes.py
"""
import json

import pytest

from common.user_errors import UserError
from preprocess import jpeg_to_tfrecord
from tests import user_commands
from tests.preprocess.conftest import IN_PROCESS

BOM = "\ufeff".encode()


def pipeline_argv(tmp_path, *csv_inputs):
    return (["--output_dir", str(tmp_path / "out")] + [f"--input_csv={value}" for value in csv_inputs]
            + IN_PROCESS)


@pytest.fixture
def photos(tmp_path, make_jpeg):
    """Four JPEGs a.jpg..d.jpg in tmp_path."""
    for seed, name in enumerate("abcd"):
        (tmp_path / f"{name}.jpg").write_bytes(make_jpeg(seed=seed))
    return tmp_path


def test_header_bom_and_quotes_are_accounted_for_and_never_a_class(photos):
    # "CSV UTF-8" from a spreadsheet: a BOM, then a header line.
    (photos / "train.csv").write_bytes(BOM + b"uri,label\na.jpg,cat\nb.jpg,dog\n\"c.jpg,cat\n")
    # A BOM before the first data row: that row must not be lost.
    (photos / "eval.csv").write_bytes(BOM + b"c.jpg,cat\nd.jpg,dog\n")
    jpeg_to_tfrecord.run(pipeline_argv(photos, f"train={photos}/train.csv", f"eval={photos}/eval.csv"))
    meta = json.loads((photos / "out" / "metadata.json").read_text())
    assert meta["labels"] == ["cat", "dog"]  # not "label"
    assert (photos / "out" / "labels.txt").read_text() == "cat\ndog\n"
    assert {split: stats["records"] for split, stats in meta["splits"].items()} == {
        "train": 2, "eval": 2}
    assert meta["rejected"] == {"header_line": 1, "malformed_csv_line": 1}
    assert meta["rows_read"] == 6
    letters = [json.loads(line) for line in
               (photos / "out" / "errors-00000-of-00001.jsonl").read_text().splitlines()]
    assert sorted((letter["origin"], letter["reason"]) for letter in letters) == [
        ("train.csv:1", "header_line"), ("train.csv:4", "malformed_csv_line")]


def test_a_label_only_on_rejected_rows_fails_naming_it(photos):
    (photos / "train.csv").write_text("a.jpg,cat\nb.jpg,dog\nmissing.jpg,zebra\n")
    (photos / "eval.csv").write_text("c.jpg,cat\nd.jpg,dog\n")
    with pytest.raises(UserError) as refused:
        jpeg_to_tfrecord.run(pipeline_argv(photos, f"train={photos}/train.csv",
                                           f"eval={photos}/eval.csv"))
    message = str(refused.value)
    assert message.startswith("label(s) ['zebra'] have no usable image")
    out = photos / "out"
    assert not list(out.rglob("metadata.json")) and not list(out.rglob("labels.txt"))
    assert not list(out.rglob("train-*")) and not list(out.rglob("eval-*"))
    (dead_letters,) = out.glob("_staging-*/errors-00000-of-00001.jsonl")  # the failed run's
    assert str(dead_letters) in message and "missing_file" in dead_letters.read_text()


@pytest.mark.process
def test_a_bad_flag_is_one_line_and_exit_code_2(tmp_path):
    """A local CSV that is not there is refused before Beam and TensorFlow load: here neither could."""
    result = user_commands.run("preprocess.jpeg_to_tfrecord", "--output_dir", tmp_path / "out",
                               f"--input_csv=train={tmp_path}/none.csv", timeout=300,
                               env=user_commands.user_env_without_beam())
    assert (result.returncode, user_commands.error_lines(result)) == (
        2, [f"error: --input_csv {tmp_path}/none.csv matches no file"]), result.stderr[-2000:]
    assert not (tmp_path / "out").exists()
