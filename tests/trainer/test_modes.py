"""trainer/run/modes.py has one row per mode the settings allow (trainer/settings/table.py), and nothing else."""
from trainer.run import modes
from trainer.settings import table


def test_every_allowed_mode_has_one_row_and_no_other():
    assert sorted(modes.MODES) == sorted(table.MODES)


def test_the_modes_that_train_are_the_ones_that_read_the_train_split():
    assert sorted(name for name, mode in modes.MODES.items() if mode.trains) == sorted(table.TRAIN_MODES)
