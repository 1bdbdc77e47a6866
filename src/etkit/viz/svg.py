"""Inline SVG charts for the HTML report: no JavaScript, no network, every label escaped.

Each function returns one ``<svg>`` element as a string; hover titles (``<title>``) carry exact values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape

from ..safetext import xml_text

__all__ = ["stacked_bars", "bar_chart", "heatmap", "block_matrix", "gantt", "legend", "KIND_COLORS", "CATEGORY_COLORS",
           "MAX_HEAT_CELLS"]

KIND_COLORS = {"compute": "#4e79a7", "cpu": "#76b7b2", "comm": "#e15759", "memory": "#f28e2b", "other": "#bab0ab",
               "caller": "#9c755f", "wait": "#d3d3d3"}
CATEGORY_COLORS = {"compute": "#4e79a7", "exposed_comm": "#e15759", "memory": "#f28e2b", "waiting": "#b07aa1",
                   "host": "#76b7b2", "idle": "#d9d9d9", "overlapped_comm": "#ff9da7"}
_FONT = 'font-family="sans-serif" font-size="11"'


def _e(text: object) -> str:
    return escape(xml_text(str(text)), quote=True)


def _svg(width: float, height: float, body: list[str], cls: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {cls}" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">' + "".join(body) + "</svg>")


def legend(colors: Mapping[str, str], labels: Mapping[str, str] | None = None) -> str:
    """A row of colour swatches (HTML, not SVG, so it wraps)."""
    items = [f'<span class="swatch" style="background:{c}"></span>{_e((labels or {}).get(k, k))}'
             for k, c in colors.items()]
    return '<div class="legend">' + " ".join(f"<span>{i}</span>" for i in items) + "</div>"


def _rows_layout(n: int, tallest: int) -> tuple[int, int, int]:
    """Bar height, gap and label stride for ``n`` rows: many ranks get thin bars and every k-th label."""
    bar_h = max(2, min(tallest, 640 // max(n, 1) - 1))
    gap = 4 if bar_h >= 12 else 1
    stride = 1 if bar_h >= 10 else -(-11 // (bar_h + gap))
    return bar_h, gap, stride


def stacked_bars(rows: Sequence[tuple[str, Mapping[str, float]]], categories: Sequence[str],
                 colors: Mapping[str, str], fmt: Callable[[float], str], *, width: int = 760) -> str:
    """One horizontal bar per row, split by category, scaled to the largest row total."""
    label_w = max(90, min(300, 7 * max((len(label) for label, _ in rows), default=0) + 10))
    bar_h, gap, stride = _rows_layout(len(rows), 16)
    height = max(len(rows), 1) * (bar_h + gap) + 10
    biggest = max((sum(v.get(c, 0.0) for c in categories) for _, v in rows), default=0.0) or 1.0
    body = []
    for i, (label, values) in enumerate(rows):
        y = 5 + i * (bar_h + gap)
        if i % stride == 0:
            body.append(f'<text x="{label_w - 6}" y="{y + min(bar_h, 12) - 2}" text-anchor="end" {_FONT}>'
                        f"{_e(label)}</text>")
        x = float(label_w)
        for c in categories:
            v = values.get(c, 0.0)
            w = (width - label_w - 10) * v / biggest
            if w <= 0:
                continue
            body.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{colors[c]}">'
                        f"<title>{_e(label)}: {_e(c)} {_e(fmt(v))}</title></rect>")
            x += w
    return _svg(width, height, body, "stacked-bars")


def bar_chart(labels: Sequence[str], values: Sequence[float], fmt: Callable[[float], str], *,
              color: str = "#4e79a7", width: int = 760, label_width: int = 200) -> str:
    """Horizontal bars, one per label, with the value printed at the end (labels thinned when many)."""
    bar_h, gap, stride = _rows_layout(len(labels), 14)
    height = max(len(labels), 1) * (bar_h + gap) + 10
    top = max(values, default=0.0) or 1.0
    span = width - label_width - 90
    body = []
    for i, (label, v) in enumerate(zip(labels, values)):
        y = 5 + i * (bar_h + gap)
        w = span * v / top
        body.append(f'<rect x="{label_width}" y="{y}" width="{max(w, 0.5):.2f}" height="{bar_h}" fill="{color}">'
                    f"<title>{_e(label)}: {_e(fmt(v))}</title></rect>")
        if i % stride == 0:
            text_y = y + min(bar_h, 12) - 2
            body.append(f'<text x="{label_width - 6}" y="{text_y}" text-anchor="end" {_FONT}>{_e(label)}</text>')
            body.append(f'<text x="{label_width + w + 4:.2f}" y="{text_y}" {_FONT}>{_e(fmt(v))}</text>')
    return _svg(width, height, body, "bar-chart")


def _heat(frac: float) -> str:
    # white -> dark red
    r, g, b = 255, int(255 - 200 * frac), int(255 - 220 * frac)
    return f"rgb({r},{g},{b})"


#: Largest matrix drawn cell by cell; a bigger one is summed into blocks of consecutive ranks.
MAX_HEAT_CELLS = 64


def block_matrix(matrix, labels: Sequence[str]):  # type: ignore[no-untyped-def]
    """``(matrix, labels)`` with at most :data:`MAX_HEAT_CELLS` rows and columns: blocks of consecutive
    ranks summed, labelled ``first-last``."""
    import numpy as np

    n = len(labels)
    if n <= MAX_HEAT_CELLS:
        return matrix, list(labels)
    width = -(-n // MAX_HEAT_CELLS)
    edges = list(range(0, n, width)) + [n]
    blocks = np.add.reduceat(np.add.reduceat(np.asarray(matrix), edges[:-1], axis=0), edges[:-1], axis=1)
    return blocks, [f"{labels[a]}-{labels[b - 1]}" for a, b in zip(edges[:-1], edges[1:])]


def heatmap(matrix, labels: Sequence[str], fmt: Callable[[float], str], *, size: int = 480,  # type: ignore[no-untyped-def]
            what: str = "") -> str:
    """Square heat map, rows = senders, columns = receivers, with its colour scale (``what``: the unit's
    name, e.g. "bytes"); over :data:`MAX_HEAT_CELLS` ranks, blocks of ranks (:func:`block_matrix`)."""
    matrix, labels = block_matrix(matrix, labels)
    n = len(labels)
    margin = 70 if n and max(len(x) for x in labels) > 4 else 40
    cell = min(max((size - margin) / max(n, 1), 1.0), 40.0)
    total = margin + cell * n + 5
    scale_w = 140
    top = float(matrix.max()) if n else 0.0
    body = [f'<text x="{margin}" y="12" {_FONT}>to rank &#8594;</text>',
            f'<text x="10" y="{margin + 10}" {_FONT} transform="rotate(90 10 {margin + 10})">from rank &#8594;</text>']
    show_labels = cell >= 12
    for i in range(n):
        if show_labels:
            body.append(f'<text x="{margin - 3}" y="{margin + (i + 0.7) * cell:.1f}" text-anchor="end" {_FONT}>'
                        f"{_e(labels[i])}</text>")
            body.append(f'<text x="{margin + (i + 0.5) * cell:.1f}" y="{margin - 4}" text-anchor="middle" {_FONT}>'
                        f"{_e(labels[i])}</text>")
        for j in range(n):
            v = float(matrix[i, j])
            frac = v / top if top else 0.0
            body.append(f'<rect x="{margin + j * cell:.2f}" y="{margin + i * cell:.2f}" width="{cell:.2f}" '
                        f'height="{cell:.2f}" fill="{_heat(frac)}" stroke="#eee" stroke-width="0.5">'
                        f"<title>{_e(labels[i])} &#8594; {_e(labels[j])}: {_e(fmt(v))}</title></rect>")
    # the colour scale: ten steps from 0 to the largest cell
    x0 = total + 20
    body.append(f'<text x="{x0}" y="{margin - 4}" {_FONT}>scale{(" (" + _e(what) + ")") if what else ""}</text>')
    steps = 10
    bar_h = max((total - margin - 20) / steps, 6.0)
    for k in range(steps):
        frac = 1 - k / (steps - 1)
        body.append(f'<rect class="scale" x="{x0}" y="{margin + k * bar_h:.1f}" width="16" height="{bar_h:.1f}" '
                    f'fill="{_heat(frac)}" stroke="#ccc" stroke-width="0.5"/>')
    body.append(f'<text x="{x0 + 22}" y="{margin + 10}" {_FONT}>{_e(fmt(top))}</text>')
    body.append(f'<text x="{x0 + 22}" y="{margin + steps * bar_h:.1f}" {_FONT}>{_e(fmt(0.0))}</text>')
    return _svg(total + scale_w, max(total, margin + steps * bar_h + 10), body, "heatmap")


def gantt(lanes: Sequence[tuple[str, Sequence[tuple[float, float, str, str]]]], t0: float, t1: float,
          fmt: Callable[[float], str], *, width: int = 1000) -> str:
    """Timeline: one row per lane, boxes ``(start, end, label, color)`` between ``t0`` and ``t1``."""
    label_w, row_h, gap = 150, 14, 3
    plot_w = width - label_w - 10
    scale = plot_w / (t1 - t0) if t1 > t0 else 0.0
    height = max(len(lanes), 1) * (row_h + gap) + 25
    body = []
    for k in range(5):
        x = label_w + plot_w * k / 4
        body.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 18}" stroke="#ddd"/>')
        body.append(f'<text x="{x:.1f}" y="{height - 5}" text-anchor="middle" {_FONT}>'
                    f"{_e(fmt((t1 - t0) * k / 4))}</text>")
    for i, (label, boxes) in enumerate(lanes):
        y = 2 + i * (row_h + gap)
        body.append(f'<text x="{label_w - 6}" y="{y + row_h - 3}" text-anchor="end" {_FONT}>{_e(label)}</text>')
        for start, end, name, color in boxes:
            x = label_w + (max(start, t0) - t0) * scale
            w = max((min(end, t1) - max(start, t0)) * scale, 0.6)
            body.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" fill="{color}">'
                        f"<title>{_e(name)}: {_e(fmt(end - start))}</title></rect>")
    return _svg(width, height, body, "gantt")
