"""A run's per-trial numbers per cell and metric, kept in summary.json for trends and nightly
regression checks across runs of the same matrix (the index never re-reads old journals).

A summary.json newer than its journal is trusted by the index, so a point is validated as it is
read: counts within 0 <= k <= n <= MAX_SESSIONS and at most MAX_TRIALS trials and values. An
invalid file fails validation and the summary is rebuilt from the journal, instead of a trial
of 10^10 sessions reaching the statistics (an unbounded allocation there, once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

import pydantic

from orchestrator.core.bounds import MAX_SESSIONS
from orchestrator.core.records import MetricKind, MetricUnit
from orchestrator.store.journal import TrialRow

MAX_CELLS = 256  # cells kept per run (a trend of more is unreadable anyway)
MAX_TRIALS = 64  # trials kept per cell and metric (the newest ones)

Count = Annotated[int, pydantic.Field(ge=0, le=MAX_SESSIONS)]  # sessions of one trial, or events among them
Share = Annotated[float, pydantic.Field(ge=0.0, le=1.0)]  # a rate or a bound of its interval


class SeriesPoint(pydantic.BaseModel):
    """One cell's metric in one run: (k, n) per trial for a proportion, values for a number."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    cell: str
    levels: dict[str, str]
    metric: str
    kind: MetricKind
    trials: list[tuple[Count, Count]] = pydantic.Field(default=[], max_length=MAX_TRIALS)
    values: list[float] = pydantic.Field(default=[], max_length=MAX_TRIALS)
    # an adaptive rule stopped the cell early (report.build.stopped_cells, as its report marks it): its
    # rate takes the report's anytime-valid interval. Written only when true: the summary of a run
    # without adaptive stopping stays as it was
    stopped: bool = pydantic.Field(default=False, exclude_if=lambda stopped: not stopped)
    # the report's (rate, low, high) of the cell, when `trials` cannot give it back: some cell of the
    # run had more than MAX_TRIALS trials, so a kept series is not the report's data (its pooled rate,
    # its dispersion). Written only then: other runs' summaries stay as they were
    shown: tuple[Share, Share, Share] | None = pydantic.Field(default=None, exclude_if=lambda shown: shown is None)
    # a number metric's declared unit (the report's Report.units), for the index's words on its
    # change; written only when the metric has one, so a run without units keeps its summary as it was
    unit: MetricUnit = pydantic.Field(default="", exclude_if=lambda unit: not unit)

    @pydantic.field_validator("trials")
    @classmethod
    def _k_of_n(cls, trials: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """More events than sessions is no proportion: the statistics would fail on it later."""
        bad = next(((k, n) for k, n in trials if k > n), None)
        if bad is not None:
            raise ValueError(f"trial {bad[0]}/{bad[1]}: more events than sessions")
        return trials

    @property
    def rate(self) -> tuple[int, int]:
        return sum(k for k, _ in self.trials), sum(n for _, n in self.trials)


def valid_trial(k: int, n: int) -> bool:
    """What SeriesPoint accepts: a journal's trial beyond it is left out of the series (the
    run's own report still shows it), so building a summary never fails validation."""
    return 0 <= k <= n <= MAX_SESSIONS


@dataclass
class _Acc:
    cell: str
    levels: dict[str, str]
    metric: str
    kind: MetricKind
    trials: list[tuple[int, int]] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def run_series(rows: Sequence[TrialRow]) -> list[SeriesPoint]:
    """The last completed record of each trial, grouped by cell and metric, in first-seen order."""
    last: dict[int, TrialRow] = {}
    for row in rows:
        if row.status == "completed":
            last[row.trial] = row
    grouped: dict[tuple[str, str], _Acc] = {}
    cells: set[str] = set()
    for trial in sorted(last):
        row = last[trial]
        if row.cell not in cells and len(cells) >= MAX_CELLS:
            continue
        cells.add(row.cell)
        for m in row.metrics:
            acc = grouped.setdefault((row.cell, m.name), _Acc(row.cell, dict(row.levels), m.name, m.kind))
            if m.kind == "proportion" and m.k is not None and m.n and valid_trial(m.k, m.n):
                acc.trials.append((m.k, m.n))
            elif m.kind == "number" and m.value is not None:
                acc.values.append(m.value)
    return [
        SeriesPoint(
            cell=a.cell,
            levels=a.levels,
            metric=a.metric,
            kind=a.kind,
            trials=a.trials[-MAX_TRIALS:],
            values=a.values[-MAX_TRIALS:],
        )
        for a in grouped.values()
    ]
