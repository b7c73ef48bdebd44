"""Row charts as inline SVG, written directly: one row per cell or effect, a point with its
interval or a box, on a shared horizontal axis.

Why not matplotlib: these charts are dots, whiskers and boxes on one axis. matplotlib took
about 2 s of CPU per report (0.9 s to import, ~0.3 s per chart to lay out and write SVG with
every glyph as a path), paid at the end of every `orch run` and by every report the team pages
rebuild; this writes the same picture in milliseconds, and the text stays text (searchable,
selectable, a fraction of the size). Like report/trends.py, the output holds only numbers and
escaped text, so the page's Content-Security-Policy needs nothing more.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.core.clip import clip

WIDTH = 720
ROW_H = 22
ROW_H2 = 32  # a chart whose labels take two lines
TOP = 10
BOTTOM = 44  # tick labels and the axis title
RIGHT = 16
CHAR_W = 6.2  # px per character of a 11 px sans-serif label (an estimate: no layout engine here)
GRID = "#d0d7de"
TEXT = "#24292f"


@dataclass(frozen=True)
class Box:
    """Five numbers of a box plot."""

    whislo: float
    q1: float
    med: float
    q3: float
    whishi: float


@dataclass(frozen=True)
class Row:
    """One row: a point with an optional interval, or a box."""

    label: str
    color: str
    point: float | None = None
    low: float | None = None
    high: float | None = None
    box: Box | None = None
    square: bool = False  # marker shape: effects are squares, rates circles


@dataclass(frozen=True)
class Axis:
    """The horizontal axis: its title, an optional reference line, whether it starts at 0."""

    title: str
    ref: float | None = None
    ref_color: str = "black"
    ref_dashed: bool = False
    from_zero: bool = False


def row_chart(rows: Sequence[Row], axis: Axis, *, key: str, title: str, header: str = "") -> str:
    """The chart as an <svg class="chart"> element; "" for no rows. A header is a line above the
    rows, across the chart (what the row labels list, when they are too short to say it)."""
    if not rows:
        return ""
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", key)
    left = min(0.62 * WIDTH, max(len(line) for r in rows for line in r.label.split("\n")) * CHAR_W + 14)
    row_h = ROW_H2 if any("\n" in r.label for r in rows) else ROW_H
    lo, hi = _domain(rows, axis)
    ticks = nice_ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    plot_w = WIDTH - left - RIGHT
    top = TOP + (ROW_H if header else 0)
    height = top + row_h * max(len(rows), 2) + BOTTOM
    bottom = height - BOTTOM

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    parts = [
        f'<svg class="chart" role="img" aria-labelledby="{slug}-title" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">',
        f'<title id="{slug}-title">{_text(title)}</title>',
    ]
    if header:
        parts.append(_label(0, TOP + ROW_H * 0.5 + 4, clip(header, int(WIDTH / CHAR_W) - 2), "start"))
    for t in ticks:
        parts.append(_line(x(t), top, x(t), bottom, GRID, 0.6))
        parts.append(_label(x(t), bottom + 14, _tick(t), "middle"))
    parts.append(_line(left, bottom, left + plot_w, bottom, TEXT, 0.8))
    parts.append(_label(left + plot_w / 2, height - 8, axis.title, "middle"))
    if axis.ref is not None:
        dash = ' stroke-dasharray="4 3"' if axis.ref_dashed else ""
        parts.append(_line(x(axis.ref), top, x(axis.ref), bottom, axis.ref_color, 0.9, dash))
    for i, row in enumerate(rows):
        y = top + row_h * (i + 0.5)
        parts.append(_label(left - 8, y + 4, row.label, "end"))
        parts.extend(_row(row, y, x))
    parts.append("</svg>")
    return "".join(parts)


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step + 1e-9) * step
    count = math.ceil((hi - first) / step - 1e-9)
    return [round(first + k * step, 12) for k in range(count + 1)]


def _domain(rows: Sequence[Row], axis: Axis) -> tuple[float, float]:
    values = [axis.ref] if axis.ref is not None else []
    for r in rows:
        values += [v for v in (r.point, r.low, r.high) if v is not None]
        if r.box is not None:
            values += [r.box.whislo, r.box.whishi]
    values = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(values), max(values)
    if axis.from_zero:
        lo = min(0.0, lo)
    pad = (hi - lo) * 0.03 or abs(hi) * 0.05 or 1.0
    return (lo if axis.from_zero else lo - pad), hi + pad


def _row(row: Row, y: float, to_x: Callable[[float], float]) -> list[str]:
    parts = []
    if row.box is not None:
        b = row.box
        parts.append(_line(to_x(b.whislo), y, to_x(b.whishi), y, row.color, 1.0))
        for end in (b.whislo, b.whishi):
            parts.append(_line(to_x(end), y - 4, to_x(end), y + 4, row.color, 1.0))
        q1, q3 = to_x(b.q1), to_x(b.q3)
        parts.append(
            f'<rect x="{q1:.1f}" y="{y - 6:.1f}" width="{max(q3 - q1, 0.5):.1f}" height="12" '
            f'fill="white" stroke="{row.color}"/>'
        )
        parts.append(_line(to_x(b.med), y - 6, to_x(b.med), y + 6, "#cf6a00", 1.6))
    if row.low is not None and row.high is not None:
        lo, hi = to_x(row.low), to_x(row.high)
        parts.append(_line(lo, y, hi, y, row.color, 1.2))
        for end in (lo, hi):
            parts.append(_line(end, y - 3, end, y + 3, row.color, 1.2))
    if row.point is not None:
        px = to_x(row.point)
        if row.square:
            parts.append(f'<rect x="{px - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{row.color}"/>')
        else:
            parts.append(f'<circle cx="{px:.1f}" cy="{y:.1f}" r="3.5" fill="{row.color}"/>')
    return parts


def _line(x1: float, y1: float, x2: float, y2: float, color: str, width: float, extra: str = "") -> str:
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
        f'stroke-width="{width}"{extra}/>'
    )


def _label(x: float, y: float, text: str, anchor: str) -> str:
    """One line at y, or two ("a\nb") centred on it, each its own tspan."""
    if "\n" in text:
        first, second = text.split("\n", 1)
        text_ = f'<tspan x="{x:.1f}" dy="-6">{_text(first)}</tspan><tspan x="{x:.1f}" dy="12">{_text(second)}</tspan>'
        return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{TEXT}">{text_}</text>'
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{TEXT}">{_text(text)}</text>'


def _tick(v: float) -> str:
    return f"{v:g}"


def _text(text: str) -> str:
    return html.escape(text, quote=True)
