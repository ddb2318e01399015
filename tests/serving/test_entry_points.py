"""The serving entry points answer --help and typos at once: flags are parsed before
TensorFlow or Beam is imported, abbreviations are refused, and a typo gets its closest flag.

    .venv/bin/python -m pytest tests/serving/test_entry_points.py
"""
import subprocess
import sys
import time

import pytest

# (module, a typo'd flag with a value, the flag it should suggest, the rest of a valid command)
ENTRY_POINTS = [
    ("serving.client", "--lables", "--labels", ["--server", "http://127.0.0.1:1", "a.jpg"]),
    ("serving.batch_predict", "--top-k", "--top_k", ["--input_csv", "a.csv", "--model_dir", "m",
                                                     "--output", "o"]),
    ("serving.demo", "--rest_port", "--rest_api_port", ["--model_base_path", "m", "a.jpg"]),
]
HEAVY_MODULES = ("tensorflow", "apache_beam")
pytestmark = pytest.mark.process  # what is checked is the command: its imports, exit code and stderr


def run(argv, repo_root):
    return subprocess.run([sys.executable, "-X", "importtime", "-m", *argv], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)


def imported_top_modules(importtime_stderr):
    """The top-level package names -X importtime lists ('import time: self | total | name')."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in importtime_stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("module,typo,suggestion,rest", ENTRY_POINTS)
def test_help_is_fast_and_imports_neither_tensorflow_nor_beam(module, typo, suggestion, rest,
                                                             repo_root):
    start = time.monotonic()
    result = run([module, "--help"], repo_root)
    seconds = time.monotonic() - start
    assert result.returncode == 0 and result.stdout.startswith(f"usage: python -m {module}")
    assert not imported_top_modules(result.stderr) & set(HEAVY_MODULES)
    assert seconds < 3, f"{module} --help took {seconds:.1f} s"


@pytest.mark.parametrize("module,typo,suggestion,rest", ENTRY_POINTS)
def test_a_typo_is_one_line_naming_the_flag_meant(module, typo, suggestion, rest, repo_root):
    result = run([module, typo, "1", *rest], repo_root)
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2 and result.stdout == ""
    assert len(errors) == 1 and f"did you mean {suggestion}?" in errors[0], errors
    assert not imported_top_modules(result.stderr) & {"tensorflow"}


@pytest.mark.parametrize("module,argv", [
    ("serving.client", ["--server", "http://127.0.0.1:1", "--top", "3", "a.jpg"]),
    ("serving.demo", ["--model_base", "m", "a.jpg"])])
def test_abbreviations_are_not_flags(module, argv, repo_root):
    result = run([module, *argv], repo_root)
    assert result.returncode == 2 and f"unrecognized arguments: {argv[-3]}" in result.stderr
