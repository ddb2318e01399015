"""The demo CSVs work from any working directory (make demo passes a relative path)."""
import os

from preprocess import demo_data


def test_relative_output_dir_gives_absolute_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo_data.build_demo_data("work/images")
    uris = [line.split(",")[0] for line in (tmp_path / "work/images/eval.csv").read_text().splitlines()]
    assert len(uris) == 340
    assert all(os.path.isabs(uri) and os.path.exists(uri) for uri in uris)
