"""Report model -> inline SVG charts: rates per cell, effects, numeric boxes.

Why inline SVG: the report is one self-contained file that opens offline and makes no request;
SVG text stays text (selectable, searchable). Each chart is drawn from the report model only,
never per trial, so a 100,000-trial run costs the same few charts as a small one. The drawing
itself is report/svgchart.py (rows on one axis, written directly); ids are prefixed per chart
so two charts in one page never share an id.
"""

from __future__ import annotations

from orchestrator.core.clip import clip
from orchestrator.report import missing
from orchestrator.report.model import CellView, EffectView, Report
from orchestrator.report.svgchart import Axis, Box, Row, row_chart

BASE = "#1f6feb"
HIT = "#d1242f"
MUTED = "#57606a"
LABEL_CHARS = 70  # a chart row's label, cut with an ellipsis (core.clip), " (baseline)" included
BASELINE = " (baseline)"
SIGNIFICANT = " *"  # a significant row's (a finding's) mark: red alone is lost on some readers and in grey print


def rate_chart(report: Report, metric: str) -> str:
    """Rate per cell with its Wilson interval; baseline blue, significant cells red."""
    cells = [c for c in report.cells if c.proportions[metric].rate.n]
    labels, header = _labels(report, cells)
    rows = []
    for cell, label in zip(cells, labels, strict=True):
        r = cell.proportions[metric].rate
        significant = cell.proportions[metric].significant and not cell.is_baseline
        color = BASE if cell.is_baseline else HIT if significant else MUTED
        label += _caution(cell.proportions[metric].caution) + SIGNIFICANT * significant
        rows.append(Row(label, color, (r.rate or 0.0) * 100, r.low * 100, r.high * 100))
    base = next((c for c in cells if c.is_baseline), None)
    ref = (base.proportions[metric].rate.rate or 0.0) * 100 if base is not None else None
    axis = Axis(f"{metric}, % of sessions (95% Wilson interval)", ref, BASE, ref_dashed=True, from_zero=True)
    title = f"{metric} rate per cell with 95% intervals"
    return row_chart(rows, axis, key=f"rate-{metric}", title=title, header=header)


def effects_chart(report: Report, metric: str) -> str:
    """Main and conditional effects in rate points with raw intervals; findings (after Holm) in red."""
    rows = [
        Row(
            _effect_label(e) + _caution(e.caution) + SIGNIFICANT * e.finding,
            HIT if e.finding else MUTED,
            e.estimate * 100,
            e.low * 100,
            e.high * 100,
            square=True,
        )
        for e in report.effects
        if e.metric == metric
    ]
    axis = Axis(f"change in {metric}, rate points (95% MOVER interval)", 0.0)
    return row_chart(rows, axis, key=f"effects-{metric}", title=f"effects of factors on {metric}")


def number_chart(report: Report, metric: str) -> str:
    """Box plot of a numeric metric per cell (five numbers from the model, not raw values)."""
    cells = [c for c in report.cells if c.numbers[metric].box is not None]
    labels, header = _labels(report, cells)
    rows = []
    for cell, label in zip(cells, labels, strict=True):
        box = cell.numbers[metric].box
        assert box is not None  # the cells kept above
        five = Box(box.whislo, box.q1, box.med, box.q3, box.whishi)
        rows.append(Row(label, BASE if cell.is_baseline else MUTED, box=five))
    unit = report.units.get(metric)
    axis = Axis(f"{metric} ({unit})" if unit else metric)
    title = f"distribution of {metric} per cell"
    return row_chart(rows, axis, key=f"number-{metric}", title=title, header=header)


def _labels(report: Report, cells: list[CellView]) -> tuple[list[str], str]:
    """Each cell's row label, and the chart's header line ("" for none). A label is the cell's
    "k=v, ..." when every one fits LABEL_CHARS; else only its levels, "v / v / ...", under a header
    naming the factors in that order: a "k=v" label cut at the cap lost the factors that told
    rows apart (a 6-factor sweep's chart showed pairs of identical labels)."""
    named = [", ".join(f"{k}={v}" for k, v in c.levels.items()) or c.cell for c in cells]
    if all(len(text) + len(BASELINE) * c.is_baseline <= LABEL_CHARS for text, c in zip(named, cells, strict=True)):
        return [text + BASELINE * c.is_baseline for text, c in zip(named, cells, strict=True)], ""
    levels = [" / ".join(c.levels.values()) or c.cell for c in cells]
    labels = [
        clip(text, LABEL_CHARS - len(BASELINE)) + BASELINE if c.is_baseline else clip(text, LABEL_CHARS)
        for text, c in zip(levels, cells, strict=True)
    ]
    return labels, "rows: " + " / ".join(report.factors)


def _effect_label(e: EffectView) -> str:
    """An effect's label, 'factor ref→level | held=level', on one line, or on two when longer than
    LABEL_CHARS: cut at the cap, the held factor's level fell off and '| x=on' read as '| x=off'."""
    change = f"{e.factor} {e.reference}→{e.level}"
    given = ", ".join(f"{k}={v}" for k, v in e.given.items())
    if not given or len(change) + len(given) + 3 <= LABEL_CHARS:
        return clip(change + (f" | {given}" if given else ""), LABEL_CHARS)
    return clip(change, LABEL_CHARS) + "\n" + clip(f"| {given}", LABEL_CHARS)


def _caution(caution: str) -> str:
    """A red mark's missing-data caution (report.missing.mark), in a few words; the tables give it whole."""
    return f" (caution: trials {missing.WORDS})" if caution else ""
