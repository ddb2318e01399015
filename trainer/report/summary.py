"""The closing lines of a trainer command: what it produced, where, and how to look at it.

    .venv/bin/python -m trainer.report.summary OUT      # the summary of an existing run
"""
import json
import sys

from trainer.settings import table

from trainer.run import params_file
from trainer.run import early_stopping, eval_records


def format_eval(record):
    """'accuracy 0.9912, top_5_accuracy 1.0000, loss 0.0312' of one eval record."""
    keys = [k for k in ("accuracy", "mean_per_class_accuracy", "loss") if k in record]
    keys += sorted(k for k in record if k.startswith("top_") and k.endswith("_accuracy"))
    return ", ".join(f"{k} {record[k]:.4f}" for k in keys)


def summarize_run(params, result):
    """Lines naming the run directory, the best evaluation, the export and TensorBoard."""
    output_dir, mode = params["output_dir"], params["mode"]
    if table.mode_reads(params).predicts:
        return f"predictions: {result['output_dir']} ({json.dumps(result, sort_keys=True)})"
    lines = [f"run: {output_dir} (mode {mode})"]
    metric = params["early_stopping_metric"]
    best = early_stopping.best_record(eval_records.read_eval_results(output_dir), metric)
    if best:
        lines.append(f"best eval (by {metric}): step {best['global_step']}: {format_eval(best)}")
        if best.get("best_export"):
            lines.append(f"best export: {eval_records.path_in_run(output_dir, best['best_export'])}")
    if mode != "evaluate" and isinstance(result, str):
        lines.append(f"export: {result}")
    lines.append(f"look: tensorboard --logdir {output_dir}")
    return "\n".join(lines)


def main(argv):
    params = dict(table.DEFAULTS, **params_file.read_saved_params(argv[1]))
    params.update(output_dir=argv[1], mode="evaluate")
    print(summarize_run(params, None))


if __name__ == "__main__":
    main(sys.argv)
