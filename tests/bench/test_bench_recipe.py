"""bench/bench_recipe.py's own pieces: the summary figures, the training subset, and its refusals.

Its tiny end-to-end run (one recipe training of 2 steps) is in test_bench_scripts.py.

    .venv/bin/python -m pytest tests/bench/test_bench_recipe.py
"""
import pytest

from bench import bench_recipe
from tests.user_commands import error_lines, run


def test_summarise_gives_the_mean_and_the_sample_standard_deviation():
    mean, spread = bench_recipe.summarise([0.7, 0.8, 0.9])
    assert mean == pytest.approx(0.8)
    assert spread == pytest.approx(0.1)  # sqrt((0.01 + 0 + 0.01) / (3 - 1))
    assert bench_recipe.summarise([0.75]) == (0.75, 0.0)


def test_table_gives_each_seed_the_mean_and_the_recipes_gain_over_its_engines_baseline():
    results = {("keras", "baseline"): [(0.70, 10.0, 8.0), (0.80, 20.0, 9.0), (0.90, 30.0, 10.0)],
               ("keras", "recipe"): [(0.80, 40.0, 30.0), (0.90, 40.0, 30.0), (0.85, 40.0, 30.0)],
               ("estimator", "recipe"): [(0.50, 5.0, 4.0), (0.60, 5.0, 4.0), (0.70, 5.0, 4.0)]}
    lines = bench_recipe.format_table(results, [1, 2, 3]).splitlines()
    assert lines[0] == ("| engine | recipe | seed 1 | seed 2 | seed 3 | mean ± sd | "
                        "recipe − baseline | s per run (wall / CPU) |")
    assert lines[2] == "| keras | baseline | 0.7000 | 0.8000 | 0.9000 | 0.8000 ± 0.1000 |  | 20 / 9 |"
    assert lines[3] == "| keras | recipe | 0.8000 | 0.9000 | 0.8500 | 0.8500 ± 0.0500 | +0.0500 | 40 / 30 |"
    # no estimator baseline was run: no difference to give
    assert lines[4] == "| estimator | recipe | 0.5000 | 0.6000 | 0.7000 | 0.6000 ± 0.1000 |  | 5 / 4 |"


def test_first_per_label_keeps_the_first_images_of_each_label_in_order():
    lines = [f"/d/{label}/{i}.jpg,{label}\n" for i, label in enumerate("0102010233")]
    assert bench_recipe.first_per_label(lines, 2) == [
        "/d/0/0.jpg,0\n", "/d/1/1.jpg,1\n", "/d/0/2.jpg,0\n", "/d/2/3.jpg,2\n", "/d/1/5.jpg,1\n",
        "/d/2/7.jpg,2\n", "/d/3/8.jpg,3\n", "/d/3/9.jpg,3\n"]


@pytest.mark.parametrize("flags, expected", [
    (["--seeds", "1,0"], "--seeds='1,0' must be distinct integers >= 1"),
    (["--engines", "keras,tpu"], "--engines='keras,tpu' must be distinct names of estimator, keras"),
    (["--recipe_flags=--min_crop_area 2"], "min_crop_area=2.0 (--recipe_flags) must be in (0, 1]"),
    (["--recipe_flags=--learning_rat 0.1"], "--learning_rat 0.1; did you mean --learning_rate?"),
    (["--recipe_flags=--config c.yaml"], "--recipe_flags: --config is not a trainer setting"),
])
@pytest.mark.process
def test_a_bad_flag_is_one_line_and_exit_code_2_with_nothing_written(tmp_path, flags, expected):
    work, log = tmp_path / "work", tmp_path / "bench.log"
    done = run("bench.bench_recipe", *flags, "--work_dir", work, "--log_file", log, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(error_lines(done)) == 1 and expected in done.stderr, done.stderr
    assert not work.exists() and not log.exists()
