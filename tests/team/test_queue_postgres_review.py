"""Defects of the shared PostgreSQL queue found by review, on the real server the tests start
(helpers/postgres.py): a claim that gave up after 1000 items waiting for a busy testbed, one bad
stored value stopping every claim, a take-back racing its owner's reconnect dropping the owner's
result, a database outage a little longer than the reconnect time ending the night, and a
read-only `orch status` creating the queue's tables."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from helpers.postgres import PgServer

from orchestrator.cli.main import main
from orchestrator.team.queue import NewItem, QueueItem, SweepOutcome, run_queue
from orchestrator.team.queuestore_pg import TABLE, PgQueue

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("postgres")]  # as test_queue_postgres.py


def quiet(url: str, reconnect_s: float = 1.0) -> PgQueue:
    """A store without heartbeat (the test drives every call) and a short reconnect time."""
    return PgQueue(url, heartbeat_s=0, reconnect_s=reconnect_s)


def add(q: PgQueue, name: str, testbed: str) -> QueueItem:
    return q.add_item(NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, testbeds=(testbed,)))


def test_a_claim_walks_past_any_number_of_items_waiting_for_a_busy_testbed(postgres: PgServer, pg_url: str) -> None:
    a, b = quiet(pg_url), quiet(pg_url)
    try:
        add(a, "first", "bed-a")
        assert a.claim() is not None  # A drives bed-a
        postgres.sql(
            pg_url,
            f"INSERT INTO {TABLE} (matrix, inventory, priority, added, updated, testbeds, matrix_text) "
            "SELECT '/m/x.yaml', '/i/inv.yaml', 0, '2026-01-01', '2026-01-01', 'bed-a', repeat('x', 100000) "
            "FROM generate_series(1, 1001)",
        )
        free = add(b, "free", "bed-b")
        t0 = time.monotonic()
        got = b.claim()
        took = time.monotonic() - t0
        assert got is not None and got.id == free.id
        assert took < 1.0, f"the claim took {took:.2f} s"
        assert b.claim() is None  # nothing claimable left for B: every other item waits for bed-a
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("webhooks", ["not json", "null", "[1, 2]"])
def test_one_bad_stored_webhooks_value_fails_its_item_only(postgres: PgServer, pg_url: str, webhooks: str) -> None:
    with quiet(pg_url) as q:
        bad, good = add(q, "bad", "bed-a"), add(q, "good", "bed-b")
        postgres.sql(pg_url, f"UPDATE {TABLE} SET webhooks = %s WHERE id = %s", (webhooks, bad.id))
        listed = {i.id: i for i in q.items()}
        assert "webhooks" in listed[bad.id].defect
        got = q.claim()
        assert got is not None and got.id == good.id
        failed = q.get(bad.id)
        assert failed.state == "failed" and "webhooks" in failed.message and webhooks in failed.message


def test_a_take_back_racing_its_owners_reconnect_keeps_the_owners_result(postgres: PgServer, pg_url: str) -> None:
    """A's session dies; C's claim takes A's item back while A reconnects. Whoever holds the item
    lock owns the item: A got it back, so nobody else can claim it, and A's finish is kept."""
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        item = add(a, "x", "bed-a")
        assert a.claim() is not None
        postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (a._conn.info.backend_pid,))
        time.sleep(0.3)
        with c._conn.transaction():  # the first step of C's claim
            c._take_back_dead(c._conn)
            a._reconnect()
            assert a.lost is None
        assert c.claim() is None  # A holds the item lock: C cannot claim the item set back in line
        assert a.finish(item.id, "completed", "2/2 trials").state == "completed"
    finally:
        a.close()
        c.close()


def test_an_owner_whose_item_was_taken_back_before_it_reconnected_keeps_it_if_unclaimed(
    postgres: PgServer, pg_url: str
) -> None:
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        item = add(a, "x", "bed-a")
        assert a.claim() is not None
        postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (a._conn.info.backend_pid,))
        time.sleep(0.3)
        with c._conn.transaction():
            c._take_back_dead(c._conn)  # committed before A is back
        assert c.get(item.id).state == "queued"
        a._reconnect()
        assert a.lost is None and a.get(item.id).state == "running"  # marked running again, A's
        assert a.finish(item.id, "completed", "1/1 trials").state == "completed"
    finally:
        a.close()
        c.close()


def _outage(postgres: PgServer, url: str, seconds: float) -> threading.Timer:
    """The queue's database refuses connections for `seconds` and every session is cut."""
    db = url.rsplit("/", 1)[1]
    postgres.sql(postgres.url, f"ALTER DATABASE {db} ALLOW_CONNECTIONS false")
    postgres.sql(postgres.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))
    back = threading.Timer(seconds, postgres.sql, (postgres.url, f"ALTER DATABASE {db} ALLOW_CONNECTIONS true"))
    back.start()
    return back


def test_an_outage_longer_than_the_reconnect_time_is_waited_out(postgres: PgServer, pg_url: str) -> None:
    """The server is gone for longer than reconnect_s as item 1 ends: its result is still
    written once the server is back, item 2 runs, one line says so (not one per try)."""
    notes: list[str] = []
    with quiet(pg_url, reconnect_s=0.5) as q:
        one, two = add(q, "one", "bed-a"), add(q, "two", "bed-a")
        ran: list[int] = []
        timers: list[threading.Timer] = []

        def sweep(item, deadline, record):  # noqa: ANN001
            ran.append(item.id)
            if item.id == one.id:
                timers.append(_outage(postgres, pg_url, 2.0))
            return SweepOutcome("completed", 0, None, "1/1 trials")

        result = run_queue(q, sweep, deadline=time.time() + 600, note=notes.append)
        timers[0].join()
        states = {i.id: i.state for i in q.items()}
    assert ran == [one.id, two.id] and result.exit_code == 0
    assert states == {one.id: "completed", two.id: "completed"}
    assert sum("trying again until the deadline" in n for n in notes) == 1, notes


def test_orch_status_on_a_server_creates_nothing(
    postgres: PgServer, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--reports", str(tmp_path / "reports"), "--store", pg_url]) == 0
    shown = capsys.readouterr()
    assert "no queue yet in" in shown.out + shown.err
    made = postgres.sql(pg_url, "SELECT to_regclass('orch_queue_items') IS NOT NULL")
    assert made == [(False,)], "`orch status` (read-only) created the queue's tables"
    with quiet(pg_url) as q:  # once a queue exists, status shows it
        add(q, "x", "bed-a")
    with PgQueue(pg_url, heartbeat_s=0, read_only=True) as ro:
        assert [i.state for i in ro.items()] == ["queued"]


def test_listing_reads_no_texts_and_leaves_out_old_finished_items(postgres: PgServer, pg_url: str) -> None:
    with quiet(pg_url) as q:
        for n in range(5):
            q.add_item(NewItem(Path(f"/m/{n}.yaml"), Path("/i/i.yaml"), None, matrix_text="m" * 10, testbeds=("tb",)))
        postgres.sql(pg_url, f"UPDATE {TABLE} SET state = 'completed' WHERE id <= 4")
        items, left_out = q.listing(2)
        assert [i.id for i in items] == [5, 4, 3] and left_out == 2
        assert all(i.matrix_text == "" for i in items)  # never loaded for a list
        assert q.get(5).matrix_text == "m" * 10
        assert len(q.listing(None)[0]) == 5
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (5,)
