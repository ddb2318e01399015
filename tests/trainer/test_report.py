"""The report page: its metrics and charts on hand-made values, and the real command rendered in
headless Chromium (Debian's package; .ci/run installs it).

    .venv/bin/python -m pytest tests/trainer/test_report.py
"""
import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from tests.conftest import NUM_GOOD_IMAGES, make_jpeg_bytes
from tests.engines import needs_estimator
from tests.user_commands import error_lines, run, user_env
from trainer.run import eval_records
from trainer.objective import confusion
from trainer.report import data as report_data, html as report_html, page as report, svg as report_svg

SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--hide-scrollbars")
# Injected into a copy of the page: after load, records what the browser made of it.
CHECK_SCRIPT = """<script>
window.addEventListener("load", () => {
  const images = [...document.querySelectorAll(".mistakes img")];
  const training = [...document.querySelectorAll(".training img")];
  const lines = [...document.querySelectorAll("svg.chart polyline.series")];
  document.body.setAttribute("data-check", JSON.stringify({
    images: images.length,
    decoded: images.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length,
    training: training.filter(i => i.complete && i.naturalWidth > 0).map(i => i.naturalWidth),
    charts: document.querySelectorAll("svg.chart").length,
    series: lines.map(l => [l.dataset.series, l.points.numberOfItems]),
    matrix_cells: document.querySelectorAll("table.matrix td").length,
    class_rows: document.querySelectorAll("table.classes tr").length}));
});
</script>"""

# true:      0 0 0 1 1 2 2 2    (class 3 has no images and is never predicted)
# predicted: 0 0 1 1 2 2 2 0
TRUE_IDS, PREDICTED_IDS = [0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, 1, 2, 2, 2, 0]


def test_confusion_matrix_has_true_rows_and_predicted_columns():
    matrix = confusion.confusion_matrix(TRUE_IDS, PREDICTED_IDS, 4)
    np.testing.assert_array_equal(matrix, [[2, 1, 0, 0], [0, 1, 1, 0], [1, 0, 2, 0], [0, 0, 0, 0]])
    assert confusion.accuracy(matrix) == 5 / 8


@pytest.mark.parametrize("true_ids, predicted_ids", [([0, 3], [0, 0]), ([0, 1], [0, -1]), ([0], [0, 1])])
def test_confusion_matrix_rejects_ids_it_cannot_place(true_ids, predicted_ids):
    with pytest.raises(ValueError):
        confusion.confusion_matrix(true_ids, predicted_ids, 3)


def test_precision_recall_and_f1_per_class_and_macro():
    metrics = confusion.class_metrics(confusion.confusion_matrix(TRUE_IDS, PREDICTED_IDS, 4))
    assert [(m.support, m.predicted) for m in metrics] == [(3, 3), (2, 2), (3, 3), (0, 0)]
    assert [m.precision for m in metrics] == pytest.approx([2 / 3, 1 / 2, 2 / 3, None])
    assert [m.recall for m in metrics] == pytest.approx([2 / 3, 1 / 2, 2 / 3, None])
    assert [m.f1 for m in metrics] == pytest.approx([2 / 3, 1 / 2, 2 / 3, None])
    # scikit-learn's zero_division=0: the undefined class counts as 0.
    assert confusion.macro_average(metrics)["recall"] == pytest.approx((2 / 3 + 1 / 2 + 2 / 3) / 4)
    lopsided = confusion.class_metrics(np.array([[3, 1], [0, 0]]))
    assert (lopsided[0].precision, lopsided[0].recall) == (1.0, 0.75)
    assert lopsided[0].f1 == pytest.approx(2 * 0.75 / 1.75)
    assert (lopsided[1].precision, lopsided[1].recall, lopsided[1].f1) == (0.0, None, None)


def parse_svg(text):
    return ET.fromstring(text)


def polyline_points(svg):
    return [[tuple(map(float, p.split(","))) for p in line.get("points").split()]
            for line in svg.iter(f"{SVG}polyline")]


def test_chart_places_points_by_their_values():
    frame = report_svg.Frame(width=300, height=200, left=50, right=10, top=30, bottom=40)
    svg = parse_svg(report_svg.line_chart(
        "t", [report_svg.Series("loss", [(0, 0.0), (5, 0.5), (10, 1.0)], "red")],
        frame=frame, x_domain=(0, 10), y_domain=(0.0, 1.0)))
    # x 0..10 -> 50..290 px; y 0..1 -> 160..30 px (SVG y grows downwards).
    assert polyline_points(svg) == [[(50.0, 160.0), (170.0, 95.0), (290.0, 30.0)]]
    circles = [(float(c.get("cx")), float(c.get("cy"))) for c in svg.iter(f"{SVG}circle")]
    assert circles == [(50.0, 160.0), (170.0, 95.0), (290.0, 30.0)]
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"0", "0.2", "1", "10"} <= set(labels) and "loss" in labels


def test_chart_domain_single_point_markers_and_no_data():
    frame = report_svg.Frame()
    svg = parse_svg(report_svg.line_chart(
        "acc", [report_svg.Series("eval", [(2, 0.25)], "blue"), report_svg.Series("empty", [], "red")],
        y_limits=(0.0, 1.0), markers=[(2, "best export"), (99, "outside")]))
    [[(x, y)]] = polyline_points(svg)  # the empty series draws nothing
    assert x == pytest.approx(sum(frame.x_pixels) / 2) and y == pytest.approx(sum(frame.y_pixels) / 2)
    assert [m.get("x1") for m in svg.iter(f"{SVG}line") if m.get("class") == "marker"] == [f"{x:.1f}"]
    empty = parse_svg(report_svg.line_chart("none", [report_svg.Series("a", [], "red")]))
    assert polyline_points(empty) == [] and "no data" in [t.text for t in empty.iter(f"{SVG}text")]


@pytest.mark.parametrize("lo, hi, count, min_step, ticks", [
    (0.0, 1.0, 5, 0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (0.985, 0.998, 5, 0, [0.985, 0.99, 0.995]),
    (0.988, 0.997, 5, 0, [0.988, 0.99, 0.992, 0.994, 0.996]),
    (500, 1500, 4, 1, [500, 1000, 1500]),
    (1, 3, 4, 1, [1, 2, 3]),  # steps: whole numbers even when the span is short
    (-3, 3, 5, 0, [-2, 0, 2])])
def test_nice_ticks(lo, hi, count, min_step, ticks):
    assert report_svg.nice_ticks(lo, hi, count, min_step) == pytest.approx(ticks)


def test_padded_domain_stays_within_limits():
    assert report_svg.padded_domain([0.5, 1.0], limits=(0.0, 1.0)) == pytest.approx((0.475, 1.0))
    assert report_svg.padded_domain([3.0, 3.0]) == pytest.approx((2.85, 3.15))


def test_training_scalars_from_v1_and_v2_events_later_write_wins(tmp_path):
    import tensorflow as tf
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        for step, value in ((1, 3.0), (2, 2.0)):  # TF1 style: simple_value
            raw = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag="loss", simple_value=value)])
            tf.summary.experimental.write_raw_pb(raw.SerializeToString(), step=step)
        for step, value in ((2, 1.5), (3, 1.0)):  # TF2 style: a scalar tensor (TPU host_call)
            tf.summary.scalar("loss", value, step=step)
        tf.summary.text("note", "not a scalar", step=1)
    (tmp_path / "eval").mkdir()  # eval/ event files are not training scalars
    assert report_data.read_training_events(str(tmp_path)).scalars == {"loss": [(1, 3.0), (2, 1.5), (3, 1.0)]}


def test_the_newest_steps_training_images_are_kept_the_later_write_of_a_step_winning(tmp_path):
    """Three summary steps of input images (trainer/run/input_images.py), step 4 written again by a
    resumed run: the page keeps the newest two steps, the second write of step 4."""
    import tensorflow as tf
    from trainer.run import input_images
    writer = tf.summary.create_file_writer(str(tmp_path))
    batches = {value: np.full([4, 5, 5, 3], value, np.float32) for value in (-1.0, 0.0, 1.0)}
    for step, value in ((2, -1.0), (4, -1.0), (6, 0.0), (4, 1.0)):
        input_images.write_images(writer, batches[value], step)
    writer.flush()
    images = report_data.read_training_events(str(tmp_path)).images
    assert list(images) == [4, 6] and [len(shown) for shown in images.values()] == [3, 3]
    pixels = {step: tf.io.decode_png(shown[0]).numpy() for step, shown in images.items()}
    assert pixels[4].shape == (5, 5, 3) and (pixels[4] == 255).all() and (pixels[6] == 128).all()


@pytest.mark.parametrize("size, kept", [(3, ["1", "3", "2"]), (0, []), (9, ["1", "3", "2", "4", "0"])])
def test_only_the_most_confident_mistakes_are_kept(size, kept):
    heap = []
    for order, probability in enumerate([0.4, 0.9, 0.6, 0.9, 0.5]):
        report_data.keep_most_confident(heap, size, order, report_data.Mistake(
            str(order), b"", 0, 1, probability, 0.0))
    assert [m.uri for m in report_data.most_confident_first(heap)] == kept


PNG = bytes.fromhex("89504e470d0a1a0a")  # a PNG's signature: the page inlines whatever bytes it gets


def make_page(num_mistakes=2):
    mistakes = [report_data.Mistake(f"eval/{i}.jpg", make_jpeg_bytes(i), 0, 1, 0.9 - i / 10, 0.05)
                for i in range(num_mistakes)]
    return report_html.Page(
        output_dir="/runs/<a&b>", export_dir="/runs/x/best_export/m/4", export_step=4,
        export_kind="best", eval_pattern="/d/eval-*", labels=["cat", "<dog>"],
        eval_results=[{"global_step": 2, "accuracy": 0.5, "loss": 1.0},
                      {"global_step": 4, "accuracy": 0.75, "loss": 0.7}],
        training_scalars={"loss": [(1, 2.0), (3, 1.2)], "learning_rate": [(1, 0.1)]},
        training_images={300: [PNG, PNG], 400: [PNG]}, augmentation="augment=randaugment, <x>",
        matrix=np.array([[3, 2], [0, 3]]), mistakes=mistakes, num_mistakes=num_mistakes + 1)


def test_page_is_self_contained_and_shows_every_part():
    page = report_html.render_page(make_page())
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert len(sources) == 5 and all(s.startswith("data:image/jpeg;base64,") for s in sources[3:])
    assert sources[:3] == ["data:image/png;base64,iVBORw0KGgo="] * 3  # training images, newest steps
    assert re.findall(r"<figcaption>step (\d+)</figcaption>", page) == ["300", "300", "400"]
    assert "shaped them: augment=randaugment, &lt;x&gt;" in page
    assert "<script" not in page and "&lt;dog&gt;" in page and "<dog>" not in page
    assert "/runs/&lt;a&amp;b&gt;" in page and "75.00%" in page  # recorded accuracy at step 4
    assert "Misclassified eval images (3)" in page and "The 2 most confident of 3." in page
    assert page.count('class="series"') == 3  # eval accuracy, train loss, eval loss
    assert re.search(r"<td[^>]*>2</td>", page)  # the matrix's one off-diagonal cell


def test_training_accuracy_is_named_once_in_the_legend():
    page = make_page()
    page.training_scalars["train_accuracy"] = [(1, 0.25), (3, 0.5)]
    legend = re.findall(r">(train [^<]*)<", report_html.render_page(page))
    assert "train accuracy" in legend and not [name for name in legend if "train_" in name]


@pytest.mark.trains  # the session's tiny runs of each engine (tests/trainer/conftest.py)
@pytest.mark.parametrize("engine, steps", [pytest.param("estimator", [1, 3], marks=needs_estimator),
                                           ("keras", [2, 4])])
def test_either_engines_page_shows_its_newest_training_images(engine, steps, tiny_run_of):
    """--save_summary_steps 2 over 4 steps: the Estimator's hook writes at 1 and 3, the Keras
    engine at 2 and 4; the page shows both steps' three images."""
    _, out = tiny_run_of(engine)
    page = report.build_page(str(out), None, 0)
    assert {step: len(shown) for step, shown in page.training_images.items()} == {steps[0]: 3, steps[1]: 3}
    assert report_html.render_page(page).count("data:image/png;base64,") == 6


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"), ("not_a_run", "is not a run directory"),
    ("no_eval_data", "no eval data: '/nowhere/eval-*' matches no files"), ("no_export", "has no export yet")])
@pytest.mark.trains
def test_ordinary_mistakes_are_named(case, message, tmp_path, trained_run):
    _, _, data_dir = trained_run
    out = tmp_path / "out"
    eval_glob = "/nowhere/eval-*" if case == "no_eval_data" else f"{data_dir}/eval-*"
    if case != "missing":
        out.mkdir()
    if case in ("no_eval_data", "no_export"):
        (out / "params.json").write_text(json.dumps({"eval_data_path": eval_glob}))
    with pytest.raises(report_data.ReportError, match=re.escape(message)):
        report.build_page(str(out), None, 8)


def run_report(*argv, **run_args):
    return run("trainer.report", *argv, timeout=120, **run_args)


def run_chromium(profile, *argv):
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *argv],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.process
@pytest.mark.parametrize("out, message", [
    ("nowhere", "{out} does not exist; pass the --output_dir of a training run"),
    (".", "{out} is not a run directory (no params.json); pass the --output_dir of a training run")],
    ids=["missing", "not_a_run"])
def test_command_error_is_one_line_and_exit_code_2(out, message, tmp_path):
    """A local OUT is judged before TensorFlow loads (it cannot load here)."""
    out = tmp_path / out
    result = run_report(out, env=user_env(without_tensorflow=True))
    assert result.returncode == 2 and result.stdout == ""
    assert error_lines(result) == [f"error: {message.format(out=out)}"]
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.process
@pytest.mark.trains  # the session's trained run
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                                             ".ci/run installs it when run as root)")
def test_report_renders_in_headless_chromium(trained_run, tmp_path):
    output_dir, _, _ = trained_run
    page_path = tmp_path / "report.html"
    result = run_report(output_dir, "--output", page_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [record] = [r for r in eval_records.read_eval_results(output_dir) if "best_export" in r]
    assert result.stdout.startswith(f"report: {page_path} (step {record['global_step']}, "
                                    f"{NUM_GOOD_IMAGES} eval images, accuracy {record['accuracy']:.4f}, ")
    assert result.stdout.rstrip().endswith(f"open {page_path.as_uri()}") and result.stdout.count("\n") == 1
    assert "tensorflow" not in result.stderr.lower()
    num_mistakes = int(re.search(r"(\d+) misclassified", result.stdout).group(1))
    assert num_mistakes == round(NUM_GOOD_IMAGES * (1 - record["accuracy"]))

    checked = tmp_path / "checked.html"
    checked.write_text(page_path.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = run_chromium(tmp_path / "profile", "--dump-dom", checked.as_uri()).stdout
    check = json.loads(html.unescape(re.search(r'data-check="([^"]*)"', dom).group(1)))
    assert check["images"] == check["decoded"] == num_mistakes > 0
    assert check["training"] == [16] * 3  # the Estimator engine's first step: 3 of its 16-px images
    assert check["charts"] == 2 and check["matrix_cells"] == 9 and check["class_rows"] == 5
    series = dict(check["series"])
    assert series["eval accuracy"] == series["eval loss"] == len(eval_records.read_eval_results(output_dir))
    assert series.get("train loss", 0) == len(report_data.read_training_events(output_dir).scalars.get("loss", []))

    shot = tmp_path / "shot.png"
    run_chromium(tmp_path / "profile2", "--window-size=1000,900", f"--screenshot={shot}", page_path.as_uri())
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (900, 1000, 3)
    assert (pixels.min(axis=2) < 200).mean() > 0.01  # not blank: text, charts, matrix
    assert ((pixels[..., 2] > 150) & (pixels[..., 0] < 80)).sum() > 100  # the blue diagonal
