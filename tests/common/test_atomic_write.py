"""The one atomic write (common/atomic_write.py): a reader sees the old or the new text, never
a part; a failed write leaves the old file and no temporary one; the same call on another TF
file system than the local disk (ram://, as gs:// goes through tf.io.gfile too); and no other
module writes a file aside and renames it itself.

    .venv/bin/python -m pytest tests/common/test_atomic_write.py
"""
import ast
import os
import pathlib
import threading

import pytest
import tensorflow as tf

from common import atomic_write

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_reader_sees_the_old_or_the_new_text_never_a_part(tmp_path):
    path = str(tmp_path / "params.json")
    texts = ["a" * 300_000 + "\n", "b" * 300_000 + "\n"]
    atomic_write.write_text(path, texts[0])
    seen, stop = set(), threading.Event()

    def read_while_written():
        while not stop.is_set():
            with open(path) as f:
                seen.add(f.read())

    reader = threading.Thread(target=read_while_written)
    reader.start()
    try:
        for i in range(40):
            atomic_write.write_text(path, texts[i % 2])
    finally:
        stop.set()
        reader.join()
    assert seen <= set(texts) and len(seen) >= 1
    assert os.listdir(tmp_path) == ["params.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = str(tmp_path / "eval_results.jsonl")
    atomic_write.write_text(path, "old\n")

    def failing_rename(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        atomic_write.write_text(path, "new\n")
    assert os.listdir(tmp_path) == ["eval_results.jsonl"]
    assert pathlib.Path(path).read_text() == "old\n"


def test_another_tf_file_system_than_the_local_disk(tmp_path):
    folder = f"ram://{tmp_path.name}/run"
    tf.io.gfile.makedirs(folder)
    for text in ("first\n", "second\n"):
        atomic_write.write_text(f"{folder}/params.json", text)
    assert tf.io.gfile.GFile(f"{folder}/params.json").read() == "second\n"
    assert tf.io.gfile.listdir(folder) == ["params.json"]


def writes_aside_itself(path):
    """The lines of a module that name a temporary '.tmp' file or an atomic writer of its own."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and ".tmp" in node.value)
            or (isinstance(node, ast.FunctionDef) and "atomic" in node.name)]


def test_no_other_module_writes_a_file_aside_and_renames_it_itself():
    found = {str(path.relative_to(ROOT)): writes_aside_itself(path)
             for package in ("common", "preprocess", "trainer", "serving")
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {
        "common/atomic_write.py": writes_aside_itself(ROOT / "common" / "atomic_write.py")}
    assert found["common/atomic_write.py"]  # the check finds the one that does
