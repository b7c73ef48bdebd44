"""Report model -> inline SVG charts (matplotlib, Agg canvas, no pyplot global state).

Why inline SVG: the report is one self-contained file that opens offline and makes no request;
SVG text stays text (selectable, searchable). Each chart is drawn from the report model only,
never per trial, so a 100,000-trial run costs the same few charts as a small one.

The SVG is cleaned for inlining: no XML declaration, DOCTYPE, metadata or namespace URLs, and
ids prefixed per chart so two charts in one page never share an id.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

import matplotlib

matplotlib.use("Agg")  # never a GUI backend, even if the caller's environment asks for one

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.typing import RcKeyType  # noqa: E402

from orchestrator.report.build import CellView, EffectView, Report  # noqa: E402

BASE = "#1f6feb"
HIT = "#d1242f"
MUTED = "#57606a"
_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text as <text>, not paths: smaller, selectable
    "text.parse_math": False,  # a level named "$x" must not be read as TeX
    "font.size": 9,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _styled(draw: Callable[[Report, str], str]) -> Callable[[Report, str], str]:
    """Draw under the house rcParams without touching the caller's global matplotlib state."""

    @wraps(draw)
    def wrapper(report: Report, metric: str) -> str:
        with matplotlib.rc_context(_RC):
            return draw(report, metric)

    return wrapper


@_styled
def rate_chart(report: Report, metric: str) -> str:
    """Rate per cell with its Wilson interval; baseline blue, significant cells red."""
    cells = [c for c in report.cells if c.proportions[metric].rate.n]
    if not cells:
        return ""
    labels = [_label(c) for c in cells]
    fig, ax = _figure(len(cells))
    for y, cell in enumerate(cells):
        r = cell.proportions[metric].rate
        rate = (r.rate or 0.0) * 100
        color = BASE if cell.is_baseline else HIT if cell.proportions[metric].significant else MUTED
        ax.errorbar(rate, y, xerr=_err(rate, r.low * 100, r.high * 100), fmt="o", color=color, capsize=3, markersize=5)
    base = next((c for c in cells if c.is_baseline), None)
    if base is not None:
        ax.axvline((base.proportions[metric].rate.rate or 0.0) * 100, color=BASE, lw=0.8, ls="--")
    _rows(fig, ax, labels)
    ax.set_xlabel(f"{metric}, % of sessions (95% Wilson interval)")
    ax.set_xlim(left=0)
    return _svg(fig, f"rate-{metric}", f"{metric} rate per cell with 95% intervals")


@_styled
def effects_chart(report: Report, metric: str) -> str:
    """Main and conditional effects in rate points with raw intervals; findings (after Holm) in red."""
    effects = [e for e in report.effects if e.metric == metric]
    if not effects:
        return ""
    fig, ax = _figure(len(effects))
    for y, effect in enumerate(effects):
        color = HIT if effect.finding else MUTED
        est = effect.estimate * 100
        ax.errorbar(
            est, y, xerr=_err(est, effect.low * 100, effect.high * 100), fmt="s", color=color, capsize=3, markersize=4
        )
    ax.axvline(0, color="black", lw=0.8)
    _rows(fig, ax, [_effect_label(e) for e in effects])
    ax.set_xlabel(f"change in {metric}, rate points (95% MOVER interval)")
    return _svg(fig, f"effects-{metric}", f"effects of factors on {metric}")


@_styled
def number_chart(report: Report, metric: str) -> str:
    """Box plot of a numeric metric per cell (five numbers from the model, not raw values)."""
    cells = [c for c in report.cells if c.numbers[metric].box is not None]
    if not cells:
        return ""
    fig, ax = _figure(len(cells))
    boxes = [_box(c, metric) for c in cells]
    ax.bxp(boxes, orientation="horizontal", showfliers=False, widths=0.5, positions=range(len(cells)))
    _rows(fig, ax, [_label(c) for c in cells])
    ax.set_xlabel(metric)
    return _svg(fig, f"number-{metric}", f"distribution of {metric} per cell")


def _err(value: float, low: float, high: float) -> list[list[float]]:
    """Error-bar lengths; clamped at 0 because rounding can put a limit a hair past the point."""
    return [[max(0.0, value - low)], [max(0.0, high - value)]]


def _box(cell: CellView, metric: str) -> dict[str, float | str]:
    box = cell.numbers[metric].box
    assert box is not None
    return {"whislo": box.whislo, "q1": box.q1, "med": box.med, "q3": box.q3, "whishi": box.whishi, "label": ""}


def _figure(rows: int) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7.5, 0.8 + 0.28 * max(rows, 2)))
    return fig, fig.add_subplot()


def _rows(fig: Figure, ax: Axes, labels: Sequence[str]) -> None:
    ax.set_yticks(range(len(labels)), labels=labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first cell on top
    ax.grid(axis="x", color="#d0d7de", lw=0.5)
    _margins(fig, max((len(t) for t in labels), default=0))


def _margins(fig: Figure, label_chars: int) -> None:
    """Room for the row labels, estimated from their length (tight_layout costs a full draw)."""
    width_pt, height_pt = fig.get_figwidth() * 72, fig.get_figheight() * 72
    left = min(0.62, (label_chars * 5.0 + 14) / width_pt)
    fig.subplots_adjust(left=left, right=0.97, top=1 - 8 / height_pt, bottom=36 / height_pt)


def _label(cell: CellView) -> str:
    text = ", ".join(f"{k}={v}" for k, v in cell.levels.items()) or cell.cell
    text = _short(text)
    return f"{text} (baseline)" if cell.is_baseline else text


def _effect_label(e: EffectView) -> str:
    given = ", ".join(f"{k}={v}" for k, v in e.given.items())
    return _short(f"{e.factor} {e.reference}→{e.level}" + (f" | {given}" if given else ""))


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _svg(fig: Figure, key: str, title: str) -> str:
    with matplotlib.rc_context({"svg.hashsalt": key}):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return clean_svg(buffer.getvalue(), _slug(key), title)


def clean_svg(svg: str, prefix: str, title: str) -> str:
    """Make matplotlib's standalone SVG safe to inline: no prolog, metadata, namespace URLs."""
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    svg = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)
    svg = svg.replace("<svg ", f'<svg class="chart" role="img" aria-label="{_attr(title)}" ', 1)
    return svg.strip()


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", key)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
