"""The mode names are kept once (trainer/settings/table.py's MODE_TABLE, with what each reads);
trainer/run/modes.py has one row per name, built from it, and nothing else.

    .venv/bin/python -m pytest tests/trainer/test_modes.py
"""
import pytest

from trainer.run import modes
from trainer.settings import table


def test_every_allowed_mode_has_one_row_and_no_other():
    assert sorted(modes.MODES) == sorted(table.MODES)


@pytest.mark.parametrize("name", table.MODES)
def test_each_row_reads_what_the_settings_say(name):
    assert modes.MODES[name].reads is table.MODE_TABLE[name]
    assert modes.of({"mode": name}).trains == table.MODE_TABLE[name].trains


def test_only_the_training_modes_train_and_only_predict_reads_predict_input():
    assert [name for name, reads in table.MODE_TABLE.items() if reads.trains] == ["train_and_eval", "train"]
    assert [name for name, reads in table.MODE_TABLE.items() if reads.predicts] == ["predict"]
