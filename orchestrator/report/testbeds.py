"""Do parallel testbeds differ? The check behind the headline's testbed sentences.

Pure: no I/O. A parallel run (several testbeds, one plan) pools every trial of a cell whatever
testbed ran it; that is only sound if the testbeds are interchangeable. This module tests, per
cell and metric, whether its testbeds differ, against the spread of the trials themselves (a
testbed's trials are the unit, not its sessions): the rate by a quasi-binomial chi-square, each
number metric by a one-way F test on the trials' values; Holm over every cell and metric tested
(one family, so identical testbeds are called different in at most alpha of the reports). No
difference is said as "not shown", never as agreement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from orchestrator.core import clustered, stats
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.report.model import Finding

T = TypeVar("T")
Grouped = dict[str, dict[str, list[T]]]  # cell -> testbed -> one entry per completed trial

RATE_METHOD = "against trial-to-trial variation"
NUMBER_METHOD = "one-way F test on the trials' values"


@dataclass(frozen=True)
class BedTest:
    """One cell's testbeds compared on one metric: what the sentence shows and how it was tested."""

    metric: str
    cell: str
    p: float
    shown: str  # each testbed's data, e.g. "tb1 17/120, tb2 17/40"
    method: str


def testbed_findings(trials: Iterable[TrialRecord], metric: str | None, numbers: Sequence[str] = ()) -> list[Finding]:
    """Do parallel testbeds differ? Per cell, the rate `metric` (_rate_tests) and each number
    metric in `numbers` (_number_tests) across testbeds, against the trials' own spread,
    Holm-adjusted over every cell and metric tested; a difference means the testbeds are not
    interchangeable, and no difference is said as not shown, never as agreement."""
    done = [t for t in trials if t.status == "completed"]
    rates = _grouped(done, metric, _counts) if metric else {}
    values = {name: _grouped(done, name, _value) for name in numbers}
    every: list[Mapping[str, Mapping[str, object]]] = [rates, *values.values()]
    testbeds = sorted({tb for data in every for by_tb in data.values() for tb in by_tb})
    if len(testbeds) < 2:
        return []
    tests = _rate_tests(metric, rates) if metric else []
    tests += [t for name, data in values.items() for t in _number_tests(name, data, _unit(done, name))]
    if not tests:
        return [_unchecked(testbeds, every, numbers)]
    adjusted = stats.holm([t.p for t in tests])
    differ = [(t, p) for t, p in zip(tests, adjusted, strict=True) if p < stats.ALPHA]
    if not differ:
        return [_not_shown(testbeds, tests, min(adjusted))]
    return [_differ(t, p) for t, p in differ]


def _grouped(trials: Iterable[TrialRecord], metric: str, read: Callable[[MetricValue], T | None]) -> Grouped[T]:
    """cell -> testbed -> each completed trial's reading of `metric`: the trials, not their sum,
    since the spread of trials within one (cell, testbed) is what a difference between testbeds
    must beat."""
    found: Grouped[T] = {}
    for t in trials:
        m = t.metrics.get(metric)
        entry = None if m is None else read(m)
        if entry is not None:
            found.setdefault(t.cell, {}).setdefault(t.testbed, []).append(entry)
    return found


def _counts(m: MetricValue) -> tuple[int, int] | None:
    return None if m.n is None else (m.k or 0, m.n)


def _value(m: MetricValue) -> float | None:
    return m.value if m.value is not None and math.isfinite(m.value) else None


def _unit(trials: Iterable[TrialRecord], metric: str) -> str:
    return next((m.unit for t in trials if (m := t.metrics.get(metric)) is not None and m.unit), "")


def _rate_tests(metric: str, by_group: Grouped[tuple[int, int]]) -> list[BedTest]:
    """Each cell run on several testbeds: one rate across its testbeds (_testbed_pvalue)."""
    pooled = {c: {tb: _sum_counts(ts) for tb, ts in by_tb.items()} for c, by_tb in by_group.items()}
    cells = [c for c, by_tb in pooled.items() if len(by_tb) > 1]
    if not cells:
        return []
    disp = clustered.dispersion([ts for by_tb in by_group.values() for ts in by_tb.values()])
    method = RATE_METHOD + ("" if disp.estimable else f"; {clustered.ASSUMED_NOTE}")
    return [
        BedTest(
            metric=metric,
            cell=c,
            p=_testbed_pvalue(list(pooled[c].values()), disp),
            shown=", ".join(f"{tb} {k}/{n}" for tb, (k, n) in sorted(pooled[c].items())),
            method=method,
        )
        for c in cells
    ]


def _sum_counts(counts: Sequence[tuple[int, int]]) -> tuple[int, int]:
    return sum(k for k, _ in counts), sum(n for _, n in counts)


def _testbed_pvalue(counts: Sequence[tuple[int, int]], disp: clustered.Dispersion) -> float:
    """One cell's testbeds share one rate? Quasi-binomial: the chi-square over its testbeds against
    the dispersion of trials around their own (cell, testbed) rate (a testbed's sum of trials
    varies phi times the binomial, so a session-level test calls identical testbeds different in
    39% of runs at ICC 0.05); with no replicate to estimate phi, the least design effect orch
    assumes (clustered.prior_inflation), taken as known."""
    if disp.estimable:
        return stats.heterogeneity(counts, disp.phi, disp.df)
    return stats.heterogeneity(counts, clustered.prior_inflation(disp.sessions_per_trial), math.inf)


def _number_tests(metric: str, by_group: Grouped[float], unit: str) -> list[BedTest]:
    """Each cell run on several testbeds with a spread to measure (stats.one_way_f: some testbed
    ran it twice): do its testbeds' trials share one mean? A 20% slower testbed is a mean apart."""
    tests = []
    for cell, by_tb in by_group.items():
        p = stats.one_way_f(list(by_tb.values())) if len(by_tb) > 1 else None
        if p is not None:
            shown = ", ".join(
                f"{tb} mean {_mean(vs):.4g}{unit and ' ' + unit} ({_trials(vs)})" for tb, vs in sorted(by_tb.items())
            )
            tests.append(BedTest(metric=metric, cell=cell, p=p, shown=shown, method=NUMBER_METHOD))
    return tests


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _trials(values: Sequence[float]) -> str:
    return "1 trial" if len(values) == 1 else f"{len(values)} trials"


def _differ(test: BedTest, p: float) -> Finding:
    return Finding(
        kind="caution",
        text=f"Testbeds differ in {test.cell} on {test.metric}: {test.shown} (p={p:.2g}, Holm over cells and "
        f"metrics, {test.method}); treat its pooled numbers with care.",
    )


def _not_shown(testbeds: Sequence[str], tests: Sequence[BedTest], smallest: float) -> Finding:
    metrics = list(dict.fromkeys(t.metric for t in tests))
    cells = len({t.cell for t in tests})
    by_method: dict[str, list[str]] = {}
    for m, method in dict((t.metric, t.method) for t in tests).items():
        by_method.setdefault(method, []).append(m)
    how = (
        "; ".join(f"{_and(ms)}: {method}" for method, ms in by_method.items())
        if len(by_method) > 1
        else tests[0].method
    )
    return Finding(
        kind="info",
        text=f"Testbeds {', '.join(testbeds)} were not shown to differ: no cell's {_or(metrics)} differs "
        f"significantly between them, which does not show that they agree (smallest Holm-adjusted p = "
        f"{smallest:.2g}, {cells} cells run on several testbeds; {how}).",
    )


def _unchecked(
    testbeds: Sequence[str], data: Sequence[Mapping[str, Mapping[str, object]]], numbers: Sequence[str]
) -> Finding:
    """Nothing tested: the testbeds never shared a cell, or shared only cells each ran once."""
    shared = any(len(by_tb) > 1 for grouped in data for by_tb in grouped.values())
    why = (
        f"ran each shared cell once, leaving no trial-to-trial spread to test {_or(list(numbers))} against"
        if shared
        else "never ran the same cell"
    )
    return Finding(kind="caution", text=f"Testbeds {', '.join(testbeds)} {why}: whether they differ cannot be checked.")


def _or(items: Sequence[str]) -> str:
    return _listed(items, "or")


def _and(items: Sequence[str]) -> str:
    return _listed(items, "and")


def _listed(items: Sequence[str], word: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]
