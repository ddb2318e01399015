"""What happens to each kind of input, through the real command (jpeg_to_tfrecord.run): one
run over a CSV (Windows line ends, a Latin-1 file name) and one over a folder tree, then
one check per kind. docs/preprocessing.md "What happens to each kind of input" is this table.

    .venv/bin/python -m pytest tests/preprocess/test_input_kinds.py
"""
import collections
import io
import json
import os

import numpy as np
import pytest
from PIL import ExifTags, Image

from common import record_schema
from preprocess import jpeg_to_tfrecord
from tests.conftest import encode_image, pattern_image
from tests.preprocess.conftest import IN_PROCESS, read_split

LATIN1_NAME = b"caf\xe9.jpg"  # 'café.jpg' written by a Latin-1 system: not UTF-8
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(300)


def photo_jpeg():
    return encode_image(pattern_image(120, 160, seed=11), quality=90)


def photo_png():
    return encode_image(pattern_image(120, 160, seed=11), fmt="PNG")


def overwrite(data, start, run):
    return data[:start] + run + data[start + len(run):]


def exif_rotated_jpeg():
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6
    return encode_image(pattern_image(30, 50, seed=12), exif=exif.tobytes())


def animated_gif():
    frames = [Image.new("RGB", (12, 12), colour) for colour in ("red", "blue")]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


def gray16_png():
    buffer = io.BytesIO()
    Image.fromarray(np.tile(np.arange(0, 65536, 4096, dtype=np.uint16), (4, 1))).save(buffer, "PNG")
    return buffer.getvalue()


# name -> (bytes, label, outcome): "ok:<conversions>" or "<reason>:<words of its detail>".
CSV_KINDS = {
    "good.jpg": (photo_jpeg(), "cat", "ok:"),
    "truncated_300.jpg": (photo_jpeg()[:300], "cat", "corrupt_image:header is cut short"),
    "corrupt_middle.jpg": (overwrite(photo_jpeg(), 5000, b"\xff" * 64), "dog",
                           "corrupt_image:JPEG data damaged"),
    "corrupt_middle.png": (overwrite(photo_png(), 20000, bytes(64)), "cat",
                           "corrupt_image:PNG decode failed"),
    "end_marker_lost.jpg": (overwrite(photo_jpeg(), len(photo_jpeg()) - 2, b"\0\0"), "dog",
                            "corrupt_image:end-of-image marker"),
    # Zeros or random bytes inside a JPEG's image data often decode without an error, or even a
    # libjpeg warning, in PIL and in TensorFlow alike: garbled pixels no decoder can tell.
    "zeroed_middle.jpg": (overwrite(photo_jpeg(), 5000, bytes(64)), "dog", "ok:"),
    "garbled_middle.jpg": (overwrite(photo_jpeg(), 5000, bytes(range(7, 71))), "cat", "ok:"),
    "scan16.png": (gray16_png(), "cat", "ok:format_png,mode_i;16"),
    "rotated.jpg": (exif_rotated_jpeg(), "dog", "ok:exif_rotated"),
    "cmyk.jpg": (encode_image(pattern_image(16, 16, seed=13), mode="CMYK"), "cat", "ok:mode_cmyk"),
    "animated.gif": (animated_gif(), "dog", "ok:format_gif,mode_p,first_frame"),
    "iphone.jpg": (HEIC, "cat", "unsupported_format:HEIC"),
    "empty.jpg": (b"", "cat", "empty_file:0 bytes"),
    "link.jpg": ("-> good.jpg", "dog", "ok:"),
    "dangling.jpg": ("-> gone.jpg", "cat", "missing_file:a symlink to gone.jpg, which does not exist"),
    "caf\\xe9.jpg": (photo_jpeg(), "dog", "ok:"),
}


def write_file(folder, name, data):
    path = os.path.join(os.fsencode(folder), LATIN1_NAME if name == "caf\\xe9.jpg" else name.encode())
    if isinstance(data, str):  # "-> target": a symlink
        os.symlink(data[3:], path)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return path


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    """(metadata, records by file name, dead letters by file name) of one run over CSV_KINDS."""
    root = tmp_path_factory.mktemp("kinds")
    lines = [write_file(root, name, data) + b"," + label.encode()
             for name, (data, label, _) in CSV_KINDS.items()]
    (root / "train.csv").write_bytes(b"\r\n".join(lines) + b"\r\n")  # Windows line ends
    out = root / "out"
    meta = jpeg_to_tfrecord.run(["--input_csv", f"train={root / 'train.csv'}",
                                 "--output_dir", str(out)] + IN_PROCESS)
    records = {r[record_schema.FILENAME].decode().rsplit("/", 1)[1]: r for r in read_split(out, "train")}
    letters = {letter["source"].rsplit("/", 1)[1]: letter for letter in read_letters(out)}
    return meta, records, letters, out


def read_letters(out):
    return [json.loads(line) for line in (out / "errors-00000-of-00001.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(CSV_KINDS))
def test_each_kind_of_file(csv_run, name):
    _, records, letters, _ = csv_run
    outcome = CSV_KINDS[name][2]
    kind, _, words = outcome.partition(":")
    if kind == "ok":
        assert name in records and name not in letters
        image = records[name][record_schema.ENCODED]
        original = CSV_KINDS["good.jpg" if name == "link.jpg" else name][0]
        assert Image.open(io.BytesIO(image)).format == "JPEG"
        assert (image == original) == (words == "")  # kept as it is unless converted
        check_trainer_decodes(records[name])
    else:
        assert name not in records
        assert (letters[name]["reason"], words in letters[name]["detail"]) == (kind, True), letters[name]


def check_trainer_decodes(record):
    import tensorflow as tf
    image = tf.io.decode_jpeg(record[record_schema.ENCODED], channels=3)
    assert image.shape == (record[record_schema.HEIGHT], record[record_schema.WIDTH], 3)


def test_the_run_counts_every_row_and_the_crlf_labels_are_clean(csv_run):
    meta, records, letters, out = csv_run
    assert meta["rows_read"] == len(CSV_KINDS) == len(records) + len(letters)
    conversions = collections.Counter(kind for _, _, outcome in CSV_KINDS.values()
                                      if outcome.startswith("ok:")
                                      for kind in outcome[3:].split(",") if kind)
    assert meta["converted"] == dict(conversions)
    assert (out / "labels.txt").read_bytes() == b"cat\ndog\n"
    assert meta["labels"] == ["cat", "dog"]


def test_a_rotated_photo_is_stored_upright_and_a_latin1_name_is_escaped(csv_run):
    _, records, _, _ = csv_run
    rotated = records["rotated.jpg"]
    assert (rotated[record_schema.HEIGHT], rotated[record_schema.WIDTH]) == (50, 30)
    assert records["caf\\xe9.jpg"][record_schema.FILENAME].decode().endswith("/caf\\xe9.jpg")
    gray = np.asarray(Image.open(io.BytesIO(records["scan16.png"][record_schema.ENCODED])))
    assert 100 < gray.mean() < 155  # a 0..65535 ramp: mid-gray, not white


# The folder tree: ROOT/<label>/<file>, and what does not fit it.
def make_tree(root):
    for folder in ("cat", "dog/nested", "elsewhere"):
        (root / folder).mkdir(parents=True)
    jpeg = photo_jpeg()
    for path in ("cat/a.jpg", "dog/b.jpg", "dog/nested/deep.jpg", "elsewhere/c.jpg", "loose.jpg"):
        (root / path).write_bytes(jpeg)
    write_file(root / "cat", "caf\\xe9.jpg", jpeg)
    os.mkdir(os.path.join(os.fsencode(root), b"r\xe9sum\xe9"))  # a label folder not in UTF-8
    write_file(os.path.join(os.fsencode(root), b"r\xe9sum\xe9"), "x.jpg", jpeg)
    os.symlink(root / "elsewhere", root / "linked")  # a symlinked label folder
    os.symlink(root / "gone.jpg", root / "dog" / "dangling.jpg")


TREE_KINDS = {  # path below ROOT -> "ok" or "<reason>:<words of its detail>"
    "cat/a.jpg": "ok", "dog/b.jpg": "ok", "cat/caf\\xe9.jpg": "ok", "elsewhere/c.jpg": "ok",
    "linked/c.jpg": "ok",
    "loose.jpg": "not_in_label_folder:directly in",
    "dog/nested": "unreadable_file:Is a directory",
    "r\\xe9sum\\xe9/x.jpg": "invalid_label:is not UTF-8 text",
    "dog/dangling.jpg": "missing_file:a symlink to",
}


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree") / "photos"
    root.mkdir()
    make_tree(root)
    out = root.parent / "out"
    meta = jpeg_to_tfrecord.run(["--input_dir", str(root), "--eval_fraction", "0",
                                 "--output_dir", str(out)] + IN_PROCESS)
    prefix = len(str(root)) + 1
    records = {r[record_schema.FILENAME].decode()[prefix:] for r in read_split(out, "train")}
    letters = {letter["source"][prefix:]: letter for letter in read_letters(out)}
    return meta, records, letters


@pytest.mark.parametrize("path", sorted(TREE_KINDS))
def test_each_kind_of_folder_entry(tree_run, path):
    _, records, letters = tree_run
    kind, _, words = TREE_KINDS[path].partition(":")
    if kind == "ok":
        assert path in records and path not in letters
    else:
        assert path not in records
        assert (letters[path]["reason"], words in letters[path]["detail"]) == (kind, True), letters[path]


def test_the_folder_run_counts_every_entry(tree_run):
    meta, records, letters = tree_run
    assert meta["rows_read"] == len(TREE_KINDS) == len(records) + len(letters)
    assert meta["labels"] == ["cat", "dog", "elsewhere", "linked"]
