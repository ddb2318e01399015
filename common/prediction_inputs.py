"""Batch-prediction inputs: image URIs from a CSV or JPEGs from TFRecords, checked before any model.

Both batch routes (trainer/estimator/predict.py on the accelerator, serving/batch_predict.py
on Beam) read images here and check each one with the decoder serving uses
(common/image_ops.decode_image), so an unreadable or corrupt image becomes an
error record naming it instead of failing a whole batch in the graph.
Files are read with tf.io.gfile (local, gs://), not Beam's FileSystems: the
trainer imports this module, and importing Beam installs a root log handler
that silences the trainer's own logging.basicConfig.

    .venv/bin/python -m common.prediction_inputs work/demo/images/eval.csv   # count usable images
"""
import dataclasses
import posixpath
import re
import sys

import tensorflow as tf

from common import image_ops, image_uris, record_schema
from common.image_uris import CORRUPT_IMAGE, EMPTY_FILE, InputRejected


@dataclasses.dataclass(frozen=True)
class InputImage:
    uri: str            # where the image came from (for TFRecords: the record's image/filename)
    jpeg: bytes = None  # the file bytes; None when error is set
    error: tuple = None  # (reason, detail) when the image cannot be classified
    label: str = None   # the true class name when the input gives one (CSV label, record's text)


def is_csv(path):
    return path.lower().endswith(".csv")


def parse_uri_line(line, csv_dir, origin=""):
    """The URI of a 'uri' or 'uri,label' line; InputRejected otherwise."""
    return parse_uri_and_label(line, csv_dir, origin)[0]


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
    """Yields a checked InputImage per record of the TFRecords matching file_pattern."""
    paths = sorted(tf.io.gfile.glob(file_pattern))
    if not paths:
        raise ValueError(f"predict input {file_pattern!r} matches no files")
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
    """Every InputImage of a CSV ('uri[,label]' lines) or a TFRecord glob, in input order."""
    if not is_csv(path):
        yield from read_tfrecord_images(path)
        return
    if not tf.io.gfile.exists(path):
        raise ValueError(f"predict input {path!r} does not exist")
    for item in read_csv_uris(path):
        yield item if isinstance(item, InputImage) else load_uri(*item)


def main(argv):
    images = list(read_inputs(argv[1]))
    errors = [image for image in images if image.error]
    print(f"{len(images)} inputs, {len(images) - len(errors)} usable, {len(errors)} errors")
    for image in errors[:10]:
        print(image.uri, image.error)


if __name__ == "__main__":
    main(sys.argv)
