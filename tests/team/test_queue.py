"""The queue database and the queue loop, without starting sweeps (a fake SweepFn stands in).

Claims are also raced by two real processes, since that is what SQLite's locking must survive.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.team.queue import (
    Claimer,
    Queue,
    QueueError,
    QueueItem,
    SweepOutcome,
    item_state_after,
    parse_until,
    run_queue,
)
from orchestrator.team.queuestore import process_start

from .helpers import FakeSweeps, add


@pytest.fixture
def queue(tmp_path: Path):
    q = Queue.in_reports(tmp_path / "reports")
    yield q
    q.close()


def dead_claimer() -> Claimer:
    """This host and pid, but another start time: what a recycled pid of a dead runner looks like."""
    me = Claimer.current()
    return Claimer(me.host, me.pid, me.start + 1)


def test_items_are_taken_by_priority_then_age(queue: Queue) -> None:
    a, b, c, d = add(queue, "a"), add(queue, "b", 5), add(queue, "c"), add(queue, "d", 5)
    assert [i.id for i in queue.items()] == [b.id, d.id, a.id, c.id]
    claimed = [queue.claim() for _ in range(5)]
    assert [i.id if i else None for i in claimed] == [b.id, d.id, a.id, c.id, None]
    assert all(queue.get(i.id).state == "running" for i in (a, b, c, d))
    assert queue.get(a.id).claimed_by == Claimer.current().encode()


def test_claim_skips_given_items_and_finished_ones(queue: Queue) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    queue.finish(queue.claim().id, "completed")  # type: ignore[union-attr]
    assert queue.claim(frozenset({b.id})) is None
    assert queue.get(a.id).state == "completed" and queue.get(b.id).state == "queued"


def test_item_fields_round_trip(queue: Queue) -> None:
    item = queue.add(Path("/m/x.yaml"), Path("/i/y.yaml"), "tb2", -3, ("https://h/1", "slack+https://h/2"))
    assert (item.matrix, item.inventory, item.testbed, item.priority) == ("/m/x.yaml", "/i/y.yaml", "tb2", -3)
    assert item.webhooks == ("https://h/1", "slack+https://h/2") and item.state == "queued"
    assert item.run_dir is None and item.message == "" and item.label == f"item {item.id} (x.yaml)"


@pytest.mark.process
def test_dead_claims_are_taken_back(queue: Queue, tmp_path: Path) -> None:
    """A runner killed with -9 leaves its items `running`; the next claim takes them back."""
    started, fresh = add(queue, "started"), add(queue, "fresh")
    run_dir = tmp_path / "reports" / "run-1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    runner = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start(runner.pid)
        assert start is not None
        for _ in (started, fresh):
            assert queue.claim(claimer=Claimer(socket.gethostname(), runner.pid, start)) is not None
        queue.set_run_dir(started.id, run_dir)
        assert queue.claim() is None  # its runner is alive: nothing to take
    finally:
        runner.kill()  # by PID: the process this test started
        runner.wait()
    # the next claim (by a live process) first takes both back, then picks by order again
    got = queue.claim()
    assert got is not None and got.id == started.id and got.run_dir == str(run_dir)
    assert queue.get(fresh.id).state == "queued" and "died" in queue.get(fresh.id).message
    queue.finish(got.id, "resumable")
    assert queue.get(started.id).state == "resumable"


def test_live_claims_are_left_alone(queue: Queue) -> None:
    a = add(queue, "a")
    assert queue.claim() is not None
    assert queue.claim() is None  # we are alive: our claim stands
    assert queue.get(a.id).state == "running"


def test_other_hosts_claims_are_presumed_alive() -> None:
    assert Claimer("some-other-controller", 1, 1).alive()
    assert not dead_claimer().alive()
    assert Claimer.current().alive()
    assert Claimer.decode(Claimer.current().encode()) == Claimer.current()


def test_remove(queue: Queue) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    assert queue.remove(b.id).id == b.id
    assert [i.id for i in queue.items()] == [a.id]
    queue.claim()
    with pytest.raises(UsageError, match=f"item {a.id} .* is running"):
        queue.remove(a.id)
    with pytest.raises(UsageError, match="no queue item 999") as exc:
        queue.remove(999)
    assert exc.value.exit_code == 2


@pytest.mark.process
def test_claims_race_between_processes(tmp_path: Path, queue: Queue) -> None:
    """Two processes claim as fast as they can from one database: every item exactly once."""
    n = 120
    for k in range(n):
        add(queue, f"m{k}")
    go = tmp_path / "go"
    script = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from orchestrator.team.queue import Queue
        q = Queue(Path({str(queue.path)!r}))
        Path(sys.argv[1]).touch()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        got = []
        while (item := q.claim()) is not None:
            got.append(item.id)
            time.sleep(0.002)  # a moment of work, so the other process gets the lock too
            q.finish(item.id, "completed")  # as a runner does (a claim left behind by an
                                            # exited process would rightly be taken back)
        print(" ".join(map(str, got)))
        """)
    ready = [tmp_path / f"ready-{k}" for k in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], stdout=subprocess.PIPE, text=True) for r in ready]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both are ready: they start claiming at the same moment
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    first, second = (set(map(int, o)) for o in outs)
    assert len(first) + len(second) == n, "an item was claimed twice"
    assert first | second == {i.id for i in queue.items()}
    assert {i.state for i in queue.items()} == {"completed"}
    assert first and second, "one process never got a claim in: no race was tested"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    q = Queue(tmp_path / "q.db")
    q._db.execute("PRAGMA user_version = 99")
    q.close()
    with pytest.raises(QueueError, match="schema version 99 is newer"):
        Queue(tmp_path / "q.db")


def test_read_only_open_of_a_missing_queue_fails_without_creating_it(tmp_path: Path) -> None:
    with pytest.raises(QueueError, match="cannot open the queue"):
        Queue(tmp_path / "nope.db", read_only=True)
    assert not (tmp_path / "nope.db").exists()


# ---------------------------------------------------------------------------- the loop
def test_loop_runs_everything_in_order_and_notifies(queue: Queue, tmp_path: Path) -> None:
    a, b, c = add(queue, "a"), add(queue, "b", 1), add(queue, "c")
    sweeps = FakeSweeps(tmp_path, {"a": ["completed"], "b": ["failed"], "c": ["completed"]})
    done: list[tuple[int, str, str]] = []
    result = run_queue(queue, sweeps, on_done=lambda i, o: done.append((i.id, i.state, o.status)))
    assert [c_[0] for c_ in sweeps.calls] == ["b", "a", "c"]
    assert done == [(b.id, "failed", "failed"), (a.id, "completed", "completed"), (c.id, "completed", "completed")]
    assert result.exit_code == 1 and not result.deadline_reached and not result.interrupted
    assert queue.get(a.id).run_dir == str(tmp_path / "reports" / "run-a")
    assert queue.get(b.id).message == "b failed" and queue.get(b.id).claimed_by is None


def test_loop_skips_a_busy_testbed_and_leaves_it_queued(queue: Queue, tmp_path: Path) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    sweeps = FakeSweeps(tmp_path, {"a": ["locked"], "b": ["completed"]})
    notes: list[str] = []
    result = run_queue(queue, sweeps, note=notes.append)
    assert [c[0] for c in sweeps.calls] == ["a", "b"]  # a once only: not retried in this pass
    assert queue.get(a.id).state == "queued" and queue.get(b.id).state == "completed"
    assert queue.get(a.id).message == ""  # put back by the loop, not taken back as a dead claim
    assert result.skipped_locked == [a.id] and result.exit_code == 0
    assert any("busy" in n for n in notes)


def test_loop_starts_nothing_after_the_deadline(queue: Queue, tmp_path: Path) -> None:
    a = add(queue, "a")
    sweeps = FakeSweeps(tmp_path, {"a": ["completed"]})
    result = run_queue(queue, sweeps, deadline=100.0, clock=lambda: 100.0)
    assert sweeps.calls == [] and result.deadline_reached and result.exit_code == 0
    assert queue.get(a.id).state == "queued"


def test_a_sweep_cut_by_the_deadline_stays_resumable_and_is_resumed_later(queue: Queue, tmp_path: Path) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    now = [0.0]
    sweeps = FakeSweeps(tmp_path, {"a": ["interrupted", "completed"], "b": ["completed"]})

    def cut(item: QueueItem, deadline: float | None, record) -> SweepOutcome:  # noqa: ANN001
        outcome = sweeps(item, deadline, record)
        now[0] = 50.0  # the deadline passed during the sweep
        return outcome

    first = run_queue(queue, cut, deadline=40.0, clock=lambda: now[0])
    assert first.deadline_reached and not first.interrupted and first.exit_code == 0
    assert sweeps.calls == [("a", "running", 40.0, None)]
    item = queue.get(a.id)
    assert item.state == "resumable" and item.run_dir == str(tmp_path / "reports" / "run-a")
    assert queue.get(b.id).state == "queued"

    second = run_queue(queue, sweeps)  # no deadline: the cut sweep is resumed (same run dir), then b
    assert [c[0] for c in sweeps.calls[1:]] == ["a", "b"]
    assert sweeps.calls[1][3] == str(tmp_path / "reports" / "run-a")
    assert queue.get(a.id).state == "completed" and second.exit_code == 0


def test_an_interrupt_stops_the_loop_with_130(queue: Queue, tmp_path: Path) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    result = run_queue(queue, FakeSweeps(tmp_path, {"a": ["interrupted"], "b": ["completed"]}))
    assert result.interrupted and result.exit_code == 130
    assert queue.get(a.id).state == "resumable" and queue.get(b.id).state == "queued"


def test_ctrl_c_outside_the_runner_puts_the_item_back(queue: Queue, tmp_path: Path) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    with pytest.raises(KeyboardInterrupt):
        run_queue(queue, FakeSweeps(tmp_path, {"a": ["raise"]}))
    item = queue.get(a.id)
    assert item.state == "resumable" and item.claimed_by is None  # its run dir holds a run
    assert queue.get(b.id).state == "queued"


def test_errors_fail_new_items_but_keep_resumable_ones(queue: Queue, tmp_path: Path) -> None:
    a, b = add(queue, "a"), add(queue, "b")
    run_queue(queue, FakeSweeps(tmp_path, {"a": ["interrupted"]}))
    result = run_queue(queue, FakeSweeps(tmp_path, {"a": ["error"], "b": ["error"]}))
    assert queue.get(a.id).state == "resumable" and queue.get(a.id).message == "preflight: host down"
    assert queue.get(b.id).state == "failed" and result.exit_code == 1


def test_an_error_after_the_run_started_leaves_it_resumable(queue: Queue, tmp_path: Path) -> None:
    a = add(queue, "a")
    add(queue, "b")  # runs after a's error: one failing item does not stop the pass
    sweeps = FakeSweeps(tmp_path, {"a": ["error-mid-run"], "b": ["completed"]})
    result = run_queue(queue, sweeps)
    assert [c[0] for c in sweeps.calls] == ["a", "b"]  # not retried in the same pass
    item = queue.get(a.id)
    assert item.state == "resumable" and item.message == "journal: disk full" and result.exit_code == 1


def test_item_state_after_is_total() -> None:
    item = QueueItem(1, "/m", "/i", None, 0, (), "queued", "", "", None, None, "")
    assert item_state_after(item, SweepOutcome("completed", 0)) == ("completed", "")
    assert item_state_after(item, SweepOutcome("failed", 1, message="1/2")) == ("failed", "1/2")
    assert item_state_after(item, SweepOutcome("interrupted", 130))[0] == "resumable"
    assert item_state_after(item, SweepOutcome("locked", 2)) == ("queued", "")
    claimed = QueueItem(1, "/m", "/i", None, 0, (), "running", "", "", None, "h:1:1", "")
    assert item_state_after(claimed, SweepOutcome("locked", 2)) == ("queued", "")
    assert item_state_after(item, SweepOutcome("error", 2, message="x")) == ("failed", "x")


# ---------------------------------------------------------------------------- deadlines
LOCAL = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("07:00", datetime(2026, 5, 1, 22, 0, tzinfo=LOCAL), datetime(2026, 5, 2, 7, 0, tzinfo=LOCAL)),
        ("07:00", datetime(2026, 5, 1, 6, 0, tzinfo=LOCAL), datetime(2026, 5, 1, 7, 0, tzinfo=LOCAL)),
        ("07:00", datetime(2026, 5, 1, 7, 0, tzinfo=LOCAL), datetime(2026, 5, 2, 7, 0, tzinfo=LOCAL)),
        ("23:59:30", datetime(2026, 5, 1, 23, 59, 0, tzinfo=LOCAL), datetime(2026, 5, 1, 23, 59, 30, tzinfo=LOCAL)),
        ("2026-05-03T05:30", datetime(2026, 5, 1, tzinfo=LOCAL), datetime(2026, 5, 3, 5, 30, tzinfo=LOCAL)),
        (
            "2026-05-03T05:30:00+00:00",
            datetime(2026, 5, 1, tzinfo=LOCAL),
            datetime(2026, 5, 3, 5, 30, tzinfo=timezone.utc),
        ),
    ],
)
def test_parse_until(text: str, now: datetime, expected: datetime) -> None:
    assert parse_until(text, now) == expected


@pytest.mark.parametrize("text", ["7am", "25:00", "", "tomorrow"])
def test_parse_until_refuses_nonsense(text: str) -> None:
    with pytest.raises(UsageError, match="--until"):
        parse_until(text, datetime(2026, 5, 1, tzinfo=LOCAL))


def test_queue_file_is_sqlite_in_wal_mode(queue: Queue) -> None:
    add(queue, "a")
    assert queue._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert queue.path.name == "queue.db" and socket.gethostname()
    assert json.loads(queue._db.execute("SELECT webhooks FROM items").fetchone()[0]) == []
    assert os.path.getsize(queue.path) > 0
