"""A number metric's declared `unit:` reaches every page that shows its values: recorded in run.json
(RunManifest.metric_units), left out of it when no metric declares one, so a run folder written
before units were recorded loads, reads and reports exactly as before."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers.adaptive_runs import MATRIX, REPO, plan_of
from helpers.report_synth import synthetic_run, write_run

from orchestrator.core.config import read_inventory
from orchestrator.core.gates import Gate
from orchestrator.core.records import RunManifest
from orchestrator.errors import OrchError
from orchestrator.report.ciexport import export_ci
from orchestrator.report.compare import write_comparison
from orchestrator.report.render import write_report
from orchestrator.report.series import SeriesPoint
from orchestrator.report.trends import NightRun, change_text, regression_check
from orchestrator.report.unlike import unlike
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.planrecord import make_manifest

UNITS = (
    MATRIX
    + """\
    wall: {regex: 'wall=(?P<value>[0-9.]+)', unit: s}
    tokens: {regex: 'tokens=(?P<value>[0-9]+)'}
collect:
  errors: {role: decode, pattern: ERROR, unit: lines}
"""
)


def test_the_manifest_records_each_declared_unit_of_metrics_and_collectors(tmp_path: Path) -> None:
    _, plan = plan_of(tmp_path, UNITS)
    manifest = make_manifest(plan, read_inventory(REPO / "inventory/local.yaml"), "r", "x")
    assert manifest.metric_units == {"wall": "s", "errors": "lines"}  # tokens declares none
    save_manifest(tmp_path, manifest)
    assert json.loads((tmp_path / "run.json").read_text())["metric_units"] == {"wall": "s", "errors": "lines"}
    assert load_manifest(tmp_path).metric_units == {"wall": "s", "errors": "lines"}


def test_a_run_json_without_units_loads_and_is_written_back_as_it_was(tmp_path: Path) -> None:
    run = write_run(tmp_path / "old", *synthetic_run())
    old = json.loads((run / "run.json").read_text())
    assert "metric_units" not in old
    assert load_manifest(run).metric_units == {}
    again = RunManifest.model_validate_json((run / "run.json").read_text()).model_dump_json(indent=2)
    assert again == (run / "run.json").read_text()  # no key added to a unitless run.json


def test_a_hand_edited_unit_in_run_json_is_refused_at_its_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "old", *synthetic_run())
    data = json.loads((run / "run.json").read_text())
    data["metric_units"] = {"wall": "s\u202e"}  # a bidi override would reverse the text after it
    (run / "run.json").write_text(json.dumps(data))
    with pytest.raises(OrchError, match=r"run.json(.|\n)*U\+202E"):
        load_manifest(run)


UNITS_OF_RUN = {"wall": "s<x>", "anomalies": "lines"}  # markup in a unit is text on every page


def _text(page: str) -> str:
    """The page as a reader sees it: tags dropped, entities decoded (what a unit must survive as)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_report_shows_each_unit_in_cells_effects_findings_and_chart_axes(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", *synthetic_run(units=UNITS_OF_RUN))
    page = write_report(run).read_text()
    assert "<x>" not in page and "s&lt;x&gt;" in page  # text, never markup
    text = _text(page)
    assert "wall (s<x>) median [interval] (coverage)" in text  # the cells table's column
    assert "anomalies (lines) median [interval] (coverage)" in text
    assert re.search(r"\n\s*156\.85 s<x> \(too few values", text)  # each cell's median
    assert "wall (numeric, in s<x>)" in text and "anomalies (numeric, in lines)" in text  # effects tables
    assert re.search(r"995 lines vs 320 lines\s+3\.11x\s+\+671\.5 lines \[646, 691\]", text)
    assert "995 lines vs 320 lines over 8 vs 8 trials (shift +671.5 lines" in text  # the finding
    assert "anomalies (lines) per cell" in text  # the chart's heading
    assert ">wall (s&lt;x&gt;)</text>" in page  # the chart's axis, escaped inside the SVG


def test_an_old_run_without_units_reports_as_before(tmp_path: Path) -> None:
    """A run.json written before units were recorded: no unit anywhere, the very text of before
    (the numbers' columns, cells and effects; trials keep their own recorded unit in the drill-down)."""
    page = write_report(write_run(tmp_path / "old", *synthetic_run())).read_text()
    text = _text(page)
    assert "wall median [interval] (coverage)" in text
    assert re.search(r"\n\s*156\.85 \(too few values", text)
    assert "wall (numeric)" in text and "995 vs 320 over 8 vs 8 trials (shift +671.5 [646, 691]" in text
    assert ">wall</text>" in page


def test_the_comparison_page_shows_each_unit_beside_medians_and_differences(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", *synthetic_run(units=UNITS_OF_RUN))
    b = write_run(tmp_path / "b", *synthetic_run(seed=2, run_id="20260510-070000-overlap_ablation", units=UNITS_OF_RUN))
    page = write_comparison(a, b, tmp_path / "c.html").read_text()
    assert "<x>" not in page
    text = _text(page)
    assert re.search(r"wall \(s<x>\)\s+median 156\.85 s<x> \(n=2\)\s+median 151\.9 s<x> \(n=2\)\s+-4\.95 s<x>", text)
    assert re.search(r"anomalies \(lines\)\s+median \d+(\.\d+)? lines \(n=2\)", text)


def test_a_comparison_leaves_out_a_metric_measured_in_another_unit(tmp_path: Path) -> None:
    inventory = read_inventory(REPO / "inventory/local.yaml")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = make_manifest(plan_of(tmp_path / "a", UNITS)[1], inventory, "a", "x")
    b = make_manifest(plan_of(tmp_path / "b", UNITS.replace("unit: s}", "unit: ms}"))[1], inventory, "b", "x")
    assert unlike(a, b).metrics == {
        "wall": "regex 'wall=(?P<value>[0-9.]+)' in 's' in A, regex 'wall=(?P<value>[0-9.]+)' in 'ms' in B"
    }
    assert unlike(a, a).metrics == {}


def _night(run_id: str, values: list[float], unit: str) -> NightRun:
    point = SeriesPoint(cell="c", levels={"f": "a"}, metric="wall", kind="number", values=values, unit=unit)
    return NightRun(run_id, run_id, run_id, "completed", [point])


@pytest.mark.parametrize("unit,words", [("s", "wall in c: median 100.5 s over"), ("", "wall in c: median 100.5 over")])
def test_the_index_says_a_changed_number_in_its_unit(unit: str, words: str) -> None:
    earlier = [_night(f"r{i}", [100.0 + j % 2 for j in range(8)], unit) for i in range(3)]
    (change,) = regression_check(_night("new", [200.0 + j for j in range(8)], unit), earlier)
    assert change.flagged
    assert change_text(change).startswith(words)
    assert (" 203.5 s now" in change_text(change)) == bool(unit)


def test_a_run_summary_keeps_each_number_metric_unit_for_the_index(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", *synthetic_run(units=UNITS_OF_RUN))
    write_report(run)
    series = json.loads((run / "summary.json").read_text())["series"]
    assert {(p["metric"], p.get("unit")) for p in series} == {
        ("corruption", None),
        ("wall", "s<x>"),
        ("anomalies", "lines"),
    }


def test_a_gate_on_a_number_says_its_unit_in_junit_and_on_the_report(tmp_path: Path) -> None:
    manifest, records = synthetic_run(replicates=6, units=UNITS_OF_RUN)  # 6 trials: an interval
    gate = Gate(name="wall under 150", metric="wall", upper=150.0, cells={"bf16_index_k": "on"})
    run = write_run(tmp_path / "run", manifest.model_copy(update={"gates": [gate]}), records)
    xml = ET.fromstring(export_ci(run, "junit", tmp_path / "j.xml").read_bytes())
    messages = [f.get("message") or "" for f in xml.iter("failure")]
    assert messages and all(re.match(r"[0-9.]+ \[[0-9.]+, [0-9.]+\] s<x>: upper bound", m) for m in messages)
    assert "s&lt;x&gt;: upper bound" in write_report(run).read_text()


def test_units_are_the_only_difference_from_the_page_of_a_run_without_them(tmp_path: Path) -> None:
    """The same run written the old way (no units in run.json) and with units: with each unit's
    marks taken out, the pages are equal, byte for byte. So an old run renders exactly as before
    (nothing else of the page moved), and the units are never more than text beside the values."""
    old = write_report(write_run(tmp_path / "old", *synthetic_run())).read_text()
    new = write_report(write_run(tmp_path / "new", *synthetic_run(units={"wall": "s<x>", "anomalies": "l<y>"})))
    page = new.read_text()
    assert page != old
    for unit in ("s&lt;x&gt;", "l&lt;y&gt;"):
        assert f" {unit}" in page
        page = page.replace(f" ({unit})", "").replace(f", in {unit}", "").replace(f" {unit}", "")
    assert page == old


def test_units_are_the_only_difference_on_the_comparison_page(tmp_path: Path) -> None:
    pages = []
    for units in ({}, {"wall": "s<x>", "anomalies": "l<y>"}):
        a = write_run(tmp_path / f"a{len(units)}", *synthetic_run(units=units))
        b_run = synthetic_run(seed=2, run_id="20260510-070000-overlap_ablation", units=units)
        b = write_run(tmp_path / f"b{len(units)}", *b_run)
        pages.append(write_comparison(a, b, tmp_path / f"c{len(units)}.html").read_text())
    old, page = pages
    for unit in ("s&lt;x&gt;", "l&lt;y&gt;"):
        assert f" {unit}" in page
        page = page.replace(f" ({unit})", "").replace(f" {unit}", "")
    assert (
        page.replace(str(tmp_path / "a2"), str(tmp_path / "a0")).replace(str(tmp_path / "b2"), str(tmp_path / "b0"))
        == old
    )
