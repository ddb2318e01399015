"""Line charts as inline SVG for the report page: axes, ticks, one polyline per series.

No plotting library (matplotlib is not in the lock): a chart is a few dozen
SVG elements, and the page stays one self-contained file.

    .venv/bin/python -m trainer.report.svg > /tmp/chart.svg   # a sample chart
"""
import dataclasses
import html
import math
import sys

MAX_MARKERS = 60  # a dot per point up to this many points; beyond, the line alone reads better


@dataclasses.dataclass(frozen=True)
class Series:
    name: str
    points: list  # [(x, y)], x ascending; x = global step
    color: str    # any CSS colour


@dataclasses.dataclass(frozen=True)
class Frame:
    """The chart's size and the margins around its plot area, in pixels."""
    width: int = 440
    height: int = 260
    left: int = 60     # room for the y tick labels and the y axis label
    right: int = 16
    top: int = 36      # room for the title and the legend
    bottom: int = 44   # room for the x tick labels and the x axis label

    @property
    def x_pixels(self):
        return self.left, self.width - self.right

    @property
    def y_pixels(self):  # SVG's y grows downwards: the domain's low end is the bottom edge
        return self.height - self.bottom, self.top


def make_scale(domain, pixels):
    """value -> pixel, linear, mapping domain (lo, hi) onto pixels (start, end)."""
    (lo, hi), (start, end) = domain, pixels
    return lambda value: start + (value - lo) * (end - start) / (hi - lo)


def padded_domain(values, pad=0.05, limits=(-math.inf, math.inf)):
    """(lo, hi) around values with pad of the span either side, kept within limits."""
    lo, hi = min(values), max(values)
    span = hi - lo or abs(hi) or 1.0
    lo, hi = max(lo - pad * span, limits[0]), min(hi + pad * span, limits[1])
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def step_domain(steps):
    """The x domain: first to last step exactly; one step alone sits in the middle."""
    lo, hi = min(steps), max(steps)
    return (lo, hi) if hi > lo else (lo - 1, hi + 1)


def nice_ticks(lo, hi, count=5, min_step=0.0):
    """Round values (1, 2 or 5 times a power of ten apart) within [lo, hi], about count of them.

    min_step=1 keeps the ticks of an axis of steps on whole numbers.
    """
    raw = max((hi - lo) / max(count, 1), min_step)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step + 1e-9) + 1)]


def format_tick(value):
    return f"{value:.6g}"


def axes_svg(frame, x_domain, y_domain, x_label, y_label):
    """Grid lines, tick labels and axis labels of the plot area."""
    x_scale, y_scale = make_scale(x_domain, frame.x_pixels), make_scale(y_domain, frame.y_pixels)
    (x0, x1), (y0, y1) = frame.x_pixels, frame.y_pixels
    parts = [f'<rect class="plot" x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" '
             'fill="none" stroke="#999"/>']
    for tick in nice_ticks(*y_domain):
        y = y_scale(tick)
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{format_tick(tick)}</text>')
    for tick in nice_ticks(*x_domain, count=4, min_step=1):
        x = x_scale(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}" stroke="#999"/>'
                     f'<text x="{x:.1f}" y="{y0 + 17}" text-anchor="middle">{format_tick(tick)}</text>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{frame.height - 6}" text-anchor="middle">'
                 f'{html.escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {(y0 + y1) / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{html.escape(y_label)}</text>')
    return "".join(parts)


def series_svg(series, x_scale, y_scale):
    """One polyline (and a dot per point when there are few) with tooltips."""
    pixels = [(x_scale(x), y_scale(y)) for x, y in series.points]
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in pixels)
    name = html.escape(series.name)
    parts = [f'<polyline class="series" data-series="{name}" points="{points}" fill="none" '
             f'stroke="{series.color}" stroke-width="2"/>']
    if len(pixels) <= MAX_MARKERS:
        parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{series.color}">'
                  f'<title>{name}, step {x:g}: {y:.4g}</title></circle>'
                  for (px, py), (x, y) in zip(pixels, series.points)]
    return "".join(parts)


def marker_svg(frame, x_scale, x, label):
    """A dashed vertical line at step x, labelled at its top (e.g. the exported step)."""
    px, (y0, y1) = x_scale(x), frame.y_pixels
    is_left_half = px < sum(frame.x_pixels) / 2  # the label goes on the side with room
    anchor, label_x = ("start", px + 3) if is_left_half else ("end", px - 3)
    return (f'<line class="marker" x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y1}" stroke="#555" '
            f'stroke-dasharray="4 3"/><text x="{label_x:.1f}" y="{y1 + 12}" text-anchor="{anchor}" '
            f'fill="#555">{html.escape(label)}</text>')


def legend_svg(frame, series):
    parts, x = [], frame.left
    for s in series:
        parts.append(f'<rect x="{x}" y="{frame.top - 14}" width="10" height="10" fill="{s.color}"/>'
                     f'<text x="{x + 14}" y="{frame.top - 5}">{html.escape(s.name)}</text>')
        x += 24 + 7 * len(s.name)
    return "".join(parts)


def line_chart(title, series, x_label="step", y_label="", y_limits=(-math.inf, math.inf),
               frame=Frame(), x_domain=None, y_domain=None, markers=()):
    """An <svg> element with one line per non-empty series; a note when none has points.

    markers: (step, label) pairs drawn as dashed vertical lines when within the x domain.
    """
    series = [s for s in series if s.points]
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{frame.width}" '
            f'height="{frame.height}" viewBox="0 0 {frame.width} {frame.height}" role="img" '
            f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="11">'
            f'<title>{html.escape(title)}</title>'
            f'<text x="{frame.left}" y="12" font-size="13" font-weight="bold">{html.escape(title)}</text>')
    if not series:
        return head + (f'<text x="{frame.width / 2}" y="{frame.height / 2}" text-anchor="middle">'
                       'no data</text></svg>')
    x_domain = x_domain or step_domain([x for s in series for x, _ in s.points])
    y_domain = y_domain or padded_domain([y for s in series for _, y in s.points], limits=y_limits)
    x_scale, y_scale = make_scale(x_domain, frame.x_pixels), make_scale(y_domain, frame.y_pixels)
    return (head + axes_svg(frame, x_domain, y_domain, x_label, y_label)
            + "".join(marker_svg(frame, x_scale, x, label) for x, label in markers
                      if x_domain[0] <= x <= x_domain[1])
            + "".join(series_svg(s, x_scale, y_scale) for s in series)
            + legend_svg(frame, series) + "</svg>")


def main(argv):
    del argv
    print(line_chart("sample", [Series("loss", [(0, 2.3), (500, 0.4), (1000, 0.1)], "#d62728"),
                                Series("eval loss", [(500, 0.5), (1000, 0.2)], "#1f77b4")],
                     y_label="loss"))


if __name__ == "__main__":
    main(sys.argv)
