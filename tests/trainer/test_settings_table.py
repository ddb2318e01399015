"""The settings table (trainer/settings/table.py) and its checks, through the real command.

Each bad value, from a flag, a --config file or an earlier run's params.json, stops
`python -m trainer.task` with one line naming the setting, the value, the rule and the
source, exit code 2, and nothing written: no output directory, params.json,
checkpoint or event file.

    .venv/bin/python -m pytest tests/trainer/test_settings_table.py
"""
import json
import math
import pathlib
import re
import subprocess
import sys

import pytest

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import error_lines, run_trainer, user_env
from trainer.settings import checks, flags, table


def files_under(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture(scope="module")
def shared_dataset(tmp_path_factory):
    """The refusals' dataset (tiny_dataset's sizes), read by every test of the module, written once."""
    return write_dataset(tmp_path_factory.mktemp("refusals") / "data", {"train": 24, "eval": 11},
                         size=20)


@pytest.mark.parametrize("extra, config_text, expected", [
    (["--min_crop_area", "0"], None, "min_crop_area=0.0 (flag --min_crop_area) must be in (0, 1]"),
    (["--min_crop_area", "1.5"], None, "min_crop_area=1.5 (flag --min_crop_area) must be in (0, 1]"),
    ([], "min_crop_area: 0\n", "min_crop_area=0.0 (--config {d}/hparams.yaml) must be in (0, 1]"),
    (["--shuffle_buffer", "0"], None, "shuffle_buffer=0 (flag --shuffle_buffer) must be >= 1"),
    (["--seed", "-1"], None, "seed=-1 (flag --seed) must be >= 0"),
    (["--cnn_filters", "0"], None, "cnn_filters=[0] (flag --cnn_filters) must be >= 1"),
    (["--learning_rate", "nan"], None, "learning_rate=nan (flag --learning_rate) is not a finite number"),
    (["--learning_rate", "inf"], None, "learning_rate=inf (flag --learning_rate) is not a finite number"),
    ([], "weight_decay: .nan\n", "weight_decay=nan (--config {d}/hparams.yaml) is not a finite number"),
    (["--gradient_clip_norm", "-1"], None, "gradient_clip_norm=-1.0 (flag --gradient_clip_norm) must be >= 0"),
    (["--optimizer", "adamw", "--weight_decay", "1.5"], None,
     "weight_decay=1.5 (flag --weight_decay) must be in [0, 1) with optimizer='adamw' (flag --optimizer): "),
    (["--optimizer", "AdamW"], None, "optimizer='AdamW' (flag --optimizer) must be one of ['momentum', "
                                     "'adam', 'adamw']; did you mean adamw?"),
    (["--model", "efficientnetv2-s"], None, "model='efficientnetv2-s' (flag --model) must be one of "),
    (["--model", "convnext-tiny"], None, "; did you mean convnext_tiny?"),
    (["--train_step", "30"], None, "unrecognized arguments: --train_step 30; did you mean --train_steps?"),
    (["--train_stepz", "30"], None, "did you mean --train_steps?"),
    ([], "train_stepz: 30\n", "--config {d}/hparams.yaml: 'train_stepz' is not a setting; did you mean "
                              "train_steps?"),
    (["--augment", "randaugmnt"], None, "augment='randaugmnt' (flag --augment) must be one of "
                                        "['none', 'randaugment', 'autoaugment']; did you mean randaugment?"),
    (["--augment", "randaugment", "--randaugment_magnitude", "11"], None,
     "randaugment_magnitude=11.0 (flag --randaugment_magnitude) must be in [0, 10]"),
    (["--randaugment_magnitude", "5"], None, "randaugment_magnitude=5.0 (flag --randaugment_magnitude) is "
                                             "only read by --augment randaugment, not augment='none' (default)"),
    (["--mixup_alpha", "0.8", "--mixup_switch_prob", "0.3"], None,
     "mixup_switch_prob=0.3 (flag --mixup_switch_prob) chooses between mixup and CutMix, and needs both "
     "--mixup_alpha and --cutmix_alpha above 0"),
])
@pytest.mark.process
def test_a_bad_setting_is_one_line_before_tensorflow_loads_and_nothing_is_written(
        shared_dataset, tmp_path, extra, config_text, expected):
    """Judged by the settings' rules alone: refused before TensorFlow loads (an import of it
    would fail here), so a user's typo answers in well under a second."""
    result, out = refuse(shared_dataset, tmp_path, extra, config_text, without_tensorflow=True)
    assert expected.format(d=tmp_path) in error_lines(result)[0]
    assert not out.exists(), files_under(out)


@pytest.mark.process
def test_a_setting_judged_against_the_data_is_refused_after_tensorflow_loads(shared_dataset, tmp_path):
    result, out = refuse(shared_dataset, tmp_path, ["--train_data_path", str(shared_dataset)], None)
    assert f"train_data_path='{shared_dataset}' is a directory: did you mean '{shared_dataset}/train-*'?" in \
        error_lines(result)[0]
    assert not out.exists(), files_under(out)


def refuse(dataset, tmp_path, extra, config_text, **env):
    """The trainer's result on tiny flags plus extra (and a --config file of config_text), checked to
    be one line and exit code 2; (result, output_dir)."""
    out = tmp_path / "out"
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{dataset}/train-*",
                        eval_data_path=f"{dataset}/eval-*", output_dir=out))
    if config_text is not None:
        (tmp_path / "hparams.yaml").write_text(config_text)
        argv.append(f"--config={tmp_path}/hparams.yaml")
    result = run_trainer(*argv, *extra, timeout=300, env=user_env(**env))
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(error_lines(result)) == 1, error_lines(result)
    return result, out


@pytest.mark.parametrize("overrides, expected", [
    ({"augment": "randaugment", "randaugment_num_ops": 0}, "randaugment_num_ops=0 (flag) must be in [1, 10]"),
    ({"random_erasing": 1.5}, "random_erasing=1.5 (flag) must be in [0, 1]"),
    ({"mixup_alpha": -0.2}, "mixup_alpha=-0.2 (flag) must be >= 0"),
    ({"cutmix_alpha": math.inf}, "cutmix_alpha=inf (flag) is not a finite number"),
    ({"mixup_switch_prob": 1.5}, "mixup_switch_prob=1.5 (flag) must be in [0, 1]"),
    ({"randaugment_num_ops": 3}, "randaugment_num_ops=3 (flag) is only read by --augment randaugment"),
    ({"cutmix_alpha": 1.0, "mixup_switch_prob": 0.2}, "mixup_switch_prob=0.2 (flag) chooses between"),
])
def test_augmentation_values_are_held_to_their_rules(overrides, expected):
    """The rest of the augmentation rules, in-process (the command's refusal is the same path,
    tested above for a few)."""
    params = dict(table.DEFAULTS, output_dir="/tmp/o", **overrides)
    with pytest.raises(checks.ConfigError) as err:
        checks.check_params(params, dict.fromkeys(overrides, "flag"))
    assert expected in str(err.value)


def test_label_smoothing_composes_with_every_mixing_setting():
    """The rule decided: smoothing is applied once, in the loss, to the mixed target (timm's
    order, tests/trainer/test_mix.py), so no value of either is refused with the other."""
    params = dict(table.DEFAULTS, output_dir="/tmp/o", label_smoothing=0.9, mixup_alpha=0.8,
                  cutmix_alpha=1.0, mixup_switch_prob=1.0)
    assert checks.check_params(params, {}) is None


@pytest.mark.process
def test_a_bad_value_in_a_saved_run_is_named_and_the_run_left_as_it_was(tiny_argv, tiny_params, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    saved = dict(tiny_params, min_crop_area=0.0)
    (out / table.PARAMS_FILE).write_text(json.dumps(saved))
    result = run_trainer(*tiny_argv, env=user_env(without_tensorflow=True))  # before TensorFlow loads
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip() == (f"error: min_crop_area=0.0 ({out}/{table.PARAMS_FILE} of an earlier "
                                     f"run) must be in (0, 1]")
    assert files_under(out) == [table.PARAMS_FILE]
    assert json.loads((out / table.PARAMS_FILE).read_text()) == saved


@pytest.mark.process
@pytest.mark.parametrize("content", [b'{"learning_rate": 0.1', b"\x80\x81 overwritten, not text"],
                         ids=["cut_short_by_a_partial_copy", "overwritten_with_bytes"])
def test_a_damaged_saved_params_file_is_named(tiny_argv, tmp_path, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / table.PARAMS_FILE).write_bytes(content)
    result = run_trainer(*tiny_argv, env=user_env(without_tensorflow=True))  # before TensorFlow loads
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"{out}/{table.PARAMS_FILE} is damaged" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.process
def test_help_shows_every_setting_with_its_default_without_tensorflow():
    code = ("import sys; from trainer.settings import flags\n"
            "try:\n    flags.parse_flags(['--help'])\nexcept SystemExit as e:\n    code = e.code\n"
            "print('TF', 'tensorflow' in sys.modules, code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().endswith("TF False 0"), result.stdout[-500:] + result.stderr[-500:]
    help_text = " ".join(result.stdout.split())
    for name, setting in table.SETTINGS.items():
        assert f"--{name}" in help_text
        default = "unset" if setting.default is None else repr(setting.default)
        assert f"(default: {default}" in " ".join(flags.help_text(setting).split())
    for title, _ in table.GROUPS:
        assert " ".join(title.split()) in help_text


def test_every_default_keeps_its_own_rule():
    assert {name: checks.value_problem(name, setting.default)
            for name, setting in table.SETTINGS.items()
            if checks.value_problem(name, setting.default)} == {"output_dir": "is required"}


@pytest.mark.parametrize("name", [n for n, s in table.SETTINGS.items() if s.kind is float])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_every_float_setting_refuses_nan_and_infinity(name, bad):
    assert "is not a finite number" in checks.value_problem(name, bad)


@pytest.mark.parametrize("value, kind, problem", [
    ("0.5", float, None), ("1e-3", float, None), ("true", bool, None), ("2.5", int, "not a whole number"),
    (True, int, "not a whole number"), ("x", float, "not a number"), ([], list, "comma-separated list"),
])
def test_values_are_typed_by_the_table(value, kind, problem):
    name = next(n for n, s in table.SETTINGS.items() if s.kind is kind)
    if problem is None:
        assert isinstance(checks.coerce(name, value, "test"), kind)
    else:
        with pytest.raises(checks.ConfigError, match=problem):
            checks.coerce(name, value, "test")


def test_the_networks_the_table_names_are_the_ones_nets_builds():
    from trainer import nets
    assert set(nets.BUILDERS) == set(table.NETWORKS)
    for network in table.NETWORKS.values():
        assert set(network.options) <= set(table.SETTINGS)


def test_training_md_lists_what_a_resume_refuses_and_what_it_records():
    """docs/training.md's resume table names each setting in the row its on_resume says (the
    network options, refused for the network that reads them, with the refused)."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    rows = {row.split("|")[1].strip(): set(re.findall(r"`--(\w+)`", row))
            for row in text.split("## Resuming with other settings", 1)[1].splitlines()
            if row.startswith(("| refused", "| recorded"))}
    options = {option for network in table.NETWORKS.values() for option in network.options}
    by_column = {column: {n for n, s in table.SETTINGS.items() if s.on_resume == column}
                 for column in table.ON_RESUME}
    assert rows == {"refused": by_column["refuse"] | options, "recorded": by_column["record"]}


def test_more_warmup_images_than_the_eval_split_are_clamped_with_a_line(tiny_argv, caplog):
    from trainer import chain
    params = chain.parse_params(tiny_argv + ["--num_warmup_images=50"])
    assert params["num_warmup_images"] == params["num_eval_examples"] == 11
    assert "num_warmup_images=50 is more than the eval split holds" in caplog.text
