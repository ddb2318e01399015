"""A --model_base_path one level above the model (OUT/export): said at once, with the path meant.

    .venv/bin/python -m pytest tests/serving/standin/test_model_base.py
"""
import pytest

from serving.standin import version_policy


@pytest.fixture
def export_root(tmp_path):
    """OUT/export holding image_classifier/{1,2} (complete), other/ (only a partial version 3)
    and a loose file."""
    for version in (1, 2):
        (tmp_path / "export" / "image_classifier" / str(version)).mkdir(parents=True)
        (tmp_path / "export" / "image_classifier" / str(version) / "saved_model.pb").write_bytes(b"")
    (tmp_path / "export" / "other" / "3").mkdir(parents=True)
    (tmp_path / "export" / "notes.txt").write_text("x")
    return tmp_path / "export"


def test_the_folder_above_a_model_names_the_model(export_root):
    with pytest.raises(version_policy.ModelBaseAboveModel) as raised:
        version_policy.check_model_base(str(export_root))
    assert str(raised.value) == (
        f"--model_base_path={export_root} holds no numbered version directory, but "
        f"{export_root}/image_classifier does: did you mean "
        f"--model_base_path={export_root}/image_classifier?")


@pytest.mark.parametrize("relative", ["image_classifier", "other", "missing", "notes.txt"])
def test_a_model_base_or_a_model_to_come_passes(export_root, relative):
    version_policy.check_model_base(str(export_root / relative))  # no exception: served or waited for
