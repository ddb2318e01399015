"""Every bench script runs at a tiny size, so none can break unnoticed between benchmark runs.

Each is called through its own entry point, in process, with the smallest arguments it
takes (seconds, not the minutes of `make bench`), and must print its result table.
A new bench/bench_*.py fails test_every_bench_script_is_covered until it is added here.

    .venv/bin/python -m pytest tests/bench/test_bench_scripts.py
"""
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# {script: (entry point, tiny arguments, a line its output must hold)}; "{tmp}" is a scratch dir.
SCRIPTS = {
    "bench_input": ("run", ["--rounds", "1", "--seconds", "0.2", "--digits", "64", "--photos", "8"],
                    "train vs raw:"),
    "bench_preprocess": ("main", ["--photos", "8", "--repeats", "1", "--workers", "2",
                                  "--work_dir", "{tmp}/preprocess"], "photos 427x640"),
    "bench_train": ("run", ["--models", "small_cnn", "--rounds", "1", "--steps", "18", "--examples", "64",
                            "--finetune_source_steps", "2", "--finetune_steps", "2",
                            "--finetune_eval_every", "2"], "Keras engine / Estimator engine ="),
    "bench_serving": ("main", ["--rounds", "1", "--requests", "4"], "in-process"),
    "bench_serving_floor": ("main", ["--rounds", "1", "--requests", "8"], "stand-in, Python clients"),
    "bench_batch_predict": ("main", ["--run_dir", "{run_dir}", "--input_csv", "{input_csv}",
                                     "--batch_size", "8"], "in-process model calls alone"),
    # one training, of the recipe (its flags are the new ones), through the real commands
    "bench_recipe": ("run", ["--steps", "2", "--seeds", "1", "--engines", "keras", "--recipes", "recipe",
                             "--train_per_label", "2", "--work_dir", "{tmp}/recipe",
                             "--log_file", "{tmp}/recipe.log"], "| keras | recipe | "),
}

# Run through their command, in a fresh process: bench_preprocess forks a multiprocessing
# pool, and a fork of a test process that has run gRPC servers and TensorFlow's threads
# (an earlier test file on the same worker) can leave a worker dead holding the pool's
# queue lock: the pool then waits forever (seen once, 2026-11-26).
OWN_PROCESS = {"bench_preprocess"}


def test_every_bench_script_is_covered():
    scripts = {path.stem for path in (ROOT / "bench").glob("bench_*.py")}
    assert scripts == set(SCRIPTS)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_bench_script_runs_at_a_tiny_size(script, tmp_path, trained_run, input_csv, capsys):
    entry, argv, expected = SCRIPTS[script]
    values = {"tmp": tmp_path, "run_dir": trained_run[0], "input_csv": input_csv}
    argv = [arg.format(**values) for arg in argv]
    if script in OWN_PROCESS:
        done = subprocess.run([sys.executable, "-m", f"bench.{script}", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        output = done.stdout
    else:
        getattr(importlib.import_module(f"bench.{script}"), entry)(argv)
        output = capsys.readouterr().out
    assert expected in output, output[-2000:]
    if script == "bench_serving_floor":  # and where the stand-in's extra time goes
        assert "Python per batched :predict" in output, output[-2000:]
    if script == "bench_train":  # the fine-tune comparison says what it found
        assert any(word in output for word in ("MET", "INCONCLUSIVE")), output[-2000:]
