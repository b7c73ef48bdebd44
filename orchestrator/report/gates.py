"""The matrix's gates checked against a report's cells (the report, `orch run`'s exit code and the
JUnit export all call this, so they can never disagree about a gate)."""

from __future__ import annotations

import dataclasses

from orchestrator.core.clustered import ASSUMED_NOTE
from orchestrator.core.gates import GateCell, GateResult, evaluate
from orchestrator.report import missing
from orchestrator.report.model import CellView, Report


def check_gates(report: Report) -> list[GateResult]:
    """One result per gate and cell it selects; empty when the matrix has no gates."""
    if not report.gates:
        return []
    cells_of = {m: [cell_estimate(c, m) for c in report.cells] for m in report.metrics}
    results = evaluate(report.gates, cells_of, report.units)
    cells = {c.cell: c for c in report.cells}
    return [_without_data(_with_assumption(r, report), cells.get(r.cell)) for r in results]


def _without_data(result: GateResult, cell: CellView | None) -> GateResult:
    """The result failed when some of the cell's finished trials have no value of the gate's metric
    (failed for good, or a lost scrape). Why: the interval covers the completed trials only, and the
    lost one may be the trial that breaks the bound (a crash under load leaves a cell its easy
    trials, report.missing); a gate never passes on missing data."""
    lost = cell.missing.get(result.gate.metric, 0) if cell is not None else 0
    if not result.passed or cell is None or not lost:
        return result
    why = f"{lost} of its {cell.ran} finished trials {missing.WORDS}: a gate never passes on missing data"
    return dataclasses.replace(result, passed=False, message=f"{result.message}; but {why}")


def _with_assumption(result: GateResult, report: Report) -> GateResult:
    """The result, saying so when its interval rests on an assumed intra-trial correlation: a
    proportion whose dispersion the run could not estimate (report.dispersion holds only estimated
    ones) is widened by the prior alone, and a CI gate passed on it must not read as measured."""
    metric = result.gate.metric
    assumed = report.metrics.get(metric) == "proportion" and metric not in report.dispersion
    if not assumed or result.high is None:
        return result
    return dataclasses.replace(result, message=f"{result.message} ({ASSUMED_NOTE})")


def cell_estimate(cell: CellView, metric: str) -> GateCell:
    """The cell's estimate and 95% interval for the metric (None where it has none): what gates
    check and what the Bencher export reports."""
    if metric in cell.proportions:
        rate = cell.proportions[metric].rate
        if rate.n == 0 or rate.rate is None:
            return GateCell(cell.cell, cell.levels, None, None, None)
        return GateCell(cell.cell, cell.levels, rate.rate, rate.low, rate.high)
    number = cell.numbers.get(metric)
    if number is None or number.median is None:
        return GateCell(cell.cell, cell.levels, None, None, None)
    return GateCell(cell.cell, cell.levels, number.median, number.low, number.high)


def failed_names(results: list[GateResult]) -> tuple[str, ...]:
    """`gate name @ cell` for every failed result (what run's exit message and summary.json list)."""
    return tuple(f"{r.gate.name} @ {r.cell or 'no cell'}: {r.message}" for r in results if not r.passed)
