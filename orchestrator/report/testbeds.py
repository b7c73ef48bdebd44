"""Do parallel testbeds differ? The check behind the headline's testbed sentences.

Pure: no I/O. A parallel run (several testbeds, one plan) pools every trial of a cell whatever
testbed ran it; that is only sound if the testbeds are interchangeable. This module tests, per
cell, whether its testbeds differ, against the spread of the trials themselves (a testbed's trials
are the unit, not its sessions), Holm-adjusted; no difference is said as "not shown", never as
agreement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from orchestrator.core import clustered, stats
from orchestrator.core.records import TrialRecord
from orchestrator.report.model import Finding


def testbed_findings(trials: Iterable[TrialRecord], metric: str | None) -> list[Finding]:
    """Do parallel testbeds differ? Per cell, a test of one rate across testbeds against the
    trials' own spread (_testbed_pvalue), Holm-adjusted over the cells; a difference means the
    testbeds are not interchangeable, and no difference is said as not shown, never as agreement."""
    if metric is None:
        return []
    by_group = _testbed_trials(trials, metric)
    pooled = {c: {tb: _sum_counts(ts) for tb, ts in by_tb.items()} for c, by_tb in by_group.items()}
    testbeds = sorted({tb for by_tb in pooled.values() for tb in by_tb})
    if len(testbeds) < 2:
        return []
    cells = [c for c, by_tb in pooled.items() if len(by_tb) > 1]
    if not cells:
        return [
            Finding(
                kind="caution",
                text=f"Testbeds {', '.join(testbeds)} never ran the same cell: whether they differ cannot be checked.",
            )
        ]
    disp = clustered.dispersion([ts for by_tb in by_group.values() for ts in by_tb.values()])
    adjusted = stats.holm([_testbed_pvalue(list(pooled[c].values()), disp) for c in cells])
    how = "" if disp.estimable else f"; {clustered.ASSUMED_NOTE}"
    differ = [(c, p) for c, p in zip(cells, adjusted, strict=True) if p < stats.ALPHA]
    if not differ:
        return [
            Finding(
                kind="info",
                text=f"Testbeds {', '.join(testbeds)} were not shown to differ: no cell's {metric} differs "
                f"significantly between them, which does not show that they agree (smallest Holm-adjusted p = "
                f"{min(adjusted):.2g}, "
                f"{len(cells)} cells run on several testbeds; against trial-to-trial variation{how}).",
            )
        ]
    return [
        Finding(
            kind="caution",
            text=f"Testbeds differ in {c}: "
            + ", ".join(f"{tb} {k}/{n}" for tb, (k, n) in sorted(pooled[c].items()))
            + f" (p={p:.2g}, Holm, against trial-to-trial variation{how}); "
            "treat its pooled numbers with care.",
        )
        for c, p in differ
    ]


def _testbed_trials(trials: Iterable[TrialRecord], metric: str) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """cell -> testbed -> (k, n) of each completed trial: the trials, not their sum, since the
    spread of trials within one (cell, testbed) is what a difference between testbeds must beat."""
    found: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for t in trials:
        m = t.metrics.get(metric)
        if t.status != "completed" or m is None or m.n is None:
            continue
        found.setdefault(t.cell, {}).setdefault(t.testbed, []).append((m.k or 0, m.n))
    return found


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
