"""PURE: a hunt matrix's search - its settings, its first wave (the two endpoints and every
leave-one-out configuration), a configuration's cell, the expected cost `orch plan` shows, and
the search replayed from a run's trials (resume and the report).

A hunt's later configurations depend on its results, so its plan (sweep/hunt.py) is only the
first wave; the step source makes the rest as it goes, and the journal records every trial.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.config import Matrix
from orchestrator.core.hunt import Hunt, HuntSettings
from orchestrator.core.hunt_model import ModelSettings
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.matrix import Cell, level_index, make_cell
from orchestrator.core.records import TrialRecord

# Sessions a hunt of 16 flags needed in bench/bench_hunt.py (3-flag AND at 15%, background
# 0.5-1%, trial-to-trial variation, trials of 5 sessions): median ~230, p90 ~310. Most of it is
# the first wave (endpoints + one trial per flag) and the clean streaks that confirm each
# culprit's drop, so it is scaled as: first wave + per-flag follow-ups + confirmations.
FOLLOW_UP_TRIALS_PER_FLAG = 0.8
CONFIRM_SESSIONS = 90


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
    wave = (flags + 2) * n + n  # the failing endpoint usually needs a second trial for its failures
    median = wave + round(FOLLOW_UP_TRIALS_PER_FLAG * flags) * n + CONFIRM_SESSIONS
    return median, round(median * 1.35)


def replay(matrix: Matrix, records: Sequence[TrialRecord]) -> Hunt:
    """The search's state after these trials (the report and resume both rebuild it so)."""
    assert matrix.hunt is not None
    hunt = Hunt(settings_of(matrix.hunt))
    for record in records:
        observe(hunt, matrix, record)
    return hunt


def observe(hunt: Hunt, matrix: Matrix, record: TrialRecord) -> None:
    """A completed trial's k/n of the hunt's metric; failed or void trials say nothing."""
    spec = matrix.hunt
    assert spec is not None
    m = record.metrics.get(spec.metric)
    config = spec.config_of(record.levels)
    if record.status != "completed" or m is None or m.n is None or config is None:
        return
    hunt.observe(config, m.k or 0, m.n)
