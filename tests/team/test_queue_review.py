"""Defects of the overnight loop and the SQLite store found by review (unit tier: fake sweeps,
fake clocks, no process started): a testbed busy when the night starts idled the queue until
morning, a store outage ended the night and dropped a finished item's result, one malformed
stored value stopped every claim and `queue list`, and `queue list` loaded every item's texts and
laid out ten thousand rows with rich."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.cli import team as cli_team
from orchestrator.cli.main import main
from orchestrator.team.queue import NewItem, Queue, QueueError, QueueItem, QueueUnavailable, SweepOutcome, run_queue


def add(q: Queue, name: str, text: str = "") -> QueueItem:
    return q.add_item(NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, matrix_text=text, testbeds=("sim",)))


class Clock:
    """A fake clock that moves only when slept on (or by `tick` per look)."""

    def __init__(self, now: float, tick: float = 0.0) -> None:
        self.now, self.tick = now, tick
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_testbed_busy_when_the_night_starts_runs_once_it_is_free(tmp_path: Path) -> None:
    clock = Clock(3600.0)  # 01:00; a manual run holds the testbed until 01:10
    calls: list[float] = []

    def sweep(item, deadline, record):  # noqa: ANN001
        calls.append(clock.now)
        if clock.now < 3600.0 + 600:
            return SweepOutcome("locked", 2, None, "testbed 'sim' is locked by run R (pid 4242)")
        return SweepOutcome("completed", 0, None, "2/2 trials")

    notes: list[str] = []
    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        result = run_queue(
            q, sweep, deadline=7 * 3600.0, clock=clock, sleep=clock.sleep, busy_wait_s=60, note=notes.append
        )
        assert q.get(item.id).state == "completed"
    assert len(calls) == 11 and clock.slept == [60.0] * 10  # tried every minute until free
    assert result.exit_code == 0 and result.skipped_locked == [item.id]
    assert sum(f"item {item.id} waits for a busy testbed" in n for n in notes) == 1  # said once, not every minute
    assert sum("skipped, its testbed is busy" in n for n in notes) == 1


def test_a_busy_testbed_is_waited_for_only_until_the_deadline(tmp_path: Path) -> None:
    clock = Clock(0.0)

    def sweep(item, deadline, record):  # noqa: ANN001
        return SweepOutcome("locked", 2, None, "testbed 'sim' is locked")

    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        result = run_queue(q, sweep, deadline=150.0, clock=clock, sleep=clock.sleep, busy_wait_s=60)
        assert q.get(item.id).state == "queued"
    assert clock.slept == [60.0, 60.0, 30.0] and clock.now == 150.0 and result.deadline_reached


def test_a_waited_for_item_another_runner_took_is_said_gone(tmp_path: Path) -> None:
    """Two `queue run`s at once: the second waited for the busy testbed, then ended without a word
    when the first had taken the item meanwhile."""
    notes: list[str] = []
    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        clock = Clock(0.0)

        def taken_meanwhile(seconds: float) -> None:
            clock.sleep(seconds)
            q.remove(item.id)

        def sweep(item, deadline, record):  # noqa: ANN001
            return SweepOutcome("locked", 2, None, "testbed 'sim' is locked by run R (pid 4242)")

        result = run_queue(
            q, sweep, deadline=3600.0, clock=clock, sleep=taken_meanwhile, busy_wait_s=60, note=notes.append
        )
    assert clock.slept == [60.0] and not result.ran and result.exit_code == 0
    assert notes[-1].startswith(f"item {item.id} no longer queued (another `queue run` took it")


class Flaky:
    """A store whose calls fail (QueueError) while `down` says so: a database outage."""

    def __init__(self, queue: Queue, down: Callable[[], bool]) -> None:
        self.queue, self.down = queue, down
        self.claims_prove_owner_gone = False
        self.where = queue.where

    def __getattr__(self, name: str):  # noqa: ANN204
        real = getattr(self.queue, name)

        def call(*args: object, **kwargs: object) -> object:
            if self.down():
                raise QueueUnavailable("db: cannot write the queue: connection refused")
            return real(*args, **kwargs)

        return call


def test_an_outage_between_items_is_waited_out_and_no_result_is_lost(tmp_path: Path) -> None:
    clock = Clock(0.0)
    outage = [0.0, 0.0]  # from, to
    notes: list[str] = []

    def sweep(item, deadline, record):  # noqa: ANN001
        if item.matrix.endswith("one.yaml"):
            outage[:] = [clock.now, clock.now + 200.0]  # the database goes away as it ends
        return SweepOutcome("completed", 0, None, "1/1 trials")

    with Queue(tmp_path / "queue.db") as q:
        one, two = add(q, "one"), add(q, "two")
        store = Flaky(q, lambda: outage[0] <= clock.now < outage[1])
        result = run_queue(store, sweep, deadline=3600.0, clock=clock, sleep=clock.sleep, note=notes.append)  # type: ignore[arg-type]
        assert q.get(one.id).state == "completed" and q.get(two.id).state == "completed"
    assert result.exit_code == 0
    assert clock.slept == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]  # bounded backoff
    assert sum("trying again until the deadline" in n for n in notes) == 1  # one line per outage
    assert sum("answers again" in n for n in notes) == 1


def test_an_outage_past_the_deadline_ends_with_a_clear_error_and_the_item_resumable(tmp_path: Path) -> None:
    clock = Clock(0.0)
    down = [False]

    def sweep(item, deadline, record):  # noqa: ANN001
        run_dir = tmp_path / "reports" / "run1"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text("{}")
        record(run_dir)
        down[0] = True
        return SweepOutcome("interrupted", 130, run_dir, "deadline reached")

    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "one")
        with pytest.raises(QueueError, match="gave up trying to record how item 1 .* at the deadline"):
            run_queue(Flaky(q, lambda: down[0]), sweep, deadline=100.0, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
        assert clock.now == 100.0
        assert q.get(item.id).state == "running"  # this runner is gone once it exits: taken back, resumable
        assert q.get(item.id).resumable_run is not None


# the last: lists nested 100,000 deep, which json.loads gives up on with RecursionError (no
# ValueError): `queue list`, `orch status` and every claim ended in a traceback
@pytest.mark.parametrize(
    "webhooks", ["not json", "null", '{"a": 1}', "[" * 100_000 + "]" * 100_000], ids=["text", "null", "map", "deep"]
)
def test_a_bad_stored_webhooks_value_fails_its_item_and_the_queue_goes_on(
    tmp_path: Path, webhooks: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    with Queue(reports / "queue.db") as q:
        bad, good = add(q, "bad"), add(q, "good")
    with sqlite3.connect(reports / "queue.db") as db:
        db.execute("UPDATE items SET webhooks = ? WHERE id = ?", (webhooks, bad.id))
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    shown = capsys.readouterr().out
    assert "cannot run" in shown and "webhooks" in shown
    with Queue(reports / "queue.db") as q:
        got = q.claim()
        assert got is not None and got.id == good.id
        failed = q.get(bad.id)
    assert failed.state == "failed" and "webhooks" in failed.message and failed.claimed_by is None


def test_a_malformed_claimed_by_fails_its_item_and_the_queue_goes_on(tmp_path: Path) -> None:
    with Queue(tmp_path / "queue.db") as q:
        odd, other = add(q, "a"), add(q, "b")
    with sqlite3.connect(tmp_path / "queue.db") as db:
        db.execute("UPDATE items SET state = 'running', claimed_by = 'controller-a' WHERE id = ?", (odd.id,))
    with Queue(tmp_path / "queue.db") as q:
        got = q.claim()
        assert got is not None and got.id == other.id
        failed = q.get(odd.id)
        assert failed.state == "failed" and "'controller-a' is not host:pid:start" in failed.message
        assert q.remove(odd.id).id == odd.id


def test_queue_list_shows_pending_and_the_last_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    with Queue(reports / "queue.db") as q:
        for n in range(30):
            add(q, f"m{n}", text="x" * 1000)
    with sqlite3.connect(reports / "queue.db") as db:
        db.execute("UPDATE items SET state = 'completed' WHERE id <= 25")
    with Queue(reports / "queue.db") as q:
        items, left_out = q.listing(20)
        assert [i.id for i in items][:5] == [26, 27, 28, 29, 30] and len(items) == 25 and left_out == 5
        assert all(i.matrix_text == "" for i in items)  # a list never reads the texts
        assert q.get(1).matrix_text == "x" * 1000
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    assert "5 older finished items not shown (--all shows them)" in capsys.readouterr().out
    assert main(["queue", "list", "--all", "--reports", str(reports)]) == 0
    assert "not shown" not in capsys.readouterr().out


def test_a_long_queue_list_is_plain_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_team, "LIST_RICH_ROWS", 3)
    reports = tmp_path / "reports"
    with Queue(reports / "queue.db") as q:
        for n in range(4):
            add(q, f"m{n}")
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t")[:3] == ["id", "state", "prio"] and len(lines) == 5
    assert lines[1].split("\t")[:4] == ["1", "queued", "0", "m0.yaml"]
