"""CSVs of image URIs, one set of rules for preprocessing and both batch-prediction routes.

    .venv/bin/python -m pytest tests/common/test_image_uris.py
"""
import json
import os

import pytest

from common import image_uris

BOM = "\ufeff".encode()


def local_open(path):
    return open(path, "rb")


def test_a_byte_order_mark_is_not_part_of_the_first_uri(tmp_path):
    path = tmp_path / "images.csv"
    path.write_bytes(BOM + b"a.jpg,cat\r\n\r\nb.jpg,dog\n")
    assert list(image_uris.read_csv_lines(str(path), local_open)) == [
        ("images.csv:1", "a.jpg,cat"), ("images.csv:3", "b.jpg,dog")]


@pytest.mark.parametrize("errors, expected", [
    ("replace", "caf\ufffd.jpg,cat"),          # the batch-prediction routes: a readable name
    ("surrogateescape", "caf\udce9.jpg,cat"),  # preprocessing: the same bytes open the file
])
def test_a_latin1_line_is_decoded_as_asked(tmp_path, errors, expected):
    path = tmp_path / "images.csv"
    path.write_bytes(b"caf\xe9.jpg,cat\r\n")
    assert list(image_uris.read_csv_lines(str(path), local_open, errors)) == [
        ("images.csv:1", expected)]


@pytest.mark.parametrize("line, origin, reason", [
    ('"a.jpg,cat', "x.csv:2", image_uris.MALFORMED_CSV_LINE),   # unbalanced quote
    ('a.jpg,"cat', "x.csv:2", image_uris.MALFORMED_CSV_LINE),
    ("uri,label", "x.csv:1", image_uris.HEADER_LINE),
    ("image_path,class", "x.csv:1", image_uris.HEADER_LINE),
    ("a.jpg,cat,extra", "x.csv:1", image_uris.MALFORMED_CSV_LINE),
    (",cat", "x.csv:2", image_uris.MALFORMED_CSV_LINE),
])
def test_bad_lines_are_refused_with_their_reason(line, origin, reason):
    with pytest.raises(image_uris.InputRejected) as caught:
        image_uris.split_csv_line(line, (1, 2), origin=origin)
    assert caught.value.reason == reason


@pytest.mark.parametrize("line, origin, fields", [
    ("uri,label", "x.csv:2", ["uri", "label"]),  # only line 1 can be a header
    ("a.jpg,cat", "x.csv:1", ["a.jpg", "cat"]),
    ("photos/img001,cat", "x.csv:1", ["photos/img001", "cat"]),
    ('"a, b.jpg",cat', "x.csv:1", ["a, b.jpg", "cat"]),
    ("gs://b/a.jpg,", "x.csv:1", ["gs://b/a.jpg", ""]),
])
def test_good_lines_keep_their_fields(line, origin, fields):
    assert image_uris.split_csv_line(line, (1, 2), origin=origin) == fields


def test_file_errors_become_reasons(tmp_path):
    with pytest.raises(image_uris.InputRejected) as missing:
        image_uris.read_image_bytes(str(tmp_path / "none.jpg"), local_open)
    assert missing.value.reason == image_uris.MISSING_FILE and "none.jpg" in missing.value.detail
    with pytest.raises(image_uris.InputRejected) as unreadable:
        image_uris.read_image_bytes(str(tmp_path), local_open)  # a directory
    assert unreadable.value.reason == image_uris.UNREADABLE_FILE
    os.symlink(tmp_path / "gone.jpg", tmp_path / "link.jpg")
    with pytest.raises(image_uris.InputRejected) as dangling:
        image_uris.read_image_bytes(str(tmp_path / "link.jpg"), local_open)
    assert dangling.value.reason == image_uris.MISSING_FILE
    assert dangling.value.detail.endswith(f"(a symlink to {tmp_path / 'gone.jpg'}, which does not exist)")



def test_gcs_client_errors_become_reasons_and_transient_ones_are_raised():
    """The errors a GCS client raises (google.api_core, loaded by the client, not by image_uris):
    not found and forbidden become reasons; 503 and 429 are raised, for the runner to retry."""
    from google.api_core import exceptions

    def raising(err):
        def open_remote(uri):
            raise err
        return open_remote
    for err, reason in ((exceptions.NotFound("gone"), image_uris.MISSING_FILE),
                        (exceptions.Forbidden("no access"), image_uris.UNREADABLE_FILE)):
        with pytest.raises(image_uris.InputRejected) as rejected:
            image_uris.read_image_bytes("gs://b/a.jpg", raising(err))
        assert rejected.value.reason == reason and rejected.value.detail.startswith("gs://b/a.jpg: ")
    for err in (exceptions.ServiceUnavailable("busy"), exceptions.TooManyRequests("slow down")):
        with pytest.raises(type(err)):
            image_uris.read_image_bytes("gs://b/a.jpg", raising(err))


@pytest.mark.trains
def test_predict_mode_reads_a_spreadsheet_csv_without_losing_a_row(trained_run, input_csv, tmp_path):
    """BOM + header + unbalanced quote through `trainer.task --mode predict` (in this process):
    every data row gets its record, and the header and the bad line are error records with
    their reason."""
    from tests.serving.test_batch_predict_routes import run_trainer_predict
    good = ["1.jpg,cat", "3.jpg", "5.jpg,dog"]  # images the input_csv fixture made
    csv_path = input_csv.parent / "spreadsheet.csv"
    csv_path.write_bytes(BOM + "\n".join(["uri,label", *good, '"2.jpg,cat']).encode() + b"\n")
    out = tmp_path / "preds"
    run_trainer_predict(trained_run[0], csv_path, out)
    records = [json.loads(line) for path in sorted(out.glob("predictions-*.jsonl"))
               for line in path.read_text().splitlines()]
    errors = sorted(r["error"]["reason"] for r in records if "error" in r)
    assert errors == ["header_line", "malformed_csv_line"]
    predicted = [r["uri"] for r in records if "error" not in r]
    assert predicted == [str(input_csv.parent / f"{i}.jpg") for i in (1, 3, 5)]
