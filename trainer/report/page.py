"""One self-contained HTML page about a training run, to open in any browser.

The page (trainer/report/html.py) shows the training curves, the newest training
images as the network saw them (augmented), the confusion
matrix and per-class precision/recall of the best export on the eval split,
and the eval images it got wrong. It needs no network and no server: charts
are inline SVG and images are data: URIs.

    .venv/bin/python -m trainer.report work/demo/run            # -> work/demo/run/report.html
    .venv/bin/python -m trainer.report OUT --output /tmp/r.html --eval_data_path 'DIR/eval-*'
"""
import logging
import os
import pathlib

import tensorflow as tf

from common import export_predictor
from trainer.run import eval_records
from trainer.objective import confusion
from trainer.report import data as report_data, html as report_html

_LOGGER = logging.getLogger(__name__)


def load_export(export_dir):
    try:
        return export_predictor.load_export(export_dir)
    except ValueError as err:  # an export without the serving contract (ExportNotFound too)
        raise report_data.ReportError(str(err)) from None


def build_page(output_dir, eval_pattern, max_images):
    """report_html.Page of a run: its curves, and its export evaluated on eval_pattern."""
    params = report_data.read_run_params(output_dir)
    eval_pattern = eval_pattern or params.get("eval_data_path")
    paths = report_data.eval_files(eval_pattern)
    export_dir, step, kind = report_data.find_export(
        output_dir, report_data.serving_model_name(params))
    _LOGGER.info("evaluating the %s export (step %d) on %s", kind, step, eval_pattern)
    export = load_export(export_dir)
    evaluation = report_data.evaluate_export(
        export, report_data.read_eval_records(paths), max_images)
    if not evaluation.true_ids:
        raise report_data.ReportError(f"no eval data: {eval_pattern!r} holds no records")
    matrix = confusion.confusion_matrix(
        evaluation.true_ids, evaluation.predicted_ids, len(export.labels))
    events = report_data.read_training_events(output_dir)
    return report_html.Page(
        output_dir=output_dir, export_dir=export_dir, export_step=step, export_kind=kind,
        eval_pattern=eval_pattern, labels=export.labels,
        eval_results=eval_records.read_eval_results(output_dir),
        training_scalars=events.scalars, training_images=events.images,
        augmentation=report_data.augmentation_in_effect(params),
        matrix=matrix, mistakes=evaluation.mistakes, num_mistakes=evaluation.num_mistakes)


def write_text(path, text):
    """Writes the page (local or gs://) and returns a URL to open it with."""
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
    return path if "://" in path else pathlib.Path(os.path.abspath(path)).as_uri()
