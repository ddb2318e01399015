"""Ordinary mistakes through the real commands: one line naming the problem and the fix,
exit code 2, never a traceback. A mistake two commands share (a model directory that is not an
export) is the real command's in trainer.task and refused in this process by batch_predict.

    .venv/bin/python -m pytest tests/common/test_cli_mistakes.py
"""
import pytest

from tests import user_commands
from tests.engines import HAS_ESTIMATOR


@pytest.fixture
def csv_and_shards(tmp_path, make_jpeg):
    (tmp_path / "a.jpg").write_bytes(make_jpeg())
    (tmp_path / "train.csv").write_text("a.jpg,cat\n")
    for name in ("train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"):
        (tmp_path / name).write_bytes(b"")
    return tmp_path


# .venv-keras has no Estimator engine (the default): there the predict mistake goes to the Keras one.
ENGINE = [] if HAS_ESTIMATOR else ["--engine", "keras"]


# What a command answers before loading (here it could not load it): "" neither, "tensorflow"
# TensorFlow, "beam" Beam and TensorFlow. A typo of a flag is compared with Beam's option names.
@pytest.mark.process
@pytest.mark.parametrize("module, argv, expected, answered_before", [
    ("preprocess.jpeg_to_tfrecord",
     ["--input_csv", "{d}/train.csv", "--output_dir", "{d}/out", "--eval_fracton", "0.2"],
     "error: unknown flag --eval_fracton: not a flag of this command nor a Beam pipeline "
     "option; did you mean --eval_fraction?", ""),
    ("preprocess.jpeg_to_tfrecord",
     ["--input_csv", "{d}/train.csv", "--output_dir", "{d}/out", "{d}/stray.csv"],
     "error: unexpected argument '{d}/stray.csv' (a glob the shell expanded into several files? "
     "quote it", "beam"),
    ("trainer.task", ["--train_data_path", "{d}/train-00000-of-00002.tfrecord",
                      "{d}/train-00001-of-00002.tfrecord", "--output_dir", "{d}/out"],
     "(a glob the shell expanded into several files? quote it", "tensorflow"),
    ("trainer.task", ["--config", "{d}/nope.yaml", "--output_dir", "{d}/out"],
     "error: --config {d}/nope.yaml: no such file", "tensorflow"),
    ("trainer.task", ["--config", "{d}", "--output_dir", "{d}/out"],
     "error: --config {d} is a directory: pass a YAML file of settings", "tensorflow"),
    ("preprocess.jpeg_to_tfrecord", ["--input_csv", "{d}", "--output_dir", "{d}/out"],
     "error: --input_csv {d}: {d} is a folder; pass a CSV file of uri,label lines, or "
     "--input_dir {d} for a folder of images in one folder per label", "beam"),
    ("trainer.task", ["--mode", "predict", "--output_dir", "{d}", "--predict_input",
                      "{d}/train.csv", "--predict_export_dir", "{d}"] + ENGINE,
     "is not an export: no saved_model.pb in it or in a numbered version directory below it",
     "tensorflow"),
    ("serving.batch_predict", ["--input_csv", "{d}/train.csv", "--model_dir", "{d}",
                               "--output", "{d}/preds", "--max_num_wokers", "3"],
     "did you mean --max_num_workers?", ""),
    ("serving.client", ["--server", "localhost:8501", "{d}/a.jpg"],
     "error: --server 'localhost:8501' must look like http://HOST:PORT, e.g. http://localhost:8501",
     ""),
])
def test_a_mistake_is_one_line_and_exit_code_2(csv_and_shards, module, argv, expected,
                                               answered_before):
    env = (user_commands.user_env_without_beam() if answered_before == "beam" else
           user_commands.user_env(without_tensorflow=answered_before == "tensorflow"))
    result = user_commands.run(module, *[arg.format(d=csv_and_shards) for arg in argv], env=env,
                               timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "usage:" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expected.format(d=csv_and_shards) in lines[0]
    assert not (csv_and_shards / "out").exists()  # nothing written


def test_a_model_dir_that_is_not_an_export_is_refused_by_batch_predict(csv_and_shards):
    """serving.batch_predict's refusal, in this process: trainer.task's above is the real
    command's one line before TensorFlow loads (and batch_predict's own are in
    tests/serving/test_batch_predict_inputs.py and test_batch_predict_lock.py)."""
    from common.user_errors import UserError
    from serving import batch_predict
    with pytest.raises(UserError, match="is not an export: no saved_model.pb"):
        batch_predict.run(["--input_csv", f"{csv_and_shards}/train.csv", "--model_dir",
                           str(csv_and_shards), "--output", f"{csv_and_shards}/preds"])
    assert not (csv_and_shards / "out").exists()
