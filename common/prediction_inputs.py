"""Batch-prediction inputs: a CSV of image URIs, a folder or glob of images, or TFRecords,
each image checked before any model.

Both batch routes (trainer/estimator/predict.py on the accelerator, serving/batch_predict.py
on Beam) read images here and check each one with the decoder serving uses
(common/image_ops.decode_image), so an unreadable or corrupt image becomes an
error record naming it instead of failing a whole batch in the graph.
What a path is (input_kind): a .csv file is a CSV of 'uri[,label]' lines; a folder
is every image file below it (IMAGE_EXTENSIONS, hidden names skipped, other files
named in a log line); a glob whose matches are all image files is those images; any
other path or glob is TFRecords. An input that can give no image at all (an empty
folder, a glob matching nothing, a missing CSV) is NoUsableInput, one line.
Files are read with tf.io.gfile (local, gs://), not Beam's FileSystems: the
trainer imports this module, and importing Beam installs a root log handler
that silences the trainer's own logging.basicConfig.

    .venv/bin/python -m common.prediction_inputs work/demo/images/eval.csv   # count usable images
    .venv/bin/python -m common.prediction_inputs 'photos/*.png'               # a glob of images
"""
import dataclasses
import logging
import posixpath
import re
import sys

import tensorflow as tf

from common import image_ops, image_uris, record_schema
from common.image_uris import CORRUPT_IMAGE, EMPTY_FILE, InputRejected
from common.user_errors import UserError

# The file names a folder or glob of images is made of: what serving's decoder reads
# (common/image_ops.decode_image: JPEG, PNG, GIF, BMP), by extension, any case.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
GLOB_CHARACTERS = "*?["
EXPECTED_CSV = "'uri[,label]' lines naming JPEG, PNG, GIF or BMP files"
_LOGGER = logging.getLogger(__name__)


class NoUsableInput(UserError):
    """The input can give no image to classify: nothing is predicted and nothing written."""


@dataclasses.dataclass(frozen=True)
class InputImage:
    uri: str            # where the image came from (for TFRecords: the record's image/filename)
    jpeg: bytes = None  # the file bytes; None when error is set
    error: tuple = None  # (reason, detail) when the image cannot be classified
    label: str = None   # the true class name when the input gives one (CSV label, record's text)


def is_csv(path):
    return path.lower().endswith(".csv")


def is_image_name(path):
    return path.lower().endswith(IMAGE_EXTENSIONS)


def is_glob(path):
    return any(char in path for char in GLOB_CHARACTERS)


def input_kind(path):
    """"csv", "images" (a folder, or a glob of image files only) or "tfrecords";
    NoUsableInput for a glob matching image files and other files."""
    if is_csv(path) and not is_glob(path):
        return "csv"
    if not is_glob(path):
        return "images" if tf.io.gfile.isdir(path) or is_image_name(path) else "tfrecords"
    matches = tf.io.gfile.glob(path)
    images = [m for m in matches if is_image_name(m)]
    if images and len(images) < len(matches):
        other = next(m for m in matches if not is_image_name(m))
        raise NoUsableInput(f"{path} matches image files ({images[0]}, ...) and other files "
                            f"({other}, ...): narrow it to images (e.g. '*.jpg') or to TFRecords")
    return "images" if images else "tfrecords"


def list_image_files(path):
    """The sorted image files of a folder (recursively) or a glob; NoUsableInput when none."""
    if not is_glob(path) and tf.io.gfile.isdir(path):
        files = sorted(walk_files(path.rstrip("/")))
    else:
        files = sorted(tf.io.gfile.glob(path))
    images = [f for f in files if is_image_name(f)]
    others = [f for f in files if not is_image_name(f)]
    if not files and not is_glob(path) and not tf.io.gfile.exists(path):  # typed whole, not there
        raise NoUsableInput(f"{path}: no such file or folder")
    if not images:
        found = f"{len(others)} other file(s), e.g. {others[0]}" if others else "nothing"
        raise NoUsableInput(f"{path} has no image files: expected files named "
                            f"{', '.join(IMAGE_EXTENSIONS)} (any case); found {found}")
    if others:
        _LOGGER.warning("Skipped %d file(s) under %s whose names are not images (%s): %s",
                        len(others), path, ", ".join(IMAGE_EXTENSIONS), name_some(others))
    return images


def walk_files(folder):
    """Every file below folder; names starting with '.' (hidden files and folders) are skipped."""
    for directory, subdirs, names in tf.io.gfile.walk(folder):
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        yield from (posixpath.join(directory, n) for n in names if not n.startswith("."))


def name_some(paths, shown=3):
    more = f", ... ({len(paths)} in all)" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def check_csv_path(path, flag="--predict_input", exists=None, isdir=None):
    """NoUsableInput unless path is a CSV file (not missing, not a folder); exists and isdir
    default to tf.io.gfile's (Beam's route passes FileSystems-based ones)."""
    if (isdir or tf.io.gfile.isdir)(path):
        images_flag = "--input_images" if flag == "--input_csv" else flag
        raise NoUsableInput(f"{flag} {path} is a folder, not a CSV of {EXPECTED_CSV}; to classify "
                            f"the images in it, pass {images_flag} {path}")
    if not (exists or tf.io.gfile.exists)(path):
        raise NoUsableInput(f"{flag} {path} does not exist; expected a CSV of {EXPECTED_CSV}")


def parse_uri_and_label(line, csv_dir, origin=""):
    """(uri, label or None) of a 'uri' or 'uri,label' line; InputRejected otherwise."""
    fields = image_uris.split_csv_line(line, (1, 2), origin=origin)
    label = fields[1] if len(fields) == 2 and fields[1] else None
    return image_uris.resolve_uri(fields[0], csv_dir), label


def check_image(uri, jpeg):
    """Returns jpeg if serving's decoder accepts it; InputRejected naming uri otherwise."""
    if not jpeg:
        raise InputRejected(EMPTY_FILE, f"{uri}: 0 bytes")
    try:
        image_ops.decode_image(tf.constant(jpeg))
    except tf.errors.InvalidArgumentError as err:
        raise InputRejected(CORRUPT_IMAGE, f"{uri}: {summarize_decode_error(err)}") from None
    return jpeg


def summarize_decode_error(err):
    """TF's message without its '{{function_node ...}}' prefix and '[Op:...]' suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", err.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", text).strip()


def open_binary(path):
    return tf.io.gfile.GFile(path, "rb")


def load_uri(uri, label=None):
    """InputImage for one URI (local or gs://): read, then checked."""
    try:
        return InputImage(uri, check_image(uri, image_uris.read_image_bytes(uri, open_binary)),
                          label=label)
    except InputRejected as err:
        return InputImage(uri, error=(err.reason, err.detail), label=label)


def read_csv_uris(path):
    """Yields (uri, label or None), or an InputImage error for a malformed line, per line."""
    csv_dir = posixpath.dirname(path)
    for origin, line in image_uris.read_csv_lines(path, open_binary):
        try:
            yield parse_uri_and_label(line, csv_dir, origin)
        except InputRejected as err:
            yield InputImage(origin, error=(err.reason, err.detail))


def read_tfrecord_images(file_pattern):
    """A checked InputImage per record of the TFRecords matching file_pattern (an iterator);
    NoUsableInput at once when nothing matches."""
    paths = sorted(tf.io.gfile.glob(file_pattern))
    if not paths:
        raise NoUsableInput(f"{file_pattern} matches no files; expected a CSV of {EXPECTED_CSV}, "
                            f"a folder or glob of images, or a TFRecord glob")
    return iter_records(paths)


def iter_records(paths):
    for path in paths:
        for number, record in enumerate(tf.compat.v1.io.tf_record_iterator(path)):
            yield image_from_record(record, f"{path}:{number}")


def image_from_record(record, fallback_uri):
    """A checked InputImage of one serialized Example (common/record_schema.py schema).

    Its uri is the record's image/filename, or fallback_uri when that is empty.
    """
    example = record_schema.decode_example_proto(record)
    uri = example.get(record_schema.FILENAME, b"").decode() or fallback_uri
    label = example.get(record_schema.LABEL_TEXT, b"").decode() or None
    try:
        return InputImage(uri, check_image(uri, example.get(record_schema.ENCODED, b"")),
                          label=label)
    except InputRejected as err:
        return InputImage(uri, error=(err.reason, err.detail), label=label)


def read_inputs(path):
    """Every InputImage of a CSV ('uri[,label]' lines), a folder or glob of images, or a
    TFRecord glob, in input order. The path is checked at once (before the first image is
    asked for): NoUsableInput when it can give no image."""
    kind = input_kind(path)
    if kind == "images":
        return (load_uri(uri) for uri in list_image_files(path))
    if kind == "tfrecords":
        return read_tfrecord_images(path)
    check_csv_path(path)
    return (item if isinstance(item, InputImage) else load_uri(*item)
            for item in read_csv_uris(path))


def check_some_usable(source, images, errors):
    """NoUsableInput unless some of `images` inputs of source were classified; errors:
    {reason: count} of the ones that were not."""
    if images > sum(errors.values()):
        return
    if not images:
        raise NoUsableInput(f"{source} gave no input rows or images; expected a CSV of "
                            f"{EXPECTED_CSV}, a folder or glob of images, or TFRecords")
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(errors.items()))
    raise NoUsableInput(f"none of the {images} input(s) of {source} is a usable image ({reasons}); "
                        f"nothing was written")


def main(argv):
    images = list(read_inputs(argv[1]))
    errors = [image for image in images if image.error]
    print(f"{len(images)} inputs, {len(images) - len(errors)} usable, {len(errors)} errors")
    for image in errors[:10]:
        print(image.uri, image.error)


if __name__ == "__main__":
    main(sys.argv)
