"""PURE: a hunt matrix's plan - its first wave (the two endpoints and every leave-one-out
configuration), a configuration's step, and the expected cost `orch plan` shows. The search's
settings and its replay from a run's trials (resume and the report) are core/huntreplay.py.

A hunt's later configurations depend on its results, so its plan (hunt_plan) is only the first
wave; the step source (sweep/hunt.py) makes the rest as it goes, with hunt_step, and the journal
records every trial.
"""

from __future__ import annotations

from orchestrator.core.config import check_against_inventory
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.inventory import Testbed
from orchestrator.core.matrix import hunt_cell
from orchestrator.core.model import Matrix, Trial
from orchestrator.core.steps import Plan, Step, new_seed

# Sessions a hunt of 16 flags needed in bench/bench_hunt.py (3-flag AND at 15%, background
# 0.5%, trial-to-trial variation ICC 0.03, trials of 5 sessions), less its first wave (19 trials of
# 5 = 95 sessions): re-measured 2026-12-05 on 300 hunts (`bench_hunt.py --hunts 300 --settings
# and3-bg0.5 --testbeds 1`, seeds 0-299): median 390, p90 567 (565 before REPRO_TRIALS), so 295 /
# 472 beyond the wave (it was 290 / 460, from 1,000 hunts of 385 / 555 before the rest checks of
# the drops, which added ~7 to the median). A test cannot pin it cheaply: one 16-flag hunt takes
# 0.3-1.7 s of CPU, and the median of a handful of hunts swings by +-30% (9 seeds: 280-705).
# bench/README.md, "bench_hunt.py".
# The first wave (both endpoints, a second trial of the failing one, a trial per flag) scales
# with the trial size; the rest (clean streaks that confirm each culprit's drop, re-tests of
# decoys whose drop looked clean by chance, the checks) is about a fixed number of sessions: a
# 20-session run of matrices/dsv4_hunt.yaml on the simulator took 620 = 19 x 20 + 240 (measured
# before the clean endpoint's own rule, which saves ~25 sessions of the rest, and the checks).
SEARCH_SESSIONS_16 = 295  # median beyond the first wave, 16 flags
SEARCH_P90_16 = 472  # p90 beyond the first wave, 16 flags


def first_wave(spec: HuntSpec) -> list[int]:
    """All failing, all clean, then each flag dropped from the failing configuration."""
    full = (1 << len(spec.flags)) - 1
    return [full, 0, *(full ^ (1 << i) for i in range(len(spec.flags)))]


def modelled_sessions(spec: HuntSpec) -> tuple[int, int]:
    """(median, p90) sessions a hunt of this many flags needs to reach an answer (benchmark
    model), whatever its budget."""
    n, flags = spec.sessions_per_trial, len(spec.flags)
    wave = (flags + 3) * n
    scale = 0.5 + 0.5 * flags / 16  # part of the search is per culprit, part per flag
    return wave + round(SEARCH_SESSIONS_16 * scale), wave + round(SEARCH_P90_16 * scale)


def expected_sessions(spec: HuntSpec) -> tuple[int, int]:
    """(median, p90) sessions the hunt is expected to spend: the model's, capped at max_sessions
    (the hunt stops there, answer or not; `budget_note` says when it does)."""
    median, p90 = modelled_sessions(spec)
    return min(median, spec.max_sessions), min(p90, spec.max_sessions)


def budget_note(spec: HuntSpec) -> str | None:
    """What max_sessions does to the expected cost, in words; None when it does not bind."""
    cap, (median, p90) = spec.max_sessions, modelled_sessions(spec)
    wave = len(first_wave(spec)) * spec.sessions_per_trial
    if wave > cap:
        return (
            f"capped by max_sessions {cap}: it does not pay for the first wave ({len(first_wave(spec))} trials "
            f"of {spec.sessions_per_trial} sessions = {wave}), so the hunt will stop before it searches"
        )
    if median > cap:
        return f"capped by max_sessions {cap}: the hunt is likely to stop before an answer (uncapped: ~{median})"
    if p90 > cap:
        return f"p90 capped by max_sessions {cap}: over 1 hunt in 10 would stop before an answer (uncapped: {p90})"
    return None


def hunt_step(matrix: Matrix, index: int, round_: int, config: int, testbed: Testbed | None = None) -> Step:
    """One trial of a configuration. The restart fields are the plan's expectation only (every
    role the cell sets); the runner decides restarts from the files on the hosts."""
    assert matrix.hunt is not None
    cell = hunt_cell(matrix, config)
    roles = tuple(cell.env)
    units: tuple[tuple[str, str], ...] = ()
    startup = 0.0
    if testbed is not None:
        units = tuple((r, u.name) for r in roles if r in testbed.hosts for u in testbed.hosts[r].units)
        startup = max((testbed.hosts[r].startup_estimate_s for r in roles if r in testbed.hosts), default=0.0)
    trial = Trial(index, round_, cell, config == (1 << len(matrix.hunt.flags)) - 1)
    return Step(trial, cell.env, roles, units, roles, startup + matrix.repro.expected_duration_s)


def hunt_plan(matrix: Matrix, testbed: Testbed, seed: int | None = None) -> Plan:
    """The hunt's first wave as a plan (one trial per configuration)."""
    assert matrix.hunt is not None
    check_against_inventory(matrix, testbed)
    configs = first_wave(matrix.hunt)
    steps = tuple(hunt_step(matrix, i, 0, x, testbed) for i, x in enumerate(configs))
    seed = seed if seed is not None else (matrix.seed if matrix.seed is not None else new_seed())
    return Plan(matrix, testbed, seed, 1, tuple(s.trial.cell for s in steps), steps)
