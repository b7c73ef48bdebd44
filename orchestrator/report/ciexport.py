"""`orch export --format junit|bencher`: a run in the formats CI systems and Bencher read.

JUnit XML: one test case per gate and cell (a failed gate is a failing case whose message says
what was measured against which bound), so a CI job page lists exactly which cell broke which
bound. Bencher Metric Format (BMF) JSON: per cell, each metric's estimate with the 95% interval
as lower/upper values, so Bencher's thresholds see the uncertainty, not only a point. BMF has no
unit field (a Measure's unit is set in Bencher, where the measure is created): a metric's declared
unit is said in the JUnit messages, and BMF values are in it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from orchestrator.core.gates import GateResult
from orchestrator.core.words import counted
from orchestrator.report import missing
from orchestrator.report.gates import cell_estimate, check_gates
from orchestrator.report.model import Report
from orchestrator.store.atomic import write_bytes_atomic
from orchestrator.store.rundir import RunDir

CiFormat = Literal["junit", "bencher"]
EXTENSION: dict[CiFormat, str] = {"junit": "junit.xml", "bencher": "bencher.json"}
NO_GATES = "the matrix declares no gates"


def cell_label(levels: Mapping[str, str]) -> str:
    return ",".join(f"{f}={lv}" for f, lv in levels.items()) or "all"


def junit_xml(report: Report, results: list[GateResult]) -> bytes:
    """One <testsuite> per run; a <testcase> per gate check. No gates: an empty suite that says so."""
    failures = sum(not r.passed for r in results)
    suite = ET.Element(
        "testsuite",
        name=f"orch gates: {report.name}",
        tests=str(len(results)),
        failures=str(failures),
        errors="0",
        skipped="0",
        timestamp=report.started,
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="run_id", value=report.run_id)
    ET.SubElement(props, "property", name="status", value=report.status)
    if not report.gates:
        ET.SubElement(props, "property", name="note", value=NO_GATES)
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=f"orch.{report.name}.{r.gate.metric}", name=f"{r.gate.name} [{_cell(r)}]"
        )
        if not r.passed:
            failure = ET.SubElement(case, "failure", message=r.message, type="GateFailed")
            failure.text = f"{r.gate.name}\ncell: {_cell(r)}\n{r.message}\n"
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)


def _cell(result: GateResult) -> str:
    return cell_label(result.levels) if result.cell else "no cell selected"


Bencher = dict[str, dict[str, dict[str, float]]]


def bencher_json(report: Report, measures: Bencher | None = None) -> bytes:
    """The Bencher file's bytes (`measures`: bencher_measures(report), when already made)."""
    return json.dumps(measures or bencher_measures(report), indent=1, sort_keys=True).encode("utf-8")


def bencher_measures(report: Report) -> Bencher:
    """BMF: {cell: {metric: {value, lower_value, upper_value}}}; cells without data are left out."""
    out: Bencher = {}
    for cell in report.cells:
        measures: dict[str, dict[str, float]] = {}
        for metric in report.metrics:
            est = cell_estimate(cell, metric)
            if est.estimate is None:
                continue
            measures[metric] = {"value": est.estimate}
            if est.low is not None and est.high is not None:
                measures[metric] |= {"lower_value": est.low, "upper_value": est.high}
        if measures:
            out[cell_label(cell.levels)] = measures
    return out


def unbounded_note(measures: Bencher) -> str | None:
    """How many estimates the Bencher file gives with no interval. Why: a median of fewer than 6
    values has no 95% interval (core.ranks), so no bound is written, rightly, but the terminal said
    only 'exported' and a CI job comparing bounds had none to compare, unsaid."""
    bare = sum("lower_value" not in m for cell in measures.values() for m in cell.values())
    if not bare:
        return None
    have = "estimate has" if bare == 1 else "estimates have"
    return (
        f"{bare} {have} no interval: fewer than 6 trials with a value (a median's 95% interval needs 6), "
        "so the Bencher file gives the value without lower_value/upper_value"
    )


PARTIAL_SHOWN = 5  # cells named in partial_note; the rest counted


def partial_note(report: Report, measures: Bencher) -> str | None:
    """What the Bencher file cannot say of a cell some of whose finished trials have no value of a
    metric (failed for good, or a lost scrape): its estimate and interval rest on the other trials
    alone. The report marks such a cell (`1 of 2 trials without data`) and fails every gate on it
    (a gate never passes on missing data), while BMF has no field for it, and the terminal said
    only 'exported': a CI threshold on its upper_value passed the cell the JUnit file failed."""
    partial = [
        (label, cell, sum(cell.missing.get(m, 0) > 0 for m in measures[label]))
        for cell in report.cells
        if (label := cell_label(cell.levels)) in measures and any(cell.missing.get(m, 0) for m in measures[label])
    ]
    if not partial:
        return None
    estimates = sum(count for _, _, count in partial)
    named = [f"{label}: {max(cell.missing.values())} of {cell.ran} {missing.WORDS}" for label, cell, _ in partial]
    more = len(named) - PARTIAL_SHOWN
    shown = "; ".join(named[:PARTIAL_SHOWN]) + (f"; and {counted(more, 'more cell')}" if more > 0 else "")
    rest = "rests" if estimates == 1 else "rest"
    return (
        f"{counted(estimates, 'estimate')} of {counted(len(partial), 'cell')} {rest} on part of the cell's finished "
        f"trials ({shown}): the Bencher file cannot mark them; the report does, and a gate on them fails"
    )


def export_ci(run_dir: Path, fmt: CiFormat, out: Path | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """The JUnit or Bencher file of a run. `warn` hears of a JUnit file with no test case (the matrix
    has no gates): it said only 'exported: ...', exit 0, and a CI job wired to it stayed green; and
    of Bencher estimates with no interval (unbounded_note) or on part of their cell's trials
    (partial_note), and of a run not ended: a CI job could
    read gates judged on part of the run as its result."""
    from orchestrator.report.export import check_output, not_ended
    from orchestrator.report.render import load_report

    if out is not None:
        check_output(out)
    report = load_report(run_dir, drilldown_cap=0)
    if warn is not None and (said := not_ended(report.status)):
        warn(said)
    if fmt == "junit" and not report.gates and warn is not None:
        warn(f"{NO_GATES}: the JUnit file has no test case, so a CI job reading it has nothing to fail on")
    if fmt == "junit":
        data = junit_xml(report, check_gates(report))
    else:
        measures = bencher_measures(report)
        for note in (unbounded_note(measures), partial_note(report, measures)):
            if note is not None and warn is not None:
                warn(note)
        data = bencher_json(report, measures)
    path = out if out is not None else RunDir(run_dir).export(report.run_id, EXTENSION[fmt])
    return write_bytes_atomic(path, data, what="cannot write the export", user_path=True)
