"""PURE: expand a matrix into cells, then into an ordered list of trials.

Expansion is an indexed product (ReFrame-style): each zip group is one axis whose levels move
together, every other factor is an axis of its own. ``exclude`` removes cells that match all the
keys of an entry (partial match); ``include`` appends whole cells. There is no GitHub-Actions-style
merging: what you read in the matrix is what runs.

Order: ``randomized`` (the default) runs every replicate round as its own seeded random
permutation of the cells (randomized blocks), so slow drift in the cluster cannot masquerade as
a factor's effect; ``sequential`` runs the cells in declared order every round.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable

from .config import Matrix
from .errors import ConfigError

GREEDY_LIMIT = 1_000  # min-restarts: cells per round the greedy path handles
MAX_TRIALS = 1_000_000  # beyond this a matrix is a mistake, not an experiment
WARN_TRIALS = 10_000


@dataclass(frozen=True, order=True)
class Cell:
    """One combination of levels, in the matrix's factor order."""

    levels: tuple[tuple[str, str], ...]  # ((factor, level), ...)

    @property
    def id(self) -> str:
        return ",".join(f"{f}={lv}" for f, lv in self.levels)

    def as_dict(self) -> dict[str, str]:
        return dict(self.levels)

    def matches(self, selector: dict[str, str]) -> bool:
        mine = self.as_dict()
        return all(mine.get(f) == lv for f, lv in selector.items())


@dataclass(frozen=True)
class Trial:
    index: int  # position in the run, 0-based
    round: int  # replicate round
    cell: Cell
    is_baseline: bool


def cell_count(matrix: Matrix) -> int:
    """Size of the product before exclude/include, without building it."""
    return math.prod(len(axis[0][1]) for axis in _axes(matrix))


def expand(matrix: Matrix) -> list[Cell]:
    """Cells of the matrix: product of axes, minus excludes, plus includes."""
    total = cell_count(matrix) * matrix.replicates
    if total > MAX_TRIALS:
        raise ConfigError(
            f"the matrix expands to {total:,} trials (over {MAX_TRIALS:,})", file=matrix.path,
            path="factors", hint="split it, use zips, or exclude combinations",
        )
    cells = [c for c in _product(matrix) if not any(c.matches(sel) for sel in matrix.exclude)]
    present = set(cells)
    for i, sel in enumerate(matrix.include):
        cell = Cell(tuple((f.name, sel[f.name]) for f in matrix.factors))
        if cell in present:
            raise matrix.source.error(("include", i), f"cell {cell.id} is already in the matrix",
                                      "include only adds cells that the product or exclude left out")
        cells.append(cell)
        present.add(cell)
    if not cells:
        raise matrix.source.error(("exclude",), "every cell is excluded: nothing to run")
    base = baseline_cell(matrix)
    if base not in present:
        raise matrix.source.error(("baseline",), f"the baseline cell {base.id} is not in the matrix",
                                  "it was excluded or is not a combination of the zips")
    return cells


def baseline_cell(matrix: Matrix) -> Cell:
    return Cell(tuple((f.name, matrix.baseline[f.name]) for f in matrix.factors))


RestartCost = Callable[[Cell, Cell], int]  # units restarted when going from one cell to another


def order_trials(matrix: Matrix, cells: list[Cell], seed: int, replicates: int | None = None,
                 *, order: str | None = None, cost: RestartCost | None = None) -> list[Trial]:
    """Replicate rounds in the matrix's order; randomized rounds are seeded permutations;
    min-restarts rounds are a greedy shortest path through the cells by restart cost."""
    rounds = replicates if replicates is not None else matrix.replicates
    order = order or matrix.order
    base = baseline_cell(matrix)
    trials: list[Trial] = []
    extra_baseline = (matrix.adaptive.baseline_runs - 1) if matrix.adaptive else 0
    for r in range(rounds):
        block = list(cells) + [base] * extra_baseline  # adaptive: more baseline sessions per round
        if order == "randomized":
            random.Random(seed * 1_000_003 + r).shuffle(block)
        elif order == "min-restarts" and len(block) <= GREEDY_LIMIT:
            block = _fewest_restarts(block, trials[-1].cell if trials else base, cost or _roles_cost)
        # beyond GREEDY_LIMIT cells the greedy path (quadratic) is too slow; the declared product
        # order, which changes the first factor least often, is the fallback
        start = len(trials)
        trials.extend(Trial(start + i, r, c, c == base) for i, c in enumerate(block))
    return trials


def _fewest_restarts(cells: list[Cell], start: Cell, cost: RestartCost) -> list[Cell]:
    """Greedy nearest neighbour from `start`: always go to the cheapest remaining cell (ties in
    declared order). Not optimal in general, but within a small factor and linear per step;
    for two-level factors it walks a Gray-code-like path."""
    left, path, here = list(cells), [], start
    if start in left:
        left.remove(start)
        path.append(start)
    while left:
        nxt = min(left, key=lambda c: cost(here, c))
        left.remove(nxt)
        path.append(nxt)
        here = nxt
    return path


def _roles_cost(a: Cell, b: Cell) -> int:
    """Fallback cost without an inventory: how many factors differ."""
    return sum(x != y for x, y in zip(a.levels, b.levels))


def warnings_for(matrix: Matrix, replicates: int | None = None) -> list[str]:
    total = cell_count(matrix) * (replicates or matrix.replicates)
    if total > WARN_TRIALS:
        return [f"{matrix.path}: this sweep has {total:,} trials; check the estimate with `orch plan`"]
    return []


def _axes(matrix: Matrix) -> list[list[tuple[str, list[str]]]]:
    """Each axis is a list of (factor, level names) that move together."""
    zipped = {name: group for group in matrix.zips for name in group}
    axes, done = [], set()
    for f in matrix.factors:
        if f.name in done:
            continue
        group = zipped.get(f.name, (f.name,))
        axes.append([(name, list(matrix.factor(name).level_names)) for name in group])
        done.update(group)
    return axes


def _product(matrix: Matrix) -> list[Cell]:
    order = {f.name: i for i, f in enumerate(matrix.factors)}
    axes = _axes(matrix)
    cells = []
    for picks in itertools.product(*(range(len(axis[0][1])) for axis in axes)):
        chosen = [(name, levels[i]) for axis, i in zip(axes, picks) for name, levels in axis]
        cells.append(Cell(tuple(sorted(chosen, key=lambda fl: order[fl[0]]))))
    return cells
