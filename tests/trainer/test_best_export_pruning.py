"""OUT/best_export keeps one version: the new best; every other numbered directory goes,
complete or not (common/export_versions.py says which directories are versions). A tie on
the best-export metric goes to the lower eval loss, on a copy of the session's finished run
(tests/trainer/conftest.py tiny_run_of).

    .venv/bin/python -m pytest tests/trainer/test_best_export_pruning.py -q
"""
import json
import os
import shutil

import pytest

from common import export_versions, signature
from tests.engines import needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer import task
from trainer.run import eval_records, evaluations


def test_remove_other_versions_keeps_the_new_best_and_what_is_not_a_version(tmp_path):
    for name in ("3", "7", "12"):  # complete versions
        (tmp_path / name).mkdir()
        (tmp_path / name / export_versions.SAVED_MODEL_FILE).write_bytes(b"")
    (tmp_path / "5" / "variables").mkdir(parents=True)  # a version never completed
    (tmp_path / "temp-1").mkdir()                        # not a version: left alone
    evaluations.remove_other_versions(str(tmp_path), keep=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["7", "temp-1"]
    assert export_versions.list_versions(str(tmp_path)) == [7]


@needs_estimator
@pytest.mark.trains
def test_a_tie_on_the_metric_exports_the_step_of_lower_loss(copy_of_tiny_run):
    data, out = copy_of_tiny_run("estimator")  # evaluations at steps 2 and 4
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out))
    first, second = eval_records.read_eval_results(out)
    # As if step 2 had scored step 4's accuracy with a higher loss, and the run had been killed
    # before step 4's evaluation was recorded: the same command evaluates step 4 first.
    first.update(accuracy=second["accuracy"], loss=second["loss"] + 1.0)
    (out / eval_records.RESULTS_FILE).write_text(json.dumps(first) + "\n")
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    shutil.rmtree(best_base / "4", ignore_errors=True)
    task.main(argv)
    tied = eval_records.read_eval_results(out)[-1]
    assert (tied["global_step"], tied["accuracy"]) == (4, first["accuracy"])
    assert tied["best_export"] == f"{signature.BEST_EXPORT_SUBDIR}/image_classifier/4"
    assert os.listdir(best_base) == ["4"]  # not step 2's, the first of the tie
    assert tied["evaluations_without_improvement"] == 0
