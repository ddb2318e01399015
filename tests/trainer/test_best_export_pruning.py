"""OUT/best_export keeps one version: the new best; every other numbered directory goes,
complete or not (common/export_versions.py says which directories are versions).

    .venv/bin/python -m pytest tests/trainer/test_best_export_pruning.py -q
"""
from common import export_versions
from trainer.run import evaluations


def test_remove_other_versions_keeps_the_new_best_and_what_is_not_a_version(tmp_path):
    for name in ("3", "7", "12"):  # complete versions
        (tmp_path / name).mkdir()
        (tmp_path / name / export_versions.SAVED_MODEL_FILE).write_bytes(b"")
    (tmp_path / "5" / "variables").mkdir(parents=True)  # a version never completed
    (tmp_path / "temp-1").mkdir()                        # not a version: left alone
    evaluations.remove_other_versions(str(tmp_path), keep=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["7", "temp-1"]
    assert export_versions.list_versions(str(tmp_path)) == [7]
