"""The TFRecord schema: the one definition that the pipeline writes and the trainer reads.

Keys follow the ImageNet-style records that the TPU reference models read.
Labels are 0-based indices into the dataset's ``labels.txt``; there is no
1-based convention anywhere in this project.

    python -m common.record_schema DIR/train-00000-of-00004.tfrecord   # print a record
"""
import sys

# No TensorFlow import at module level: Beam workers import this module to
# write records, and importing TensorFlow costs every worker process ~10 s.

# Bump when a key, dtype or meaning changes; metadata.json records it and the
# trainer refuses data written with another version.
SCHEMA_VERSION = 1

ENCODED = "image/encoded"          # bytes: a JPEG, 3 channels, from this project's preprocessing;
                                   # the trainer also reads what the serving decoder reads (PNG, GIF, BMP)
FORMAT = "image/format"            # bytes: b"JPEG" from this project; informational, never trusted
HEIGHT = "image/height"            # int64: pixels
WIDTH = "image/width"              # int64: pixels
CHANNELS = "image/channels"        # int64: always 3
LABEL = "image/class/label"        # int64: 0-based index into labels.txt
LABEL_TEXT = "image/class/text"    # bytes: the label string, labels[label]
FILENAME = "image/filename"        # bytes: the source URI the image came from

IMAGE_FORMAT = b"JPEG"
IMAGE_CHANNELS = 3


def parse_spec():
    """The parse spec shared by every reader.

    Only the keys the input pipeline needs are required; the rest default so
    that a reader never fails on provenance fields.
    """
    import tensorflow as tf
    return {
        ENCODED: tf.io.FixedLenFeature([], tf.string),
        LABEL: tf.io.FixedLenFeature([], tf.int64),
        FORMAT: tf.io.FixedLenFeature([], tf.string, default_value=IMAGE_FORMAT),
        HEIGHT: tf.io.FixedLenFeature([], tf.int64, default_value=0),
        WIDTH: tf.io.FixedLenFeature([], tf.int64, default_value=0),
        CHANNELS: tf.io.FixedLenFeature([], tf.int64, default_value=IMAGE_CHANNELS),
        LABEL_TEXT: tf.io.FixedLenFeature([], tf.string, default_value=b""),
        FILENAME: tf.io.FixedLenFeature([], tf.string, default_value=b""),
    }


# tf.train.Example wire format, written directly (protobuf encoding rules):
#   Example  { Features features = 1; }
#   Features { map<string, Feature> feature = 1; }   map entry: key = 1, value = 2
#   Feature  { BytesList bytes_list = 1; Int64List int64_list = 3; }
#   BytesList { repeated bytes value = 1; }  Int64List { repeated int64 value = 1 [packed]; }
# Each message is built as a list of byte strings with its length known, and
# joined once at the end: the JPEG bytes are copied once, not once per level.
_SMALL_VARINTS = tuple(bytes((value,)) for value in range(0x80))  # one byte each


def _varint(value):
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]  # lengths of short strings, labels, tags
    value &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negatives
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field_number):
    """The key of a length-delimited field (wire type 2)."""
    return _varint(field_number << 3 | 2)


def _delimited(field_number, parts, size):
    """(parts, size) of field ``field_number`` holding ``parts`` (``size`` bytes in all)."""
    head = _tag(field_number) + _varint(size)
    return [head, *parts], len(head) + size


def _bytes_feature(value):
    return _delimited(1, *_delimited(1, [value], len(value)))


def _int64_feature(value):
    packed = _varint(int(value))
    return _delimited(3, *_delimited(1, [packed], len(packed)))


def _encode_key(key):
    """The key field (1) of a map entry, as one byte string."""
    key_bytes = key.encode("utf-8")
    return b"".join(_delimited(1, [key_bytes], len(key_bytes))[0])


def _map_entry(key, feature):
    """One Features.feature map entry: the key (field 1) and the Feature (field 2)."""
    key_part = _ENCODED_KEYS[key]
    value_parts, value_size = _delimited(2, *feature)
    return _delimited(1, [key_part, *value_parts], len(key_part) + value_size)


# The schema's keys, encoded once rather than for every record.
_ENCODED_KEYS = {key: _encode_key(key) for key in (
    ENCODED, FORMAT, HEIGHT, WIDTH, CHANNELS, LABEL, LABEL_TEXT, FILENAME)}
# Entries that are the same in every record, encoded once.
_FORMAT_ENTRY = _map_entry(FORMAT, _bytes_feature(IMAGE_FORMAT))
_CHANNELS_ENTRY = _map_entry(CHANNELS, _int64_feature(IMAGE_CHANNELS))


def make_example(jpeg_bytes, height, width, label, label_text, filename):
    """Returns a serialized tf.train.Example for one RGB JPEG image.

    Pure Python: safe and cheap in a Beam worker, with no TensorFlow import.
    tests/test_schema.py checks it parses back with tf.train.Example and the parse spec.
    """
    entries = (
        _map_entry(ENCODED, _bytes_feature(jpeg_bytes)),
        _FORMAT_ENTRY,
        _map_entry(HEIGHT, _int64_feature(height)),
        _map_entry(WIDTH, _int64_feature(width)),
        _CHANNELS_ENTRY,
        _map_entry(LABEL, _int64_feature(label)),
        _map_entry(LABEL_TEXT, _bytes_feature(label_text.encode("utf-8"))),
        _map_entry(FILENAME, _bytes_feature(filename.encode("utf-8"))),
    )
    parts, size = [], 0
    for entry_parts, entry_size in entries:
        parts += entry_parts
        size += entry_size
    example_parts, _ = _delimited(1, parts, size)
    return b"".join(example_parts)


def parse_example(serialized):
    """Parses one serialized Example (a scalar string tensor) into a dict of tensors."""
    import tensorflow as tf
    return tf.io.parse_single_example(serialized, parse_spec())


def parse_example_batch(serialized):
    """Parses a [batch] string tensor of Examples; faster than per-record parsing."""
    import tensorflow as tf
    return tf.io.parse_example(serialized, parse_spec())


def decode_example_proto(serialized):
    """Returns a plain dict of Python values for one serialized Example (for tools and tests)."""
    import tensorflow as tf
    example = tf.train.Example.FromString(serialized)
    out = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value)
        out[key] = values[0] if len(values) == 1 else values
    return out


def main(argv):
    import tensorflow as tf
    for path in argv[1:]:
        for raw in tf.data.TFRecordDataset(path).take(1):
            record = decode_example_proto(raw.numpy())
            record[ENCODED] = f"<{len(record[ENCODED])} bytes>"
            print(path, record)


if __name__ == "__main__":
    main(sys.argv)
