"""The one rule for export versions (common/export_versions.py), on a local directory and on
gs:// (the suite's GCS emulator), with the same tree in both.

    .venv/bin/python -m pytest tests/common/test_export_versions.py -q
"""
import pytest

from common import export_versions
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)

# name -> files in it: complete versions 1, 2, 10; 3 mid-copy (no saved_model.pb yet); the
# rest are not versions (a staging dir, a non-canonical number, a file named as a number).
TREE = {
    "1/saved_model.pb": b"", "2/saved_model.pb": b"", "2/variables/variables.index": b"",
    "10/saved_model.pb": b"", "3/variables/variables.index": b"",
    "temp-123/saved_model.pb": b"", "007/saved_model.pb": b"", "v4/saved_model.pb": b"",
    "11": b"not a directory", "10/assets/saved_model.pb": b"",
}


def make_local(tmp_path):
    for name, data in TREE.items():
        path = tmp_path / "base" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(tmp_path / "base"), str(tmp_path / "absent")


def make_gcs(bucket):  # noqa: F811 (the fixture's value)
    for name, data in TREE.items():
        bucket.blob(f"base/{name}").upload_from_string(data)
    return f"gs://{bucket.name}/base", f"gs://{bucket.name}/absent"


@pytest.fixture(params=["local", "gs"])
def export_base(request, tmp_path):
    """(export base holding TREE, a base that does not exist), locally or on the emulator."""
    if request.param == "local":
        return make_local(tmp_path)
    return make_gcs(request.getfixturevalue("bucket"))


@pytest.mark.process
def test_versions_are_the_numbered_directories_with_a_saved_model(export_base):
    base, absent = export_base
    assert export_versions.list_versions(base) == [1, 2, 10]
    assert export_versions.list_versions(base + "/") == [1, 2, 10]
    assert export_versions.list_versions(base, complete=False) == [1, 2, 3, 10]
    assert export_versions.latest_version(base) == 10
    assert export_versions.list_versions(absent) == []
    assert export_versions.latest_version(absent) is None
    assert export_versions.require_latest_version(base) == 10
    with pytest.raises(export_versions.ExportNotFound, match="^--model_base_path=.* holds no"):
        export_versions.require_latest_version(absent)


@pytest.mark.process
def test_resolve_export_dir_takes_a_base_or_a_version(export_base):
    base, absent = export_base
    assert export_versions.resolve_export_dir(base) == (f"{base}/10", 10)
    assert export_versions.resolve_export_dir(f"{base}/2/") == (f"{base}/2", 2)
    assert export_versions.resolve_export_dir(f"{base}/temp-123") == (f"{base}/temp-123", None)
    for not_an_export in (absent, f"{base}/3"):
        with pytest.raises(export_versions.ExportNotFound, match="is not an export"):
            export_versions.resolve_export_dir(not_an_export)


@pytest.mark.parametrize("name, is_version", [
    ("0", True), ("12", True), ("012", False), ("-1", False), ("1.5", False), ("v1", False),
    ("", False), ("١٢", False)])  # Arabic-Indic digits pass str.isdigit()
def test_version_names(name, is_version):
    assert export_versions.is_version_name(name) is is_version
