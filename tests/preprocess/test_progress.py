"""The progress line (preprocess/progress.py): counts, the job's total, the share and the time left.

    .venv/bin/python -m pytest tests/preprocess/test_progress.py
"""
import logging

import pytest

from preprocess import jpeg_to_tfrecord, progress
from tests.conftest import encode_image, pattern_image
from tests.preprocess.conftest import IN_PROCESS


@pytest.mark.parametrize("done, seconds, total, processes, expected", [
    (3200, 8.0, 10000, 1,
     "progress: 3,200 of 10,000 images (32%), 12 rejected, 400/s, about 17 s left"),
    (1600, 8.0, 10000, 2,
     "progress: 3,200 of 10,000 images (32%, estimated from 1 of 2 worker processes), "
     "12 rejected, 400/s, about 17 s left"),
    (1600, 8.0, 10000, progress.UNKNOWN,
     "worker progress: 1,600 images done (the job has 10,000), 12 rejected, 200/s"),
    (1600, 8.0, 0, 1, "worker progress: 1,600 images done, 12 rejected, 200/s"),
    (100, 1.0, 1_000_000, 1,
     "progress: 100 of 1,000,000 images (0%), 12 rejected, 100/s, about 2 h 46 min left"),
])
def test_the_line(done, seconds, total, processes, expected):
    assert progress.format_line("images", done, 12, seconds, total, processes) == expected


def test_a_line_every_period_from_the_first_outcome():
    now = [100.0]
    tracker = progress.Progress("images", every_seconds=15, clock=lambda: now[0])
    lines = []
    for i in range(40):  # one outcome a second, every fourth rejected
        lines.append(tracker.add(rejected=i % 4 == 0, total=100))
        now[0] += 1
    logged = [line for line in lines if line]
    assert logged == ["progress: 16 of 100 images (16%), 4 rejected, 1/s, about 1 min 19 s left",
                      "progress: 31 of 100 images (31%), 8 rejected, 1/s, about 1 min 07 s left"]


def test_the_real_run_reports_its_total(tmp_path, monkeypatch, caplog):
    """Every outcome logged (period 0): the total is the rows to process, known before the
    images are, and the last line says all of them."""
    monkeypatch.setattr(progress, "PROGRESS_EVERY_SECONDS", 0.0)
    lines = [f"{i}.jpg,{'ab'[i % 2]}" for i in range(12)] + ["broken_line", "gone.jpg,a"]
    for i in range(12):
        (tmp_path / f"{i}.jpg").write_bytes(encode_image(pattern_image(8, 8, seed=i)))
    (tmp_path / "all.csv").write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.INFO, logger=progress.LOGGER_NAME):
        jpeg_to_tfrecord.run(["--input_csv", str(tmp_path / "all.csv"), "--eval_fraction", "0",
                              "--output_dir", str(tmp_path / "out")] + IN_PROCESS)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert len(logged) == 13  # 12 images + the missing file; the broken line never gets here
    assert logged[-1].startswith("progress: 13 of 13 images (100%), 1 rejected, ")
    assert logged[-1].endswith("about 0 s left")
