"""The TFRecord schema: the one definition that the pipeline writes and the trainer reads.

Keys follow the ImageNet-style records that the TPU reference models read.
Labels are 0-based indices into the dataset's ``labels.txt``; there is no
1-based convention anywhere in this project.

    python -m trainer.features DIR/train-00000-of-00004.tfrecord   # print a record
"""
import sys

import tensorflow as tf

# Bump when a key, dtype or meaning changes; metadata.json records it and the
# trainer refuses data written with another version.
SCHEMA_VERSION = 1

ENCODED = "image/encoded"          # bytes: a baseline/progressive JPEG, 3 channels
FORMAT = "image/format"            # bytes: always b"JPEG"
HEIGHT = "image/height"            # int64: pixels
WIDTH = "image/width"              # int64: pixels
CHANNELS = "image/channels"        # int64: always 3
LABEL = "image/class/label"        # int64: 0-based index into labels.txt
LABEL_TEXT = "image/class/text"    # bytes: the label string, labels[label]
FILENAME = "image/filename"        # bytes: the source URI the image came from

IMAGE_FORMAT = b"JPEG"
IMAGE_CHANNELS = 3

# Parse spec shared by every reader. Only the keys the input pipeline needs are
# required; the rest default so that a reader never fails on provenance fields.
PARSE_SPEC = {
    ENCODED: tf.io.FixedLenFeature([], tf.string),
    LABEL: tf.io.FixedLenFeature([], tf.int64),
    FORMAT: tf.io.FixedLenFeature([], tf.string, default_value=IMAGE_FORMAT),
    HEIGHT: tf.io.FixedLenFeature([], tf.int64, default_value=0),
    WIDTH: tf.io.FixedLenFeature([], tf.int64, default_value=0),
    CHANNELS: tf.io.FixedLenFeature([], tf.int64, default_value=IMAGE_CHANNELS),
    LABEL_TEXT: tf.io.FixedLenFeature([], tf.string, default_value=b""),
    FILENAME: tf.io.FixedLenFeature([], tf.string, default_value=b""),
}


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def make_example(jpeg_bytes, height, width, label, label_text, filename):
    """Returns a serialized tf.train.Example for one RGB JPEG image.

    Pure protobuf work: safe to call in a Beam worker without a TF session.
    """
    feature = {
        ENCODED: _bytes(jpeg_bytes),
        FORMAT: _bytes(IMAGE_FORMAT),
        HEIGHT: _int64(int(height)),
        WIDTH: _int64(int(width)),
        CHANNELS: _int64(IMAGE_CHANNELS),
        LABEL: _int64(int(label)),
        LABEL_TEXT: _bytes(label_text.encode("utf-8")),
        FILENAME: _bytes(filename.encode("utf-8")),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_example(serialized):
    """Parses one serialized Example (a scalar string tensor) into a dict of tensors."""
    return tf.io.parse_single_example(serialized, PARSE_SPEC)


def parse_example_batch(serialized):
    """Parses a [batch] string tensor of Examples; faster than per-record parsing."""
    return tf.io.parse_example(serialized, PARSE_SPEC)


def decode_example_proto(serialized):
    """Returns a plain dict of Python values for one serialized Example (for tools and tests)."""
    example = tf.train.Example.FromString(serialized)
    out = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value)
        out[key] = values[0] if len(values) == 1 else values
    return out


def main(argv):
    for path in argv[1:]:
        for raw in tf.data.TFRecordDataset(path).take(1):
            record = decode_example_proto(raw.numpy())
            record[ENCODED] = f"<{len(record[ENCODED])} bytes>"
            print(path, record)


if __name__ == "__main__":
    main(sys.argv)
