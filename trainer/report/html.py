"""The report page as one self-contained HTML string: no scripts, no network, images inlined.

Sections: what was evaluated, the training curves (trainer/report/svg.py), the newest
training images (PNGs of TensorBoard's train_input images), the confusion matrix (a table whose cells are shaded by the share of their row),
per-class precision/recall/F1 (trainer/objective/confusion.py) and a grid of the
most confident mistakes, each JPEG inlined as a data: URI.

    .venv/bin/python -m trainer.report OUT      # writes OUT/report.html through this module
"""
import base64
import dataclasses
import html

from trainer.objective import confusion
from trainer.report import svg as report_svg

MAX_MATRIX_CLASSES = 100  # a 100x100 table is still readable when zoomed; beyond, the table alone
ACCURACY_COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b")
LOSS_COLORS = ("#d62728", "#1f77b4")
STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; font-family: monospace; }
.charts svg { margin-right: 16px; border: 1px solid #ddd; background: #fff; }
table { border-collapse: collapse; font-size: 12px; }
td, th { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th { background: #f4f4f4; }
table.matrix td { min-width: 24px; text-align: center; }
.grid { display: flex; flex-wrap: wrap; gap: 10px; }
.grid figure { margin: 0; width: 112px; font-size: 11px; }
.grid img { width: 96px; height: 96px; object-fit: contain; image-rendering: pixelated;
            border: 1px solid #ccc; background: #eee; }
.grid figcaption { overflow-wrap: anywhere; }
.note { color: #666; font-size: 12px; }
"""


@dataclasses.dataclass
class Page:
    """Everything the page shows, as plain values (trainer/report/page.py fills it)."""
    output_dir: str
    export_dir: str
    export_step: int
    export_kind: str         # "best" (OUT/best_export) or "latest" (OUT/export)
    eval_pattern: str
    labels: list             # class names, index = class id
    eval_results: list       # records of OUT/eval_results.jsonl, oldest first
    training_scalars: dict   # {tag: [(step, value)]} of OUT's training event files
    matrix: object           # int64 [num_classes, num_classes], row = true class
    mistakes: list           # report_data.Mistake, most confident first
    num_mistakes: int
    training_images: dict = dataclasses.field(default_factory=dict)  # {step: [PNG bytes]}, newest steps
    augmentation: str = ""   # the settings that shaped them, away from their defaults


def render_page(page):
    """The whole HTML document."""
    title = f"Report: {page.output_dir}"
    body = "".join([f"<h1>{html.escape(title)}</h1>", facts_html(page), curves_html(page),
                    training_images_html(page), matrix_html(page.matrix, page.labels),
                    class_table_html(page.matrix, page.labels), mistakes_html(page)])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
            f"<body>{body}</body></html>\n")


def percent(value):
    return "–" if value is None else f"{100 * value:.2f}%"


def recorded_accuracy(page):
    """The accuracy trainer.task recorded for the exported step (None if not recorded)."""
    for record in page.eval_results:
        if record.get("global_step") == page.export_step:
            return record.get("accuracy")
    return None


def facts_html(page):
    total = int(page.matrix.sum())
    rows = [("run", page.output_dir),
            (f"{page.export_kind} export", f"{page.export_dir} (step {page.export_step})"),
            ("eval data", f"{page.eval_pattern} ({total} images, {len(page.labels)} classes)"),
            ("export's eval accuracy", percent(confusion.accuracy(page.matrix))),
            ("recorded at that step", percent(recorded_accuracy(page))),
            ("macro F1", percent(confusion.macro_average(
                confusion.class_metrics(page.matrix))["f1"]))]
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in rows)
    return f'<dl class="facts">{items}</dl>'


def eval_series(eval_results, key, name, color):
    points = [(r["global_step"], r[key]) for r in eval_results if key in r and "global_step" in r]
    return report_svg.Series(name, sorted(points), color)


def training_series_name(tag):
    """A training scalar's legend: "train accuracy" for TensorBoard's train_accuracy tag."""
    return "train " + tag.removeprefix("train_").replace("_", " ")


def curves_html(page):
    """An accuracy chart (eval, and any training accuracy) and a loss chart (training and eval)."""
    train_accuracy = [report_svg.Series(training_series_name(tag), points, color) for (tag, points), color in
                      zip(sorted((t, p) for t, p in page.training_scalars.items()
                                 if t.endswith("accuracy")), ACCURACY_COLORS[1:])]
    markers = [(page.export_step, f"{page.export_kind} export")]
    accuracy = report_svg.line_chart(
        "Accuracy", [eval_series(page.eval_results, "accuracy", "eval accuracy", ACCURACY_COLORS[0])]
        + train_accuracy, y_label="accuracy", y_limits=(0.0, 1.0), markers=markers)
    loss = report_svg.line_chart(
        "Loss", [report_svg.Series("train loss", page.training_scalars.get("loss", []), LOSS_COLORS[0]),
                 eval_series(page.eval_results, "loss", "eval loss", LOSS_COLORS[1])],
        y_label="loss", markers=markers)
    return f'<h2>Training curves</h2><div class="charts">{accuracy}{loss}</div>'


def cell_style(count, row_total, is_diagonal):
    """Blue for hits, red for mistakes, darker the larger the share of the row."""
    share = confusion.row_shade(count, row_total)
    rgb = "31,119,180" if is_diagonal else "214,39,40"
    text = "#fff" if share > 0.6 else "#222"
    return f"background: rgba({rgb},{share:.3f}); color: {text}"


def matrix_html(matrix, labels):
    head = "<h2>Confusion matrix</h2>"
    if len(labels) > MAX_MATRIX_CLASSES:
        return head + (f'<p class="note">{len(labels)} classes: more than {MAX_MATRIX_CLASSES}, '
                       "so only the per-class table below is shown.</p>")
    names = [html.escape(label) for label in labels]
    rows = [f'<tr><th scope="col">true \\ predicted</th>'
            + "".join(f'<th scope="col">{name}</th>' for name in names) + "</tr>"]
    for i, name in enumerate(names):
        total = int(matrix[i].sum())
        cells = "".join(f'<td style="{cell_style(int(count), total, i == j)}">{int(count)}</td>'
                        for j, count in enumerate(matrix[i]))
        rows.append(f'<tr><th scope="row">{name}</th>{cells}</tr>')
    return (head + '<p class="note">Rows: true class; columns: predicted class; '
            "shading: share of the row.</p>" + f'<table class="matrix">{"".join(rows)}</table>')


def class_table_html(matrix, labels):
    metrics = confusion.class_metrics(matrix)
    rows = ["<tr><th>class</th><th>images</th><th>predicted</th><th>precision</th>"
            "<th>recall</th><th>F1</th></tr>"]
    for label, m in zip(labels, metrics):
        rows.append(f"<tr><th>{html.escape(label)}</th><td>{m.support}</td><td>{m.predicted}</td>"
                    f"<td>{percent(m.precision)}</td><td>{percent(m.recall)}</td>"
                    f"<td>{percent(m.f1)}</td></tr>")
    macro = confusion.macro_average(metrics)
    rows.append(f"<tr><th>macro average</th><td>{int(matrix.sum())}</td><td></td>"
                f"<td>{percent(macro['precision'])}</td><td>{percent(macro['recall'])}</td>"
                f"<td>{percent(macro['f1'])}</td></tr>")
    return f'<h2>Per-class precision and recall</h2><table class="classes">{"".join(rows)}</table>'


def data_uri(image, kind="jpeg"):
    return f"data:image/{kind};base64," + base64.b64encode(image).decode("ascii")


def training_images_html(page):
    """The newest summary steps' training images, as the network saw them (augmented)."""
    head = "<h2>Training images, as the network saw them</h2>"
    if not page.training_images:
        return head + ('<p class="note">None in the run\'s event files: the trainer writes them every '
                       "--save_summary_steps (the Estimator and Keras engines not on a TPU).</p>")
    settings = (f"the settings that shaped them: {page.augmentation}" if page.augmentation
                else "every crop and augmentation setting at its default")
    note = ('<p class="note">The first images of the training batch at the newest summary steps, '
            f"as the input pipeline made them; {html.escape(settings)}.</p>")
    figures = "".join(f'<figure><img src="{data_uri(png, "png")}" alt="training step {step}, image {i}">'
                      f"<figcaption>step {step}</figcaption></figure>"
                      for step, shown in page.training_images.items() for i, png in enumerate(shown))
    return head + note + f'<div class="grid training">{figures}</div>'


def mistake_html(mistake, labels):
    true_name, predicted_name = labels[mistake.true_id], labels[mistake.predicted_id]
    return (f'<figure><img src="{data_uri(mistake.jpeg)}" alt="{html.escape(mistake.uri)}" '
            f'title="{html.escape(mistake.uri)}"><figcaption>true: <b>{html.escape(true_name)}</b> '
            f"({mistake.true_probability:.2f})<br>predicted: <b>{html.escape(predicted_name)}</b> "
            f"({mistake.probability:.2f})</figcaption></figure>")


def mistakes_html(page):
    head = f"<h2>Misclassified eval images ({page.num_mistakes})</h2>"
    if not page.mistakes:
        return head + '<p class="note">None: every eval image was classified correctly.</p>'
    shown = ("" if len(page.mistakes) == page.num_mistakes else
             f"The {len(page.mistakes)} most confident of {page.num_mistakes}. ")
    note = (f'<p class="note">{shown}Most confident first; in brackets the probability the '
            "export gave to each class.</p>")
    return head + note + '<div class="grid mistakes">' + "".join(
        mistake_html(m, page.labels) for m in page.mistakes) + "</div>"
