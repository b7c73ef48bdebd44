"""Gates: bounds a CI system can enforce on a sweep's intervals (PURE).

A gate says what the data must *show*, not what a point estimate happens to be: `upper: 0.01` on
a proportion passes only when the upper end of the cell's 95% interval is at most 1%, so a cell
measured on too few sessions fails the gate instead of passing it by luck. A cell with no
interval at all (no completed trial, or too few values for one) fails with that reason: a gate
never passes on missing data.

    gates:
      - metric: tool_call_corruption
        upper: 0.01                      # the upper 95% bound must be <= 1% ...
        cells: {multi_stream_overlap: "off"}   # ... in these cells (default: every cell)
      - metric: p99_latency_ms
        upper: 2500
      - metric: throughput
        lower: 900                        # the lower 95% bound must be >= 900
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

MAX_GATES = 1000


class Gate(BaseModel):
    """A checked gate, stored in run.json so the report, the export and the exit code agree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    metric: str
    upper: float | None = None
    lower: float | None = None
    cells: dict[str, str] = {}  # factor -> level; empty: every cell

    def applies_to(self, levels: Mapping[str, str]) -> bool:
        return all(levels.get(f) == lv for f, lv in self.cells.items())

    @property
    def bound_text(self) -> str:
        parts = []
        if self.upper is not None:
            parts.append(f"upper 95% bound <= {self.upper:g}")
        if self.lower is not None:
            parts.append(f"lower 95% bound >= {self.lower:g}")
        return " and ".join(parts)


def default_name(metric: str, upper: float | None, lower: float | None, cells: Mapping[str, str]) -> str:
    where = ",".join(f"{f}={lv}" for f, lv in cells.items()) or "every cell"
    bounds = ([f"<= {upper:g}"] if upper is not None else []) + ([f">= {lower:g}"] if lower is not None else [])
    return f"{metric} {' and '.join(bounds)} ({where})"


@dataclass(frozen=True)
class GateCell:
    """What a gate needs of one cell for one metric: the estimate and its 95% interval (None:
    the cell has no interval for the metric)."""

    cell: str
    levels: Mapping[str, str]
    estimate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    cell: str
    levels: Mapping[str, str]
    passed: bool
    message: str  # what was measured against the bound, in words
    estimate: float | None = None
    low: float | None = None
    high: float | None = None


def evaluate(gates: Sequence[Gate], cells_of: Mapping[str, Sequence[GateCell]]) -> list[GateResult]:
    """One result per gate and cell it applies to. `cells_of` maps a metric to its cells; a gate
    that selects no cell at all fails (a typo in the selector must not pass CI)."""
    results: list[GateResult] = []
    for gate in gates:
        chosen = [c for c in cells_of.get(gate.metric, ()) if gate.applies_to(c.levels)]
        if not chosen:
            results.append(GateResult(gate, "", gate.cells, False, f"no cell with data for {gate.metric}"))
        results.extend(_check(gate, c) for c in chosen)
    return results


def _check(gate: Gate, cell: GateCell) -> GateResult:
    if cell.low is None or cell.high is None:
        return GateResult(gate, cell.cell, cell.levels, False, "no 95% interval (too little data)", cell.estimate)
    failures = []
    if gate.upper is not None and cell.high > gate.upper:
        failures.append(f"upper bound {cell.high:.4g} > {gate.upper:g}")
    if gate.lower is not None and cell.low < gate.lower:
        failures.append(f"lower bound {cell.low:.4g} < {gate.lower:g}")
    interval = f"{_num(cell.estimate)} [{cell.low:.4g}, {cell.high:.4g}]"
    message = f"{interval}: " + ("; ".join(failures) if failures else gate.bound_text)
    return GateResult(gate, cell.cell, cell.levels, not failures, message, cell.estimate, cell.low, cell.high)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def failed(results: Sequence[GateResult]) -> list[GateResult]:
    return [r for r in results if not r.passed]
