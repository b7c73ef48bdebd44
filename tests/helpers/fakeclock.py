"""A clock a test moves by hand: what orch's waits take as `clock` and `sleep`, so a wait of
minutes (a store outage, a busy testbed) is checked in microseconds, and exactly."""

from __future__ import annotations


class FakeClock:
    """`clock()` is `now`; `sleep(s)` records s and moves `now` by it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
