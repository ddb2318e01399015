"""Which evaluation is the best, and when to stop: decisions made from eval_results.jsonl alone.

One metric, --early_stopping_metric (default accuracy), decides what "best" means
everywhere: the best export (OUT/best_export), early stopping and the metric a
hyperparameter-tuning trial reports (trainer/cloud/hptuning.py); a tie on it goes to the
lower eval loss (so a tie with a lower loss is an improvement: it is the export served,
and patience counts from it). The state of early
stopping is not stored anywhere else: the number of evaluations since the best one
is read back from OUT/eval_results.jsonl, so a resumed run (kill -9 included)
continues the count where it stopped, and raising --early_stopping_patience on a
stopped run lets it train on.

Pure Python (no TensorFlow), so the decisions are tested on plain records:

    .venv/bin/python -m pytest tests/trainer/test_early_stopping.py
"""
# Eval metrics where lower is better (trainer/estimator/model.py make_metric_fn, and Estimator's loss).
LOWER_IS_BETTER = ("loss", "cross_entropy")
TIE_BREAK = "loss"  # of two records with the same metric value, the one of lower loss is better


def is_better(value, best, metric):
    """Strictly better: a tie is no improvement (a flat metric must not reset patience)."""
    return value < best if metric in LOWER_IS_BETTER else value > best


def is_better_record(record, best, metric):
    """record beats best: a better metric, or the same metric and a strictly lower loss.

    Accuracy on a small eval set ties often (it moves in steps of 1/N); of two checkpoints
    that classify as many images right, the one more confident where it is right (lower
    loss) is the one to serve. A tie on both, or a record without loss, is no improvement.
    """
    if record[metric] != best[metric]:
        return is_better(record[metric], best[metric], metric)
    if TIE_BREAK not in record or TIE_BREAK not in best:
        return False
    return record[TIE_BREAK] < best[TIE_BREAK]


def best_record(records, metric):
    """The record holding the best value of metric, ties broken by the lower loss, then by
    the earlier step (None for no records).

    Records without the metric (written before it was chosen, e.g. another top_k) are skipped.
    """
    best = None
    for record in records:
        if metric in record and (best is None or is_better_record(record, best, metric)):
            best = record
    return best


def evaluations_since_best(records, metric):
    """Evaluations after the best one, in recording order (0 when the last one is the best)."""
    best = best_record(records, metric)
    return 0 if best is None else len(records) - 1 - records.index(best)


def stop_reason(records, params):
    """Why training should stop now (a sentence), or None to go on.

    params: early_stopping_patience (0 = never stop early), early_stopping_metric.
    """
    patience, metric = params["early_stopping_patience"], params["early_stopping_metric"]
    waited = evaluations_since_best(records, metric)
    if not patience or waited < patience:
        return None
    best = best_record(records, metric)
    return (f"{metric} did not improve on {best[metric]:.6g} (step {best['global_step']}) in "
            f"{waited} evaluations (early_stopping_patience={patience})")
