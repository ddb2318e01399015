"""The confusion matrix and per-class accuracy TensorBoard gets at each evaluation.

    .venv/bin/python -m pytest tests/trainer/test_eval_pictures.py
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from trainer.run import eval_pictures
from trainer.run import eval_records
from trainer.estimator import model
from trainer.objective import metrics as objective_metrics
from tests.trainer.run_checks import read_eval_events
from tests.conftest import free_port


def tensorboard_tags(logdir, plugin, run="eval", seconds=90):
    """The tags a real TensorBoard server lists for a run under a plugin (its data server
    decides a tag's kind by the first value it reads: a same-named tensor summary written
    first hides an image)."""
    port = free_port()
    command = [os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir", logdir,
               "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{port}/data/plugin/{plugin}/tags"
                with urllib.request.urlopen(url, timeout=5) as answer:
                    tags = json.load(answer)
                if run in tags and tags[run]:
                    return set(tags[run])
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"TensorBoard listed no {plugin} tags of run {run!r} in {seconds} s")
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_streaming_matrix_counts_weighted_rows_across_batches():
    """Zero-weight (padding) rows count for nothing; each batch adds to the running matrix."""
    labels = tf.constant([0, 1, 2, 2])
    logits = tf.one_hot([0, 2, 2, 0], 3)  # predictions 0, 2, 2, 0
    weights = tf.constant([1.0, 1.0, 1.0, 0.0])
    with tf.Graph().as_default():
        metrics = model.make_metric_fn(3, 5)(tf.constant(labels), tf.constant(logits), tf.constant(weights))
        value, update = metrics[objective_metrics.CONFUSION_MATRIX_METRIC]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            session.run(update)
            session.run(update)
            matrix = session.run(value)
    np.testing.assert_array_equal(matrix, [[2, 0, 0], [0, 0, 2], [0, 0, 2]])


def test_image_shades_hits_blue_and_mistakes_red():
    matrix = np.array([[9, 1], [0, 10]])
    image = eval_pictures.draw_confusion_matrix(matrix, ["cat", "dog"])
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert eval_pictures.cell_color(9, 10, True) == (53, 133, 188)    # 90% of a row, a hit
    assert (image == (53, 133, 188)).all(axis=-1).sum() > 100          # drawn: the cat/cat cell
    assert (image == eval_pictures.cell_color(1, 10, False)).all(axis=-1).sum() > 100
    assert eval_pictures.cell_color(0, 10, False) == (255, 255, 255)  # no mistakes: white
    red = eval_pictures.cell_color(1, 1000, False)                     # 0.1% still shows
    assert red != (255, 255, 255) and red[0] > red[1]


def test_many_classes_draw_a_block_per_cell_and_one_histogram(tmp_path):
    classes = eval_pictures.MAX_SCALAR_CLASSES + 20
    matrix = np.eye(classes, dtype=np.int64) * 3
    matrix[0, 1] = 1
    image = eval_pictures.draw_confusion_matrix(matrix, [f"n{k}" for k in range(classes)])
    scale = max(1, 600 // classes)
    assert image.shape == (classes * scale, classes * scale, 3)
    eval_pictures.write_eval_pictures(str(tmp_path), 7, matrix, [f"n{k}" for k in range(classes)])
    tags = read_eval_events(str(tmp_path))
    assert set(tags) == {"confusion_matrix", "per_class_accuracy"}
    assert 7 in tags["confusion_matrix"] and 7 in tags["per_class_accuracy"]


def test_per_class_accuracy_is_each_rows_hit_rate():
    accuracies = eval_pictures.per_class_accuracy(np.array([[3, 1, 0], [0, 0, 0], [1, 1, 2]]))
    assert accuracies[0] == pytest.approx(0.75) and np.isnan(accuracies[1])
    assert accuracies[2] == pytest.approx(0.5)


@pytest.mark.process
@pytest.mark.trains
def test_each_evaluation_writes_the_matrix_and_per_class_accuracy(tiny_run_of):
    """A real run (the session's: 4 steps, evaluated at 2 and 4): at every eval step an image and
    a scalar per class, and the per-class accuracies average to the run's own
    mean_per_class_accuracy; the record holds no matrix. A real TensorBoard lists the image."""
    _, out = tiny_run_of("estimator")  # read only
    params = json.loads((out / "params.json").read_text())
    records = eval_records.read_eval_results(str(out))
    tags = read_eval_events(f"{out}/eval")
    steps = {record["global_step"] for record in records}
    assert steps == {2, 4} and set(tags["confusion_matrix"]) == steps
    image = tags["confusion_matrix"][4]
    assert image.shape[0] > 3 * eval_pictures.CELL and image.shape[2] == 3
    per_class = {tag.split("/", 1)[1] for tag in tags if tag.startswith("per_class_accuracy/")}
    assert per_class == set(params["labels"])
    for record in records:
        values = [float(tags[f"per_class_accuracy/{label}"][record["global_step"]])
                  for label in params["labels"]]
        assert np.mean(values) == pytest.approx(record["mean_per_class_accuracy"], abs=1e-5)
        assert objective_metrics.CONFUSION_MATRIX_METRIC not in record
    assert tensorboard_tags(str(out), "images") == {"confusion_matrix"}
    text = (out / eval_records.RESULTS_FILE).read_text()
    assert "confusion" not in text and json.loads(text.splitlines()[0])["global_step"] == 2
