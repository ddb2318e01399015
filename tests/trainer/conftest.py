"""Fixtures for the trainer tests: a tiny dataset and the flags of a seconds-long run.

    .venv/bin/python -m pytest tests/trainer
"""
import pytest

# Small enough that a train/eval/export round takes seconds on 2 shared cores.
TINY_FLAGS = {
    "image_size": "16", "cnn_filters": "4,8", "dense_units": "16", "train_batch_size": "8",
    "eval_batch_size": "8", "train_steps": "4", "steps_per_eval": "2", "warmup_steps": "1",
    "save_checkpoints_steps": "2", "log_step_count_steps": "1", "save_summary_steps": "2",
    "num_warmup_images": "2", "shuffle_buffer": "16",
}


def as_argv(flags):
    return [f"--{key}={value}" for key, value in flags.items()]


@pytest.fixture
def tiny_dataset(write_tfrecord_dataset):
    """A real TFRecord dataset: 24 train and 11 eval images (11 is not a multiple of the batch)."""
    return write_tfrecord_dataset(counts={"train": 24, "eval": 11}, labels=("cat", "dog", "fish"),
                                  size=20, shards=2)


@pytest.fixture
def tiny_argv(tiny_dataset, tmp_path):
    """argv for trainer.task: tiny model and data, output in tmp_path/out."""
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "out"))


@pytest.fixture
def tiny_params(tiny_argv):
    from trainer import chain
    return chain.parse_params(tiny_argv)


@pytest.fixture(scope="session")
def tiny_run_of(tmp_path_factory):
    """tiny_run_of(engine="estimator") -> (data, output_dir): a finished TINY_FLAGS run (4 steps on
    24 train / 11 eval images, 3 classes) of that engine, trained once per session (per xdist
    worker) in this process. Read only: a test that changes a run takes copy_of_tiny_run."""
    from tests.conftest import write_dataset
    from trainer import chain, task
    runs = {}

    def run_of(engine="estimator"):
        if engine not in runs:
            base = tmp_path_factory.mktemp(f"tiny-{engine}")
            data = write_dataset(base / "data", {"train": 24, "eval": 11}, size=20)
            argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                                output_dir=base / "run", engine=engine))
            task.load_engine(engine)(chain.parse_params(argv))
            runs[engine] = (data, base / "run")
        return runs[engine]
    return run_of


@pytest.fixture
def copy_of_tiny_run(tiny_run_of, tmp_path):
    """copy_of_tiny_run(engine="estimator") -> (data, tmp_path/"run"): this test's own copy of the
    session's finished run of that engine, to resume, damage or refuse."""
    import shutil

    def copy(engine="estimator"):
        data, out = tiny_run_of(engine)
        shutil.copytree(out, tmp_path / "run")
        return data, tmp_path / "run"
    return copy
