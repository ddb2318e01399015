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


@pytest.mark.process
def test_the_real_server_says_it_at_once_instead_of_waiting(export_root, repo_root):
    """`python -m serving.standin.server --model_base_path OUT/export`: one line, exit 2, no wait."""
    import os
    import subprocess
    import sys
    import time
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "serving.standin.server", "--model_name", "image_classifier",
         "--model_base_path", str(export_root), "--rest_api_port", "0", "--port", "0"],
        cwd=repo_root, capture_output=True, text=True, timeout=120, env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --model_base_path={export_root} holds no numbered version directory, but "
        f"{export_root}/image_classifier does: did you mean "
        f"--model_base_path={export_root}/image_classifier?"]
    assert time.monotonic() - start < 60  # at once: not the wait for a version that never comes


@pytest.mark.process
def test_a_version_directory_names_its_model_base(export_root, repo_root):
    """`--model_base_path OUT/export/image_classifier/2`: one line naming the base, at once."""
    import subprocess
    import sys
    version = export_root / "image_classifier" / "2"
    with pytest.raises(version_policy.ModelBaseAboveModel) as raised:
        version_policy.check_model_base(str(version) + "/")
    result = subprocess.run(
        [sys.executable, "-m", "serving.standin.server", "--model_base_path", str(version),
         "--rest_api_port", "0", "--port", "0"],
        cwd=repo_root, capture_output=True, text=True, timeout=120)
    expected = (f"--model_base_path={version} is one version of a model (it holds "
                f"saved_model.pb), not the model's base of numbered versions: did you mean "
                f"--model_base_path={export_root}/image_classifier?")
    assert str(raised.value) == expected.replace(f"={version} ", f"={version}/ ")
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (
        2, "", [f"error: {expected}"])
