"""bench/batch_baseline.py, bench_batch_predict's baseline, does the routes' work: the same
lock, the same records and the same summary as the Beam route on the same inputs.

    .venv/bin/python -m pytest tests/bench/test_batch_baseline.py
"""
import glob
import json

import pytest

from bench import batch_baseline
from common import output_lock, prediction_records
from serving import batch_predict

pytestmark = [pytest.mark.trains]


def read_records(pattern):
    return sorted((json.loads(line) for path in glob.glob(pattern) for line in open(path)),
                  key=lambda record: record["uri"])


def without_probabilities(records):
    return [{k: v for k, v in r.items() if k != "top_k"} for r in records]


def test_the_baseline_writes_what_the_beam_route_writes(trained_run, input_csv, tmp_path):
    export_dir = trained_run[1]
    summary = batch_baseline.predict_in_process(export_dir, str(input_csv), str(tmp_path / "base"), 4)
    beam_summary = batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={export_dir}",
                                      f"--output={tmp_path}/beam/predictions", "--max_batch_size=4"])
    ours = read_records(f"{tmp_path}/base/predictions-*.jsonl")
    beams = read_records(f"{tmp_path}/beam/predictions-*.jsonl")
    assert len(ours) == 14 and sum("error" in r for r in ours) == 3
    assert without_probabilities(ours) == without_probabilities(beams)
    for mine, theirs in zip(ours, beams):
        assert [c["probability"] for c in mine.get("top_k", [])] == pytest.approx(
            [c["probability"] for c in theirs.get("top_k", [])], abs=1e-5)
    assert {k: v for k, v in summary.items()} == beam_summary
    with open(f"{tmp_path}/base/summary.json") as f:
        assert json.load(f) == beam_summary


def test_the_baseline_takes_the_routes_lock(trained_run, input_csv, tmp_path):
    out = tmp_path / "out"
    prefix = prediction_records.prediction_prefix(str(out))
    with prediction_records.hold_prefix(prefix, "--output", str(out)):
        with pytest.raises(output_lock.OutputBusy):
            batch_baseline.predict_in_process(trained_run[1], str(input_csv), str(out), 4)
    assert not glob.glob(f"{out}/predictions-*")
