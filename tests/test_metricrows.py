"""report.metricrows splits a metric's rows by cell once per report, with numpy, where the report
used pandas' groupby at each use. Each split is checked against the groupby it replaces on random
frames (cells in any order, trials out of order, rounds with gaps, cells missing rounds)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.report import build
from orchestrator.report.metricrows import MetricRows, by_cell


def random_frame(rng: np.random.Generator) -> pd.DataFrame:
    rows = int(rng.integers(1, 40))
    cells = [f"c{i}" for i in rng.permutation(int(rng.integers(1, 7)))]
    return pd.DataFrame(
        {
            "trial": rng.permutation(rows).astype("int64"),
            "round": rng.integers(0, 6, rows).astype("int64"),
            "cell": np.array([cells[i] for i in rng.integers(0, len(cells), rows)], dtype=object),
            "metric": np.array(["corruption"] * rows, dtype=object),
            "k": rng.integers(0, 20, rows).astype("int64"),
            "n": rng.integers(20, 41, rows).astype("int64"),
            "value": rng.normal(5, 2, rows),
        }
    )


FRAMES = [random_frame(np.random.default_rng(seed)) for seed in range(60)]


@pytest.mark.parametrize("frame", FRAMES[:1])
def test_a_frame_of_counts_alone_reads_as_round_0(frame: pd.DataFrame) -> None:
    cells = by_cell(frame[["cell", "k", "n"]])
    assert all((c.round == 0).all() and np.isnan(c.value).all() for c in cells.values())


def test_cells_and_their_rows_are_what_groupby_gives() -> None:
    for frame in FRAMES:
        cells = by_cell(frame)
        groups = dict(tuple(frame.groupby("cell", sort=False)))
        assert list(cells) == list(groups)
        for name, group in groups.items():
            for column in ("k", "n", "value", "round"):
                assert getattr(cells[name], column).tolist() == group[column].tolist(), (name, column)
            assert cells[name].counts() == list(zip(group.k.astype(int), group.n.astype(int), strict=True))


def test_rounds_of_a_cell_are_summed_as_groupby_sums_them() -> None:
    for frame in FRAMES:
        for name, group in frame.groupby("cell", sort=False):
            summed = group.groupby("round")[["k", "n"]].sum()
            expected = [(int(r), int(k), int(n)) for r, k, n in zip(summed.index, summed.k, summed.n, strict=True)]
            assert build._per_round(by_cell(frame)[name]) == expected


def test_the_cell_by_round_table_is_the_unstacked_groupby() -> None:
    for frame in FRAMES:
        table = frame.groupby(["cell", "round"])[["k", "n"]].sum().unstack(fill_value=0)
        k, n = build._round_table(MetricRows(frame))
        assert np.array_equal(k, table["k"].to_numpy(dtype=float))
        assert np.array_equal(n, table["n"].to_numpy(dtype=float))


def test_the_dispersion_is_computed_once_per_metric() -> None:
    rows = MetricRows(FRAMES[3])
    assert rows.dispersion is rows.dispersion
    assert repr(rows.dispersion) == repr(build._dispersion(FRAMES[3]))
