"""Where a runner takes its next trial from: the plan's trials not yet done, round by round,
shared by every runner of a parallel sweep (an adaptive source, in adaptive.py, also drops the
trials of decided cells; both hand a testbed the cells it ran least, by one rule: _balanced)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.core.model import Cell
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step

if TYPE_CHECKING:
    from orchestrator.core.sequential import Decision

OnDecision = Callable[[str, "Decision"], None]  # a cell decided: journal and show why it stops


class StepSource:
    """Hands out the planned trials not yet done: in plan order to one runner, round by round to
    several runners working in parallel on their own testbeds (thread-safe).

    Several testbeds are never identical (a slower GPU, another driver). Handed out strictly in plan
    order to whichever testbed is free, a round's k-th trial went to the same testbed every round
    when the testbeds ran at one pace, and with `order: sequential` that is the same cell (in a
    declared 2x2x2 sweep on two testbeds, one factor's levels split exactly by testbed): a testbed
    difference read as that factor's effect, in 17-61% of A/A reports (an adaptive design's too:
    15-29%; bench/bench_handout.py). So once several testbeds take trials, a testbed gets, from
    the round being handed out (the next BALANCE_WINDOW trials of it), the first trial of a cell it
    has run least: every cell's trials spread over the testbeds (a testbed twice as fast runs about
    two thirds of each cell's), and a testbed difference is shared by the cells instead of aliased
    with one of them."""

    shrinks = False  # True when trials may be dropped on the way (adaptive stopping)
    BALANCE_WINDOW = 64  # trials looked at per hand-out (a round can hold thousands of cells)

    def __init__(
        self, steps: "tuple[Step, ...] | list[Step]", done: set[int], *, fewest_restarts: bool = False
    ) -> None:
        """fewest_restarts (`order: min-restarts`): of the cells a testbed ran least, it takes the one
        that restarts fewest of its roles after its own last trial, not the first in plan order."""
        self._left = [s for s in steps if s.trial.index not in done]
        self._fewest_restarts = fewest_restarts
        self._last: dict[str, Step] = {}  # testbed -> the trial last handed to it
        self._taken = [False] * len(self._left)
        self._next = 0  # the first trial not handed out yet
        self._handed = 0
        self._ran: dict[tuple[str, Cell], int] = {}  # (testbed, cell) -> trials handed to it
        self._testbeds: set[str] = set()
        self._lock = threading.Lock()

    def next(self, testbed: str = "") -> "Step | None":
        """The next trial for `testbed` (the runner's; "" when it does not matter)."""
        with self._lock:
            if not self._front():
                return None
            self._testbeds.add(testbed)
            return self._take(self._balanced(testbed) if len(self._testbeds) > 1 else self._next, testbed)

    def _front(self) -> bool:
        """Moves `_next` to the first trial not handed out yet; False when none is left."""
        while self._next < len(self._left) and self._taken[self._next]:
            self._next += 1
        return self._next < len(self._left)

    def _usable(self, step: Step) -> bool:
        """Whether `step` may be handed out now (every trial of a fixed design may)."""
        return True

    def _take(self, at: int, testbed: str) -> Step:
        step = self._left[at]
        self._taken[at] = True
        self._handed += 1
        key = (testbed, step.trial.cell)
        self._ran[key] = self._ran.get(key, 0) + 1
        self._last[testbed] = step
        return step

    def _balanced(self, testbed: str) -> int:
        """Index of the first usable trial, in the round being handed out, of a cell `testbed` ran
        least (`_next` itself, the first trial not handed out, must be usable). Every source calls
        this one rule: an adaptive design's testbeds too (there a stopped cell's trials are not usable).
        With fewest_restarts, ties go to the trial restarting fewest roles after the testbed's last."""
        first = self._left[self._next].trial.round
        last = self._last.get(testbed) if self._fewest_restarts else None
        best, fewest = self._next, None
        for i in range(self._next, min(len(self._left), self._next + self.BALANCE_WINDOW)):
            step = self._left[i]
            if step.trial.round != first:
                break
            if self._taken[i] or not self._usable(step):
                continue
            cost = (self._ran.get((testbed, step.trial.cell), 0), 0 if last is None else restarted_roles(last, step))
            if fewest is None or cost < fewest:
                best, fewest = i, cost
        return best

    def close(self) -> None:
        with self._lock:
            self._next = len(self._left)
            self._handed = len(self._left)

    def remaining(self) -> int:
        """Trials not handed out yet."""
        with self._lock:
            return len(self._left) - self._handed

    def record(self, record: "TrialRecord") -> None:
        """A trial finished (a fixed design needs nothing from it)."""


def restarted_roles(before: Step, after: Step) -> int:
    """Roles whose env differs between two trials: those a testbed restarts going from one to the
    other (the cell's own assignments per role: equal cells, equal envs)."""
    return sum(before.env.get(role) != after.env.get(role) for role in {*before.env, *after.env})


SourceFactory = Callable[[OnDecision], StepSource]
"""Makes a sweep's step source once its runners exist (an adaptive source tells a runner when a cell
is decided). The API chooses the design (fixed, adaptive, hunt); the session and the runner only
take trials from what it makes."""
