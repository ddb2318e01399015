"""Shared fixtures: real JPEGs made in the test, and tiny real TFRecord datasets.

    .venv/bin/python -m pytest tests
"""
import io
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from PIL import Image


def encode_image(array, fmt="JPEG", mode=None, **save_args):
    """Encodes a uint8 array ([h, w] or [h, w, c]) with PIL; returns the file bytes."""
    image = Image.fromarray(np.asarray(array, dtype=np.uint8))
    if mode:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save_args)
    return buffer.getvalue()


def pattern_image(height, width, seed, channels=3):
    """A deterministic image with structure (gradients + noise), not a flat colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = (x * 255 // max(width - 1, 1) + y * 255 // max(height - 1, 1)) // 2
    planes = [(base + rng.integers(0, 40, size=base.shape) + 60 * c) % 256
              for c in range(channels)]
    image = np.stack(planes, axis=-1).astype(np.uint8)
    return image[..., 0] if channels == 1 else image


@pytest.fixture
def make_jpeg():
    """make_jpeg(height=32, width=32, seed=0, mode=None) -> JPEG bytes."""
    def _make(height=32, width=32, seed=0, mode=None, fmt="JPEG"):
        return encode_image(pattern_image(height, width, seed), fmt=fmt, mode=mode)
    return _make


@pytest.fixture
def write_tfrecord_dataset(tmp_path):
    """write_tfrecord_dataset(counts={"train": 40, "eval": 11}, labels=("a","b","c"), ...)

    Writes real TFRecord shards plus labels.txt and metadata.json through the
    shared schema and returns the dataset directory (a pathlib.Path).
    """
    import tensorflow as tf
    from trainer import features, metadata

    def _write(counts, labels=("cat", "dog", "fish"), size=24, shards=2, name="data"):
        out = tmp_path / name
        out.mkdir()
        splits = {}
        for split, count in counts.items():
            per_label = {label: 0 for label in labels}
            writers = [tf.io.TFRecordWriter(str(out / f"{split}-{i:05d}-of-{shards:05d}.tfrecord"))
                       for i in range(shards)]
            for i in range(count):
                label = i % len(labels)
                per_label[labels[label]] += 1
                jpeg = encode_image(pattern_image(size, size, seed=hash((split, i)) % 10_000))
                writers[i % shards].write(features.make_example(
                    jpeg, size, size, label, labels[label], f"{split}/{i}.jpg"))
            for writer in writers:
                writer.close()
            splits[split] = {"records": count, "per_label": per_label, "shards": shards}
        (out / metadata.LABELS_FILE).write_text(metadata.labels_to_text(labels))
        meta = metadata.build_metadata(labels, splits, rejected={}, rows_read=sum(counts.values()))
        (out / metadata.METADATA_FILE).write_text(metadata.metadata_to_json(meta))
        return out
    return _write


class FakeTPUContext:
    """The one TPUContext method the input pipelines call, for a host of a multi-host slice."""

    def __init__(self, host, num_hosts, replicas_per_host):
        self.deployment = (f"/job:worker/task:{host}/device:CPU:0", host, num_hosts,
                           replicas_per_host)

    def current_input_fn_deployment(self):
        return self.deployment


@pytest.fixture
def fake_tpu_context():
    """FakeTPUContext(host, num_hosts, replicas_per_host): per-host sharding without a TPU."""
    return FakeTPUContext


@pytest.fixture(scope="session")
def repo_root():
    return pathlib.Path(__file__).resolve().parents[1]
