"""One metric's completed trials, split by cell once per report (PURE).

Why: the report's cell tests, effects, neighbours, drift check and comparison line all read the
same per-cell (k, n) lists and the same trial-to-trial dispersion. Taken from the frame each
time, with a boolean filter and a pandas groupby (0.1 to 3 ms a call), they cost most of a small
report's build, and the Monte-Carlo checks of the report build thousands of reports.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.core import clustered


@dataclass(frozen=True)
class CellRows:
    """One cell's completed trials of one metric, in the order of the run's rows."""

    k: np.ndarray  # int64; 0 for a number metric
    n: np.ndarray  # int64; 0 for a number metric
    value: np.ndarray  # float64; nan for a proportion metric
    round: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.k.size)

    def counts(self) -> list[tuple[int, int]]:
        """The trials as (k, n) in Python ints."""
        return list(zip(self.k.tolist(), self.n.tolist(), strict=True))


class MetricRows:
    """A metric's rows of the report's frame (trial, round, cell, metric, k, n, value), split by
    cell as groupby("cell", sort=False) splits them: cells in the order of their first row."""

    def __init__(self, rows: pd.DataFrame) -> None:
        self.cells = by_cell(rows)

    @property
    def empty(self) -> bool:
        return not self.cells

    @functools.cached_property
    def dispersion(self) -> clustered.Dispersion:
        """Trial-to-trial variation of the metric, pooled over every cell's completed trials."""
        return clustered.dispersion([cell.counts() for cell in self.cells.values()])


def by_cell(rows: pd.DataFrame) -> dict[str, CellRows]:
    """rows split by cell, by a stable sort of the factorized cells (a row without a cell is
    dropped, as groupby drops it). A frame of counts alone (cell, k, n) reads as round 0 and
    value nan."""
    codes, uniques = pd.factorize(rows["cell"])
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    ordered = codes[order]

    def column(name: str, dtype: type[np.generic], missing: float) -> np.ndarray:
        values = rows[name].to_numpy(dtype=dtype) if name in rows else np.full(len(rows), missing, dtype=dtype)
        return values[order]

    columns = {
        "k": column("k", np.int64, 0),
        "n": column("n", np.int64, 0),
        "value": column("value", np.float64, np.nan),
        "round": column("round", np.int64, 0),
    }
    cuts = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), len(ordered)]
    return {
        str(uniques[ordered[a]]): CellRows(**{name: col[a:b] for name, col in columns.items()})
        for a, b in itertools.pairwise(cuts)
        if b > a
    }
