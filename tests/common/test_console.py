"""Quiet by default: which lines pass, and the flags that bring the rest back.

    .venv/bin/python -m pytest tests/common/test_console.py
"""
import logging
import os

import pytest

from common import console


def record(name, level, pathname):
    return logging.LogRecord(name, level, pathname, 1, "message", None, None)


@pytest.mark.parametrize("name, level, where, shown", [
    ("trainer.estimator.loop", logging.INFO, "project", True),
    ("root", logging.WARNING, "project", True),      # logging.warning(...) in this project
    ("root", logging.INFO, "project", False),        # logging.info(...): detail for -v
    ("tensorflow", logging.WARNING, "library", False),  # deprecation blocks
    ("root", logging.WARNING, "library", False),     # Beam's crcmod notice on the root logger
    ("apache_beam", logging.ERROR, "library", True),
])
def test_quiet_filter_keeps_the_project_and_library_errors(name, level, where, shown):
    path = (os.path.join(console.PROJECT_DIR, "trainer", "loop.py") if where == "project" else
            os.path.join(console.PROJECT_DIR, ".venv", "lib", "tensorflow", "x.py"))
    assert console.ProjectOrErrors().filter(record(name, level, path)) is shown


@pytest.mark.parametrize("argv, level", [
    ([], 0), (["-v"], 1), (["-vv"], 2), (["--verbose"], 1), (["--verbosity", "2"], 2),
    (["--verbosity=1", "--x"], 1)])
def test_verbosity_flags(argv, level):
    assert console.verbosity_from_argv(argv) == level
    assert not set(console.strip_verbosity_flags(argv)) & {"-v", "-vv", "--verbose", "--verbosity"}


def test_usage_errors_are_one_line_with_the_glob_hint(capsys):
    parser = console.ArgumentParser(prog="prog")
    parser.add_argument("--data")
    with pytest.raises(SystemExit) as caught:
        parser.parse_args(["--data", "d/a-1", "d/a-2"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quote it" in err and err.startswith("error: unrecognized")


@pytest.mark.parametrize("flag, known, is_typo", [
    ("--dry_rn", "--dry_run", True), ("--dry", "--dry_run", True),
    ("--output_di", "--output_dir", True), ("--rest_api_prot", "--rest_api_port", True),
    ("--region", "--resize", False),  # a Beam option, three keystrokes away
    ("--ssl_config_file", "--model_config_file", False),  # TF Serving's, not a typo of ours
    ("--max_num_workers", "--max_pixels", False)])
def test_is_typo_of(flag, known, is_typo):
    assert console.is_typo_of(flag, known) is is_typo


@pytest.mark.parametrize("argv, line", [
    (["--output_di", "o"], "error: unrecognized arguments: --output_di; did you mean --output_dir?"),
    (["--region", "r"], "error: the following arguments are required: --output_dir"),
])
def test_a_missing_required_flag_names_the_typo_behind_it(capsys, argv, line):
    parser = console.ArgumentParser(prog="p")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--resize", type=int)
    with pytest.raises(SystemExit, match="^2$"):
        parser.parse_known_args(argv)
    assert capsys.readouterr().err == f"{line}; see p --help\n"
