"""Gates: bounds a CI system can enforce on a sweep's intervals (PURE).

A gate says what the data must *show*, not what a point estimate happens to be: `upper: 0.01` on
a proportion passes only when the upper end of the cell's 95% interval is at most 1%, so a cell
measured on too few sessions fails the gate instead of passing it by luck. A cell with no
interval at all (no completed trial, or too few values for one) fails with that reason, as does
one with finished trials that have no value (report.gates: the cell's trial counts live there): a
gate never passes on missing data.

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

from collections.abc import Callable, Collection, Mapping, Sequence
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


def evaluate(
    gates: Sequence[Gate], cells_of: Mapping[str, Sequence[GateCell]], units: Mapping[str, str] | None = None
) -> list[GateResult]:
    """One result per gate and cell it applies to. `cells_of` maps a metric to its cells; a gate
    that selects no cell at all fails (a typo in the selector must not pass CI). `units`: each
    metric's declared unit, said after the measured interval (a CI log's 162 means nothing alone)."""
    results: list[GateResult] = []
    for gate in gates:
        measured = cells_of.get(gate.metric, ())
        chosen = [c for c in measured if gate.applies_to(c.levels)]
        if not chosen:  # a selector matching no cell (an excluded level) is not missing data
            why = "it selects no cell of this run" if measured else f"no cell with data for {gate.metric}"
            results.append(GateResult(gate, "", gate.cells, False, why))
        results.extend(_check(gate, c, (units or {}).get(gate.metric, "")) for c in chosen)
    return results


def _check(gate: Gate, cell: GateCell, unit: str = "") -> GateResult:
    if cell.low is None or cell.high is None:
        return GateResult(gate, cell.cell, cell.levels, False, "no 95% interval (too little data)", cell.estimate)
    failures = []
    if gate.upper is not None and cell.high > gate.upper:
        failures.append(f"upper bound {cell.high:.4g} > {gate.upper:g}")
    if gate.lower is not None and cell.low < gate.lower:
        failures.append(f"lower bound {cell.low:.4g} < {gate.lower:g}")
    interval = f"{_num(cell.estimate)} [{cell.low:.4g}, {cell.high:.4g}]{' ' + unit if unit else ''}"
    message = f"{interval}: " + ("; ".join(failures) if failures else gate.bound_text)
    return GateResult(gate, cell.cell, cell.levels, not failures, message, cell.estimate, cell.low, cell.high)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


# ---------------------------------------------------------------------------- before the sweep
@dataclass(frozen=True)
class PlannedCell:
    """A cell as planned: its levels and trials (the most an adaptive sweep would run)."""

    levels: Mapping[str, str]
    trials: int


@dataclass(frozen=True)
class Intervals:
    """The interval code the report's gates read, handed in by the caller: core.records imports this
    module, so it imports no statistics (tests/test_layers.py caps the import depth)."""

    rate: Callable[[int, int, float], tuple[float, float]]  # Wilson's on k of n, variance times m
    prior_inflation: Callable[[float], float]  # the design effect assumed for trials of m sessions
    median_covered: Callable[[int], bool]  # whether this many values give a 95% interval of the median


SEARCH_SESSIONS = 10**7  # sessions per trial the "needs about" search looks up to (then: none do)


def unreachable(
    gates: Sequence[Gate],
    cells: Sequence[PlannedCell],
    proportions: Collection[str],
    sessions_per_trial: int | None,
    intervals: Intervals,
) -> list[str]:
    """One warning per gate that no data could pass under this plan: `orch plan` says so before
    the sweep instead of `orch run` exiting 3 after it, whatever the data.

    A proportion's best case is the interval the report would give its cell with no event at all
    (all events for a `lower:`), in the interval code the gate reads; a number's is whether the
    cell's trials (one value each) give a 95% interval of the median at all. Unknown sessions per
    trial (no --sessions in the repro): proportions are not judged."""
    out = []
    most_trials = max((c.trials for c in cells), default=0)
    for gate in gates:
        chosen = [c for c in cells if gate.applies_to(c.levels)]
        if not chosen:
            out.append(f"{_gate_text(gate)} cannot pass: it selects no cell of this plan")
            continue
        fewest = min(c.trials for c in chosen)  # the cell whose interval is widest at best
        if gate.metric in proportions:
            if sessions_per_trial is not None:
                out += _proportion_warnings(gate, sessions_per_trial, fewest, most_trials, intervals)
        elif not intervals.median_covered(fewest):
            out.append(_number_warning(gate, fewest, intervals))
    return out


def _gate_text(gate: Gate) -> str:
    bounds = default_name(gate.metric, gate.upper, gate.lower, {}).removesuffix(" (every cell)")
    named = gate.name != default_name(gate.metric, gate.upper, gate.lower, gate.cells)
    return f"gate '{gate.name}' ({bounds})" if named else f"gate '{gate.name}'"


def best_bound(side: str, sessions: int, trials: int, most_trials: int, intervals: Intervals) -> float:
    """The best 95% bound a proportion can reach in a cell of `trials` x `sessions`: the upper with
    no event ("upper"), the lower with every session an event ("lower").

    The report widens Wilson's interval by the dispersion it estimates (never below 1) or, where it
    cannot estimate one (every cell of one trial, or no trial that both saw and missed the event),
    by the least design effect orch assumes (intervals.prior_inflation). So: no widening at all
    when some cell has 2 trials (other cells could make the dispersion estimable), else the
    prior's."""
    n = sessions * trials
    m = 1.0 if most_trials >= 2 else intervals.prior_inflation(sessions)
    low, high = intervals.rate(n if side == "lower" else 0, n, m)
    return low if side == "lower" else high


def _proportion_warnings(gate: Gate, sessions: int, trials: int, most_trials: int, iv: Intervals) -> list[str]:
    out = []
    for side, limit in (("upper", gate.upper), ("lower", gate.lower)):
        if limit is None or _reaches(side, limit, sessions, trials, most_trials, iv):
            continue
        n = sessions * trials
        bound = best_bound(side, sessions, trials, most_trials, iv)
        out.append(
            f"{_gate_text(gate)} cannot pass: with {n} sessions per cell ({sessions} x {_trials(trials)}) even "
            f"{0 if side == 'upper' else n} events give {'an upper' if side == 'upper' else 'a lower'} 95% bound of "
            f"{bound:.2g}; " + _sessions_needed(side, limit, trials, most_trials, iv)
        )
    return out


def _reaches(side: str, limit: float, sessions: int, trials: int, most_trials: int, iv: Intervals) -> bool:
    bound = best_bound(side, sessions, trials, most_trials, iv)
    return bound <= limit if side == "upper" else bound >= limit


def _fewest_sessions(side: str, limit: float, trials: int, most_trials: int, iv: Intervals) -> int | None:
    """The fewest sessions per trial whose best case passes (the bound is monotone in them)."""
    if not _reaches(side, limit, SEARCH_SESSIONS, trials, most_trials, iv):
        return None
    low, high = 1, SEARCH_SESSIONS
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if _reaches(side, limit, mid, trials, most_trials, iv) else (mid + 1, high)
    return low


def _sessions_needed(side: str, limit: float, trials: int, most_trials: int, iv: Intervals) -> str:
    per_trial = _fewest_sessions(side, limit, trials, most_trials, iv)
    if per_trial is not None:
        return f"needs about {per_trial * trials:,} sessions per cell ({per_trial:,} per trial at {_trials(trials)})"
    two = _fewest_sessions(side, limit, 2, 2, iv)
    if two is None:
        return "no number of sessions gets there"
    return (
        "one trial cannot show it at any number of sessions (the intra-trial correlation orch assumes caps "
        f"what a trial is worth); needs 2 or more trials per cell, about {2 * two:,} sessions per cell "
        f"({two:,} per trial)"
    )


def _trials(n: int) -> str:
    return f"{n} trial" if n == 1 else f"{n} trials"


def _number_warning(gate: Gate, trials: int, iv: Intervals) -> str:
    need = next((n for n in range(1, 1000) if iv.median_covered(n)), 1000)
    return (
        f"{_gate_text(gate)} cannot pass: with {_trials(trials)} per cell the median has no 95% interval "
        f"(one value per trial; even the full range covers it with less than 95%); needs {need} or more "
        f"trials per cell (--replicates {need})"
    )
