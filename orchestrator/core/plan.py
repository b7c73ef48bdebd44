"""PURE: cells x inventory -> the ordered steps of a sweep; what `orch plan` and `--dry-run` show.

The plan says, for every trial, what each role's env file must hold for the cell, which roles'
env differs from the previous trial (their units restart; others stay up), and an estimate of
the time it takes. A cell's env is the ORIGINAL file plus the cell's own assignments: a variable
that some level mentions and this cell does not is back to its original value, so a role whose
previous cell set something and whose new cell sets nothing has changed (and restarts).
The runner recomputes the restarts from the real files at run time (a host may already hold a
cell's values); the plan is the expectation, the journal is the truth.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.config import check_against_inventory
from orchestrator.core.gcpause import gc_paused
from orchestrator.core.inventory import Testbed
from orchestrator.core.matrix import Ordering, RestartCost, expand, order_positions
from orchestrator.core.model import Cell, CellValue, Matrix, Trial
from orchestrator.core.startorder import dependants, restart_order
from orchestrator.core.steps import Plan, RoleEnv, Step, new_seed


def make_plan(
    matrix: Matrix,
    testbed: Testbed,
    seed: int | None = None,
    replicates: int | None = None,
    *,
    order: str | None = None,
) -> Plan:
    check_against_inventory(matrix, testbed)
    seed = seed if seed is not None else (matrix.seed if matrix.seed is not None else new_seed())
    reps = replicates if replicates is not None else matrix.replicates
    cells = expand(matrix)
    ordering = order_positions(matrix, cells, seed, reps, order=order, cost=_restart_cost(matrix, testbed))
    with gc_paused():  # 100,000s of tuples, no cycles: the collector would rescan them all, often
        steps = _steps(matrix, testbed, ordering, [c.env for c in ordering.pool])
    return Plan(matrix, testbed, seed, reps, tuple(cells), steps)


Wave = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...], float]  # a Step's restart fields


def _steps(matrix: Matrix, testbed: Testbed, ordering: Ordering, envs: list[RoleEnv]) -> tuple[Step, ...]:
    """One Step per trial, with the restart wave _waves gives it."""
    pool, base = ordering.pool, ordering.baseline
    new = tuple.__new__  # a NamedTuple's own __new__ is a Python function: this builds the same value faster
    waves = _waves(matrix, testbed, ordering, envs)
    return tuple(
        new(Step, (new(Trial, (i, r, pool[c], c == base)), envs[c], *wave))
        for i, (r, c, wave) in enumerate(zip(ordering.rounds, ordering.cells, waves, strict=True))
    )


def restart_count(
    matrix: Matrix, testbed: Testbed, seed: int, replicates: int, order: str, cells: Sequence[Cell] | None = None
) -> int:
    """Plan.restart_count of the plan this order would make, without building its steps (`orch
    plan` weighs every order: three more plans of 800,000 steps took seconds and a gigabyte).
    `cells`: the matrix's, when the caller has them (Plan.cells): expanding 4,096 cells again for
    each order took ~0.6 s each."""
    cells = list(cells) if cells is not None else expand(matrix)
    ordering = order_positions(matrix, cells, seed, replicates, order=order, cost=_restart_cost(matrix, testbed))
    return sum(len(wave[1]) for wave in _waves(matrix, testbed, ordering, [c.env for c in ordering.pool]))


def _waves(matrix: Matrix, testbed: Testbed, ordering: Ordering, envs: list[RoleEnv]) -> list[Wave]:
    """The restart wave of each trial. Computed once per pair of consecutive cells (a sweep
    repeats the same few transitions thousands of times) and once per set of changed roles."""
    n = len(ordering.pool)
    by_pair: dict[int, Wave] = {}  # (previous position + 1) * n + position -> wave
    by_roles: dict[frozenset[str], Wave] = {}
    waves: list[Wave] = []
    previous = -1
    for c in ordering.cells:
        key = (previous + 1) * n + c
        wave = by_pair.get(key)
        if wave is None:
            changed = _changed(envs[previous] if previous >= 0 else None, envs[c])
            wave = by_roles.get(changed) or by_roles.setdefault(changed, _wave(matrix, testbed, changed))
            by_pair[key] = wave
        waves.append(wave)
        previous = c
    return waves


def resumed_steps(matrix: Matrix, testbed: Testbed, left: Sequence[Step], *, unknown: bool) -> tuple[Step, ...]:
    """The trials a resume runs, with the restarts it makes: each against the trial the resume ran
    before it (the trials between them in the plan are done). The first restarts every host of a
    role the matrix edits when what their units run is `unknown` (the stopped run's backup is taken
    up: its trials may have left any cell's env there), else what its cell sets, as a run's first."""
    out: list[Step] = []
    previous: RoleEnv | None = None
    every = frozenset(role for role in matrix.roles if role in testbed.roles)
    for step in left:
        changed = every if unknown and previous is None else _changed(previous, step.env)
        ordered, units, waits, estimate = _wave(matrix, testbed, changed)
        out.append(step._replace(changed_roles=ordered, restart_units=units, wait_roles=waits, estimate_s=estimate))
        previous = step.env
    return tuple(out)


def _changed(before: RoleEnv | None, after: RoleEnv) -> frozenset[str]:
    """Roles whose complete env differs. Every cell's complete env of a role holds the same keys
    (those the matrix mentions), so two are equal exactly when the cells' own assignments are
    (a role a cell does not mention has none). The first trial changes what its cell sets."""
    if before is None:
        return frozenset(role for role, a in after.items() if a)
    roles = after.keys() | before.keys()
    return frozenset(role for role in roles if after.get(role, _NONE) != before.get(role, _NONE))


_NONE: dict[str, CellValue] = {}


def _wave(matrix: Matrix, testbed: Testbed, changed: frozenset[str]) -> Wave:
    """Every host of each changed role restarts (all nodes of a multi-node instance together)."""
    ordered = restart_order(testbed, {key for role in changed for key in testbed.roles.get(role, ())})
    units = tuple((role, u.name) for role in ordered for u in testbed.hosts[role].units)
    waits = tuple(restart_order(testbed, dependants(testbed, set(ordered))))
    startup = max((testbed.hosts[r].startup_estimate_s for r in ordered), default=0.0)
    return tuple(ordered), units, waits, startup + matrix.repro.expected_duration_s


def _restart_cost(matrix: Matrix, testbed: Testbed) -> RestartCost:
    """Units restarted going from cell a to cell b: those of every role whose complete env
    differs. A cell's signature numbers its env per role (equal envs, equal numbers); a role the
    matrix mentions and the cell does not has the empty env (back to the original), a role no
    level mentions is -1 (never restarted)."""
    roles = list(testbed.roles)
    mentioned = matrix.roles
    classes: list[dict[frozenset[tuple[str, CellValue]], int]] = [{} for _ in roles]

    def signature(cell: Cell) -> tuple[int, ...]:
        env = cell.env
        return tuple(
            -1 if r not in mentioned else known.setdefault(frozenset(env.get(r, _NONE).items()), len(known))
            for r, known in zip(roles, classes, strict=True)
        )

    units = {r: sum(len(testbed.hosts[k].units) for k in keys) for r, keys in testbed.roles.items()}
    return RestartCost(signature, tuple(units[r] for r in roles))
