"""The shared record schema and dataset metadata: round trips and rejections."""
import numpy as np
import pytest
import tensorflow as tf

from trainer import features, metadata


def test_example_round_trip_through_parse_spec(make_jpeg):
    jpeg = make_jpeg(20, 30, seed=3)
    serialized = features.make_example(jpeg, 20, 30, 2, "fish", "gs://b/x.jpg")
    parsed = features.parse_example(tf.constant(serialized))
    assert parsed[features.ENCODED].numpy() == jpeg
    assert parsed[features.LABEL].numpy() == 2
    assert parsed[features.LABEL_TEXT].numpy() == b"fish"
    assert parsed[features.FILENAME].numpy() == b"gs://b/x.jpg"
    assert (parsed[features.HEIGHT].numpy(), parsed[features.WIDTH].numpy()) == (20, 30)
    assert parsed[features.CHANNELS].numpy() == 3
    image = tf.io.decode_jpeg(parsed[features.ENCODED]).numpy()
    assert image.shape == (20, 30, 3)


def test_batch_parse_matches_single_parse(make_jpeg):
    records = [features.make_example(make_jpeg(seed=i), 32, 32, i, str(i), f"{i}.jpg")
               for i in range(3)]
    batch = features.parse_example_batch(tf.constant(records))
    np.testing.assert_array_equal(batch[features.LABEL].numpy(), [0, 1, 2])


def test_labels_text_round_trip_and_rejections():
    assert metadata.parse_labels(metadata.labels_to_text(["b", "a"])) == ["b", "a"]
    with pytest.raises(metadata.DatasetError, match="duplicate label 'a'"):
        metadata.parse_labels("a\nb\na\n")
    with pytest.raises(metadata.DatasetError, match="no labels"):
        metadata.parse_labels("\n\n")


def test_metadata_round_trip_and_version_check():
    meta = metadata.build_metadata(
        ["a", "b"], {"train": {"records": 5, "per_label": {"a": 3, "b": 2}, "shards": 1}},
        rejected={"corrupt": 1}, rows_read=6)
    parsed = metadata.parse_metadata(metadata.metadata_to_json(meta))
    assert metadata.split_size(parsed, "train") == 5
    assert parsed["rejected_total"] == 1
    with pytest.raises(metadata.DatasetError, match="split 'eval' not in"):
        metadata.split_size(parsed, "eval")
    stale = dict(meta, schema_version=0)
    with pytest.raises(metadata.DatasetError, match="schema_version=0"):
        metadata.parse_metadata(metadata.metadata_to_json(stale))


def test_fixture_dataset_is_readable(write_tfrecord_dataset):
    data = write_tfrecord_dataset({"train": 7})
    files = sorted(str(p) for p in data.glob("train-*"))
    labels = [features.parse_example(r)[features.LABEL].numpy()
              for r in tf.data.TFRecordDataset(files)]
    assert sorted(labels) == [0, 0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("label, text, size", [(0, "a", 1), (7, "daisy", 300), (2**40, "étoile", 70000)])
def test_hand_encoded_example_equals_tensorflows_own(label, text, size):
    jpeg = bytes(range(256)) * (size // 256 + 1)
    ours = tf.train.Example.FromString(
        features.make_example(jpeg, size, size + 1, label, text, "gs://b/é.jpg"))
    expected = tf.train.Example()
    feature = expected.features.feature
    feature[features.ENCODED].bytes_list.value.append(jpeg)
    feature[features.FORMAT].bytes_list.value.append(b"JPEG")
    feature[features.HEIGHT].int64_list.value.append(size)
    feature[features.WIDTH].int64_list.value.append(size + 1)
    feature[features.CHANNELS].int64_list.value.append(3)
    feature[features.LABEL].int64_list.value.append(label)
    feature[features.LABEL_TEXT].bytes_list.value.append(text.encode())
    feature[features.FILENAME].bytes_list.value.append("gs://b/é.jpg".encode())
    assert ours == expected


def test_writing_records_does_not_import_tensorflow():
    """Beam workers import the schema and the pipeline; TensorFlow would cost each ~10 s."""
    import subprocess
    import sys
    code = ("import sys, trainer.features, trainer.metadata, preprocess.transforms, preprocess.images;"
            "trainer.features.make_example(b'x', 1, 1, 0, 'a', 'f');"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
