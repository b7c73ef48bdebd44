"""PURE: a hunt's search rebuilt from its settings and a run's trials: the settings a hunt matrix
gives the search, and the search replayed from the journal's trials (resume, the report, the
runs index and the webhook all rebuild it so).

Apart from core/huntplan.py (the first wave, steps and expected cost) so that whoever only reads
a hunt run - the report stack, which every sweep imports - does not sit above planning.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.core.hunt import Hunt, HuntSettings, endpoint_allowance
from orchestrator.core.hunt_model import ModelSettings
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord


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


def replay(matrix: Matrix, records: Iterable[TrialRecord]) -> Hunt:
    """The search's state after these trials (the report and resume both rebuild it so)."""
    assert matrix.hunt is not None
    hunt = Hunt(settings_of(matrix.hunt))
    for record in records:
        observe(hunt, matrix, record)
    return hunt


def stopped(matrix: Matrix, records: Iterable[TrialRecord]) -> Hunt:
    """The search after these trials with its stopping rule evaluated on them (propose() proposes
    nothing else): its `state` and `reason` say whether it has ended, as the report says them, and
    a hunt that has ended hands out no trial when it is resumed."""
    hunt = replay(matrix, records)
    hunt.propose()
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
