"""TFRecord shard files: how many, what they are called, and the record framing.

Written through Beam's FileSystems so local paths, gs:// and the GCS emulator
behave the same.

    python -m preprocess.shards 230e6        # shard count chosen for 230 MB of records
"""
import math
import struct
import sys

import google_crc32c
from apache_beam.io.filesystems import FileSystems

# ~100 MB per shard: each file is then one long sequential GCS read (GCS streams
# large objects well, and pays a round trip per small one), while a 1 GB dataset
# still gives tf.data 10 files to interleave in parallel.
TARGET_SHARD_BYTES = 100 * 1024 * 1024
# Far beyond any dataset this project targets; a cap against a mistyped --num_shards.
MAX_SHARDS = 10_000


def choose_num_shards(total_bytes, target_bytes=TARGET_SHARD_BYTES):
    """Fewest shards that keep each under ``target_bytes``; at least 1."""
    return max(1, min(MAX_SHARDS, math.ceil(total_bytes / target_bytes)))


def shard_path(output_dir, split, index, num_shards):
    """DIR/<split>-00003-of-00010.tfrecord (the names the trainer globs)."""
    return FileSystems.join(output_dir, f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord")


def shard_glob(output_dir, split):
    return FileSystems.join(output_dir, f"{split}-?????-of-?????.tfrecord")


def masked_crc32c(data):
    """The TFRecord checksum: CRC-32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data):
    """One TFRecord: uint64 length, crc(length), data, crc(data), little-endian."""
    length = struct.pack("<Q", len(data))
    return b"".join([length, struct.pack("<I", masked_crc32c(length)),
                     data, struct.pack("<I", masked_crc32c(data))])


def write_records(path, records):
    """Writes serialized records to one TFRecord file; returns the number written."""
    count = 0
    with FileSystems.create(path, mime_type="application/octet-stream",
                            compression_type="uncompressed") as f:
        for record in records:
            f.write(frame_record(record))
            count += 1
    return count


def write_text(path, text):
    with FileSystems.create(path, mime_type="text/plain",
                            compression_type="uncompressed") as f:
        f.write(text.encode("utf-8"))


def read_text(path):
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read().decode("utf-8")


def delete_matching(patterns):
    """Deletes every file matching the glob patterns; returns the deleted paths."""
    paths = [metadata.path
             for result in FileSystems.match(patterns)
             for metadata in result.metadata_list]
    if paths:
        FileSystems.delete(paths)
    return paths


if __name__ == "__main__":
    print(choose_num_shards(float(sys.argv[1])))
