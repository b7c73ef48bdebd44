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

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.core.argsvar import ArgsEdit, resolve
from orchestrator.core.model import (
    MAX_CELLS,
    MAX_PRODUCT,
    MAX_TRIALS,
    Cell,
    CellValue,
    EnvValue,
    Level,
    Levels,
    Matrix,
    Trial,
)
from orchestrator.errors import ConfigError

GREEDY_LIMIT = 1_000  # min-restarts: cells per round the greedy path handles
WARN_TRIALS = 10_000


LevelIndex = dict[tuple[str, str], Level]  # (factor, level) -> Level


def level_index(matrix: Matrix) -> LevelIndex:
    return {(f.name, lv.name): lv for f in matrix.factors for lv in f.levels}


def make_cell(levels: Levels, index: LevelIndex) -> Cell:
    """The cell of these levels, with every level's assignments merged into one env per role
    (factors never share a variable, except flag factors editing one args variable, one flag
    each: config checks that, and their edits merge sorted, so the merge order does not matter)."""
    env: dict[str, dict[str, CellValue]] = {}
    for key in levels:
        for role, assignments in index[key].env.items():
            mine = env.setdefault(role, {})
            for var, value in assignments.items():
                before = mine.get(var)
                if isinstance(before, ArgsEdit) and isinstance(value, ArgsEdit):
                    value = before.merged(value)
                mine[var] = value
    return Cell(levels, env)


def hunt_cell(matrix: Matrix, config: int) -> Cell:
    """The cell of a hunt configuration (a bit mask: bit i set, flag i at its failing level)."""
    assert matrix.hunt is not None
    return make_cell(matrix.hunt.levels(config), level_index(matrix))


def client_values(cell: Cell, index: LevelIndex) -> dict[str, str]:
    """The repro placeholders the cell's client factors fill (e.g. {concurrency: "32"})."""
    out: dict[str, str] = {}
    for key in cell.levels:
        out.update(index[key].client)
    return out


def expected_env(
    assignments: Mapping[str, CellValue], keys: frozenset[str], original: Mapping[str, str]
) -> dict[str, EnvValue]:
    """A role's complete env in a cell: each key the matrix mentions, with the cell's value, or
    else the value the original file gives it (None = unset, as originally). An args variable
    holds its original value with the cell's flags set (core.argsvar)."""
    out: dict[str, EnvValue] = {k: original.get(k) for k in sorted(keys)}
    out.update(resolve(assignments, original))
    return out


def cell_count(matrix: Matrix) -> int:
    """Size of the product before exclude/include, without building it."""
    return math.prod(len(axis[0][1]) for axis in _axes(matrix))


def expand(matrix: Matrix) -> list[Cell]:
    """Cells of the matrix: product of axes, minus excludes, plus includes."""
    _check_product(matrix)
    kept = _product(matrix)
    _check_cells(matrix, len(kept) + len(matrix.include))
    index = level_index(matrix)
    cells = [make_cell(levels, index) for levels in kept]
    present = set(cells)
    for i, sel in enumerate(matrix.include):
        cell = make_cell(tuple((f.name, sel[f.name]) for f in matrix.factors), index)
        if cell in present:
            raise matrix.source.error(
                ("include", i),
                f"cell {cell.id} is already in the matrix",
                "include only adds cells that the product or exclude left out",
            )
        cells.append(cell)
        present.add(cell)
    if not cells:
        raise matrix.source.error(("exclude",), "every cell is excluded: nothing to run")
    base = baseline_cell(matrix, index)
    if base not in present:
        raise matrix.source.error(
            ("baseline",),
            f"the baseline cell {base.id} is not in the matrix",
            "it was excluded or is not a combination of the zips",
        )
    return cells


def _check_product(matrix: Matrix) -> None:
    """Refuse a product too large to expand (config checks it at its line for a matrix it reads)."""
    total = cell_count(matrix) * matrix.replicates
    if total > MAX_TRIALS:
        raise ConfigError(
            f"the matrix expands to {total:,} trials (over {MAX_TRIALS:,})",
            file=matrix.path,
            path="factors",
            hint="split it, use zips, or exclude combinations",
        )
    if cell_count(matrix) > MAX_PRODUCT:
        raise matrix.source.error(
            ("factors",),
            f"the factors' product has {cell_count(matrix):,} cells (over {MAX_PRODUCT:,}, before exclude)",
            "split it or use zips; to find which of many flags matter, write a hunt (orch hunt)",
        )


def _check_cells(matrix: Matrix, cells: int) -> None:
    """Refuse more cells than a report can compare (counted before any cell's env is built)."""
    if cells > MAX_CELLS:
        raise matrix.source.error(
            ("exclude",) if matrix.exclude else ("factors",),
            f"the matrix has {cells:,} cells (over {MAX_CELLS:,}: a report of more cannot be built in reasonable time)",
            "split it, use zips, or exclude combinations; to find which of many flags matter, write a hunt (orch hunt)",
        )


def baseline_cell(matrix: Matrix, index: LevelIndex | None = None) -> Cell:
    return make_cell(
        tuple((f.name, matrix.baseline[f.name]) for f in matrix.factors),
        level_index(matrix) if index is None else index,
    )


@dataclass(frozen=True)
class RestartCost:
    """Units restarted going from one cell to another, as signatures: the cost from a to b is
    the sum of weights[d] over the dimensions d where b's signature is set (>= 0) and differs
    from a's. With inventory roles as dimensions (a signature numbers the distinct envs a cell
    gives each role, -1 for none; a weight is the role's unit count), that is the units of every
    role whose env b sets differently. Signatures, not a function of two cells: the min-restarts
    path compares each cell with every other, and arrays do that a thousand times faster."""

    signature: Callable[[Cell], tuple[int, ...]]
    weights: tuple[int, ...]

    def __call__(self, a: Cell, b: Cell) -> int:
        sa, sb = self.signature(a), self.signature(b)
        return sum(w for w, x, y in zip(self.weights, sa, sb, strict=True) if y >= 0 and x != y)


def factors_cost(matrix: Matrix) -> RestartCost:
    """Without an inventory: how many factors differ."""
    return RestartCost(lambda c: _level_positions(matrix, c), (1,) * len(matrix.factors))


def _level_positions(matrix: Matrix, cell: Cell) -> tuple[int, ...]:
    return tuple(matrix.factor(f).level_names.index(lv) for f, lv in cell.levels)


@dataclass(frozen=True)
class Ordering:
    """A sweep's order as positions: trial i runs pool[cells[i]] in replicate round rounds[i].
    Positions, not objects: make_plan walks 100,000s of them, and ints are cheap to compare."""

    pool: list[Cell]  # the cells (distinct), then the baseline if the cells lack it
    baseline: int  # position of the baseline cell in pool
    rounds: list[int]
    cells: list[int]


def order_trials(
    matrix: Matrix,
    cells: list[Cell],
    seed: int,
    replicates: int | None = None,
    *,
    order: str | None = None,
    cost: RestartCost | None = None,
) -> list[Trial]:
    """The trials of `order_positions`, as Trial values."""
    o = order_positions(matrix, cells, seed, replicates, order=order, cost=cost)
    return [Trial(i, r, o.pool[c], c == o.baseline) for i, (r, c) in enumerate(zip(o.rounds, o.cells, strict=True))]


def order_positions(
    matrix: Matrix,
    cells: list[Cell],
    seed: int,
    replicates: int | None = None,
    *,
    order: str | None = None,
    cost: RestartCost | None = None,
) -> Ordering:
    """Replicate rounds in the matrix's order; randomized rounds are seeded permutations;
    min-restarts rounds are a greedy shortest path through the cells by restart cost.

    The order of a seed never changes between orch versions (a resumed run rebuilds its plan and
    refuses to go on if it differs): round r is `random.Random(seed * 1_000_003 + r).shuffle`
    of the declared cells (plus the extra adaptive baselines at the end)."""
    rounds = replicates if replicates is not None else matrix.replicates
    order = order or matrix.order
    pool, base = _pool(matrix, cells)
    extra_baseline = (matrix.adaptive.baseline_runs - 1) if matrix.adaptive else 0
    declared = list(range(len(cells))) + [base] * extra_baseline  # adaptive: more baseline sessions
    greedy = order == "min-restarts" and len(declared) <= GREEDY_LIMIT
    # beyond GREEDY_LIMIT cells the greedy path (quadratic) is too slow; the declared product
    # order, which changes the first factor least often, is the fallback
    signatures = _signatures(pool, cost or factors_cost(matrix)) if greedy else None
    rng = random.Random()
    swaps = _swaps(len(declared))
    out = Ordering(pool, base, [], [])
    here = base
    paths: dict[int, list[int]] = {}  # the greedy path depends only on where it starts: one per start
    for r in range(rounds):
        block = list(declared)
        if order == "randomized":
            rng.seed(seed * 1_000_003 + r)  # the same state as random.Random(seed * 1_000_003 + r)
            _shuffle(rng.getrandbits, block, swaps)
        elif signatures is not None:
            if here not in paths:
                paths[here] = _fewest_restarts(block, here, *signatures)
            block = paths[here]
        out.rounds.extend([r] * len(block))
        out.cells.extend(block)
        here = block[-1]
    return out


def _swaps(n: int) -> list[tuple[int, int, int]]:
    """(i, i + 1, bits of i + 1) for each step of a Fisher-Yates shuffle of n items."""
    return [(i, i + 1, (i + 1).bit_length()) for i in range(n - 1, 0, -1)]


def _shuffle(getrandbits: Callable[[int], int], block: list[int], swaps: list[tuple[int, int, int]]) -> None:
    """random.Random.shuffle, spelled out: the same Fisher-Yates walk drawing each index by
    rejection on getrandbits (CPython's algorithm since 3.2), so the same permutation for the
    same seed (pinned by tests), at half the cost; and the order now rests only on the
    Mersenne Twister's output, not on how a Python release implements shuffle."""
    for i, bound, bits in swaps:
        j = getrandbits(bits)
        while j >= bound:
            j = getrandbits(bits)
        block[i], block[j] = block[j], block[i]


def _pool(matrix: Matrix, cells: list[Cell]) -> tuple[list[Cell], int]:
    """The cells and the baseline's position among them (appended if absent, which expand never
    allows: then it only serves the extra adaptive baseline runs)."""
    base = baseline_cell(matrix)
    pool = list(cells)
    try:
        return pool, pool.index(base)
    except ValueError:
        return pool + [base], len(pool)


def _signatures(pool: list[Cell], cost: RestartCost) -> tuple[Any, Any]:
    import numpy as np  # only min-restarts needs it: keep it out of every other command's start-up

    return np.array([cost.signature(c) for c in pool], dtype=np.int64), np.array(cost.weights, dtype=np.int64)


def _fewest_restarts(block: list[int], start: int, signatures: Any, weights: Any) -> list[int]:
    """Greedy nearest neighbour from `start`: always go to the cheapest remaining cell (ties in
    declared order: argmin takes the first). Not optimal in general, but within a small factor;
    for two-level factors it walks a Gray-code-like path. Cells are positions in the pool
    (distinct cells, distinct positions); the costs from here to every remaining cell are one
    array operation (RestartCost)."""
    import numpy as np

    left, path, here = list(block), [], start
    if start in left:
        left.remove(start)
        path.append(start)
    while left:
        candidates = signatures[left]
        costs = ((candidates != signatures[here]) & (candidates >= 0)) @ weights
        here = left.pop(int(np.argmin(costs)))
        path.append(here)
    return path


def warnings_for(matrix: Matrix, total: int) -> list[str]:
    """What to say about a plan of `total` trials before it runs (the count after exclude)."""
    if total > WARN_TRIALS:
        return [f"{matrix.path}: this sweep has {total:,} trials; check the estimate with `orch plan`"]
    return []


def _axes(matrix: Matrix) -> list[list[tuple[str, list[str]]]]:
    """Each axis is a list of (factor, level names) that move together."""
    zipped = {name: group for group in matrix.zips for name in group}
    axes: list[list[tuple[str, list[str]]]] = []
    done: set[str] = set()
    for f in matrix.factors:
        if f.name in done:
            continue
        group = zipped.get(f.name, (f.name,))
        axes.append([(name, list(matrix.factor(name).level_names)) for name in group])
        done.update(group)
    return axes


def _product(matrix: Matrix) -> list[Levels]:
    """The levels of every cell of the product that no `exclude` selector matches, in declared order."""
    order = {f.name: i for i, f in enumerate(matrix.factors)}
    axes = _axes(matrix)
    picks = np.indices([len(axis[0][1]) for axis in axes]).reshape(len(axes), -1).T  # itertools.product's order
    if matrix.exclude:
        picks = picks[~_excluded(axes, picks, matrix.exclude)]
    cells = []
    for row in picks.tolist():
        chosen = [(name, levels[i]) for axis, i in zip(axes, row, strict=True) for name, levels in axis]
        cells.append(tuple(sorted(chosen, key=lambda fl: order[fl[0]])))
    return cells


def _excluded(axes: list[list[tuple[str, list[str]]]], picks: np.ndarray, selectors: tuple[dict[str, str], ...]) -> Any:
    """Which rows of `picks` (cells x axes: each axis's level position) some selector matches.

    Selectors are grouped by the axes they name, and each group is one vectorised membership test
    of the cells' mixed-radix keys: thousands of selectors over 65,536 cells take well under a
    second, where testing each cell against each selector took minutes."""
    where = {name: (a, levels) for a, axis in enumerate(axes) for name, levels in axis}
    groups: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for sel in selectors:
        wanted: dict[int, int] = {}
        for name, level in sel.items():
            a, levels = where[name]
            if level not in levels or wanted.setdefault(a, levels.index(level)) != levels.index(level):
                break  # matches no cell: an unknown level, or two zipped factors at different positions
        else:
            named = tuple(sorted(wanted))
            groups.setdefault(named, set()).add(tuple(wanted[a] for a in named))
    out = np.zeros(len(picks), dtype=bool)
    for named, values in groups.items():
        if not named:  # an empty selector matches every cell
            return np.ones(len(picks), dtype=bool)
        radix = [len(axes[a][0][1]) for a in named]
        weights = [math.prod(radix[i + 1 :]) for i in range(len(named))]
        keys = picks[:, list(named)] @ np.array(weights, dtype=np.int64)
        out |= np.isin(keys, [sum(x * w for x, w in zip(v, weights, strict=True)) for v in values])
    return out
