"""report/svgchart.py: the hand-written row charts the report inlines."""

from __future__ import annotations

import math
import re

import pytest

from orchestrator.report.svgchart import Axis, Box, Row, nice_ticks, row_chart


@pytest.mark.parametrize("lo, hi", [(0, 50), (-30, 20), (145, 170), (0.001, 0.004), (300, 1020), (5, 5)])
def test_ticks_are_round_and_cover_the_range(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi and 3 <= len(ticks) <= 12
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 5, 10))
    assert all(math.isclose(b - a, step) for a, b in zip(ticks, ticks[1:], strict=False))


def test_points_sit_where_their_values_are_and_labels_are_escaped() -> None:
    rows = [Row("<b>&on", "#d1242f", 10.0, 5.0, 20.0), Row("baseline", "#1f6feb", 40.0, 30.0, 50.0)]
    svg = row_chart(rows, Axis("rate, %", ref=40.0, from_zero=True), key="rate-x y", title="a <title>")
    assert svg.startswith('<svg class="chart"') and svg.endswith("</svg>")
    assert "&lt;b&gt;&amp;on" in svg and "<b>" not in svg and "a &lt;title&gt;" in svg
    assert 'id="rate-x_y-title"' in svg and "http" not in svg
    cx = [float(v) for v in re.findall(r'<circle cx="([0-9.]+)"', svg)]
    ticks = {
        float(t): float(x)
        for x, t in re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="middle"[^>]*>([0-9.-]+)<', svg)
    }
    x0, x50 = ticks[0.0], ticks[50.0]
    assert cx[0] == pytest.approx(x0 + (x50 - x0) * 10 / 50, abs=0.2)
    assert cx[1] == pytest.approx(x0 + (x50 - x0) * 40 / 50, abs=0.2)


def test_boxes_and_empty_charts() -> None:
    svg = row_chart([Row("cell", "#57606a", box=Box(1, 2, 3, 4, 5))], Axis("wall"), key="number-wall", title="t")
    assert svg.count("<rect") == 1 and svg.count("<line") >= 5
    assert row_chart([], Axis("x"), key="k", title="t") == ""
