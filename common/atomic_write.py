"""THE atomic write: a small file written aside, then renamed into place (local and gs://).

A reader sees the old or the new text, never a partial one.

Readers of such files run beside their writer: other tasks of a cluster read OUT/params.json
while the chief rewrites it, the report and an evaluator read OUT/eval_results.jsonl while
the trainer appends, a run killed mid-write must leave the previous file whole. Every such
file is written through write_text: params.json (trainer/chain.py), eval_results.jsonl
(trainer/run/eval_records.py), early_stopping.json (trainer/run/rounds.py) and
record_counts.json (trainer/data/byo_records.py). A folder published whole (an export, the
TFLite models, Kubernetes manifests) goes through common/publish.py.

Through tf.io.gfile, so the same call serves a local disk, gs:// and any other file system TF
knows: locally the rename is rename(2), atomic; gs:// has no rename, and TF's GCS file system
copies the temporary object onto the final one, which GCS replaces whole (an object is never
seen half written), then deletes the temporary one. The temporary name is unique to the call
(PATH.tmp-<random>), so two writers never write into each other's temporary file.

    .venv/bin/python -c "from common import atomic_write; atomic_write.write_text('/tmp/x.json', '{}')"
"""
import contextlib
import uuid

import tensorflow as tf


def write_text(path, text):
    """Writes text to path whole, through PATH.tmp-<random> renamed onto path (local or gs://).
    The folder must exist. A failed write deletes its temporary file and leaves path as it was."""
    staged = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with tf.io.gfile.GFile(staged, "w") as f:
            f.write(text)
        tf.io.gfile.rename(staged, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(Exception):  # gone already, or the disk itself failed
            tf.io.gfile.remove(staged)
        raise
