"""PURE: a hunt matrix's search - its settings, its first wave (the two endpoints and every
leave-one-out configuration), a configuration's cell, the expected cost `orch plan` shows, and
the search replayed from a run's trials (resume and the report).

A hunt's later configurations depend on its results, so its plan (sweep/hunt.py) is only the
first wave; the step source makes the rest as it goes, and the journal records every trial.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.hunt import Hunt, HuntSettings
from orchestrator.core.hunt_model import ModelSettings
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.matrix import level_index, make_cell
from orchestrator.core.model import Cell, Matrix
from orchestrator.core.records import TrialRecord

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
    return HuntSettings(
        flags=spec.flags,
        target=spec.posterior,
        confidence=spec.confidence,
        min_failures=spec.min_failures,
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


def expected_sessions(spec: HuntSpec) -> tuple[int, int]:
    """(median, p90) sessions a hunt of this many flags is expected to need (benchmark model)."""
    n, flags = spec.sessions_per_trial, len(spec.flags)
    wave = (flags + 3) * n
    scale = 0.5 + 0.5 * flags / 16  # part of the search is per culprit, part per flag
    return wave + round(SEARCH_SESSIONS_16 * scale), wave + round(SEARCH_P90_16 * scale)


def replay(matrix: Matrix, records: Sequence[TrialRecord]) -> Hunt:
    """The search's state after these trials (the report and resume both rebuild it so)."""
    assert matrix.hunt is not None
    hunt = Hunt(settings_of(matrix.hunt))
    for record in records:
        observe(hunt, matrix, record)
    return hunt


def observe(hunt: Hunt, matrix: Matrix, record: TrialRecord) -> None:
    """A completed trial's k/n of the hunt's metric; failed or void trials say nothing."""
    assert matrix.hunt is not None
    counts = counts_of(matrix.hunt, record)
    if counts is not None:
        hunt.observe(*counts)


def counts_of(spec: HuntSpec, record: TrialRecord) -> tuple[int, int, int] | None:
    """(configuration, k, n) of a trial's hunt metric; None when it is no evidence (failed or void,
    no count, or not one of the hunt's configurations)."""
    m = record.metrics.get(spec.metric)
    config = spec.config_of(record.levels)
    if record.status != "completed" or m is None or m.n is None or config is None:
        return None
    return config, m.k or 0, m.n
