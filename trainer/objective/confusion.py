"""Per-class metrics of a confusion matrix (precision, recall, F1, the row shading): the report page's and TensorBoard's.

Pure NumPy, so the numbers are tested on hand-made examples without a model.
Conventions follow scikit-learn's classification_report with zero_division=0
in the averages: a class never predicted has no precision (None, shown as a
dash) and counts as 0 in the macro average.

    .venv/bin/python -m trainer.objective.confusion 0,1,2,2 0,2,2,1   # true ids, predicted ids
"""
import dataclasses
import sys

import numpy as np


@dataclasses.dataclass(frozen=True)
class ClassMetrics:
    support: int        # eval images of this class (the matrix row's sum)
    predicted: int      # images predicted as this class (the matrix column's sum)
    precision: float    # None when the class was never predicted
    recall: float       # None when the class has no eval images
    f1: float           # None when precision or recall is None


def confusion_matrix(true_ids, predicted_ids, num_classes):
    """int64 [num_classes, num_classes]: row = true class, column = predicted class."""
    true_ids = np.asarray(true_ids, dtype=np.int64)
    predicted_ids = np.asarray(predicted_ids, dtype=np.int64)
    if true_ids.shape != predicted_ids.shape:
        raise ValueError(f"{true_ids.size} true ids but {predicted_ids.size} predicted ids")
    for name, ids in (("true", true_ids), ("predicted", predicted_ids)):
        if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
            raise ValueError(f"a {name} class id is outside [0, {num_classes}): {ids.min()}..{ids.max()}")
    matrix = np.zeros([num_classes, num_classes], dtype=np.int64)
    np.add.at(matrix, (true_ids, predicted_ids), 1)
    return matrix


def row_shade(count, row_total, lightest=0.15):
    """How dark a matrix cell is drawn, in [0, 1]: its share of the row, at least `lightest`
    when non-zero (one mistake in a large row must still show). The report page's table and
    TensorBoard's image (trainer/run/eval_pictures.py) both shade by it."""
    share = count / row_total if row_total else 0.0
    return max(share, lightest) if count else share


def ratio(numerator, denominator):
    return float(numerator) / float(denominator) if denominator else None


def harmonic_mean(precision, recall):
    if precision is None or recall is None:
        return None
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def class_metrics(matrix):
    """A ClassMetrics per class (row) of a confusion matrix."""
    out = []
    for k in range(matrix.shape[0]):
        hits, support, predicted = matrix[k, k], matrix[k].sum(), matrix[:, k].sum()
        precision, recall = ratio(hits, predicted), ratio(hits, support)
        out.append(ClassMetrics(int(support), int(predicted), precision, recall,
                                harmonic_mean(precision, recall)))
    return out


def macro_average(metrics):
    """{"precision", "recall", "f1"}: unweighted means over classes, an undefined value as 0."""
    if not metrics:
        return {"precision": None, "recall": None, "f1": None}
    return {name: float(np.mean([getattr(m, name) or 0.0 for m in metrics]))
            for name in ("precision", "recall", "f1")}


def accuracy(matrix):
    """Correct / all of a confusion matrix; None when it is empty."""
    return ratio(np.trace(matrix), matrix.sum())


def main(argv):
    true_ids = [int(x) for x in argv[1].split(",")]
    predicted_ids = [int(x) for x in argv[2].split(",")]
    matrix = confusion_matrix(true_ids, predicted_ids, max(true_ids + predicted_ids) + 1)
    print(matrix)
    for k, metrics in enumerate(class_metrics(matrix)):
        print(k, metrics)


if __name__ == "__main__":
    main(sys.argv)
