"""--seed through the real command: the same seed trains the same weights, another seed others,
with either engine; a resumed run keeps its seed and refuses another.

Three tiny runs per engine (two training rounds each, so the per-round streams are covered),
started at once: each is mostly TensorFlow's start-up. The negative --seed is one line with
the other bad values (tests/trainer/test_settings_table.py).

    .venv/bin/python -m pytest tests/trainer/test_seed.py
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.engines import needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer import chain
from trainer.settings import checks


def start_training(argv):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-m", "trainer.task", *map(str, argv)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def final_weights(output_dir):
    """{name: value} of every tensor of the run's latest checkpoint."""
    reader = tf.train.load_checkpoint(str(output_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), "keras"])
def test_the_same_seed_trains_the_same_weights_and_another_seed_others(tiny_dataset, tmp_path, engine):
    def argv(name, seed):
        return as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", mode="train",
                            eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / name,
                            engine=engine, seed=seed)) + ["--random_flip"]
    runs = {name: start_training(argv(name, seed)) for name, seed in (("a", 1), ("b", 1), ("c", 2))}
    for name, process in runs.items():
        output = process.communicate(timeout=300)[0]
        assert process.returncode == 0, f"run {name}:\n{output[-3000:]}"
    a, b, c = (final_weights(tmp_path / name) for name in "abc")
    assert set(a) == set(b) == set(c) and len(a) > 5
    assert [name for name in a if not np.array_equal(a[name], b[name])] == []
    kernels = [name for name in a if "kernel" in name and a[name].dtype == np.float32]
    assert kernels and all(not np.array_equal(a[name], c[name]) for name in kernels)

    # A rerun keeps the seed its params.json holds; another seed on its checkpoints is refused.
    assert chain.parse_params([arg for arg in argv("a", 1) if not arg.startswith("--seed")])["seed"] == 1
    with pytest.raises(checks.ConfigError, match="holds checkpoints of a run built with other "
                                                 "settings: seed 1 -> 3"):
        chain.parse_params(argv("a", 3))


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), "keras"])
def test_an_unseeded_run_after_a_seeded_one_in_the_same_process(tiny_dataset, tmp_path, engine):
    """A seeded run turns op determinism on for its process; the next unseeded run there (a
    test worker, a notebook, a tuning loop) must not inherit it: with it on, TensorFlow refuses
    every unseeded random op. It did: one seeded test made later tests in its worker fail."""
    from trainer import task

    def argv(name, seed):
        return as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", mode="train",
                            eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / name,
                            engine=engine, seed=seed)) + ["--random_flip"]
    task.main(argv("seeded", 1))
    task.main(argv("unseeded", 0))
    assert tf.train.latest_checkpoint(str(tmp_path / "unseeded")).endswith("-4")
    assert tf.random.uniform([1]).shape == (1,)  # an unseeded op outside any run works too


def test_a_run_from_before_seed_existed_resumes_only_unseeded(tiny_dataset, tmp_path):
    """Its params.json has no "seed": the run was unseeded (the default), so another seed on its
    checkpoints is a change like any other, and no seed resumes it."""
    from trainer import task
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", mode="train",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "old",
                        engine="keras"))
    task.main(argv)
    params_file = tmp_path / "old" / "params.json"
    saved = json.loads(params_file.read_text())
    del saved["seed"]
    params_file.write_text(json.dumps(saved))
    with pytest.raises(checks.ConfigError, match="built with other settings: seed 0 -> 3"):
        chain.parse_params(argv + ["--seed=3"])
    assert chain.parse_params(argv)["seed"] == 0
