"""Simulated parallel runs for the testbed check (not a test module): shared by its tests and
bench/bench_testbeds.py.

A run is `cells` cells, each run `trials` times on each testbed; a trial carries a corruption
count (`sessions` sessions at the cell's rate, identical on every testbed) and a wall time and a
latency drawn around 160 s and 2.0 s with coefficient of variation `cv`; the last testbed's
number metrics are `slower` times the others' (1.2: 20% slower). `shape` "normal" or "lognormal"
(skewed, as latencies are)."""

from __future__ import annotations

import numpy as np

from orchestrator.core.records import MetricValue, TrialRecord

RATES = (0.15, 0.05, 0.02, 0.02, 0.01, 0.0, 0.0, 0.0)
NUMBERS = {"wall": (160.0, "s"), "latency": (2.0, "s")}


def parallel_trials(
    rng: np.random.Generator,
    *,
    cells: int = 8,
    trials: int = 4,
    testbeds: int = 2,
    cv: float = 0.05,
    slower: float = 1.0,
    shape: str = "normal",
    sessions: int = 40,
) -> list[TrialRecord]:
    """The completed trials of one parallel run (see the module's docstring)."""
    records = []
    for cell in range(cells):
        rate = RATES[cell % len(RATES)]
        for bed in range(testbeds):
            factor = slower if bed == testbeds - 1 else 1.0
            for _ in range(trials):
                metrics = {
                    "corruption": MetricValue(kind="proportion", k=int(rng.binomial(sessions, rate)), n=sessions)
                }
                for name, (mean, unit) in NUMBERS.items():
                    metrics[name] = MetricValue(kind="number", value=factor * _draw(rng, mean, cv, shape), unit=unit)
                records.append(_record(len(records), f"c={cell}", f"tb{bed}", metrics))
    return records


def _draw(rng: np.random.Generator, mean: float, cv: float, shape: str) -> float:
    if shape == "lognormal":
        sigma = float(np.sqrt(np.log1p(cv**2)))
        return float(mean * rng.lognormal(-(sigma**2) / 2, sigma))
    return float(rng.normal(mean, cv * mean))


def _record(index: int, cell: str, testbed: str, metrics: dict[str, MetricValue]) -> TrialRecord:
    return TrialRecord(
        run_id="r1", trial=index, round=0, cell=cell, levels={"c": cell[2:]}, testbed=testbed,
        status="completed", started="2026-11-30T00:00:00Z", ended="2026-11-30T00:00:01Z", duration_s=1.0,
        metrics=metrics,
    )  # fmt: skip
