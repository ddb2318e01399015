"""What a person sees from the trainer: help that explains, quiet progress, a closing summary.

    .venv/bin/python -m pytest tests/trainer/test_cli_output.py
"""
import glob
import re

import pytest

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import error_lines, run, run_trainer, user_env
from trainer.run import progress
from trainer.settings import table


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """This module's runs only read it: written once (tests/trainer/conftest.py's is per test)."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


def test_every_setting_has_one_described_flag_in_a_group():
    names = [setting.name for _, settings in table.GROUPS for setting in settings]
    assert sorted(names) == sorted(table.DEFAULTS) and len(names) == len(set(names))
    undocumented = [name for name in names if not table.SETTINGS[name].help.strip()]
    assert not undocumented, f"give these settings a help line: {undocumented}"
    assert [title.split(":")[0] for title, _ in table.GROUPS][:2] == ["Run", "TPU"]


@pytest.mark.process
def test_help_is_grouped_explained_and_free_of_library_lines():
    result = run_trainer("--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: python -m trainer.task") and result.stderr == ""
    assert "\nTPU: off by default" in result.stdout and "\nModel:\n" in result.stdout
    assert "--mode {train_and_eval,evaluate,export,predict" in result.stdout
    assert "--model {" in result.stdout and "small_cnn" in result.stdout
    assert "glob of training TFRecords" in result.stdout


@pytest.mark.process
@pytest.mark.parametrize("engine", ["estimator", "keras"])
def test_the_xla_checks_answer_help_and_a_bad_flag_before_tensorflow_loads(engine):
    """Their flags are the trainer's: --help and a bad value need no TensorFlow (it cannot load here)."""
    without_tensorflow = user_env(without_tensorflow=True)
    xla = run(f"trainer.{engine}.xla_check", "--help", env=without_tensorflow)
    assert xla.returncode == 0 and xla.stderr == ""
    assert xla.stdout.startswith(f"usage: python -m trainer.{engine}.xla_check")
    assert "TPU readiness without a TPU" in xla.stdout and "--model {" in xla.stdout
    bad = run(f"trainer.{engine}.xla_check", "--model", "small_cnn", "--image_size", "x",
              env=without_tensorflow)
    assert bad.returncode == 2 and bad.stdout == ""
    assert error_lines(bad) == ["error: image_size='x' (flag --image_size) is not a whole number"]


@pytest.mark.process
def test_a_run_prints_progress_eval_lines_and_a_summary_only(tiny_dataset, tmp_path):
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=out,
                        progress_seconds=1000))
    result = run_trainer(*argv)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (result.stderr + result.stdout).strip().splitlines()
    assert not [line for line in lines if "tensorflow" in line.lower() or "Warning" in line], lines
    assert [line for line in lines if line.startswith("step ")] == [
        line for line in lines if re.fullmatch(r"step [24]/4  loss \d+\.\d{4}  [\d,]+ examples/s  ETA \d+:\d\d:\d\d", line)]
    assert len([line for line in lines if line.startswith("step ")]) == 2  # one per training call
    assert [line.split(":")[0] for line in lines if line.startswith("eval at step")] == [
        "eval at step 2", "eval at step 4"]
    assert lines[-5] == f"run: {out} (mode train_and_eval)"
    assert lines[-1] == f"look: tensorboard --logdir {out}"
    assert lines[-2] == f"export: {out}/export/image_classifier/4"
    assert lines[-3].startswith(f"best export: {out}/best_export/image_classifier/")
    assert lines[-4].startswith("best eval (by accuracy): step ") and "accuracy" in lines[-4]
    assert len(lines) <= 10


@pytest.mark.process
def test_verbose_brings_the_library_lines_back(tiny_dataset, tmp_path):
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "out",
                        train_steps=2, steps_per_eval=2, mode="train"))  # no eval or export: not needed here
    result = run_trainer(*argv, "-v")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Saving checkpoints for 2" in result.stderr


def test_progress_line_format():
    assert progress.format_line(500, 1500, 0.08741, 763.2, 78.4) == (
        "step 500/1500  loss 0.0874  763 examples/s  ETA 0:01:18")
    assert progress.format_line(3, 10, None, None, None) == "step 3/10"


@pytest.mark.trains
def test_a_run_writes_tensorboards_hparams_view(tiny_run_of):
    from tensorboard.plugins.hparams import plugin_data_pb2
    import tensorflow as tf
    from trainer import chain
    from trainer.run import hparams_view
    data, out = tiny_run_of("estimator")  # read only; two training rounds, one run
    params = chain.parse_params(as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                                             eval_data_path=f"{data}/eval-*", output_dir=out)))
    sessions = []
    for path in glob.glob(f"{out}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    plugin = plugin_data_pb2.HParamsPluginData.FromString(
                        value.metadata.plugin_data.content)
                    if plugin.HasField("session_start_info"):
                        sessions.append(plugin.session_start_info.hparams)
    assert len(sessions) == 1
    assert sessions[0]["model"].string_value == "small_cnn"
    assert sessions[0]["image_size"].number_value == params["image_size"]
    assert set(sessions[0]) == set(hparams_view.hparam_values(params))
