"""--seed, with either engine: the same seed trains the same weights (in this process and in a
fresh `python -m trainer.task`, as a user's rerun does), another seed others; a resumed run keeps
its seed and refuses another; an unseeded run after seeded ones in the same process trains.

Per engine, three tiny runs (two training rounds each, so the per-round streams are covered):
seed 1 in a child process, started first so that it trains while this process trains seed 1 and
seed 2, then an unseeded run. The negative --seed is one line with the other bad values
(tests/trainer/test_settings_table.py).

    .venv/bin/python -m pytest tests/trainer/test_seed.py
"""
import json
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import write_dataset
from tests.engines import KERAS, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.user_commands import start_trainer, user_env
from trainer import chain, task
from trainer.settings import checks

ENGINES = [pytest.param("estimator", marks=needs_estimator), KERAS]


def seeded_argv(data, out, engine, seed):
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", mode="train",
                        eval_data_path=f"{data}/eval-*", output_dir=out, engine=engine,
                        seed=seed)) + ["--random_flip"]


def final_weights(output_dir):
    """{name: value} of every tensor of the run's latest checkpoint."""
    reader = tf.train.load_checkpoint(str(output_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory):
    """seeded_runs(engine) -> {"data", "a", "b", "c", "unseeded": paths, "unseeded_op": shape}:
    a (seed 1) and c (seed 2) trained here while b (seed 1) trains in a child process, then
    "unseeded" (seed 0) here right after the seeded runs, and an unseeded random op after it
    (what the worker's next test would run): the order the unseeded test needs, whatever order
    the tests run in."""
    runs = {}

    def runs_of(engine):
        if engine not in runs:
            base = tmp_path_factory.mktemp(f"seeded-{engine}")
            data = write_dataset(base / "data", {"train": 24, "eval": 11}, size=20)
            child = start_trainer(*seeded_argv(data, base / "b", engine, 1), stderr=subprocess.STDOUT,
                                  env=user_env(TF_CPP_MIN_LOG_LEVEL=3))
            try:
                task.main(seeded_argv(data, base / "a", engine, 1))
                task.main(seeded_argv(data, base / "c", engine, 2))
                task.main(seeded_argv(data, base / "unseeded", engine, 0))
                unseeded_op = tf.random.uniform([1]).shape
            finally:
                output = child.communicate(timeout=600)[0]
            assert child.returncode == 0, f"run b:\n{output[-3000:]}"
            runs[engine] = dict(data=data, unseeded_op=unseeded_op,
                                **{name: base / name for name in ("a", "b", "c", "unseeded")})
        return runs[engine]
    return runs_of


@pytest.mark.process
@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_the_same_seed_trains_the_same_weights_and_another_seed_others(seeded_runs, engine):
    runs = seeded_runs(engine)
    a, b, c = (final_weights(runs[name]) for name in "abc")
    assert set(a) == set(b) == set(c) and len(a) > 5
    assert [name for name in a if not np.array_equal(a[name], b[name])] == []
    kernels = [name for name in a if "kernel" in name and a[name].dtype == np.float32]
    assert kernels and all(not np.array_equal(a[name], c[name]) for name in kernels)

    # A rerun keeps the seed its params.json holds; another seed on its checkpoints is refused.
    argv = seeded_argv(runs["data"], runs["a"], engine, 1)
    assert chain.parse_params([arg for arg in argv if not arg.startswith("--seed")])["seed"] == 1
    with pytest.raises(checks.ConfigError, match="holds checkpoints of a run built with other "
                                                 "settings: seed 1 -> 3"):
        chain.parse_params(seeded_argv(runs["data"], runs["a"], engine, 3))


@pytest.mark.process
@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_an_unseeded_run_after_a_seeded_one_in_the_same_process(seeded_runs, engine):
    """A seeded run turns op determinism on for its process; the next unseeded run there (a
    test worker, a notebook, a tuning loop) must not inherit it: with it on, TensorFlow refuses
    every unseeded random op. It did: one seeded test made later tests in its worker fail."""
    runs = seeded_runs(engine)
    assert tf.train.latest_checkpoint(str(runs["unseeded"])).endswith("-4")
    assert runs["unseeded_op"] == (1,)  # an unseeded op outside any run works too


@pytest.mark.trains
def test_a_run_from_before_seed_existed_resumes_only_unseeded(copy_of_tiny_run):
    """Its params.json has no "seed": the run was unseeded (the default), so another seed on its
    checkpoints is a change like any other, and no seed resumes it."""
    data, out = copy_of_tiny_run("keras")
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                        eval_data_path=f"{data}/eval-*", output_dir=out, engine="keras"))
    saved = json.loads((out / "params.json").read_text())
    del saved["seed"]
    (out / "params.json").write_text(json.dumps(saved))
    with pytest.raises(checks.ConfigError, match="built with other settings: seed 0 -> 3"):
        chain.parse_params(argv + ["--seed=3"])
    assert chain.parse_params(argv)["seed"] == 0
