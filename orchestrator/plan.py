"""PURE: cells x inventory -> the ordered steps of a sweep; what `orch plan` and `--dry-run` show.

The plan says, for every trial, what each role's env file must hold for the cell, which roles'
env differs from the previous trial (their units restart; others stay up), and an estimate of
the time it takes. The runner recomputes the restarts from the real files at run time (a host
may already hold a cell's values); the plan is the expectation, the journal is the truth.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from .config import EnvValue, Level, Matrix, Testbed, check_against_inventory
from .matrix import Cell, Trial, baseline_cell, expand, order_trials

RoleEnv = dict[str, dict[str, EnvValue]]  # role -> VAR -> value (None = removed)


@dataclass(frozen=True)
class Step:
    trial: Trial
    env: RoleEnv  # the cell's assignments per role
    changed_roles: tuple[str, ...]  # roles whose env differs from the previous trial
    restart_units: tuple[tuple[str, str], ...]  # (role, unit) in restart order
    wait_roles: tuple[str, ...]  # roles whose health is awaited (restarted + dependants)
    estimate_s: float


@dataclass(frozen=True)
class Plan:
    matrix: Matrix
    testbed: Testbed
    seed: int
    replicates: int
    cells: tuple[Cell, ...]
    steps: tuple[Step, ...]

    @property
    def restart_count(self) -> int:
        return sum(len(s.restart_units) for s in self.steps)

    @property
    def estimated_duration_s(self) -> float:
        return sum(s.estimate_s for s in self.steps)

    @property
    def baseline(self) -> Cell:
        return baseline_cell(self.matrix)


def new_seed() -> int:
    return secrets.randbelow(2**31)


def make_plan(matrix: Matrix, testbed: Testbed, seed: int | None = None, replicates: int | None = None,
              *, order: str | None = None) -> Plan:
    check_against_inventory(matrix, testbed)
    seed = seed if seed is not None else (matrix.seed if matrix.seed is not None else new_seed())
    reps = replicates if replicates is not None else matrix.replicates
    cells = expand(matrix)
    steps, previous = [], None
    index = {(f.name, lv.name): lv for f in matrix.factors for lv in f.levels}
    envs = {c: cell_env(matrix, c, index) for c in cells}
    waves: dict[frozenset[str], tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...], float]] = {}

    def cost(a: Cell, b: Cell) -> int:
        ea, eb = envs.get(a) or cell_env(matrix, a), envs[b]
        return sum(len(testbed.hosts[r].units) for r in eb if ea.get(r) != eb[r])

    for trial in order_trials(matrix, cells, seed, reps, order=order, cost=cost):
        env = envs[trial.cell]
        steps.append(_step(matrix, testbed, trial, env, previous, waves))
        previous = env
    return Plan(matrix, testbed, seed, reps, tuple(cells), tuple(steps))


def cell_env(matrix: Matrix, cell: Cell, index: dict[tuple[str, str], Level] | None = None) -> RoleEnv:
    """Merge every factor's level assignments into one env per role."""
    env: RoleEnv = {}
    for factor_name, level_name in cell.levels:
        level = index[(factor_name, level_name)] if index else matrix.factor(factor_name).level(level_name)
        for role, assignments in level.env.items():
            env.setdefault(role, {}).update(assignments)
    return env


def restart_order(testbed: Testbed, roles: set[str]) -> list[str]:
    """Roles in dependency order: a role comes after every role in its `after` list."""
    ordered: list[str] = []

    def visit(role: str) -> None:
        if role in ordered:
            return
        for dep in testbed.hosts[role].after:
            if dep in roles:
                visit(dep)
        ordered.append(role)

    for role in testbed.hosts:
        if role in roles:
            visit(role)
    return ordered


def dependants(testbed: Testbed, roles: set[str]) -> set[str]:
    """Roles whose readiness depends on any of `roles` (e.g. the router on its workers)."""
    out = set(roles)
    changed = True
    while changed:
        changed = False
        for role, host in testbed.hosts.items():
            if role not in out and out.intersection(host.after):
                out.add(role)
                changed = True
    return out


def _step(matrix: Matrix, testbed: Testbed, trial: Trial, env: RoleEnv, previous: RoleEnv | None,
          cache: dict) -> Step:  # type: ignore[type-arg]
    changed = frozenset(r for r in env if previous is None or env[r] != previous.get(r))
    if changed not in cache:  # the same few role sets recur across thousands of trials
        ordered = restart_order(testbed, set(changed))
        units = tuple((role, u.name) for role in ordered for u in testbed.hosts[role].units)
        waits = tuple(restart_order(testbed, dependants(testbed, set(changed))))
        startup = max((testbed.hosts[r].startup_estimate_s for r in ordered), default=0.0)
        cache[changed] = (tuple(ordered), units, waits, startup + matrix.repro.expected_duration_s)
    ordered_t, units_t, waits_t, estimate = cache[changed]
    return Step(trial, env, ordered_t, units_t, waits_t, estimate)


def env_diff(before: dict[str, EnvValue], after: dict[str, EnvValue]) -> dict[str, tuple[EnvValue, EnvValue]]:
    """VAR -> (old, new) for variables whose value changes."""
    keys = list(dict.fromkeys([*before, *after]))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}
