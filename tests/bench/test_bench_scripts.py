"""Every bench script runs at a tiny size, so none can break unnoticed between benchmark runs.

Each is called through its own entry point, in process, with the smallest arguments it
takes (seconds, not the minutes of `make bench`), and must print its one result table
(bench/report.py's: a header naming the log file, the goal lines), none of the libraries'
lines, and write nothing into the checkout. Where a script would train a model to serve
(--model_base_path unset), bench_serving does (its export_untrained_model, which
bench_serving_floor shares); bench_serving_floor serves the session's tiny trained run.
A new bench/bench_*.py fails test_every_bench_script_is_covered until it is added here.

    .venv/bin/python -m pytest tests/bench/test_bench_scripts.py
"""
import importlib
import os
import pathlib

import pytest

from tests.user_commands import run, user_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
# {script: (entry point, tiny arguments, a line its output must hold)}; "{tmp}" is a scratch dir.
SCRIPTS = {
    # batch 8: its untimed first 5 batches per pipeline are most of the decoding here
    "bench_input": ("run", ["--rounds", "1", "--seconds", "0.05", "--digits", "64", "--photos", "8",
                            "--batch_size", "8"],
                    "goal: photos: 8 JPEGs -> 224x224: input_fn train / raw"),
    # default and threads: the processes mode starts a worker process per run, each importing
    # Beam (~4 s; 16 of its 28 s here): its flags are held below, and the pipeline runs in that
    # mode in tests/preprocess/test_jpeg_to_tfrecord.py (test_other_local_modes_give_the_same_outputs)
    "bench_preprocess": ("main", ["--photos", "8", "--repeats", "1", "--workers", "1", "--digits", "16",
                                  "--job_runs", "2", "--modes", "default,threads"],
                         "goal: photos 427x640: pipeline / pool"),
    # --steps 18: the least past its 16 warm-up steps; one fine-tune repeat (a quarter of its CPU)
    "bench_train": ("run", ["--models", "small_cnn", "--rounds", "1", "--steps", "18", "--examples", "64",
                            "--finetune_source_steps", "2", "--finetune_steps", "2",
                            "--finetune_eval_every", "2", "--finetune_repeats", "1"],
                    "goal: small_cnn: Keras engine / Estimator engine, steps/s >= 1.00x"),
    "bench_serving": ("main", ["--rounds", "1", "--requests", "4"], "| grpc+batching"),
    "bench_serving_floor": ("main", ["--rounds", "1", "--requests", "8", "--model_base_path", "{model_base}"],
                            "stand-in / floor"),
    "bench_batch_predict": ("main", ["--run_dir", "{run_dir}", "--input_csv", "{input_csv}",
                                     "--batch_size", "8", "--rounds", "1", "--large_images", "20"],
                            "goal: beam / in-process on 20 images >= 0.90x"),
    # one training, of the recipe (its flags are the new ones), through the real commands
    "bench_recipe": ("run", ["--steps", "2", "--seeds", "1", "--engines", "keras", "--recipes", "recipe",
                             "--train_per_label", "2", "--work_dir", "{tmp}/recipe",
                             "--log_file", "{tmp}/recipe.log"], "| keras | recipe | "),
}
# Lines the libraries print that must reach the log file, not the table.
NOISE = ("WARNING", "I0000", "W0000", "tensorflow", "absl", "apache_beam", '{"accuracy"')

# Run through their command, in a fresh process: bench_preprocess forks a multiprocessing
# pool, and a fork of a test process that has run gRPC servers and TensorFlow's threads
# (an earlier test file on the same worker) can leave a worker dead holding the pool's
# queue lock: the pool then waits forever (seen once, 2026-11-26).
OWN_PROCESS = {"bench_preprocess"}


MET_RULE_TEXT = "MET when the median across rounds is at or above the goal"


def checkout_files():
    """Every file of the checkout but the environments' and caches' (.git, .venv*, .pytest_cache,
    __pycache__), which are not walked: walking them took 15 s a call beside five environments."""
    files = set()
    for directory, subdirs, names in os.walk(ROOT):
        top = pathlib.Path(directory) == ROOT
        subdirs[:] = [d for d in subdirs if d != "__pycache__" and not (
            top and (d in (".git", ".pytest_cache") or d.startswith(".venv")))]
        files.update(str(pathlib.Path(directory, name).relative_to(ROOT)) for name in names)
    return files


# Run in .venv-jax, where its own test is (make test-jax): it needs JAX beside TensorFlow.
ELSEWHERE = {"bench_jax_train": ROOT / "tests" / "trainer" / "jax" / "test_bench_jax_train.py"}


def test_every_bench_script_is_covered():
    scripts = {path.stem for path in (ROOT / "bench").glob("bench_*.py")}
    assert scripts == set(SCRIPTS) | set(ELSEWHERE)
    assert all(f"bench.{script}" in test.read_text() for script, test in ELSEWHERE.items())


@pytest.mark.process
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_script_answers_help_at_once_with_the_shared_flags(script):
    """bench/cli.py's flags mean the same in every script (make bench-quick passes --quick to
    each), and --help answers before TensorFlow or Beam loads."""
    done = run(f"bench.{script}", "--help", timeout=60, env=user_env(without_tensorflow=True))
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: python -m bench.{script}")
    assert "--quick" in done.stdout and "--log_file" in done.stdout


def served_base(trained_run):
    """The session's tiny trained run's export base (OUT/export/<model>), for --model_base_path."""
    return trained_run[0] / "export" / "image_classifier"


# The servers the serving scripts start, bench_preprocess's own process; the session's run.
@pytest.mark.process
@pytest.mark.trains
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_bench_script_runs_at_a_tiny_size(script, tmp_path, trained_run, input_csv, capsys):
    entry, argv, expected = SCRIPTS[script]
    checkout_before = checkout_files()
    values = {"tmp": tmp_path, "run_dir": trained_run[0], "input_csv": input_csv,
              "model_base": served_base(trained_run)}
    argv = [arg.format(**values) for arg in argv]
    if script in OWN_PROCESS:
        done = run(f"bench.{script}", *argv)
        assert done.returncode == 0, done.stderr[-2000:]
        output = done.stdout
    else:
        getattr(importlib.import_module(f"bench.{script}"), entry)(argv)
        output = capsys.readouterr().out
    assert expected in output, output[-2000:]
    assert "library lines: " in output  # where the libraries' lines went
    # A goal's figure with its MET rule; bench_serving and bench_recipe have no goal.
    assert MET_RULE_TEXT in output or script in ("bench_serving", "bench_serving_floor", "bench_recipe")
    assert not [line for line in output.splitlines() if line.startswith(NOISE)], output[-2000:]
    assert checkout_files() == checkout_before  # nothing written into the checkout
    assert output.count("\n## ") + output.count("\n### ") == 1, output[-2000:]  # one table
    if script == "bench_train":  # the fine-tune comparison says what it found
        assert "matmul" not in output
        assert any(word in output for word in ("MET", "INCONCLUSIVE")), output[-2000:]


def test_bench_preprocess_modes_are_the_pipelines_three_local_runs():
    """What the processes mode adds to the others is its flags: the pipeline's local runner in
    multi_processing mode with --workers workers."""
    before = dict(os.environ)
    bench_preprocess = importlib.import_module("bench.bench_preprocess")
    for name in set(os.environ) - set(before):  # its defaults for its own process (TF's, warnings')
        del os.environ[name]
    from apache_beam.options.pipeline_options import DirectOptions
    from common import beam_pipeline
    runs = {mode: beam_pipeline.build_pipeline_options([flag.format(workers=3) for flag in flags])
            .view_as(DirectOptions) for mode, flags in bench_preprocess.BEAM_MODES.items()}
    assert {mode: (run.direct_running_mode, run.direct_num_workers) for mode, run in runs.items()} == {
        "default": ("in_memory", 1), "threads": ("multi_threading", 3), "processes": ("multi_processing", 3)}
    assert tuple(runs) == bench_preprocess.MODES  # --modes names them all


@pytest.mark.parametrize("modes", ["threads", "default,default", "default,fork"])
def test_bench_preprocess_refuses_modes_without_the_default_or_unknown(modes, capsys):
    bench_preprocess = importlib.import_module("bench.bench_preprocess")
    with pytest.raises(SystemExit) as exit_info:
        bench_preprocess.parse_args(["--modes", modes])
    assert exit_info.value.code == 2
    assert f"--modes={modes!r} must be distinct names of default, threads, processes" in capsys.readouterr().err


@pytest.mark.trains  # the session's run
def test_bench_serving_floor_steps_prints_where_the_stand_ins_time_goes_as_its_one_table(trained_run, capsys):
    importlib.import_module("bench.bench_serving_floor").main(
        ["--steps", "--rounds", "1", "--model_base_path", str(served_base(trained_run))])
    output = capsys.readouterr().out
    assert "Python per batched :predict" in output and output.count("\n## ") == 1, output[-2000:]
    assert "| stand-in " in output and "extra per request" in output


@pytest.mark.parametrize("warm_curve, words", [
    ([(20, 0.70), (40, 0.90), (60, 0.90), (80, 0.90)], "at step 40 of 80, from scratch at step 80 (goal: warm-started <= half): MET"),
    ([(20, 0.70), (40, 0.80), (60, 0.80), (80, 0.80)], "in none of its 80 steps, from scratch at step 80 (goal: warm-started <= half): NOT MET")])
def test_finetune_goal_line_says_whether_and_when_warm_start_got_there(warm_curve, words):
    bench_train = importlib.import_module("bench.bench_train")
    scratch = [(20, 0.5), (40, 0.6), (60, 0.7), (80, 0.9)]
    line = bench_train.finetune_verdict({"from scratch": (scratch, 1.0), "warm-started": (warm_curve, 1.0)},
                                        0.9, 80)
    assert line == f"warm-started reaches 0.9000 {words}"
