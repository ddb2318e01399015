"""Warmup file: TF Serving's format, read back record by record.

    .venv/bin/python -m pytest tests/common/test_warmup.py
"""
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from common import signature, warmup


def test_warmup_file_holds_predict_logs_with_the_jpegs(tmp_path, make_jpeg):
    jpegs = [make_jpeg(seed=i) for i in range(3)]
    path = warmup.write_warmup_requests(str(tmp_path), jpegs, model_name="m1")
    assert path == str(tmp_path / signature.WARMUP_FILE)
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    logs = [prediction_log_pb2.PredictionLog.FromString(r) for r in records]
    assert [log.WhichOneof("log_type") for log in logs] == ["predict_log"] * 4
    requests = [log.predict_log.request for log in logs]
    assert {r.model_spec.name for r in requests} == {"m1"}
    assert {r.model_spec.signature_name for r in requests} == {signature.SIGNATURE_DEFAULT}
    batches = [list(tf.make_ndarray(r.inputs[signature.INPUT_IMAGE_BYTES])) for r in requests]
    assert batches == [[jpegs[0]], [jpegs[1]], [jpegs[2]], jpegs]
    assert all(set(r.inputs) == {signature.INPUT_IMAGE_BYTES} for r in requests)


def test_keyed_warmup_requests_carry_keys(tmp_path, make_jpeg):
    warmup.write_warmup_requests(str(tmp_path), [make_jpeg()],
                                 signature_names=(signature.SIGNATURE_KEYED,))
    (request,) = warmup.read_warmup_requests(str(tmp_path))
    assert request.model_spec.name == signature.DEFAULT_MODEL_NAME
    assert list(tf.make_ndarray(request.inputs[signature.INPUT_KEY])) == [b"warmup-0"]


def test_read_warmup_requests_without_file_is_empty(tmp_path):
    assert warmup.read_warmup_requests(str(tmp_path)) == []


@pytest.mark.parametrize("export_dir, jpegs, error", [
    ("missing", [b"x"], warmup.WarmupError),
    (".", [], warmup.WarmupError),
])
def test_write_warmup_requests_rejects_bad_arguments(tmp_path, export_dir, jpegs, error):
    with pytest.raises(error, match="export_dir|empty"):
        warmup.write_warmup_requests(str(tmp_path / export_dir), jpegs)


def test_too_many_warmup_requests_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="exceed TF Serving's limit"):
        warmup.write_warmup_requests(str(tmp_path), [b"x"] * 1000)


def test_warmup_command_line_writes_the_files_it_is_given(tmp_path, make_jpeg, capsys):
    images = [tmp_path / "a.jpg", tmp_path / "b.jpg"]
    for i, path in enumerate(images):
        path.write_bytes(make_jpeg(seed=i))
    warmup.main([str(tmp_path), *map(str, images), "--model_name", "digits"])
    assert capsys.readouterr().out.strip() == str(tmp_path / signature.WARMUP_FILE)
    requests = warmup.read_warmup_requests(str(tmp_path))
    assert len(requests) == 3 and requests[0].model_spec.name == "digits"
    assert list(tf.make_ndarray(requests[2].inputs[signature.INPUT_IMAGE_BYTES])) == [
        p.read_bytes() for p in images]
