"""A --model_base_path one level above the model (OUT/export): said at once, with the path meant,
by the real server before TensorFlow loads.

    .venv/bin/python -m pytest tests/serving/standin/test_model_base.py
"""
import pytest

from serving.standin import version_policy
from tests import user_commands


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


@pytest.mark.process
def test_the_real_server_says_it_at_once_instead_of_waiting(export_root):
    """`python -m serving.standin.server --model_base_path OUT/export`: one line, exit 2, no wait
    (not even for TensorFlow: a `tensorflow` that cannot load is on the path)."""
    result = user_commands.run(
        "serving.standin.server", "--model_name", "image_classifier", "--model_base_path",
        export_root, "--rest_api_port", "0", "--port", "0", timeout=60,
        env=user_commands.user_env(without_tensorflow=True))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --model_base_path={export_root} holds no numbered version directory, but "
        f"{export_root}/image_classifier does: did you mean "
        f"--model_base_path={export_root}/image_classifier?"]


@pytest.mark.process
def test_a_version_directory_names_its_model_base(export_root):
    """`--model_base_path OUT/export/image_classifier/2`: one line naming the base, before
    TensorFlow loads."""
    version = export_root / "image_classifier" / "2"
    with pytest.raises(version_policy.ModelBaseAboveModel) as raised:
        version_policy.check_model_base(str(version) + "/")
    result = user_commands.run(
        "serving.standin.server", "--model_base_path", version, "--rest_api_port", "0",
        "--port", "0", timeout=60, env=user_commands.user_env(without_tensorflow=True))
    expected = (f"--model_base_path={version} is one version of a model (it holds "
                f"saved_model.pb), not the model's base of numbered versions: did you mean "
                f"--model_base_path={export_root}/image_classifier?")
    assert str(raised.value) == expected.replace(f"={version} ", f"={version}/ ")
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (
        2, "", [f"error: {expected}"])
