"""report/svgchart.py: the hand-written row charts the report inlines."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest

from orchestrator.report.svgchart import RIGHT, WIDTH, Axis, Box, Row, nice_ticks, row_chart


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


def _geometry(
    svg: str,
) -> tuple[float, list[tuple[float, float, str, str]], list[tuple[float, float, float, float, str]]]:
    """(height, texts (x, y, anchor, text), lines (x1, y1, x2, y2, extra attributes))."""
    height = float(re.search(r'viewBox="0 0 720 ([0-9.]+)"', svg).group(1))  # type: ignore[union-attr]
    texts = [
        (float(x), float(y), anchor, text)
        for x, y, anchor, text in re.findall(
            r'<text x="([-0-9.]+)" y="([-0-9.]+)" text-anchor="(\w+)"[^>]*>([^<]*)<', svg
        )
    ]
    lines = [
        (float(a), float(b), float(c), float(d), rest)
        for a, b, c, d, rest in re.findall(
            r'<line x1="([-0-9.]+)" y1="([-0-9.]+)" x2="([-0-9.]+)" y2="([-0-9.]+)" ([^/]*)/>', svg
        )
    ]
    return height, texts, lines


def _ticks(svg: str) -> dict[str, float]:
    """Tick label -> its x, left to right (the axis title, also centred, is no number)."""
    return {t: x for x, _, anchor, t in _geometry(svg)[1] if anchor == "middle" and t.replace(".", "").isdigit()}


def _to_x(svg: str) -> Callable[[float], float]:
    """A value's x on the chart, from where its ticks 10 and 20 stand (to the SVG's one decimal)."""
    ticks = _ticks(svg)
    per_unit = (ticks["20"] - ticks["10"]) / 10
    return lambda v: round(ticks["10"] + (v - 10) * per_unit, 1)


def test_every_label_tick_and_line_sits_inside_the_chart_where_a_reader_looks_for_it() -> None:
    """The sixteenth mutation round: the chart's layout was checked only by where its points sat.
    Row labels end left of the plot; ticks and the axis span the plot to the right margin; the
    axis title is centred under it; a header sits above the first row; all inside the viewBox."""
    rows = [Row("cell one", "#d1242f", 10.0, 5.0, 20.0), Row("baseline", "#1f6feb", 40.0, 30.0, 50.0)]
    svg = row_chart(rows, Axis("rate, %", from_zero=True), key="k", title="t", header="cells")
    height, texts, lines = _geometry(svg)
    axis = next(line for line in lines if 'stroke="#24292f"' in line[4])
    left, bottom, right = axis[0], axis[1], axis[2]
    assert axis[3] == bottom and right == WIDTH - RIGHT and 0 < left < right
    for x, y, _, text in texts:
        assert 0 <= x <= WIDTH and 0 < y <= height, text
    labels = {text: (x, y, anchor) for x, y, anchor, text in texts}
    assert labels["cell one"][0] < left and labels["cell one"][2] == "end"
    assert labels["rate, %"][:1] == (pytest.approx((left + right) / 2, abs=0.1),) and labels["rate, %"][1] > bottom
    assert labels["cells"][1] < labels["cell one"][1] < labels["baseline"][1] < bottom  # header, then the rows
    tick_x = list(_ticks(svg).values())
    assert tick_x and all(left - 0.1 <= x <= right + 0.1 for x in tick_x)
    assert max(tick_x) == pytest.approx(right, abs=0.1)  # the last tick at the axis' end


def test_a_reference_line_is_drawn_at_its_value_and_dashed_when_asked() -> None:
    rows = [Row("a", "#d1242f", 10.0, 5.0, 20.0)]
    plain = row_chart(rows, Axis("x", from_zero=True), key="k", title="t")
    ref = row_chart(rows, Axis("x", ref=15.0, ref_color="#8250df", ref_dashed=True, from_zero=True), key="k", title="t")
    assert "#8250df" not in plain
    line = next(line for line in _geometry(ref)[2] if 'stroke="#8250df"' in line[4])
    assert line[0] == line[2] and 'stroke-dasharray="4 3"' in line[4]
    assert line[0] == pytest.approx(_to_x(ref)(15.0), abs=0.2)


def test_an_axis_starts_near_its_data_unless_asked_to_start_at_zero() -> None:
    rows = [Row("a", "#d1242f", 150.0, 145.0, 170.0)]
    ticks = list(_ticks(row_chart(rows, Axis("wall"), key="k", title="t")))
    assert float(ticks[0]) >= 100 and "0" not in ticks
    assert list(_ticks(row_chart(rows, Axis("wall", from_zero=True), key="k", title="t")))[0] == "0"


def _same_lines(got: list[tuple[float, ...]], want: list[tuple[float, ...]]) -> bool:
    """The same segments, each coordinate within the 0.1 px the SVG's one decimal rounds to."""
    flat = [v for line in sorted(got) for v in line]
    return len(got) == len(want) and flat == pytest.approx([v for line in sorted(want) for v in line], abs=0.15)


def test_an_interval_is_a_bar_with_a_cap_at_each_end_around_its_point() -> None:
    svg = row_chart([Row("a", "#d1242f", 10.0, 5.0, 20.0)], Axis("x", from_zero=True), key="k", title="t")
    at = _to_x(svg)
    mine = [line[:4] for line in _geometry(svg)[2] if 'stroke="#d1242f"' in line[4]]
    (cy,) = {float(y) for y in re.findall(r'<circle cx="[0-9.]+" cy="([0-9.]+)"', svg)}
    assert _same_lines(
        mine, [(at(5), cy, at(20), cy), (at(5), cy - 3, at(5), cy + 3), (at(20), cy - 3, at(20), cy + 3)]
    )
    alone = row_chart([Row("b", "#1f6feb", 10.0)], Axis("x", from_zero=True), key="k", title="t")
    assert "<circle" in alone and not [line for line in _geometry(alone)[2] if 'stroke="#1f6feb"' in line[4]]


def test_a_box_has_its_whiskers_with_caps_its_quartiles_and_its_median() -> None:
    svg = row_chart([Row("a", "#57606a", box=Box(10, 20, 25, 30, 40))], Axis("x", from_zero=True), key="k", title="t")
    at = _to_x(svg)
    rect = re.search(r'<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)"', svg)
    assert rect is not None
    x, top, width, height = (float(v) for v in rect.groups())
    y = top + 6
    assert x == pytest.approx(at(20), abs=0.15) and height == 12 and x + width == pytest.approx(at(30), abs=0.25)
    whisker = [line[:4] for line in _geometry(svg)[2] if 'stroke="#57606a"' in line[4]]
    assert _same_lines(
        whisker, [(at(10), y, at(40), y), (at(10), y - 4, at(10), y + 4), (at(40), y - 4, at(40), y + 4)]
    )
    median = [line[:4] for line in _geometry(svg)[2] if 'stroke="#cf6a00"' in line[4]]
    assert _same_lines(median, [(at(25), y - 6, at(25), y + 6)])
