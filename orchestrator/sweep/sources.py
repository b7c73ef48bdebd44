"""Where a runner takes its next trial from: the plan's trials not yet done, in plan order,
shared by every runner of a parallel sweep (an adaptive source, in adaptive.py, also drops the
trials of decided cells)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step

if TYPE_CHECKING:
    from orchestrator.core.sequential import Decision

OnDecision = Callable[[str, "Decision"], None]  # a cell decided: journal and show why it stops


class StepSource:
    """Hands out the planned trials not yet done, in plan order, to one runner or to several
    runners working in parallel on their own testbeds (thread-safe)."""

    shrinks = False  # True when trials may be dropped on the way (adaptive stopping)

    def __init__(self, steps: "tuple[Step, ...] | list[Step]", done: set[int]) -> None:
        self._left = [s for s in steps if s.trial.index not in done]
        self._next = 0
        self._lock = threading.Lock()

    def next(self) -> "Step | None":
        with self._lock:
            if self._next >= len(self._left):
                return None
            step = self._left[self._next]
            self._next += 1
            return step

    def close(self) -> None:
        with self._lock:
            self._next = len(self._left)

    def remaining(self) -> int:
        """Trials not handed out yet."""
        with self._lock:
            return len(self._left) - self._next

    def record(self, record: "TrialRecord") -> None:
        """A trial finished (a fixed design needs nothing from it)."""


SourceFactory = Callable[[OnDecision], StepSource]
"""Makes a sweep's step source once its runners exist (an adaptive source tells a runner when a cell
is decided). The API chooses the design (fixed, adaptive, hunt); the session and the runner only
take trials from what it makes."""
