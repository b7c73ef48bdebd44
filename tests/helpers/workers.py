"""How many pytest-xdist workers `-n auto` starts (tests/conftest.py's hook calls this)."""

from __future__ import annotations

TIERS = ("sim", "testbed", "browser", "process")  # every tier but the unit tier


def workers_for(mark_expression: str, cores: int) -> int:
    """A run of only the unit tier is CPU-bound: one worker per core (2 cores: 55 s with 2
    workers, 73 s with 3, each worker also collecting the whole suite). A run with real-system
    tests waits at times (restarts, warm-ups, outages, deadlines) and is CPU-bound the rest:
    two workers more than cores. The whole suite on 2 cores, 2026-12-07, same commit: 652 s
    with 3 workers (the cores 87% busy: two workers waiting at once left one idle), 587 s with
    4 (96% busy)."""
    unit_tier_only = all(f"not {tier}" in mark_expression for tier in TIERS)
    return max(1, cores) if unit_tier_only else max(1, cores) + 2
