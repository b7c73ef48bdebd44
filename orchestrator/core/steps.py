"""A sweep's plan as data: one Step per trial, in run order, and the Plan that holds them.

core.plan makes them (cells x inventory -> steps), core.huntplan a hunt's first wave; this module
only says what they are (and draws the seed of a plan whose matrix and command line name none,
the one thing both plans share), so the sweep (runner, trial phases, step sources) and the stores
that record a plan depend on the types and not on the planning: a short chain of imports under them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import NamedTuple

from orchestrator.core.inventory import Testbed
from orchestrator.core.model import Cell, CellEnv, Matrix, Trial

RoleEnv = CellEnv  # role -> VAR -> value (None = removed); read-only, the cell's own


class Step(NamedTuple):
    """One trial with what it needs. A named tuple (immutable, and cheap to build: a plan holds
    one per trial, and `orch resume` rebuilds 100,000 of them before it may go on)."""

    trial: Trial
    env: RoleEnv  # the cell's own assignments per role (what the journal shows), shared by its trials
    # hosts (keys of Testbed.hosts: the role, for a role of one host) whose role's complete env
    # (original + assignments, see Matrix.mentioned) differs from the previous trial's: a role the
    # previous cell set and this one does not is among them; every host of such a role
    changed_roles: tuple[str, ...]
    restart_units: tuple[tuple[str, str], ...]  # (host key, unit) in restart order
    wait_roles: tuple[str, ...]  # hosts whose health is awaited (restarted + dependants)
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


def new_seed() -> int:
    """A plan's seed when neither the command line nor the matrix names one (run.json records it)."""
    return secrets.randbelow(2**31)
