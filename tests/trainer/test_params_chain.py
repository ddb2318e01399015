"""The configuration chain: defaults -> saved params -> --config -> typed flags -> dataset -> validate.

    .venv/bin/python -m pytest tests/trainer/test_params_chain.py
"""
import json
import re

import pytest
import tensorflow as tf

from trainer import task
from trainer.settings import checks, table
from trainer import chain
from trainer.run import params_file


def test_dataset_values_come_from_metadata_not_constants(tiny_params):
    assert tiny_params["labels"] == ["cat", "dog", "fish"]
    assert tiny_params["num_classes"] == 3
    assert tiny_params["num_train_examples"] == 24
    assert tiny_params["num_eval_examples"] == 11


def test_only_typed_flags_override_defaults(tiny_params):
    assert tiny_params["train_batch_size"] == 8  # typed
    assert tiny_params["cnn_filters"] == [4, 8]  # typed as "4,8"
    assert tiny_params["learning_rate"] == table.DEFAULTS["learning_rate"]  # not typed
    assert tiny_params["use_tpu"] is False


def test_job_dir_is_output_dir(tiny_argv, tmp_path):
    argv = [a for a in tiny_argv if not a.startswith("--output_dir")] + [f"--job-dir={tmp_path}/j"]
    assert chain.parse_params(argv)["output_dir"] == f"{tmp_path}/j"


def test_config_file_sits_between_defaults_and_flags(tiny_argv, tmp_path):
    path = tmp_path / "hparams.yaml"
    path.write_text("learning_rate: 0.5\ntrain_batch_size: 16\n")
    params = chain.parse_params(tiny_argv + [f"--config={path}"])
    assert params["learning_rate"] == 0.5          # from the file
    assert params["train_batch_size"] == 8         # the typed flag wins


def test_saved_params_are_the_base_of_a_rerun(tiny_argv, tiny_params):
    params_file.write_params(dict(tiny_params, learning_rate=0.123))
    saved = json.loads((tf.io.gfile.GFile(
        f"{tiny_params['output_dir']}/{table.PARAMS_FILE}").read()))
    assert saved["learning_rate"] == 0.123
    assert chain.parse_params(tiny_argv)["learning_rate"] == 0.123
    assert chain.parse_params(tiny_argv + ["--learning_rate=0.2"])["learning_rate"] == 0.2


def test_export_mode_reads_labels_from_saved_params(tiny_params, tiny_argv):
    params_file.write_params(tiny_params)
    params = chain.parse_params([f"--output_dir={tiny_params['output_dir']}", "--mode=export"])
    assert params["labels"] == ["cat", "dog", "fish"]
    params_file.write_params(params)  # as the export run does
    assert chain.parse_params(tiny_argv)["mode"] == "train_and_eval"  # the mode is not inherited


@pytest.mark.parametrize("extra, message", [
    (["--train_data_path=/nonexistent/train-*"], "train_data_path='/nonexistent/train-*' matches no files"),
    (["--model=vgg"], "model='vgg' (flag --model) must be one of"),
    (["--use_tpu", "--num_cores=8", "--train_batch_size=12"],
     "train_batch_size=12 (flag --train_batch_size) must be divisible by num_cores=8 (flag --num_cores)"),
    (["--train_steps=0"], "train_steps=0 (flag --train_steps) must be >= 1"),
    (["--resnet_depth=21"], "resnet_depth=21 (flag --resnet_depth) must be 6n+2"),
    (["--learning_rate=fast"], "learning_rate='fast' (flag --learning_rate) is not a number"),
    (["--mode=serve"], "mode='serve' (flag --mode) must be one of"),
    (["--min_crop_area=0"], "min_crop_area=0.0 (flag --min_crop_area) must be in (0, 1]"),
    (["--min_crop_area=1.5"], "min_crop_area=1.5 (flag --min_crop_area) must be in (0, 1]"),
    (["--shuffle_buffer=0"], "shuffle_buffer=0 (flag --shuffle_buffer) must be >= 1"),
    (["--cnn_filters=32,0"], "cnn_filters=[32, 0] (flag --cnn_filters) must be >= 1"),
    (["--learning_rate=inf"], "learning_rate=inf (flag --learning_rate) is not a finite number"),
    (["--train_steps=2.5"], "train_steps='2.5' (flag --train_steps) is not a whole number"),
])
def test_bad_settings_fail_naming_the_value(tiny_argv, extra, message):
    with pytest.raises(checks.ConfigError, match=re.escape(message)):
        chain.parse_params(tiny_argv + extra)


def test_unknown_config_keys_are_rejected_by_name(tiny_argv, tmp_path):
    path = tmp_path / "hparams.yaml"
    path.write_text("learning_rate: 0.5\nlearnign_rate: 0.1\n")
    with pytest.raises(checks.ConfigError, match=r"'learnign_rate' is not a setting; did you mean learning_rate\?"):
        chain.parse_params(tiny_argv + [f"--config={path}"])


def test_dataset_keys_cannot_be_set(tiny_argv, tmp_path):
    path = tmp_path / "hparams.yaml"
    path.write_text("num_classes: 5\n")
    with pytest.raises(checks.ConfigError, match="num_classes is read from the dataset"):
        chain.parse_params(tiny_argv + [f"--config={path}"])


def test_tpu_owned_keys_never_reach_the_estimator(tiny_params):
    params = table.estimator_params(tiny_params)
    assert not set(params) & {"batch_size", "context", "use_tpu"}


def test_main_exits_with_the_message_before_training(tiny_argv, capsys):
    with pytest.raises(SystemExit) as caught:
        task.main(tiny_argv + ["--model=vgg"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.startswith("error: model='vgg' (flag --model) must be one of")


def test_a_split_with_no_records_fails_before_training(write_tfrecord_dataset, tmp_path):
    """Every row rejected upstream leaves a 0-record split; training it would spin forever."""
    data = write_tfrecord_dataset(counts={"train": 0, "eval": 3}, name="empty")
    argv = [f"--train_data_path={data}/train-*", f"--eval_data_path={data}/eval-*",
            f"--output_dir={tmp_path / 'out'}"]
    with pytest.raises(checks.ConfigError, match=r"train-\*'.*0 records"):
        chain.parse_params(argv)


def test_training_that_does_not_advance_is_an_error():
    from trainer.run import rounds
    params = {"train_data_path": "D/train-*", "train_batch_size": 64}
    assert rounds.check_progress(100, 600, params) == 600
    with pytest.raises(RuntimeError, match="did not advance past global step 100"):
        rounds.check_progress(100, 100, params)
    with pytest.raises(RuntimeError, match="did not advance past global step None"):
        rounds.check_progress(None, None, params)
