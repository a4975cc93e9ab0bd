"""Charts as server-rendered SVG: no JavaScript needed to draw them, nothing fetched at run time.

Every chart is an `<svg role="img">` with a `<title>` and `<desc>` (its alt text), one `<g>` per
series carrying `data-series` (and each mark its values as data attributes, for tests and for
anyone scraping the page), native tooltips (`<title>` inside each mark), and a legend. The page
puts a data table beside each chart. Colours: the Okabe-Ito and Tol palettes, each at least 3:1
against white (WCAG 2.1 non-text contrast); a pattern-free design relies on the legend order,
which follows the stacking order, and on the tables.
"""

from __future__ import annotations

# ruff: noqa: E501  (SVG markup reads best one element per line)
import html
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PALETTE = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#8A6D00", "#56507A", "#A6401F", "#117733",
    "#882255", "#44548A", "#6F6F00", "#AA4499", "#1F6F8B", "#7A5230",
)  # fmt: skip
OTHER_COLOUR = "#B8860B"
UNKNOWN_COLOUR = "#8C8C8C"  # greys for the verdicts that name no CCA, told apart by lightness
INSUFFICIENT_COLOUR = "#3D3D3D"
FONT = 'font-family="system-ui, sans-serif"'


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def colour_for(name: str, order: Sequence[str]) -> str:
    if name in ("other", "others"):
        return OTHER_COLOUR
    if name.startswith("unknown"):
        return UNKNOWN_COLOUR
    if name.startswith("insufficient"):
        return INSUFFICIENT_COLOUR
    i = list(order).index(name) if name in order else abs(hash(name))
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True)
class Box:
    width: int = 720
    height: int = 300
    left: int = 48
    right: int = 150  # the legend
    top: int = 12
    bottom: int = 40

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom


def _open(chart_id: str, title: str, desc: str, box: Box, kind: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{esc(chart_id)}" data-chart="{esc(kind)}" '
        f'role="img" aria-labelledby="{esc(chart_id)}-t {esc(chart_id)}-d" viewBox="0 0 {box.width} {box.height}" '
        f'width="100%" preserveAspectRatio="xMinYMin meet" {FONT} font-size="11">',
        f'<title id="{esc(chart_id)}-t">{esc(title)}</title>',
        f'<desc id="{esc(chart_id)}-d">{esc(desc)}</desc>',
    ]


def _y_axis(box: Box, ticks: Sequence[tuple[float, str]]) -> list[str]:
    out = []
    for frac, label in ticks:
        y = box.top + box.plot_h * (1 - frac)
        out.append(
            f'<line x1="{box.left}" x2="{box.left + box.plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#D0D0D0" stroke-width="0.5"/>'
        )
        out.append(
            f'<text x="{box.left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#333">{esc(label)}</text>'
        )
    return out


def _legend(box: Box, names: Sequence[str], colours: dict[str, str]) -> list[str]:
    out = ['<g class="legend">']
    x = box.left + box.plot_w + 12
    for i, name in enumerate(names[:16]):
        y = box.top + 4 + i * 16
        out.append(
            f'<g class="legend-item" data-series="{esc(name)}"><rect x="{x:.1f}" y="{y}" width="10" height="10" '
            f'fill="{colours[name]}"/><text x="{x + 15:.1f}" y="{y + 9}" fill="#1A1A1A">{esc(name)}</text></g>'
        )
    out.append("</g>")
    return out


def stacked_area(
    chart_id: str,
    title: str,
    desc: str,
    x_labels: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    x_pos: Sequence[float] | None = None,
    markers: Sequence[tuple[float, str]] = (),
    box: Box | None = None,
) -> str:
    """Shares (0..1) stacked bottom-up in the order of `series`, one point per x label. A single
    point is drawn as a band (a stacked column). `x_pos` places points on a numeric axis (years);
    `markers` are labelled vertical rules (where our own campaigns start)."""
    b = box or Box()
    n = len(x_labels)
    names = list(series)
    colours = {s: colour_for(s, names) for s in names}
    out = _open(chart_id, title, desc, b, "stacked-area")
    out += _y_axis(b, [(f, f"{f:.0%}") for f in (0, 0.25, 0.5, 0.75, 1.0)])
    if n == 0:
        out.append(f'<text x="{b.left + 10}" y="{b.top + 20}" fill="#333">no data</text></svg>')
        return "\n".join(out)
    if x_pos is not None:
        lo, hi = min(x_pos), max(x_pos)
        span = (hi - lo) or 1.0
        xs = [b.left + b.plot_w * (x - lo) / span for x in x_pos]
    elif n == 1:
        xs = [b.left + b.plot_w * 0.3]
    else:
        xs = [b.left + b.plot_w * i / (n - 1) for i in range(n)]
    if n == 1:  # a band: the same point twice, 40 % of the width apart
        xs = [b.left + b.plot_w * 0.3, b.left + b.plot_w * 0.7]
    base = np.zeros(n)
    for name in names:
        vals = np.asarray([float(v) for v in series[name]], dtype=float)
        top = base + vals
        if n == 1:
            lower, upper = [base[0], base[0]], [top[0], top[0]]
        else:
            lower, upper = list(base), list(top)
        pts_up = [
            f"{x:.1f},{b.top + b.plot_h * (1 - min(y, 1.0)):.1f}" for x, y in zip(xs, upper, strict=True)
        ]
        pts_lo = [
            f"{x:.1f},{b.top + b.plot_h * (1 - min(y, 1.0)):.1f}"
            for x, y in zip(reversed(xs), reversed(lower), strict=True)
        ]
        tip = "; ".join(f"{lab}: {v:.1%}" for lab, v in zip(x_labels, vals, strict=True))
        values = ",".join(f"{v:.4f}" for v in vals)
        out.append(
            f'<g class="series" data-series="{esc(name)}" data-values="{values}">'
            f'<path d="M{" L".join(pts_up + pts_lo)} Z" fill="{colours[name]}" stroke="#FFFFFF" '
            f'stroke-width="0.6"><title>{esc(name)} — {esc(tip)}</title></path></g>'
        )
        base = top
    # x labels: at most ~8 shown
    step = max(1, math.ceil(n / 8))
    label_xs = xs if n > 1 else [(xs[0] + xs[1]) / 2]
    for i, (x, lab) in enumerate(zip(label_xs, x_labels, strict=False)):
        if i % step == 0 or i == n - 1:
            out.append(
                f'<text x="{x:.1f}" y="{b.top + b.plot_h + 16:.1f}" text-anchor="middle" fill="#333">'
                f"{esc(lab)}</text>"
            )
    for xv, lab in markers:
        if x_pos is None:
            continue
        lo, hi = min(x_pos), max(x_pos)
        x = b.left + b.plot_w * (xv - lo) / ((hi - lo) or 1.0)
        out.append(
            f'<g class="marker" data-label="{esc(lab)}"><line x1="{x:.1f}" x2="{x:.1f}" y1="{b.top}" '
            f'y2="{b.top + b.plot_h:.1f}" stroke="#1A1A1A" stroke-dasharray="3 2"/>'
            f'<text x="{x - 3:.1f}" y="{b.top + 10}" text-anchor="end" fill="#1A1A1A">{esc(lab)}</text></g>'
        )
    out += _legend(b, list(reversed(names)), colours)  # top of the stack first, as drawn
    out.append("</svg>")
    return "\n".join(out)


def hbars(
    chart_id: str,
    title: str,
    desc: str,
    items: Sequence[tuple[str, float, str]],
    *,
    max_value: float | None = None,
    intervals: Sequence[tuple[float, float] | None] | None = None,
    box: Box | None = None,
) -> str:
    """Horizontal bars: (name, value, label shown). Optional error bars (lo, hi)."""
    rows = len(items)
    b = box or Box(height=max(60, 24 + rows * 22), left=150, right=60, bottom=8)
    top = max_value or max([v for _, v, _ in items] + [1e-9])
    out = _open(chart_id, title, desc, b, "bars")
    for i, (name, v, label) in enumerate(items):
        y = b.top + i * 22
        w = b.plot_w * max(v, 0.0) / top
        out.append(
            f'<g class="series" data-series="{esc(name)}" data-value="{v:.4f}">'
            f'<text x="{b.left - 6}" y="{y + 13}" text-anchor="end" fill="#1A1A1A">{esc(name)}</text>'
            f'<rect x="{b.left}" y="{y + 2}" width="{w:.1f}" height="15" fill="{PALETTE[0]}">'
            f"<title>{esc(name)}: {esc(label)}</title></rect>"
        )
        if intervals and intervals[i] is not None:
            lo, hi = intervals[i]  # type: ignore[misc]
            x0, x1 = b.left + b.plot_w * lo / top, b.left + b.plot_w * hi / top
            out.append(
                f'<line class="ci" x1="{x0:.1f}" x2="{x1:.1f}" y1="{y + 9.5}" y2="{y + 9.5}" stroke="#1A1A1A" '
                'stroke-width="1.5"/>'
            )
        out.append(f'<text x="{b.left + w + 4:.1f}" y="{y + 13}" fill="#1A1A1A">{esc(label)}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def heatmap(
    chart_id: str,
    title: str,
    desc: str,
    rows: Sequence[str],
    cols: Sequence[str],
    matrix: Sequence[Sequence[int]],
) -> str:
    """A confusion matrix: rows are the truth, columns the verdict; darker = more of the row."""
    cell = 22
    b = Box(
        width=110 + cell * len(cols) + 10, height=90 + cell * len(rows), left=100, right=10, top=80, bottom=10
    )
    out = _open(chart_id, title, desc, b, "heatmap")
    for j, c in enumerate(cols):
        x = b.left + j * cell + cell / 2
        out.append(
            f'<text x="{x:.1f}" y="{b.top - 6}" transform="rotate(-60 {x:.1f} {b.top - 6})" fill="#1A1A1A">'
            f"{esc(c)}</text>"
        )
    for i, r in enumerate(rows):
        y = b.top + i * cell
        total = sum(matrix[i]) or 1
        out.append(f'<g class="series" data-series="{esc(r)}">')
        out.append(f'<text x="{b.left - 6}" y="{y + 15}" text-anchor="end" fill="#1A1A1A">{esc(r)}</text>')
        for j, c in enumerate(cols):
            n = int(matrix[i][j])
            frac = n / total
            # A light blue ramp (white to rgb(110,140,255)): the dark count stays at >= 5.7:1
            # contrast on every cell (WCAG AA), the shade says how much of the row it holds.
            fill = f"rgb({255 - int(145 * frac)},{255 - int(115 * frac)},255)" if n else "#FFFFFF"
            ink = "#1A1A1A"
            diag = ' stroke="#1A1A1A" stroke-width="1"' if r == c else ' stroke="#DDDDDD" stroke-width="0.5"'
            out.append(
                f'<rect x="{b.left + j * cell}" y="{y}" width="{cell}" height="{cell}" fill="{fill}"{diag} '
                f'data-true="{esc(r)}" data-verdict="{esc(c)}" data-count="{n}"><title>true {esc(r)}, verdict '
                f"{esc(c)}: {n}</title></rect>"
            )
            if n:
                out.append(
                    f'<text x="{b.left + j * cell + cell / 2}" y="{y + 15}" text-anchor="middle" '
                    f'fill="{ink}" font-size="10">{n}</text>'
                )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _decimate(t: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ~max_points points that keep each bucket's minimum and maximum (peaks survive)."""
    n = len(t)
    if n <= max_points:
        return t, y
    buckets = max_points // 2
    edges = np.linspace(0, n, buckets + 1, dtype=int)
    ts, ys = [], []
    for a, z in itertools.pairwise(edges):
        if z <= a:
            continue
        seg = y[a:z]
        i_min, i_max = a + int(np.argmin(seg)), a + int(np.argmax(seg))
        for i in sorted((i_min, i_max)):
            ts.append(t[i])
            ys.append(y[i])
    return np.asarray(ts), np.asarray(ys)


def trace_chart(
    chart_id: str,
    title: str,
    desc: str,
    t: np.ndarray,
    lines: dict[str, np.ndarray],
    marks: dict[str, object],
    *,
    box: Box | None = None,
    max_points: int = 700,
) -> str:
    """BiF (and the pipe) over time, with the classifier's segments (shaded), back-offs (dashed,
    with β), slow start's end and the ProbeRTT dips the BBR detectors found."""
    b = box or Box(height=260, right=130)
    t = np.asarray(t, dtype=float) - (float(t[0]) if len(t) else 0.0)
    t_max = float(t[-1]) if len(t) else 1.0
    y_max = max((float(np.max(v)) for v in lines.values() if len(v)), default=1.0) or 1.0
    names = list(lines)
    colours = {"bif": PALETTE[0], "pipe": PALETTE[1], "sacked": PALETTE[2]}
    colours.update({n: colour_for(n, names) for n in names if n not in colours})

    def px(x: float) -> float:
        return b.left + b.plot_w * x / (t_max or 1.0)

    def py(y: float) -> float:
        return b.top + b.plot_h * (1 - y / (y_max * 1.08))

    out = _open(chart_id, title, desc, b, "trace")
    out += _y_axis(b, [(f / 1.08, f"{y_max * f / 1000:.0f} kB") for f in (0, 0.5, 1.0)])
    segs = marks.get("segments") or []
    for k, seg in enumerate(segs):  # type: ignore[union-attr]
        a, z = float(seg[0]), float(seg[1])
        out.append(
            f'<rect class="segment" data-start="{a:.3f}" data-end="{z:.3f}" x="{px(a):.1f}" y="{b.top}" '
            f'width="{max(px(z) - px(a), 0.5):.1f}" height="{b.plot_h:.1f}" fill="#7F7F7F" '
            f'fill-opacity="{0.10 if k % 2 else 0.18}"><title>segment {k + 1}: {a:.1f}-{z:.1f} s</title></rect>'
        )
    for name, y in lines.items():
        tt, yy = _decimate(t, np.asarray(y, dtype=float), max_points)
        pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(tt, yy, strict=True))
        out.append(
            f'<g class="series" data-series="{esc(name)}" data-points="{len(t)}"><polyline points="{pts}" '
            f'fill="none" stroke="{colours[name]}" stroke-width="1"/></g>'
        )
    for x, beta in marks.get("backoffs") or []:  # type: ignore[union-attr]
        label = f"β {beta:.2f}" if isinstance(beta, int | float) else "back-off"
        out.append(
            f'<g class="backoff" data-t="{float(x):.3f}"><line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{b.top}" '
            f'y2="{b.top + b.plot_h:.1f}" stroke="#1A1A1A" stroke-dasharray="3 2"><title>back-off at '
            f"{float(x):.1f} s, {esc(label)}</title></line></g>"
        )
    ss = marks.get("slow_start_end")
    if isinstance(ss, int | float):
        out.append(
            f'<g class="slow-start-end" data-t="{ss:.3f}"><line x1="{px(ss):.1f}" x2="{px(ss):.1f}" '
            f'y1="{b.top}" y2="{b.top + b.plot_h:.1f}" stroke="#1A1A1A" stroke-width="1.5">'
            f"<title>slow start ends at {ss:.1f} s</title></line></g>"
        )
    for d in marks.get("dips") or []:  # type: ignore[union-attr]
        x = px(float(d))
        out.append(
            f'<path class="dip" data-t="{float(d):.3f}" d="M{x - 4:.1f},{b.top} L{x + 4:.1f},{b.top} L{x:.1f},'
            f'{b.top + 7}" fill="#1A1A1A"><title>ProbeRTT dip at {float(d):.1f} s</title></path>'
        )
    for sec in range(0, int(t_max) + 1, max(1, int(t_max // 6) or 1)):
        out.append(
            f'<text x="{px(sec):.1f}" y="{b.top + b.plot_h + 16:.1f}" text-anchor="middle" fill="#333">{sec} s</text>'
        )
    out += _legend(b, names, colours)
    out.append("</svg>")
    return "\n".join(out)
