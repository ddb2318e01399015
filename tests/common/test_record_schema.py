"""The shared record schema and dataset metadata: round trips and rejections."""
import numpy as np
import pytest
import tensorflow as tf

from common import dataset_files, record_schema


def test_example_round_trip_through_parse_spec(make_jpeg):
    jpeg = make_jpeg(20, 30, seed=3)
    serialized = record_schema.make_example(jpeg, 20, 30, 2, "fish", "gs://b/x.jpg")
    parsed = record_schema.parse_example(tf.constant(serialized))
    assert parsed[record_schema.ENCODED].numpy() == jpeg
    assert parsed[record_schema.LABEL].numpy() == 2
    assert parsed[record_schema.LABEL_TEXT].numpy() == b"fish"
    assert parsed[record_schema.FILENAME].numpy() == b"gs://b/x.jpg"
    assert (parsed[record_schema.HEIGHT].numpy(), parsed[record_schema.WIDTH].numpy()) == (20, 30)
    assert parsed[record_schema.CHANNELS].numpy() == 3
    image = tf.io.decode_jpeg(parsed[record_schema.ENCODED]).numpy()
    assert image.shape == (20, 30, 3)


def test_batch_parse_matches_single_parse(make_jpeg):
    records = [record_schema.make_example(make_jpeg(seed=i), 32, 32, i, str(i), f"{i}.jpg")
               for i in range(3)]
    batch = record_schema.parse_example_batch(tf.constant(records))
    np.testing.assert_array_equal(batch[record_schema.LABEL].numpy(), [0, 1, 2])


def test_labels_text_round_trip_and_rejections():
    assert dataset_files.parse_labels(dataset_files.labels_to_text(["b", "a"])) == ["b", "a"]
    with pytest.raises(dataset_files.DatasetError, match="duplicate label 'a'"):
        dataset_files.parse_labels("a\nb\na\n")
    with pytest.raises(dataset_files.DatasetError, match="no labels"):
        dataset_files.parse_labels("\n\n")


def test_metadata_round_trip_and_version_check():
    meta = dataset_files.build_metadata(
        ["a", "b"], {"train": {"records": 5, "per_label": {"a": 3, "b": 2}, "shards": 1}},
        rejected={"corrupt": 1}, rows_read=6)
    parsed = dataset_files.parse_metadata(dataset_files.metadata_to_json(meta))
    assert dataset_files.split_size(parsed, "train") == 5
    assert parsed["rejected_total"] == 1
    with pytest.raises(dataset_files.DatasetError, match="split 'eval' not in"):
        dataset_files.split_size(parsed, "eval")
    stale = dict(meta, schema_version=0)
    with pytest.raises(dataset_files.DatasetError, match="schema_version=0"):
        dataset_files.parse_metadata(dataset_files.metadata_to_json(stale))


def test_fixture_dataset_is_readable(write_tfrecord_dataset):
    data = write_tfrecord_dataset({"train": 7})
    files = sorted(str(p) for p in data.glob("train-*"))
    labels = [record_schema.parse_example(r)[record_schema.LABEL].numpy()
              for r in tf.data.TFRecordDataset(files)]
    assert sorted(labels) == [0, 0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("label, text, size", [(0, "a", 1), (7, "daisy", 300), (2**40, "étoile", 70000)])
def test_hand_encoded_example_equals_tensorflows_own(label, text, size):
    jpeg = bytes(range(256)) * (size // 256 + 1)
    ours = tf.train.Example.FromString(
        record_schema.make_example(jpeg, size, size + 1, label, text, "gs://b/é.jpg"))
    expected = tf.train.Example()
    feature = expected.features.feature
    feature[record_schema.ENCODED].bytes_list.value.append(jpeg)
    feature[record_schema.FORMAT].bytes_list.value.append(b"JPEG")
    feature[record_schema.HEIGHT].int64_list.value.append(size)
    feature[record_schema.WIDTH].int64_list.value.append(size + 1)
    feature[record_schema.CHANNELS].int64_list.value.append(3)
    feature[record_schema.LABEL].int64_list.value.append(label)
    feature[record_schema.LABEL_TEXT].bytes_list.value.append(text.encode())
    feature[record_schema.FILENAME].bytes_list.value.append("gs://b/é.jpg".encode())
    assert ours == expected


@pytest.mark.process
def test_writing_records_does_not_import_tensorflow():
    """Beam workers import the schema and the pipeline; TensorFlow would cost each ~10 s."""
    import subprocess
    import sys
    code = ("import sys, common.record_schema, common.dataset_files, preprocess.transforms, preprocess.images;"
            "common.record_schema.make_example(b'x', 1, 1, 0, 'a', 'f');"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
