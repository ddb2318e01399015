"""TFRecord shard files: how many, what they are called, the record framing, and
how temporary per-bundle pieces are planned into shards and joined.

A TFRecord file is a sequence of self-framed records, so the byte-for-byte
concatenation of TFRecord files is a valid TFRecord file: the pipeline writes
pieces next to the image work and assembles them into shards, and no image
bytes cross a shuffle. A piece of at least half a shard becomes a shard by a
rename (no bytes copied on a local disk, a server-side copy on GCS); only the
bundles' smaller remainders are copied into joined shards.
Written through Beam's FileSystems so local paths, gs:// and the GCS emulator
behave the same.

    python -m preprocess.shards 230e6        # shard count chosen for 230 MB of records
"""
import collections
import math
import shutil
import struct
import sys
import uuid

import google_crc32c

# ~100 MB per shard: each file is then one long sequential GCS read (GCS streams
# large objects well, and pays a round trip per small one), while a 1 GB dataset
# still gives tf.data 10 files to interleave in parallel.
TARGET_SHARD_BYTES = 100 * 1024 * 1024
# Far beyond any dataset this project targets; a cap against a mistyped --num_shards.
MAX_SHARDS = 10_000
# A temporary piece is closed when it reaches a shard's size, so that a bundle
# of N shards' worth of records leaves N pieces to rename and one remainder.
PIECE_BYTES = TARGET_SHARD_BYTES
# Pieces from this size up are a shard on their own (renamed, never copied).
WHOLE_PIECE_FRACTION = 0.5
# Open piece files per bundle (each holds a buffer, on GCS an upload thread);
# beyond this the least recently used is closed and its bucket starts a new piece.
MAX_OPEN_PIECES = 64
COPY_CHUNK_BYTES = 8 * 1024 * 1024


def filesystems():
    """Beam's FileSystems, imported on first use: the command judges its flags, and the lock
    query answers, before Beam loads (it takes seconds to import)."""
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def choose_num_shards(total_bytes, target_bytes=TARGET_SHARD_BYTES):
    """Fewest shards that keep each under ``target_bytes``; at least 1."""
    return max(1, min(MAX_SHARDS, math.ceil(total_bytes / target_bytes)))


def shard_path(output_dir, split, index, num_shards):
    """DIR/<split>-00003-of-00010.tfrecord (the names the trainer globs)."""
    return filesystems().join(output_dir, f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord")


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
    with filesystems().create(path, mime_type="application/octet-stream",
                              compression_type="uncompressed") as f:
        for record in records:
            f.write(frame_record(record))
            count += 1
    return count


def make_temp_dir(output_dir):
    """DIR/_temp-<random>: one per pipeline, so concurrent jobs never share pieces."""
    return filesystems().join(output_dir, f"_temp-{uuid.uuid4().hex[:12]}")


class PieceWriter:
    """Writes framed records into temporary piece files, one open piece per (split, bucket).

    ``close()`` returns one dict per piece: path, split, bucket, records,
    bytes, per_label ({label id: count}) and converted ({kind: count}).
    """

    def __init__(self, temp_dir, piece_bytes=PIECE_BYTES, max_open=MAX_OPEN_PIECES):
        self._temp_dir = temp_dir
        self._piece_bytes = piece_bytes
        self._max_open = max_open
        self._prefix = uuid.uuid4().hex[:12]  # a retried bundle never reuses a name
        self._open = collections.OrderedDict()  # (split, bucket) -> (file, stats)
        self._done = []

    def write(self, split, bucket, data, label, conversions):
        key = (split, bucket)
        if key not in self._open:
            self._start_piece(key)
        self._open.move_to_end(key)
        f, stats = self._open[key]
        framed = frame_record(data)
        f.write(framed)
        stats["records"] += 1
        stats["bytes"] += len(framed)
        stats["per_label"][label] += 1
        stats["converted"].update(conversions)
        if stats["bytes"] >= self._piece_bytes:
            self._finish_piece(key)

    def _start_piece(self, key):
        if len(self._open) >= self._max_open:
            self._finish_piece(next(iter(self._open)))
        split, bucket = key
        path = filesystems().join(self._temp_dir,
                                  f"{split}-{bucket}-{self._prefix}-{len(self._done):05d}")
        f = filesystems().create(path, mime_type="application/octet-stream",
                                 compression_type="uncompressed")
        stats = {"path": path, "split": split, "bucket": bucket, "records": 0, "bytes": 0,
                 "per_label": collections.Counter(), "converted": collections.Counter()}
        self._open[key] = (f, stats)

    def _finish_piece(self, key):
        f, stats = self._open.pop(key)
        f.close()
        self._done.append(dict(stats, per_label=dict(stats["per_label"]),
                               converted=dict(stats["converted"])))

    def close(self):
        while self._open:
            self._finish_piece(next(iter(self._open)))
        done, self._done = self._done, []
        return done


def plan_shards(pieces, splits, num_shards=None):
    """Pieces -> [(split, shard, count, [piece, ...])] for every shard of every split.

    num_shards None: shards by size (group_by_size). Otherwise a piece's
    bucket is its shard (the writer bucketed records by hash).
    """
    by_split = {split: [] for split in splits}
    for piece in pieces:
        by_split.setdefault(piece["split"], []).append(piece)
    plan = []
    for split, split_pieces in sorted(by_split.items()):
        if num_shards:
            groups = [[] for _ in range(num_shards)]
            for piece in split_pieces:
                groups[piece["bucket"]].append(piece)
        else:
            groups = group_by_size(split_pieces)
        plan.extend((split, shard, len(groups), sorted(members, key=piece_path))
                    for shard, members in enumerate(groups))
    return plan


def group_by_size(pieces, target_bytes=TARGET_SHARD_BYTES):
    """Pieces -> shards: a piece of >= WHOLE_PIECE_FRACTION of a shard is one alone; the
    smaller ones are packed into as few shards as their bytes need. At least one shard.

    The order is reproducible: by each shard's first piece path.
    """
    whole_bytes = WHOLE_PIECE_FRACTION * target_bytes
    groups = [[piece] for piece in pieces if piece["bytes"] >= whole_bytes]
    small = [piece for piece in pieces if piece["bytes"] < whole_bytes]
    if small or not groups:
        bins = [[] for _ in range(choose_num_shards(sum(p["bytes"] for p in small),
                                                    target_bytes))]
        pack_largest_first(small, bins)
        groups.extend(bins)
    return sorted(groups, key=lambda members: min(map(piece_path, members), default=""))


def piece_path(piece):
    return piece["path"]


def pack_largest_first(pieces, bins):
    """Greedy balanced packing; ties broken by path so a plan is reproducible."""
    sizes = [0] * len(bins)
    for piece in sorted(pieces, key=lambda p: (-p["bytes"], p["path"])):
        emptiest = min(range(len(bins)), key=sizes.__getitem__)
        bins[emptiest].append(piece)
        sizes[emptiest] += piece["bytes"]


def assemble_shard(path, sources):
    """Writes the shard ``path`` from its pieces: one piece is moved, several are joined."""
    if len(sources) == 1:
        move_file(sources[0], path)
    else:
        join_files(path, sources)


def move_file(source, path):
    """Renames ``source`` to ``path``. A retried move (source gone, target there) is done."""
    if not filesystems().exists(source) and filesystems().exists(path):
        return
    filesystems().rename([source], [path])


def join_files(path, sources):
    """Writes the byte-for-byte concatenation of ``sources`` (TFRecord files) to ``path``."""
    with filesystems().create(path, mime_type="application/octet-stream",
                              compression_type="uncompressed") as out:
        for source in sources:
            with filesystems().open(source, compression_type="uncompressed") as f:
                shutil.copyfileobj(f, out, COPY_CHUNK_BYTES)


def write_text(path, text):
    with filesystems().create(path, mime_type="text/plain",
                              compression_type="uncompressed") as f:
        f.write(text.encode("utf-8"))


def read_text(path):
    with filesystems().open(path, compression_type="uncompressed") as f:
        return f.read().decode("utf-8")


def delete_matching(patterns):
    """Deletes every file matching the glob patterns; returns the deleted paths."""
    paths = [metadata.path
             for result in filesystems().match(patterns)
             for metadata in result.metadata_list]
    if paths:
        filesystems().delete(paths)
    return paths


if __name__ == "__main__":
    print(choose_num_shards(float(sys.argv[1])))
