"""bench/report.py: the one table every bench script prints, its goal rule, and the log file
that takes the libraries' lines.

    .venv/bin/python -m pytest tests/bench/test_report.py
"""
import logging
import os
import sys
import warnings

import pytest

from bench import report


def test_a_goal_is_met_when_the_median_as_printed_is_at_or_above_it():
    assert report.ratio_figure([0.95, 0.88, 1.02]) == "0.95x (0.88-1.02 over 3 rounds)"
    assert report.verdict([0.95, 0.88, 1.02], 0.9) == "MET"
    assert report.verdict([0.89, 0.88, 1.02], 0.9) == "NOT MET"
    assert report.verdict([0.996], 1.0) == "MET"  # printed as 1.00x: what is printed decides
    assert report.verdict([0.994], 1.0) == "NOT MET"
    line = report.goal_line("route / loop", [0.91, 0.93], 0.9)
    assert line.startswith("goal: route / loop >= 0.90x: 0.92x (0.91-0.93 over 2 rounds): **MET**")
    assert report.MET_RULE in line


def test_the_table_is_markdown_with_aligned_columns():
    text = report.format_table(["a", "long name"], [["1", "2"], ["333", "4"]])
    assert text.splitlines() == ["| a   | long name |", "|-----|-----------|",
                                 "| 1   | 2         |", "| 333 | 4         |"]


@pytest.mark.process  # git rev-parse
def test_the_machine_line_gives_date_cores_and_load():
    line = report.machine_line()
    assert " UTC, " in line and f"{os.cpu_count()} cores" in line
    assert "load before the run " in line and line.count(" / ") == 2


@pytest.mark.parametrize("is_failing", [False, True])
def test_library_lines_go_to_the_log_and_stdout_comes_back(tmp_path, capfd, is_failing):
    log_path = tmp_path / "libraries.log"
    # A bench script runs in a fresh process: undo what earlier tests on this worker may have
    # left (a quieted or detached Beam logger, logging.disable) so that the test sees the same.
    beam = logging.getLogger("apache_beam")
    saved = beam.level, beam.propagate, beam.disabled, logging.root.manager.disable
    beam.setLevel(logging.NOTSET)
    beam.propagate, beam.disabled = True, False
    logging.disable(logging.NOTSET)
    logging.getLogger().addHandler(handler := logging.StreamHandler(sys.stderr))
    try:
        with pytest.raises(RuntimeError) if is_failing else nullcontext():
            with report.libraries_to_log(log_path) as out:
                print("a pipeline's summary block")
                os.write(2, b"a C++ line on descriptor 2\n")
                logging.getLogger("apache_beam").warning("a Beam warning")
                warnings.warn("a library's deprecation", DeprecationWarning)
                print("the table", file=out)
                if is_failing:
                    raise RuntimeError("the run failed")
    finally:
        logging.getLogger().removeHandler(handler)
        beam.setLevel(saved[0])
        beam.propagate, beam.disabled = saved[1], saved[2]
        logging.disable(saved[3])
    print("after")
    captured = capfd.readouterr()
    assert captured.out == "the table\nafter\n"
    assert captured.err == ""
    log = log_path.read_text()
    for line in ("a pipeline's summary block", "a C++ line on descriptor 2", "a Beam warning",
                 "a library's deprecation"):
        assert line in log


class nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
