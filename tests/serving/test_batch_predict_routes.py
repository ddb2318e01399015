"""Both batch routes end to end on a tiny trained run: padding, bad images, CSV and TFRecord
inputs, a local Beam run, agreement with the served model to 1e-5, and reruns into a place
that holds an earlier run's files (its format's files replaced, the other format's kept).
Every route runs in this process; only the refusal of a bad flag is the real command's.

    .venv/bin/python -m pytest tests/serving/test_batch_predict_routes.py
"""
import csv
import glob
import json
import logging
import os

import numpy as np
import pytest

from common import export_predictor

from serving import batch_predict
from tests import user_commands
from tests.engines import HAS_ESTIMATOR
from trainer import chain, task

BAD = {"missing.jpg": "missing_file", "empty.jpg": "empty_file", "corrupt.jpg": "corrupt_image"}


def run_trainer_predict(output_dir, predict_input, predictions_dir, *extra):
    argv = [f"--output_dir={output_dir}", "--mode=predict", f"--predict_input={predict_input}",
            f"--predict_output_dir={predictions_dir}", *extra]
    params = chain.parse_params(argv)
    return task.load_engine(params["engine"])(params)  # the run's engine (.venv-keras: Keras)


def read_jsonl(pattern):
    return [json.loads(line) for path in sorted(glob.glob(pattern)) for line in open(path)]


def without_probabilities(record):
    return dict(record, top_k=[i["class"] for i in record.get("top_k", [])])


def probabilities_by_uri(records, labels):
    """{uri: [num_classes] probabilities} from records whose top_k covers every class."""
    out = {}
    for record in records:
        if "error" not in record:
            by_name = {item["class"]: item["probability"] for item in record["top_k"]}
            out[record["uri"]] = np.array([by_name[label] for label in labels])
    return out


@pytest.fixture(scope="module")
def checkpoint_records(trained_run, input_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt_preds")
    summary = run_trainer_predict(trained_run[0], input_csv, out)
    return summary, read_jsonl(f"{out}/predictions-*.jsonl")


@pytest.fixture(scope="module")
def beam_records(trained_run, input_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("beam_preds")
    summary = batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={trained_run[1]}",
                                 f"--output={out}/predictions", "--max_batch_size=4",
                                 "--direct_num_workers=2"])
    return summary, read_jsonl(f"{out}/predictions-*.jsonl")


@pytest.mark.trains
def test_checkpoint_route_pads_and_gives_one_line_per_input(checkpoint_records):
    summary, records = checkpoint_records
    assert len(records) == 11 + len(BAD)  # 11 = 2 batches of 4 + 3, padding dropped
    assert len({r["uri"] for r in records}) == len(records)
    assert summary["predicted"] == 11 and summary["errors"] == {
        "corrupt_image": 1, "empty_file": 1, "missing_file": 1}
    predicted = [r for r in records if "error" not in r]
    assert all(len(r["top_k"]) == 3 and r["class"] == r["top_k"][0]["class"] for r in predicted)
    assert all(abs(sum(i["probability"] for i in r["top_k"]) - 1) < 1e-5 for r in predicted)


@pytest.mark.trains
@pytest.mark.parametrize("route", ["checkpoint", "beam"])
def test_bad_images_are_error_lines_naming_the_file(route, checkpoint_records, beam_records):
    _, records = checkpoint_records if route == "checkpoint" else beam_records
    errors = {os.path.basename(r["uri"]): r["error"]["reason"] for r in records if "error" in r}
    assert errors == BAD
    assert all(r["uri"] in r["error"]["detail"] for r in records if "error" in r)


@pytest.mark.trains
def test_beam_summary_counts_predictions_and_errors(beam_records):
    summary, records = beam_records
    assert {key: summary[key] for key in ("predicted", "errors")} == {
        "predicted": 11, "errors": {"corrupt_image": 1, "empty_file": 1, "missing_file": 1}}
    assert len(records) == 14
    labelled = [r for r in records if "label" in r and "error" not in r]  # 'uri,label' lines
    assert summary["labelled"] == len(labelled) == 5 and summary["unknown_labels"] == 0
    assert summary["accuracy"] == round(sum(r["label"] == r["class"] for r in labelled) / 5, 6)
    assert summary["confusion"] == {
        true: {predicted: sum(1 for r in labelled if (r["label"], r["class"]) == (true, predicted))
               for predicted in {r["class"] for r in labelled if r["label"] == true}}
        for true in {r["label"] for r in labelled}}


@pytest.mark.trains
def test_routes_agree_with_the_served_model(trained_run, input_csv, checkpoint_records,
                                            beam_records, tmp_path):
    export = export_predictor.load_export(trained_run[1])
    run_trainer_predict(trained_run[0], input_csv, tmp_path, f"--predict_export_dir={trained_run[1]}")
    routes = {"checkpoint": checkpoint_records[1], "beam": beam_records[1],
              "export": read_jsonl(f"{tmp_path}/predictions-*.jsonl")}
    by_route = {name: probabilities_by_uri(records, export.labels) for name, records in routes.items()}
    uris = sorted(by_route["checkpoint"])
    jpegs = [open(uri, "rb").read() for uri in uris]
    served = export_predictor.predict_probabilities(export, jpegs)
    for name, probabilities in by_route.items():
        assert sorted(probabilities) == uris, name
        got = np.stack([probabilities[uri] for uri in uris])
        np.testing.assert_allclose(got, served, atol=1e-5, err_msg=name)
        assert (got.argmax(1) == served.argmax(1)).all(), name


@pytest.mark.trains
def test_beam_calls_the_model_with_at_most_max_batch_size_images(trained_run, input_csv,
                                                                 beam_records, tmp_path, monkeypatch):
    """A Beam element holds several model batches (batch_transforms.BATCHES_PER_ELEMENT);
    the model still sees --max_batch_size images at a time, and the records are the same."""
    sizes, predict = [], export_predictor.predict_probabilities
    monkeypatch.setattr(export_predictor, "predict_probabilities",
                        lambda export, jpegs: sizes.append(len(jpegs)) or predict(export, jpegs))
    summary = batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={trained_run[1]}",
                                 f"--output={tmp_path}/predictions", "--max_batch_size=2",
                                 "--direct_num_workers=1"])
    assert sorted(sizes, reverse=True) == [2] * 5 + [1]  # 11 images: 5 calls of 2 and 1 of 1
    assert summary == beam_records[0]
    key = lambda record: record["uri"]  # noqa: E731
    smaller, larger = (sorted(records, key=key) for records in (
        read_jsonl(f"{tmp_path}/predictions-*.jsonl"), beam_records[1]))
    # The same records; a probability may differ in its last float32 bit with the batch size.
    assert [without_probabilities(r) for r in smaller] == [without_probabilities(r) for r in larger]
    np.testing.assert_allclose([i["probability"] for r in smaller for i in r.get("top_k", [])],
                               [i["probability"] for r in larger for i in r.get("top_k", [])], atol=1e-6)


@pytest.mark.trains
def test_tfrecord_input_and_csv_format(trained_run, tmp_path):
    output_dir, _, data = trained_run
    summary = run_trainer_predict(output_dir, f"{data}/eval-*", tmp_path, "--format=csv")
    with open(tmp_path / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert summary["predicted"] == 11 and summary["errors"] == {}
    assert [row["uri"] for row in rows] == [f"eval/{i}.jpg" for i in range(11)]
    assert all(row["class"] in ("cat", "dog", "fish") and not row["error"] for row in rows)


@pytest.mark.trains
def test_beam_reads_tfrecords(trained_run, tmp_path):
    _, export_dir, data = trained_run
    summary = batch_predict.run([f"--input_tfrecord={data}/eval-*", f"--model_dir={export_dir}",
                                 f"--output={tmp_path}/p", "--format=csv", "--direct_num_workers=1"])
    with open(tmp_path / "p.csv") as f:
        rows = list(csv.DictReader(f))
    assert {key: summary[key] for key in ("predicted", "errors", "labelled")} == {
        "predicted": 11, "errors": {}, "labelled": 11}  # labels: the records' image/class/text
    assert sorted(row["uri"] for row in rows) == sorted(f"eval/{i}.jpg" for i in range(11))
    assert summary["accuracy"] == round(sum(r["label"] == r["class"] for r in rows) / 11, 6)


def counted_estimator_predict_calls(monkeypatch):
    """The list each TPUEstimator.predict call appends its checkpoint_path to, from now on."""
    import tensorflow as tf
    estimator_class = tf.compat.v1.estimator.tpu.TPUEstimator
    calls, predict = [], estimator_class.predict

    def counted_predict(self, *args, **kwargs):
        calls.append(kwargs.get("checkpoint_path"))
        return predict(self, *args, **kwargs)
    monkeypatch.setattr(estimator_class, "predict", counted_predict)
    return calls


@pytest.mark.trains
def test_chunked_prediction_matches_one_chunk(trained_run, input_csv, checkpoint_records, tmp_path,
                                              monkeypatch):
    """Chunks of 3 images per predict call (not a multiple of the batch of 4; the middle one all
    unusable images: missing, empty, corrupt): the same lines in the same order, the same
    summary, as one big chunk; on the Estimator engine ONE TPUEstimator.predict call (one
    graph, session and checkpoint restore) streams them all."""
    calls = counted_estimator_predict_calls(monkeypatch) if HAS_ESTIMATOR else None
    summary = run_trainer_predict(trained_run[0], input_csv, tmp_path, "--predict_chunk_images=3")
    assert calls is None or len(calls) == 1
    chunked, whole = read_jsonl(f"{tmp_path}/predictions-*.jsonl"), checkpoint_records[1]
    assert [without_probabilities(r) for r in chunked] == [without_probabilities(r) for r in whole]
    np.testing.assert_allclose([i["probability"] for r in chunked for i in r.get("top_k", [])],
                               [i["probability"] for r in whole for i in r.get("top_k", [])], atol=1e-6)
    assert {k: v for k, v in summary.items() if k != "output_dir"} == {
        k: v for k, v in checkpoint_records[0].items() if k != "output_dir"}


@pytest.mark.trains
def test_predict_without_a_checkpoint_names_the_output_dir(tmp_path, input_csv, trained_run):
    params = chain.parse_params([f"--output_dir={trained_run[0]}", "--mode=predict",
                                f"--predict_input={input_csv}", f"--predict_output_dir={tmp_path}"])
    from trainer.run import predictions
    with pytest.raises(FileNotFoundError, match="has no checkpoint to predict with"):
        predictions.run_predict(None, params, None)


# An earlier run's files under prefix "p": 3 JSON-lines shards of 5 lines, a CSV of a header and
# 2 rows, and a file of another prefix. Every line names old.jpg, which no new record does.
EARLIER_FILES = {"p-00000-of-00003.jsonl": 5, "p-00001-of-00003.jsonl": 5,
                 "p-00002-of-00003.jsonl": 5, "p.csv": 3, "p2-00000-of-00001.jsonl": 1}
OUTPUT_GLOBS = {"jsonl": "p-?????-of-?????.jsonl", "csv": "p.csv"}  # what --output=DIR/p writes
EARLIER_BY_FORMAT = {"jsonl": ["p-00000-of-00003.jsonl", "p-00001-of-00003.jsonl",
                               "p-00002-of-00003.jsonl"], "csv": ["p.csv"]}


def write_earlier_run(directory):
    for name, count in EARLIER_FILES.items():
        line = "old.jpg,0,cat" if name.endswith(".csv") else '{"uri": "old.jpg"}'
        (directory / name).write_text("".join(f"{line}\n" for _ in range(count)))


def lines_of(directory, names):
    return [line for name in names for line in (directory / name).read_text().splitlines()]


def messages(caplog, containing):
    return [record.getMessage() for record in caplog.records if containing in record.getMessage()]


@pytest.mark.trains
@pytest.mark.parametrize("output_format,other_format", [("jsonl", "csv"), ("csv", "jsonl")])
def test_batch_rerun_replaces_the_earlier_run_of_its_format(trained_run, input_csv, tmp_path,
                                                           output_format, other_format, caplog):
    write_earlier_run(tmp_path)
    with caplog.at_level(logging.INFO):
        batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={trained_run[1]}",
                           f"--output={tmp_path}/p", f"--format={output_format}", "--max_batch_size=4"])
    new_files = sorted(glob.glob(f"{tmp_path}/{OUTPUT_GLOBS[output_format]}"))
    new_lines = lines_of(tmp_path, [os.path.basename(path) for path in new_files])
    assert len(new_lines) == 14 + (output_format == "csv")  # one per input (+ the CSV header)
    assert not [line for line in new_lines if "old.jpg" in line]
    kept = EARLIER_BY_FORMAT[other_format] + ["p2-00000-of-00001.jsonl"]
    assert len(lines_of(tmp_path, kept)) == sum(EARLIER_FILES[name] for name in kept)
    removed = len(EARLIER_BY_FORMAT[output_format])
    log = messages(caplog, "of an earlier")
    assert len(log) == 2, log
    assert f"Removed {removed} file(s) of an earlier {output_format} run" in log[0]
    assert f"Kept {len(EARLIER_BY_FORMAT[other_format])} {other_format} file(s)" in log[1]


@pytest.mark.trains
def test_trainer_csv_run_keeps_the_earlier_jsonl_run(trained_run, input_csv, tmp_path, caplog):
    """`trainer.task --mode predict --predict_format csv` after a jsonl run into the same place."""
    run_trainer_predict(trained_run[0], input_csv, tmp_path)
    with caplog.at_level(logging.INFO):
        run_trainer_predict(trained_run[0], input_csv, tmp_path, "--predict_format=csv")
    assert sorted(os.listdir(tmp_path)) == ["predictions-00000-of-00001.jsonl", "predictions.csv",
                                            "summary.json"]
    assert len(read_jsonl(f"{tmp_path}/predictions-*.jsonl")) == 14
    assert len(lines_of(tmp_path, ["predictions.csv"])) == 15
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {key: summary[key] for key in ("images", "predicted", "format", "errors", "labelled")} == {
        "images": 14, "predicted": 11, "format": "csv", "labelled": 5,
        "errors": {"corrupt_image": 1, "empty_file": 1, "missing_file": 1}}
    kept = messages(caplog, "Kept 1 jsonl file(s)")
    assert len(kept) == 1 and "predictions-00000-of-00001.jsonl" in kept[0]


@pytest.mark.process
@pytest.mark.parametrize("flag,message", [
    ("--top_k=0", "error: --top_k=0 must be >= 1"),
    ("--min_batch_size=0", "error: --min_batch_size=0 must be in [1, --max_batch_size=128]"),
    ("--max_batch=4", "error: unknown flag --max_batch: not a flag of this command nor a Beam "
                      "pipeline option; did you mean --max_batch_size?")])
def test_bad_batch_flag_is_one_error_line(flag, message, tmp_path):
    result = user_commands.run("serving.batch_predict", "--input_csv=a.csv", "--model_dir=m",
                               f"--output={tmp_path}/o", flag)
    assert (result.returncode, result.stderr.splitlines()) == (2, [message])
    assert os.listdir(tmp_path) == []
