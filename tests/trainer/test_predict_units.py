"""Focused tests of the batch-prediction pieces: padding count, records, CSV lines, config.

    .venv/bin/python -m pytest tests/trainer/test_predict_units.py
"""
import csv
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from common import prediction_inputs, prediction_records
from trainer.settings import checks, table
from trainer.run import params_file
from trainer.estimator import predict, predict_feed
from tests import user_commands


@pytest.mark.parametrize("num_images,batch_size,expected", [
    (11, 4, 12), (12, 4, 12), (1, 8, 8), (0, 8, 0), (17, 8, 24)])
def test_padded_count_is_whole_batches(num_images, batch_size, expected):
    assert predict.padded_count(num_images, {"batch_size": batch_size}) == expected


def test_predict_input_fn_pads_with_index_minus_one(make_jpeg):
    jpegs = [make_jpeg(seed=i, height=10 + i) for i in range(5)]
    dataset = predict.make_predict_input_fn(jpegs)(
        {"batch_size": 4, "image_size": 8, "use_bfloat16": False, "transpose_input": False})
    batches = list(dataset)
    assert [b["image"].shape.as_list() for b in batches] == [[4, 8, 8, 3]] * 2
    assert [i for b in batches for i in b[predict.INDEX_KEY].numpy()] == [0, 1, 2, 3, 4, -1, -1, -1]


def test_labelled_records_give_accuracy_and_confusion():
    records = [prediction_records.make_prediction_record(f"{i}.jpg", probs, ["cat", "dog"], 1, label)
               for i, (probs, label) in enumerate([([0.9, 0.1], "cat"), ([0.2, 0.8], "cat"),
                                                   ([0.3, 0.7], "dog"), ([0.6, 0.4], "owl"),
                                                   ([0.6, 0.4], None)])]
    records.append(prediction_records.make_error_record("x.jpg", "missing_file", "x", label="cat"))
    summary = prediction_records.summarize(records, class_names=["cat", "dog"])
    assert summary == {"images": 6, "predicted": 5, "errors": {"missing_file": 1},
                       "labelled": 3, "accuracy": round(2 / 3, 6), "unknown_labels": 1,
                       "confusion": {"cat": {"cat": 1, "dog": 1}, "dog": {"dog": 1}}}
    assert "accuracy" not in prediction_records.summarize(records[-2:])  # no labelled prediction


def test_prediction_record_ranks_top_k():
    record = prediction_records.make_prediction_record("a.jpg", [0.1, 0.7, 0.2], ["x", "y", "z"], 2)
    assert record == {"uri": "a.jpg", "class_index": 1, "class": "y",
                      "top_k": [{"class": "y", "probability": 0.7},
                                {"class": "z", "probability": 0.2}]}


@pytest.mark.parametrize("record,expected", [
    ({"uri": "a,b.jpg", "class_index": 0, "class": "x",
      "top_k": [{"class": "x", "probability": 0.75}, {"class": "y", "probability": 0.25}]},
     ["a,b.jpg", "0", "x", "0.75", "x;y", "0.75;0.25", "", ""]),
    (prediction_records.make_error_record("c.jpg", "corrupt_image", "bad", label="cat"),
     ["c.jpg", "", "", "", "", "", "corrupt_image: bad", "cat"]),
])
def test_csv_line_round_trips(record, expected):
    assert next(csv.reader(io.StringIO(prediction_records.to_csv_line(record)))) == expected


@pytest.mark.parametrize("line,expected", [
    ("a.jpg,cat", ("/d/a.jpg", "cat")), ("a.jpg", ("/d/a.jpg", None)), ("gs://b/a.jpg,", ("gs://b/a.jpg", None))])
def test_uri_lines_with_or_without_label(line, expected):
    assert prediction_inputs.parse_uri_and_label(line, "/d") == expected


@pytest.mark.parametrize("line", ["a.jpg,cat,extra", ",cat"])
def test_malformed_uri_line_is_named(line):
    with pytest.raises(prediction_inputs.InputRejected, match="malformed_csv_line"):
        prediction_inputs.parse_uri_and_label(line, "/d")


@pytest.mark.parametrize("overrides,message", [
    ({"mode": "predict"}, "needs --predict_input"),
    ({"predict_format": "xml"}, "predict_format='xml'"),
])
def test_bad_predict_settings_are_named(overrides, message):
    params = dict(table.DEFAULTS, output_dir="/tmp/x", **overrides)
    with pytest.raises(checks.ConfigError, match=message):
        checks.check_params(params, {})


@pytest.mark.parametrize("key,value", [
    ("predict_input", "a.csv"), ("predict_export_dir", "/e/1"), ("predict_output_dir", "/p"),
    ("predict_format", "csv")])
def test_one_prediction_command_does_not_steer_the_next(tmp_path, key, value):
    params_file.write_params(dict(table.DEFAULTS, output_dir=str(tmp_path), mode="predict", **{key: value}))
    saved = params_file.read_saved_params(str(tmp_path))
    assert key not in saved and "mode" not in saved
    assert saved["image_size"] == table.DEFAULTS["image_size"]  # model settings carry over


@pytest.mark.parametrize("num_images,num_hosts,replicas_per_host", [(11, 3, 2), (5, 4, 1)])
def test_predict_input_is_split_across_hosts_once_each(make_jpeg, fake_tpu_context, num_images,
                                                      num_hosts, replicas_per_host):
    jpegs = [make_jpeg(seed=i, height=9) for i in range(num_images)]
    input_fn = predict.make_predict_input_fn(jpegs)
    per_host = []
    for host in range(num_hosts):
        params = {"batch_size": 2, "image_size": 8, "use_bfloat16": False, "transpose_input": False,
                  "context": fake_tpu_context(host, num_hosts, replicas_per_host)}
        per_host.append([batch[predict.INDEX_KEY].numpy() for batch in input_fn(params)])
    assert len({len(batches) for batches in per_host}) == 1  # every host runs the same steps
    assert len(per_host[0]) % replicas_per_host == 0
    indices = [i for batches in per_host for batch in batches for i in batch if i >= 0]
    assert sorted(indices) == list(range(num_images))  # each image on exactly one host



# An earlier run in the output directory: 5 JSON-lines shards of 1 line, a CSV (header + 1 row)
# and a file no run writes. The reruns below write 5 records, 2 per shard (3 shards).
EARLIER_JSONL = [f"predictions-0000{i}-of-00005.jsonl" for i in range(5)]
EARLIER = dict({name: '{"uri": "old.jpg"}\n' for name in EARLIER_JSONL},
               **{"predictions.csv": "uri\nold.jpg\n", "predictions_by_hand.txt": "notes\n"})
NEW_FILES = {"jsonl": [f"predictions-0000{i}-of-00003.jsonl" for i in range(3)],
             "csv": ["predictions.csv"]}


@pytest.mark.parametrize("output_format,removed,kept_files,kept_log", [
    ("jsonl", 5, ["predictions.csv", "predictions_by_hand.txt"], "Kept 1 csv file(s)"),
    ("csv", 1, EARLIER_JSONL + ["predictions_by_hand.txt"], "Kept 5 jsonl file(s)")])
def test_write_records_replaces_only_its_own_format(tmp_path, caplog, output_format, removed,
                                                    kept_files, kept_log):
    for name, text in EARLIER.items():
        (tmp_path / name).write_text(text)
    records = [prediction_records.make_error_record(f"{i}.jpg", "corrupt_image", "bad") for i in range(5)]
    with caplog.at_level("INFO", logger="common.prediction_records"):
        summary = prediction_records.write_records(records, str(tmp_path), output_format, 2)
    assert sorted(os.listdir(tmp_path)) == sorted(kept_files + NEW_FILES[output_format] + ["summary.json"])
    assert [(tmp_path / name).read_text() for name in kept_files] == [EARLIER[n] for n in kept_files]
    new_text = "".join((tmp_path / name).read_text() for name in NEW_FILES[output_format])
    assert new_text.count("\n") == 5 + (output_format == "csv") and "old.jpg" not in new_text
    assert summary == json.loads((tmp_path / "summary.json").read_text()) == {
        "images": 5, "predicted": 0, "errors": {"corrupt_image": 5}, "format": output_format}
    messages = [record.getMessage() for record in caplog.records]
    pattern = prediction_records.output_pattern(f"{tmp_path}/predictions", output_format)
    assert [m for m in messages if m.startswith("Removed ")] == [
        f"Removed {removed} file(s) of an earlier {output_format} run matching {pattern}: "
        "this run's output replaces them"]
    assert len([m for m in messages if m.startswith(kept_log)]) == 1


def test_write_records_into_a_new_directory_removes_nothing(tmp_path, caplog):
    records = [prediction_records.make_error_record("a.jpg", "missing_file", "gone")]
    with caplog.at_level("INFO", logger="common.prediction_records"):
        prediction_records.write_records(records, str(tmp_path / "new"), "jsonl", 10)
    assert sorted(os.listdir(tmp_path / "new")) == ["predictions-00000-of-00001.jsonl", "summary.json"]
    assert caplog.records == []


def run_summary_command(output):
    """The command as a user runs it, where neither Beam nor TensorFlow can be imported: a local
    OUTPUT is answered before either loads."""
    return user_commands.run("common.prediction_records", output, timeout=120,
                             env=user_commands.user_env_without_beam())


@pytest.mark.process
def test_the_summary_command_reads_either_route_and_refuses_a_place_without_one(tmp_path):
    records = [prediction_records.make_error_record("a.jpg", "missing_file", "gone")]
    prediction_records.write_records(records, str(tmp_path / "run"), "jsonl", 10)
    (tmp_path / "beam.summary.json").write_text('{"images": 7}\n')  # batch_predict --output beam
    for output, images in ((tmp_path / "run", 1), (tmp_path / "beam", 7)):
        done = run_summary_command(output)
        assert done.returncode == 0 and json.loads(done.stdout)["images"] == images, done.stderr
    done = run_summary_command(tmp_path / "nothing")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path}/nothing has no finished prediction run: neither "
        f"{tmp_path}/nothing/summary.json nor {tmp_path}/nothing.summary.json exists"]


@pytest.fixture
def mixed_folder(tmp_path, make_jpeg):
    (tmp_path / "a.JPG").write_bytes(make_jpeg())
    (tmp_path / "b.png").write_bytes(make_jpeg(fmt="PNG"))
    (tmp_path / "eval-00000-of-00001.tfrecord").write_bytes(b"")
    (tmp_path / "images.csv").write_text("a.JPG\n")
    return tmp_path


@pytest.mark.parametrize("pattern,kind", [
    ("images.csv", "csv"), (".", "images"), ("*.JPG", "images"), ("[ab].*", "images"),
    ("eval-*", "tfrecords"), ("nothing-*", "tfrecords"), ("a.JPG", "images")])
def test_input_kind_by_what_the_path_names(mixed_folder, pattern, kind):
    assert prediction_inputs.input_kind(f"{mixed_folder}/{pattern}") == kind


def test_a_glob_of_images_and_other_files_is_refused(mixed_folder):
    with pytest.raises(prediction_inputs.NoUsableInput, match=r"matches image files .* and other files"):
        prediction_inputs.input_kind(f"{mixed_folder}/*")


def test_a_folder_lists_its_images_by_name(mixed_folder, caplog):
    with caplog.at_level("WARNING", logger="common.prediction_inputs"):
        files = prediction_inputs.list_image_files(str(mixed_folder))
    assert [os.path.basename(f) for f in files] == ["a.JPG", "b.png"]
    assert "Skipped 2 file(s)" in caplog.text and "images.csv" in caplog.text


def test_streamed_chunks_are_split_across_hosts_once_each(make_jpeg, fake_tpu_context):
    """One input streams chunks of 5, 0 and 3 images: each host yields the same batches for
    each chunk (its share, padded), and every image comes once, by its index over the run."""
    jpegs = [make_jpeg(seed=i, height=9) for i in range(8)]
    input_fn = predict.make_predict_input_fn(predict_feed.ChunkFeed([jpegs[:5], [], jpegs[5:]]))
    per_host = []
    for host in range(3):
        params = {"batch_size": 2, "image_size": 8, "use_bfloat16": False, "transpose_input": False,
                  "context": fake_tpu_context(host, 3, 1)}
        per_host.append([list(batch[predict.INDEX_KEY].numpy()) for batch in input_fn(params)])
    assert per_host == [[[0, 3], [5, -1]], [[1, 4], [6, -1]], [[2, -1], [7, -1]]]


def test_chunk_rows_come_back_per_chunk_in_order():
    feed = predict_feed.ChunkFeed([["a", "b"], [], ["c"]])
    rows = predict_feed.ChunkRows(feed.sizes)
    assert [feed.take(n, 1)[0] for n in range(3)] == [0, 2, 2] and feed.take(3, 1) is None
    assert rows.add(1, [1.0]) == []
    assert [None if c is None else c.tolist() for c in rows.add(0, [0.0])] == [[[0.0], [1.0]], None]
    with pytest.raises(RuntimeError, match="left 1 image"):
        rows.check_complete()
    assert [c.tolist() for c in rows.add(2, [2.0])] == [[[2.0]]]
    rows.check_complete()


def op_types(input_fn, params):
    """Every op type the input_fn's graph holds, those inside its dataset functions too."""
    with tf.Graph().as_default() as graph:
        input_fn(params)
    graph_def = graph.as_graph_def()
    return ({node.op for node in graph_def.node}
            | {node.op for function in graph_def.library.function for node in function.node_def})


class CountingEstimator:
    """estimator.predict's stand-in: builds each input_fn in a graph of its own and yields a
    probability row per real index, as TPUEstimator.predict would."""

    def __init__(self, params):
        self.params, self.inputs = params, []

    def predict(self, input_fn, checkpoint_path):
        self.inputs.append(op_types(input_fn, self.params))
        for batch in input_fn(self.params):
            for index in batch[predict.INDEX_KEY].numpy():
                yield {predict.INDEX_KEY: index, "probabilities": np.full([2], index, np.float32)}


def test_on_a_tpu_each_chunk_feeds_from_graph_constants_without_python(make_jpeg):
    # A TPU Node's input pipeline runs on a TPU host that has no Python: no generator there.
    jpegs = [make_jpeg(seed=i, height=9) for i in range(5)]
    params = {"batch_size": 2, "image_size": 8, "use_bfloat16": False, "transpose_input": False}
    estimator = CountingEstimator(params)
    chunks = list(predict.predict_with_estimator(estimator, [jpegs[:3], [], jpegs[3:]], None,
                                                 is_streamed=False))
    assert [None if c is None else c[:, 0].tolist() for c in chunks] == [[0, 1, 2], None, [0, 1]]
    assert len(estimator.inputs) == 2 and not any("PyFunc" in t for t in set().union(*estimator.inputs))
    streamed = op_types(predict.make_predict_input_fn(jpegs), params)
    assert any("PyFunc" in t for t in streamed)  # what the TPU path must not hold
