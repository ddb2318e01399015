"""Fixtures for batch prediction: one tiny trained run with an export, and a mixed input CSV.

The run is session-scoped: every test here reads the same checkpoint and export.

    .venv/bin/python -m pytest tests/predict
"""
import numpy as np
import pytest

LABELS = ("cat", "dog", "fish")
# A seconds-long train/eval/export round (as tests/trainer's TINY_FLAGS), 4-image predict batches.
RUN_FLAGS = {
    "image_size": "16", "cnn_filters": "4,8", "dense_units": "16", "train_batch_size": "8",
    "eval_batch_size": "8", "predict_batch_size": "4", "train_steps": "2", "steps_per_eval": "2",
    "warmup_steps": "1", "save_checkpoints_steps": "2", "num_warmup_images": "0",
    "shuffle_buffer": "16", "top_k": "5",
}
NUM_GOOD_IMAGES = 11  # not a multiple of predict_batch_size=4: the last batch is padded


def make_jpeg_bytes(seed, size=20):
    import tensorflow as tf
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


def write_dataset(directory, counts):
    """TFRecords through the shared schema, plus labels.txt and metadata.json."""
    import tensorflow as tf
    from trainer import features, metadata
    directory.mkdir()
    splits = {}
    for split, count in counts.items():
        with tf.io.TFRecordWriter(str(directory / f"{split}-00000-of-00001.tfrecord")) as writer:
            for i in range(count):
                writer.write(features.make_example(make_jpeg_bytes(hash((split, i)) % 9999), 20, 20,
                                                   i % 3, LABELS[i % 3], f"{split}/{i}.jpg"))
        splits[split] = {"records": count, "shards": 1,
                         "per_label": {label: len(range(k, count, 3)) for k, label in enumerate(LABELS)}}
    (directory / metadata.LABELS_FILE).write_text(metadata.labels_to_text(LABELS))
    meta = metadata.build_metadata(LABELS, splits, rejected={}, rows_read=sum(counts.values()))
    (directory / metadata.METADATA_FILE).write_text(metadata.metadata_to_json(meta))
    return directory


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """(output_dir, export_dir, data_dir) of a 2-step run on 16 train / 11 eval images."""
    from trainer import loop, task
    root = tmp_path_factory.mktemp("run")
    data = write_dataset(root / "data", {"train": 16, "eval": NUM_GOOD_IMAGES})
    flags = dict(RUN_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                 output_dir=str(root / "out"))
    export_dir = loop.run(task.parse_params([f"--{k}={v}" for k, v in flags.items()]))
    return root / "out", export_dir, data


@pytest.fixture(scope="session")
def input_csv(tmp_path_factory):
    """A CSV of 11 good images (relative and labelled or not), a missing, an empty and a corrupt file."""
    root = tmp_path_factory.mktemp("images")
    lines = []
    for i in range(NUM_GOOD_IMAGES):
        (root / f"{i}.jpg").write_bytes(make_jpeg_bytes(1000 + i, size=20 + i))
        lines.append(f"{i}.jpg,{LABELS[i % 3]}" if i % 2 else str(root / f"{i}.jpg"))
    (root / "empty.jpg").write_bytes(b"")
    (root / "corrupt.jpg").write_bytes(make_jpeg_bytes(7)[:40])
    lines[3:3] = ["missing.jpg,cat", "empty.jpg", f"{root}/corrupt.jpg,dog"]
    (root / "images.csv").write_text("\n".join(lines) + "\n")
    return root / "images.csv"
