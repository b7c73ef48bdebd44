"""A run's per-trial numbers per cell and metric, kept in summary.json for trends and nightly
regression checks across runs of the same matrix (the index never re-reads old journals)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pydantic

from orchestrator.core.records import MetricKind
from orchestrator.store.journal import TrialRow

MAX_CELLS = 256  # cells kept per run (a trend of more is unreadable anyway)
MAX_TRIALS = 64  # trials kept per cell and metric (the newest ones)


class SeriesPoint(pydantic.BaseModel):
    """One cell's metric in one run: (k, n) per trial for a proportion, values for a number."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    cell: str
    levels: dict[str, str]
    metric: str
    kind: MetricKind
    trials: list[tuple[int, int]] = []
    values: list[float] = []

    @property
    def rate(self) -> tuple[int, int]:
        return sum(k for k, _ in self.trials), sum(n for _, n in self.trials)


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
            if m.kind == "proportion" and m.k is not None and m.n:
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
