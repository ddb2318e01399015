"""What a short run writes as it trains: TensorBoard's training scalars at every
--save_summary_steps (not only where a training call ends), the augmented input images of those
steps, each progress line once, and
the progress line's loss that of TensorBoard's. In this process: the lines are the
"trainer.run.progress" logger's, on the stderr pytest captures (what a terminal shows of a whole
run: tests/trainer/test_cli_output.py).

    .venv/bin/python -m pytest tests/trainer/test_training_output.py
"""
import collections
import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import write_dataset
from tests.engines import KERAS, needs_estimator
from tests.trainer.run_checks import training_images
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer import chain, task
from trainer.data import input as input_lib

pytestmark = pytest.mark.trains

# Where each engine writes the training scalars of an 8-step run, --save_summary_steps 2: the
# Keras engine at each multiple (the step's own logs); the Estimator's SummarySaverHook at the
# first step and every save_summary_steps after it.
SUMMARY_STEPS = {"keras": [2, 4, 6, 8], "estimator": [1, 3, 5, 7]}


def training_scalars(output_dir):
    """[(tag, step, value)] of the training scalars in output_dir's event files."""
    found = []
    for path in glob.glob(os.path.join(output_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag in ("loss", "learning_rate", "train_accuracy"):
                    number = (value.simple_value if value.HasField("simple_value")
                              else float(tf.make_ndarray(value.tensor)))
                    found.append((value.tag, event.step, number))
    return found


def check_input_images(output_dir, steps, params):
    """TensorBoard's train_input/image/0..2 are at the scalars' steps, and the first of them shows
    the first three images of the batch its step trained on, erased and mixed, pixel for pixel
    (params' seeded stream read again; a step's batch is the step-th of its round's stream)."""
    images = training_images(output_dir)
    assert sorted(images) == steps
    assert {shown.shape for shown in images.values()} == {(3, 16, 16, 3)}
    stream = input_lib.make_input_fn(params["train_data_path"], input_lib.TRAIN,
                                     seed=input_lib.train_seed(params["seed"], 0))
    features, _ = next(iter(stream(dict(params, batch_size=params["train_batch_size"])).skip(steps[0] - 1)))
    expected = np.round((features["image"][:3].numpy() + 1.0) * 127.5)
    np.testing.assert_allclose(images[steps[0]], expected, atol=1)
    assert images[steps[0]].std() > 10  # not a blank or flat batch


def training_scalar_steps(output_dir):
    """{tag: [steps]} of the training scalars in output_dir's event files."""
    steps = collections.defaultdict(list)
    for tag, step, _ in training_scalars(output_dir):
        steps[tag].append(step)
    return {tag: sorted(found) for tag, found in steps.items()}


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """This module's runs only read it: written once (tests/trainer/conftest.py's is per test)."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


def stderr_of_run(flags, capsys):
    """What trainer.task writes to stderr as it runs flags, in this process."""
    capsys.readouterr()
    task.main(as_argv(flags))
    return capsys.readouterr().err


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), KERAS])
def test_summaries_at_every_save_summary_steps_and_each_progress_line_once(tiny_dataset, tmp_path,
                                                                         capsys, engine):
    out = tmp_path / "out"
    # Two rounds of one 4-step call each (save_checkpoints_steps 4 ends the calls); the first
    # call traces the train function, so it outlasts --progress_seconds 1 and prints on time.
    # Seeded and augmented: the input images are checked against the stream read again.
    flags = dict(
        TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", eval_data_path=f"{tiny_dataset}/eval-*",
        output_dir=out, engine=engine, train_steps=8, steps_per_eval=4, save_checkpoints_steps=4,
        save_summary_steps=2, progress_seconds=1, seed=7, random_erasing=1.0, mixup_alpha=0.4,
        cutmix_alpha=1.0)
    stderr = stderr_of_run(flags, capsys)
    assert training_scalar_steps(out) == {tag: SUMMARY_STEPS[engine]
                                          for tag in ("loss", "learning_rate", "train_accuracy")}
    check_input_images(out, SUMMARY_STEPS[engine], chain.parse_params(as_argv(flags)))
    progress = [line for line in stderr.splitlines() if re.match(r"step \d+/8", line)]
    shown = [line.split()[1] for line in progress]
    assert "4/8" in shown and "8/8" in shown, stderr[-3000:]
    assert len(shown) == len(set(shown)), f"a step's progress line printed twice: {progress}"


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), KERAS])
def test_the_last_progress_line_shows_the_last_steps_loss(tiny_dataset, tmp_path, capsys, engine):
    # No L2 term (weight_decay 0): the data term the line shows is then the whole loss that
    # TensorBoard's "loss" shows. Mixup/CutMix's soft labels keep the loss far from 0, where
    # the Estimator engine's line once showed it twice over (Estimator.train adds its total
    # loss to the LOSSES collection the line summed).
    out = tmp_path / "out"
    stderr = stderr_of_run(dict(
        TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", eval_data_path=f"{tiny_dataset}/eval-*",
        output_dir=out, engine=engine, train_steps=3, steps_per_eval=3, save_checkpoints_steps=3,
        save_summary_steps=1, progress_seconds=1, weight_decay=0.0, mixup_alpha=0.2, cutmix_alpha=1.0), capsys)
    shown = [float(match.group(1)) for match in re.finditer(r"^step 3/3  loss (\S+)", stderr, re.M)]
    assert len(shown) == 1, stderr[-3000:]
    logged = [value for tag, step, value in training_scalars(out) if tag == "loss" and step == 3]
    assert logged and logged[0] > 0.1
    assert shown[0] == pytest.approx(logged[0], abs=1e-4), (shown, logged)
