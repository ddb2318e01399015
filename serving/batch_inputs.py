"""Batch-prediction inputs: image URIs from a CSV or JPEGs from TFRecords, checked before any model.

Both batch routes (trainer/predict.py on the accelerator, serving/batch_predict.py
on Beam) read images here and check each one with the decoder serving uses
(trainer/image_ops.decode_image), so an unreadable or corrupt image becomes an
error record naming it instead of failing a whole batch in the graph.
Files are read with tf.io.gfile (local, gs://), not Beam's FileSystems: the
trainer imports this module, and importing Beam installs a root log handler
that silences the trainer's own logging.basicConfig.

    .venv/bin/python -m serving.batch_inputs work/demo/images/eval.csv   # count usable images
"""
import csv
import dataclasses
import posixpath
import re
import sys

import tensorflow as tf

from trainer import features, image_ops

# Error reasons of the records that got no prediction; the first three are
# preprocess/sources.py's names for the same problems.
MALFORMED_CSV_LINE = "malformed_csv_line"
MISSING_FILE = "missing_file"
UNREADABLE_FILE = "unreadable_file"
EMPTY_FILE = "empty_file"
CORRUPT_IMAGE = "corrupt_image"  # not decodable by the serving decoder


@dataclasses.dataclass(frozen=True)
class InputImage:
    uri: str            # where the image came from (for TFRecords: the record's image/filename)
    jpeg: bytes = None  # the file bytes; None when error is set
    error: tuple = None  # (reason, detail) when the image cannot be classified


class ImageUnusable(ValueError):
    """The bytes cannot be classified; reason is one of the constants above."""

    def __init__(self, reason, detail):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def is_csv(path):
    return path.lower().endswith(".csv")


def parse_uri_line(line, csv_dir):
    """The URI of a 'uri' or 'uri,label' line (the label is ignored); ImageUnusable otherwise."""
    try:
        fields = [field.strip() for field in next(csv.reader([line]))]
    except csv.Error as err:
        raise ImageUnusable(MALFORMED_CSV_LINE, f"{err}: {line!r}") from err
    if len(fields) not in (1, 2) or not fields[0]:
        raise ImageUnusable(MALFORMED_CSV_LINE,
                            f"expected 'uri' or 'uri,label', got {len(fields)} field(s): {line!r}")
    return resolve_uri(fields[0], csv_dir)


def resolve_uri(uri, base_dir):
    """Absolute and scheme URIs stay as they are; others are relative to the CSV's folder."""
    if "://" in uri or uri.startswith("/"):
        return uri
    return posixpath.join(base_dir, uri)


def check_image(uri, jpeg):
    """Returns jpeg if serving's decoder accepts it; ImageUnusable naming uri otherwise."""
    if not jpeg:
        raise ImageUnusable(EMPTY_FILE, f"{uri}: 0 bytes")
    try:
        image_ops.decode_image(tf.constant(jpeg))
    except tf.errors.InvalidArgumentError as err:
        raise ImageUnusable(CORRUPT_IMAGE, f"{uri}: {summarize_decode_error(err)}") from None
    return jpeg


def summarize_decode_error(err):
    """TF's message without its '{{function_node ...}}' prefix and '[Op:...]' suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", err.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", text).strip()


def read_image_bytes(uri):
    """The file's bytes; ImageUnusable(missing_file | unreadable_file) naming uri."""
    try:
        with tf.io.gfile.GFile(uri, "rb") as f:
            return f.read()
    except tf.errors.NotFoundError as err:
        raise ImageUnusable(MISSING_FILE, name_uri(uri, err.message)) from None
    except tf.errors.OpError as err:
        raise ImageUnusable(UNREADABLE_FILE, name_uri(uri, err.message)) from None


def name_uri(uri, message):
    """message, prefixed with uri unless TF's message already names it."""
    return message if uri in message else f"{uri}: {message}"


def load_uri(uri):
    """InputImage for one URI (local or gs://): read, then checked."""
    try:
        return InputImage(uri, check_image(uri, read_image_bytes(uri)))
    except ImageUnusable as err:
        return InputImage(uri, error=(err.reason, err.detail))


def read_csv_lines(path):
    """Yields (origin, line) for every non-blank line of the CSV at path."""
    name = posixpath.basename(path)
    with tf.io.gfile.GFile(path) as f:
        for number, line in enumerate(f.read().splitlines(), start=1):
            if line.strip():
                yield f"{name}:{number}", line


def read_csv_uris(path):
    """Yields a URI string, or an InputImage error for a malformed line, per non-blank line."""
    csv_dir = posixpath.dirname(path)
    for origin, line in read_csv_lines(path):
        try:
            yield parse_uri_line(line, csv_dir)
        except ImageUnusable as err:
            yield InputImage(origin, error=(err.reason, err.detail))


def read_tfrecord_images(file_pattern):
    """Yields a checked InputImage per record of the TFRecords matching file_pattern."""
    paths = sorted(tf.io.gfile.glob(file_pattern))
    if not paths:
        raise ValueError(f"predict input {file_pattern!r} matches no files")
    for path in paths:
        for number, record in enumerate(tf.compat.v1.io.tf_record_iterator(path)):
            yield image_from_record(record, f"{path}:{number}")


def image_from_record(record, fallback_uri):
    """A checked InputImage of one serialized Example (trainer/features.py schema).

    Its uri is the record's image/filename, or fallback_uri when that is empty.
    """
    example = features.decode_example_proto(record)
    uri = example.get(features.FILENAME, b"").decode() or fallback_uri
    try:
        return InputImage(uri, check_image(uri, example.get(features.ENCODED, b"")))
    except ImageUnusable as err:
        return InputImage(uri, error=(err.reason, err.detail))


def read_inputs(path):
    """Every InputImage of a CSV ('uri[,label]' lines) or a TFRecord glob, in input order."""
    if not is_csv(path):
        yield from read_tfrecord_images(path)
        return
    if not tf.io.gfile.exists(path):
        raise ValueError(f"predict input {path!r} does not exist")
    for item in read_csv_uris(path):
        yield item if isinstance(item, InputImage) else load_uri(item)


def main(argv):
    images = list(read_inputs(argv[1]))
    errors = [image for image in images if image.error]
    print(f"{len(images)} inputs, {len(images) - len(errors)} usable, {len(errors)} errors")
    for image in errors[:10]:
        print(image.uri, image.error)


if __name__ == "__main__":
    main(sys.argv)
