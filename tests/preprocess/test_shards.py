"""Temporary pieces, the shard plan and the byte-for-byte join (preprocess/shards.py).

    .venv/bin/python -m pytest tests/preprocess/test_shards.py
"""
import pytest

from preprocess import shards
from tests.preprocess.test_transforms import read_records


def piece(split, size, name, bucket=None):
    return {"split": split, "bucket": bucket, "bytes": size, "path": name}


def test_piece_writer_rolls_over_by_size_and_closes_least_recently_used(tmp_path):
    writer = shards.PieceWriter(str(tmp_path), piece_bytes=100, max_open=2)
    for i in range(6):  # 6 x 36 framed bytes into bucket 0: pieces of 3, 3
        writer.write("train", 0, b"x" * 20, i % 2, ("mode_l",) if i == 0 else ())
    writer.write("train", 1, b"one", 0, ())
    writer.write("eval", None, b"two", 1, ())
    writer.write("train", 2, b"three", 1, ())  # a third open piece closes train/1 first
    pieces = writer.close()
    assert [(p["split"], p["bucket"], p["records"]) for p in pieces] == [
        ("train", 0, 3), ("train", 0, 3), ("train", 1, 1), ("eval", None, 1), ("train", 2, 1)]
    assert pieces[0]["per_label"] == {0: 2, 1: 1} and pieces[0]["converted"] == {"mode_l": 1}
    assert pieces[0]["bytes"] == 108 == (tmp_path / pieces[0]["path"]).stat().st_size
    assert read_records(tmp_path / pieces[2]["path"]) == [b"one"]
    assert len({p["path"] for p in pieces}) == 5


def test_plan_by_size_keeps_whole_pieces_alone_and_packs_the_rest():
    target = shards.TARGET_SHARD_BYTES
    whole = [piece("train", target, "w0"), piece("train", target // 2, "w1")]
    small = [piece("train", target // 4, f"s{i}") for i in range(5)]  # 1.25 targets -> 2
    plan = shards.plan_shards(small + whole, ["train", "eval"])
    assert [(split, shard, count) for split, shard, count, _ in plan] == [
        ("eval", 0, 1), ("train", 0, 4), ("train", 1, 4), ("train", 2, 4), ("train", 3, 4)]
    members = {tuple(p["path"] for p in group) for *_, group in plan[1:]}
    assert ("w0",) in members and ("w1",) in members
    packed = sorted(sum(p["bytes"] for p in group) for *_, group in plan[1:]
                    if group[0]["path"].startswith("s"))
    assert packed == [2 * (target // 4), 3 * (target // 4)]
    assert sorted(p["path"] for *_, group in plan for p in group) == sorted(
        p["path"] for p in small + whole)
    assert plan[0][3] == []  # a split without records still gets its one (empty) shard


def test_plan_with_forced_count_uses_the_buckets():
    pieces = [piece("train", 10, "a", bucket=1), piece("train", 10, "b", bucket=1),
              piece("train", 10, "c", bucket=0)]
    plan = shards.plan_shards(pieces, ["train"], num_shards=3)
    assert [(shard, [p["path"] for p in members]) for _, shard, _, members in plan] == [
        (0, ["c"]), (1, ["a", "b"]), (2, [])]


def test_joined_pieces_are_one_valid_tfrecord_file(tmp_path):
    paths = []
    for i, payloads in enumerate([[b"a", b"bb"], [], [b"ccc"]]):
        paths.append(str(tmp_path / f"piece{i}"))
        shards.write_records(paths[-1], payloads)
    shards.join_files(str(tmp_path / "joined"), paths)
    assert read_records(tmp_path / "joined") == [b"a", b"bb", b"ccc"]
    tf = pytest.importorskip("tensorflow")
    assert list(tf.data.TFRecordDataset(str(tmp_path / "joined")).as_numpy_iterator()) == [
        b"a", b"bb", b"ccc"]


def test_a_single_piece_is_moved_and_a_retried_move_is_a_no_op(tmp_path):
    source, shard = str(tmp_path / "piece"), str(tmp_path / "train-00000-of-00001.tfrecord")
    shards.write_records(source, [b"a", b"bb"])
    shards.assemble_shard(shard, [source])
    assert not (tmp_path / "piece").exists()
    assert read_records(tmp_path / "train-00000-of-00001.tfrecord") == [b"a", b"bb"]
    shards.assemble_shard(shard, [source])  # the bundle retried after the move
    assert read_records(tmp_path / "train-00000-of-00001.tfrecord") == [b"a", b"bb"]
