"""How long `orch queue run` waits for a store it cannot reach (team.queue._Patience), on a fake
clock: until --until's deadline, and without one for NO_DEADLINE_OUTAGE_S (a database restart of a
few minutes must not end a night, nor a dead database hold a runner for ever)."""

from __future__ import annotations

import pytest
from helpers.fakeclock import FakeClock

from orchestrator.team.queue import NO_DEADLINE_OUTAGE_S, OUTAGE_MAX_S, _Patience
from orchestrator.team.queuestore import QueueError, QueueUnavailable


def unreachable_for(seconds: float, clock: FakeClock) -> object:
    until = clock.now + seconds

    def op() -> str:
        if clock.now < until:
            raise QueueUnavailable("postgresql://queue: connection refused")
        return "claimed"

    return op


def test_without_a_deadline_an_outage_shorter_than_the_limit_is_waited_out() -> None:
    clock, said = FakeClock(1_000.0), []
    patience = _Patience(said.append, clock, clock.sleep, deadline=None)
    assert patience(unreachable_for(NO_DEADLINE_OUTAGE_S - 300, clock), "claim an item") == "claimed"  # type: ignore[arg-type]
    assert said[0].startswith("cannot claim an item: postgresql://queue: connection refused")
    assert said[-1] == "the queue answers again (claim an item)" and len(said) == 2
    assert max(clock.slept) <= OUTAGE_MAX_S


def test_without_a_deadline_a_longer_outage_gives_up_at_the_limit() -> None:
    clock = FakeClock(1_000.0)
    start = clock.now
    patience = _Patience(lambda line: None, clock, clock.sleep, deadline=None)
    with pytest.raises(QueueError, match="gave up trying to record a result at the deadline"):
        patience(unreachable_for(10 * NO_DEADLINE_OUTAGE_S, clock), "record a result")  # type: ignore[arg-type]
    assert clock.now - start == pytest.approx(NO_DEADLINE_OUTAGE_S)


def test_a_deadline_ends_the_wait_at_the_deadline() -> None:
    clock = FakeClock(1_000.0)
    patience = _Patience(lambda line: None, clock, clock.sleep, deadline=clock.now + 120)
    with pytest.raises(QueueError):
        patience(unreachable_for(NO_DEADLINE_OUTAGE_S, clock), "claim an item")  # type: ignore[arg-type]
    assert clock.now == 1_120.0
