"""Early stopping: the decision on plain records, and a real run that stops, exports its best,
says why, and (resumed) remembers how long it has waited: a copy of the session's finished run
(tests/trainer/conftest.py tiny_run_of), resumed.

    .venv/bin/python -m pytest tests/trainer/test_early_stopping.py
"""
import json
import os

import pytest
import tensorflow as tf

from common import signature
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.settings import checks
from trainer import chain
from trainer.run import checkpoints, early_stopping, eval_records, rounds
from trainer.estimator import engine as estimator_engine
from trainer.export import contract


def records(*values, metric="accuracy"):
    return [{"global_step": 2 * (i + 1), metric: value} for i, value in enumerate(values)]


@pytest.mark.parametrize("metric, values, waited", [
    ("accuracy", (0.5, 0.7, 0.6, 0.7), 2),   # a tie is no improvement
    ("accuracy", (0.5, 0.7, 0.8), 0),
    ("loss", (0.9, 0.4, 0.5, 0.45), 2),      # lower is better
    ("cross_entropy", (0.9, 1.0), 1),
    ("accuracy", (), 0),
])
def test_evaluations_since_the_best(metric, values, waited):
    assert early_stopping.evaluations_since_best(records(*values, metric=metric), metric) == waited


@pytest.mark.parametrize("values, losses, best_step, waited", [
    ((0.7, 0.7), (0.9, 0.3), 4, 0),        # a tie goes to the lower loss
    ((0.7, 0.7), (0.3, 0.9), 2, 1),        # ... not to the later step
    ((0.7, 0.7), (0.5, 0.5), 2, 1),        # a tie on both: the earlier
    ((0.7, 0.8, 0.8), (0.1, 0.9, 0.2), 6, 0),
    ((0.8, 0.7), (0.9, 0.1), 2, 1),        # the metric first: a lower loss does not beat it
])
def test_a_tie_on_the_metric_is_broken_by_the_loss(values, losses, best_step, waited):
    with_loss = [dict(record, loss=loss) for record, loss in zip(records(*values), losses)]
    assert early_stopping.best_record(with_loss, "accuracy")["global_step"] == best_step
    assert early_stopping.evaluations_since_best(with_loss, "accuracy") == waited


@pytest.mark.parametrize("patience, reason", [
    (0, None),  # off
    (3, None),
    (2, "accuracy did not improve on 0.7 (step 4) in 2 evaluations (early_stopping_patience=2)"),
])
def test_stop_reason(patience, reason):
    params = {"early_stopping_patience": patience, "early_stopping_metric": "accuracy"}
    assert early_stopping.stop_reason(records(0.5, 0.7, 0.6, 0.7), params) == reason


@pytest.mark.parametrize("metric, ok", [("accuracy", True), ("top_5_accuracy", True), ("loss", True),
                                        ("auc", False), ("accuracy ", False)])
def test_metric_names_are_checked_before_a_run(metric, ok):
    assert (checks.value_problem("early_stopping_metric", metric) is None) == ok


def test_an_unknown_metric_fails_at_the_command_line(tmp_path):
    # Refused from the flags alone: no dataset needed to judge it.
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tmp_path}/train-*", eval_data_path=f"{tmp_path}/eval-*",
                        output_dir=tmp_path / "out", early_stopping_metric="auc"))
    with pytest.raises(checks.ConfigError, match=r"early_stopping_metric='auc' \(flag --early_stopping_metric\) must be an eval metric"):
        chain.parse_params(argv)


def rewrite_results(out, accuracies):
    """Sets the accuracy of each record (in order); the step-2 record becomes the best."""
    kept = eval_records.read_eval_results(out)
    best_export = next(r["best_export"] for r in reversed(kept) if "best_export" in r)
    for record, accuracy in zip(kept, accuracies):
        record["accuracy"] = accuracy
        record.pop("best_export", None)
    kept[0]["best_export"] = best_export  # as recorded: relative to the run
    (out / eval_records.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in kept))
    return eval_records.path_in_run(str(out), best_export)


@pytest.mark.trains
def test_a_resumed_run_remembers_its_patience_stops_and_exports_its_best(copy_of_tiny_run):
    data, out = copy_of_tiny_run("estimator")  # evaluations at steps 2 and 4
    flags = dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                 output_dir=out)
    # The step-2 evaluation was the best (accuracy 1.0 cannot be beaten), step 4's is one
    # evaluation without improvement: with patience 2, one more evaluation stops the run.
    best_export = rewrite_results(out, [1.0, 0.5])
    resumed = dict(flags, train_steps=40, early_stopping_patience=2)
    exported = estimator_engine.run(chain.parse_params(as_argv(resumed)))
    assert checkpoints.latest_checkpoint(str(out))[1] == 6  # one round, not 40 steps
    assert exported == os.path.join(out, signature.EXPORT_SUBDIR, "image_classifier", "2")
    contract.check_export(exported)
    assert sorted(tf.io.gfile.listdir(exported)) == sorted(tf.io.gfile.listdir(best_export))
    why = json.loads((out / rounds.EARLY_STOPPING_FILE).read_text())
    assert (why["stopped_at_step"], why["best_step"], why["best_value"], why["patience"]) == (6, 2, 1.0, 2)
    assert why["reason"].startswith("accuracy did not improve on 1 (step 2) in 2 evaluations")
    assert [r["evaluations_without_improvement"] for r in eval_records.read_eval_results(out)][-1] == 2
    assert estimator_engine.run(chain.parse_params(as_argv(resumed))) == exported  # a rerun stops again
    assert checkpoints.latest_checkpoint(str(out))[1] == 6
