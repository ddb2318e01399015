"""TensorBoard pictures of one evaluation: the confusion matrix as an image, accuracy per class.

Written at each evaluation's global step into the estimator's eval directory
(OUT/eval), beside the scalars Estimator writes there, so TensorBoard's IMAGES tab
shows the matrix step by step (slider) and SCALARS shows per_class_accuracy/<label>
(the class's recall: its eval images predicted right). With more than
MAX_SCALAR_CLASSES classes (ImageNet's 1,000) the per-class accuracies are one
histogram instead of a tag each; with more than MAX_LABELLED_CLASSES the matrix
is drawn a pixel block per cell, without its numbers. The matrix itself is not put
into eval_results.jsonl (C x C numbers a line); `python -m trainer.report OUT` shows
the exported model's matrix as a table.

    .venv/bin/python -m trainer.run.eval_pictures /tmp/pictures   # writes a sample; then
    .venv/bin/tensorboard --logdir /tmp/pictures
"""
import functools
import sys

import numpy as np
import tensorflow as tf
from PIL import Image, ImageDraw, ImageFont

from trainer.objective import confusion

MAX_LABELLED_CLASSES = 30   # beyond this, cell numbers and names do not fit a readable image
MAX_SCALAR_CLASSES = 100    # beyond this, a tag per class buries the SCALARS tab
CELL = 34                   # pixels per cell of a labelled matrix
HIT_RGB, MISS_RGB = (31, 119, 180), (214, 39, 40)  # the report page's blue and red


def cell_color(count, row_total, is_diagonal):
    """RGB of a cell: blue for hits, red for mistakes, darker the larger its share of the row."""
    share = confusion.row_shade(count, row_total)
    base = HIT_RGB if is_diagonal else MISS_RGB
    return tuple(round(255 - share * (255 - c)) for c in base)


def draw_confusion_matrix(matrix, labels):
    """uint8 [H, W, 3]: rows = true class (named), columns = predicted class (numbered)."""
    matrix = np.rint(np.asarray(matrix)).astype(np.int64)
    if len(labels) > MAX_LABELLED_CLASSES:
        return draw_unlabelled(matrix)
    font = ImageFont.load_default(size=12)
    names = [label[:24] if label == str(k) else f"{k} {label}"[:24] for k, label in enumerate(labels)]
    margin = 8 + max(int(font.getlength(name)) for name in names)
    size = len(labels) * CELL
    title = "rows: true class, columns: predicted"
    width = max(margin + size, 8 + int(font.getlength(title))) + 8
    image = Image.new("RGB", (width, 44 + size + 8), "white")
    draw = ImageDraw.Draw(image)
    draw.text((8, 4), title, fill="black", font=font)
    for j in range(len(labels)):
        draw.text((margin + j * CELL + CELL / 2, 34), str(j), fill="black", font=font, anchor="ms")
    for i, row in enumerate(matrix):
        top = 44 + i * CELL
        draw.text((margin - 6, top + CELL / 2), names[i], fill="black", font=font, anchor="rm")
        for j, count in enumerate(row):
            color = cell_color(count, row.sum(), i == j)
            box = (margin + j * CELL, top, margin + (j + 1) * CELL - 1, top + CELL - 1)
            draw.rectangle(box, fill=color)
            text = "white" if sum(color) < 400 else "black"
            draw.text((box[0] + CELL / 2, top + CELL / 2), str(count), fill=text, font=font, anchor="mm")
    return np.asarray(image)


def draw_unlabelled(matrix):
    """A block of pixels per cell, shaded as draw_confusion_matrix shades them."""
    scale = max(1, 600 // len(matrix))
    rows = [[cell_color(count, row.sum(), i == j) for j, count in enumerate(row)]
            for i, row in enumerate(matrix)]
    pixels = np.asarray(rows, dtype=np.uint8)
    return np.repeat(np.repeat(pixels, scale, axis=0), scale, axis=1)


def per_class_accuracy(matrix):
    """float [C]: each class's hits over its eval images (NaN for a class with none)."""
    return np.asarray([m.recall if m.recall is not None else np.nan
                       for m in confusion.class_metrics(np.rint(matrix).astype(np.int64))])


def write_eval_pictures(eval_dir, step, matrix, labels):
    """Writes the matrix image and the per-class accuracies at step into eval_dir."""
    labels = list(labels) if labels else [str(k) for k in range(len(matrix))]
    accuracies = per_class_accuracy(matrix)
    with eval_writer(eval_dir).as_default():
        tf.summary.image("confusion_matrix", draw_confusion_matrix(matrix, labels)[np.newaxis], step=step,
                         description="Eval confusion matrix: rows true class, columns predicted class.")
        if len(labels) > MAX_SCALAR_CLASSES:
            known = accuracies[~np.isnan(accuracies)]
            tf.summary.histogram("per_class_accuracy", known, step=step)
        else:
            for label, accuracy in zip(labels, accuracies):
                if not np.isnan(accuracy):
                    tf.summary.scalar(f"per_class_accuracy/{label}", accuracy, step=step)
        tf.summary.flush()


@functools.lru_cache(maxsize=None)
def eval_writer(eval_dir):
    """One summary writer (one event file) per eval directory for the process, not a new
    file at every evaluation."""
    return tf.summary.create_file_writer(eval_dir)


def write_eval_scalars(eval_dir, step, results):
    """Each {metric: value} of results as a TensorBoard scalar at step, where Estimator writes
    its eval scalars (the Keras and JAX engines')."""
    with eval_writer(eval_dir).as_default():
        for name, value in results.items():
            tf.summary.scalar(name, value, step=step)
        tf.summary.flush()


def main(argv):
    matrix = np.array([[40, 2, 0], [3, 35, 7], [0, 1, 44]])
    write_eval_pictures(argv[1], 1, matrix, ["cat", "dog", "horse"])
    print(f"wrote a sample confusion matrix and per-class accuracy to {argv[1]}")


if __name__ == "__main__":
    main(sys.argv)
