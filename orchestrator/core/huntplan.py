"""PURE: a hunt matrix's search - its settings, its first wave (the two endpoints and every
leave-one-out configuration), a configuration's cell, the expected cost `orch plan` shows, and
the search replayed from a run's trials (resume and the report).

A hunt's later configurations depend on its results, so its plan (hunt_plan) is only the first
wave; the step source (sweep/hunt.py) makes the rest as it goes, with hunt_step, and the journal
records every trial.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.core.config import check_against_inventory
from orchestrator.core.hunt import Hunt, HuntSettings, endpoint_allowance
from orchestrator.core.hunt_model import ModelSettings
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.inventory import Testbed
from orchestrator.core.matrix import level_index, make_cell
from orchestrator.core.model import Cell, Matrix, Trial
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Plan, Step, new_seed

# Sessions a hunt of 16 flags needed in bench/bench_hunt.py (3-flag AND at 15%, background
# 0.5%, trial-to-trial variation ICC 0.03, trials of 5 sessions, 1,000 hunts): median 385, p90 555
# (the search of df4b48f, plus the checks that the set without each flag ran alone twice without
# failing and that the minimal reproducer failed: +50 sessions on 335 / 505).
# The first wave (both endpoints, a second trial of the failing one, a trial per flag) scales
# with the trial size; the rest (clean streaks that confirm each culprit's drop, re-tests of
# decoys whose drop looked clean by chance, the checks) is about a fixed number of sessions: a
# 20-session run of matrices/dsv4_hunt.yaml on the simulator took 620 = 19 x 20 + 240 (measured
# before the clean endpoint's own rule, which saves ~25 sessions of the rest, and the checks).
SEARCH_SESSIONS_16 = 290  # median beyond the first wave, 16 flags
SEARCH_P90_16 = 460  # p90 beyond the first wave, 16 flags


def settings_of(spec: HuntSpec) -> HuntSettings:
    """The search's settings. The failing configuration may take `endpoint_allowance` sessions to
    show min_failures failures: a fixed 400 called one failing at 15% "not failing" when
    min_failures was 100."""
    return HuntSettings(
        flags=spec.flags,
        target=spec.posterior,
        confidence=spec.confidence,
        min_failures=spec.min_failures,
        endpoint_sessions=endpoint_allowance(spec.min_failures, spec.max_sessions),
        max_sessions=spec.max_sessions,
        sessions_per_trial=spec.sessions_per_trial,
        model=ModelSettings(icc=spec.icc, max_or=spec.max_or),
    )


def first_wave(spec: HuntSpec) -> list[int]:
    """All failing, all clean, then each flag dropped from the failing configuration."""
    full = (1 << len(spec.flags)) - 1
    return [full, 0, *(full ^ (1 << i) for i in range(len(spec.flags)))]


def hunt_cell(matrix: Matrix, config: int) -> Cell:
    assert matrix.hunt is not None
    return make_cell(matrix.hunt.levels(config), level_index(matrix))


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


def replay(matrix: Matrix, records: Iterable[TrialRecord]) -> Hunt:
    """The search's state after these trials (the report and resume both rebuild it so)."""
    assert matrix.hunt is not None
    hunt = Hunt(settings_of(matrix.hunt))
    for record in records:
        observe(hunt, matrix, record)
    return hunt


def observe(hunt: Hunt, matrix: Matrix, record: TrialRecord) -> None:
    """A completed trial's k/n of the hunt's metric. A failed or void trial, or one without a
    count, is no evidence but is counted as a trial that gave no data (the hunt stops once as
    many as its budget pays for did); an interrupted one, or one of no hunt configuration, is
    neither (the same records the journal's replay sees)."""
    assert matrix.hunt is not None
    counts = counts_of(matrix.hunt, record)
    config = matrix.hunt.config_of(record.levels)
    if counts is not None and counts[2] > 0:
        hunt.observe(*counts)
    elif record.status != "interrupted" and config is not None:
        hunt.observe_nothing(no_data_note(matrix.hunt, record, hunt.describe(config)))


def no_data_note(spec: HuntSpec, record: TrialRecord, config: str) -> str:
    """Why a trial gave no data, in a few words (the hunt's stop reason quotes the last one)."""
    if record.failure is not None:
        why = f"{record.failure.error}: {record.failure.message}"
    else:
        why = f"no sessions of {spec.metric} counted"
    return f"trial {record.trial} {record.status}: {why} ({config})"


def counts_of(spec: HuntSpec, record: TrialRecord) -> tuple[int, int, int] | None:
    """(configuration, k, n) of a trial's hunt metric; None when it is no evidence (failed or void,
    no count, or not one of the hunt's configurations)."""
    m = record.metrics.get(spec.metric)
    config = spec.config_of(record.levels)
    if record.status != "completed" or m is None or m.n is None or config is None:
        return None
    return config, m.k or 0, m.n


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
