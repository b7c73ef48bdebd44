"""Defects of the shared PostgreSQL queue found by review, on the real server the tests start
(helpers/postgres.py): a claim that gave up after 1000 items waiting for a busy testbed, one bad
stored value stopping every claim, a take-back racing its owner's reconnect dropping the owner's
result, a database outage a little longer than the reconnect time ending the night, and a
read-only `orch status` creating the queue's tables; and, at the end, what mutation testing found
no test pinned (a newer orch's queue, a lost item's locks, a claim cut off at its commit, the
heartbeat at exit and at close)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from helpers.postgres import PgServer

from orchestrator.cli.main import main
from orchestrator.errors import UsageError
from orchestrator.team import queuestore_pg
from orchestrator.team.queue import NewItem, QueueItem, SweepOutcome, run_queue
from orchestrator.team.queuestore import QueueError
from orchestrator.team.queuestore_pg import META, SCHEMA_VERSION, TABLE, PgQueue

from .helpers import REPO

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("postgres")]  # as test_queue_postgres.py


def quiet(url: str, reconnect_s: float = 1.0) -> PgQueue:
    """A store without heartbeat (the test drives every call) and a short reconnect time."""
    return PgQueue(url, heartbeat_s=0, reconnect_s=reconnect_s)


def add(q: PgQueue, name: str, testbed: str) -> QueueItem:
    return q.add_item(NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, testbeds=(testbed,)))


def _cut_off(postgres: PgServer, url: str, q: PgQueue) -> None:
    """The server ends q's session (as a restart or a cut network would), and has time to."""
    postgres.sql(url, "SELECT pg_terminate_backend(%s)", (q._conn.info.backend_pid,))
    time.sleep(0.3)


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
        _cut_off(postgres, pg_url, a)
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
        _cut_off(postgres, pg_url, a)
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


# ---------------------------------------------------------------- found by mutation testing
# `bench/mutants.py orchestrator/team/queuestore_pg.py ... --tier process --sample 40 --seed 17`:
# each test below fails on a change to the store that every test before it passed.


def test_a_queue_made_by_a_newer_orch_is_refused_naming_both_versions(postgres: PgServer, pg_url: str) -> None:
    with quiet(pg_url):
        pass
    postgres.sql(pg_url, f"UPDATE {META} SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    newer = rf"queue schema version {SCHEMA_VERSION + 1} is newer than this orch \({SCHEMA_VERSION}\) \(upgrade orch\)"
    with pytest.raises(QueueError, match=newer):
        quiet(pg_url)


def test_an_item_that_is_not_there_is_named_with_where_to_look(pg_url: str) -> None:
    with quiet(pg_url) as q, pytest.raises(UsageError, match="no queue item 4242") as err:
        q.get(4242)
    assert err.value.hint == "see `orch queue list`"


def test_a_query_the_server_refuses_keeps_the_session_and_its_locks(pg_url: str) -> None:
    """A server error on a live connection is its answer, not a lost session: no reconnect, which
    would give up the session's locks and take them back (the claimed testbed free meanwhile)."""
    with quiet(pg_url) as q:
        add(q, "x", "bed-a")
        assert q.claim() is not None
        session = q._conn.info.backend_pid
        with pytest.raises(QueueError, match="cannot read the queue: division by zero"):
            q._run(lambda c: c.execute("SELECT 1/0"), "cannot read the queue")
        assert q._conn.info.backend_pid == session


def test_a_reconnect_waits_out_an_outage_shorter_than_its_time(postgres: PgServer, pg_url: str) -> None:
    with quiet(pg_url, reconnect_s=10.0) as q:
        item = add(q, "x", "bed-a")
        assert q.claim() is not None
        back = _outage(postgres, pg_url, 1.0)
        q._reconnect()  # the first tries are refused: it tries again until the server is back
        back.join()
        assert q.lost is None and q.get(item.id).state == "running"


def test_an_item_finished_by_another_while_cut_off_is_given_up_with_its_locks(postgres: PgServer, pg_url: str) -> None:
    """A's session dies; C takes the item back, runs and finishes it; A reconnects, gets the
    (free) locks, finds the item not its own, and must let them go: held, they kept bed-a from
    every other controller for as long as A's new session lived."""
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        item = add(a, "x", "bed-a")
        assert a.claim() is not None
        _cut_off(postgres, pg_url, a)
        again = c.claim()
        assert again is not None and again.id == item.id
        c.finish(item.id, "completed", "1/1 trials")
        a._reconnect()
        assert a.lost is not None and f"gave up item {item.id}" in a.lost
        after = add(c, "y", "bed-a")
        got = c.claim()
        assert got is not None and got.id == after.id
    finally:
        a.close()
        c.close()


def test_an_item_waiting_for_a_busy_testbed_never_holds_back_one_on_a_free_testbed(pg_url: str) -> None:
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        add(a, "on-a", "bed-a")
        assert a.claim() is not None  # A drives bed-a
        c.add_item(NewItem(Path("/m/both.yaml"), Path("/i/inv.yaml"), None, testbeds=("bed-a", "bed-b")))
        free = add(c, "on-b", "bed-b")  # behind it in line, on a testbed nobody drives
        got = c.claim()
        assert got is not None and got.id == free.id
    finally:
        a.close()
        c.close()


def test_rows_waiting_for_a_testbed_found_busy_are_passed_over_without_asking_the_server(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        add(a, "first", "bed-a")
        assert a.claim() is not None
        for n in range(5):
            add(c, f"waiting-{n}", "bed-a")
        asked: list[tuple[int, ...]] = []
        real = queuestore_pg._lock_all

        def lock_all(conn: object, keys: tuple[int, ...]) -> bool:
            asked.append(keys)
            return real(conn, keys)  # type: ignore[arg-type]

        monkeypatch.setattr(queuestore_pg, "_lock_all", lock_all)
        assert c.claim() is None
        waiting = [keys for keys in asked if len(keys) == 2]  # a row's item and testbed (one key: a take-back's look)
        assert len(waiting) == 1, "bed-a was found busy at the first row: the other four are passed over"
    finally:
        a.close()
        c.close()


def test_a_claim_that_fails_after_taking_its_locks_lets_them_go(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, c = quiet(pg_url), quiet(pg_url)
    try:
        item = add(a, "x", "bed-a")
        with monkeypatch.context() as mp:
            mp.setattr(PgQueue, "_take", lambda self, conn, item_id, token: 1 / 0)
            with pytest.raises(ZeroDivisionError):
                a.claim()
        assert a._held == {}
        got = c.claim()  # A's session holds neither the item's lock nor bed-a's
        assert got is not None and got.id == item.id
    finally:
        a.close()
        c.close()


def test_a_claim_whose_commit_is_cut_off_claims_the_item_again_on_the_new_session(
    postgres: PgServer, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the session between the row's update and its commit: the update is rolled
    back, so the item is not held; the claim's retry on a new session takes it. Had the item
    stayed held, the reconnect marked it running as ours and the retry found nothing to claim:
    the item sat `running` with no controller driving it."""
    with quiet(pg_url, reconnect_s=10.0) as q:
        item = add(q, "x", "bed-a")
        real, cut = PgQueue._take, []

        def take_then_cut(self: PgQueue, conn: psycopg.Connection, item_id: int, token: str) -> QueueItem | None:
            taken = real(self, conn, item_id, token)
            if not cut:
                cut.append(conn.info.backend_pid)
                postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                time.sleep(0.3)
            return taken

        monkeypatch.setattr(PgQueue, "_take", take_then_cut)
        got = q.claim()
        assert cut and q._conn.info.backend_pid != cut[0], "the commit was cut off and the claim retried"
        assert got is not None and got.id == item.id and q.get(item.id).state == "running"
        assert list(q._held) == [item.id]


def test_a_controller_that_exits_without_closing_its_queue_is_not_held_by_the_heartbeat(pg_url: str) -> None:
    code = (
        "from pathlib import Path\n"
        "from orchestrator.team.queue import NewItem\n"
        "from orchestrator.team.queuestore_pg import PgQueue\n"
        f"q = PgQueue({pg_url!r}, heartbeat_s=0.2)\n"
        "q.add_item(NewItem(Path('/m/x.yaml'), Path('/i/i.yaml'), None, testbeds=('tb',)))\n"
        "assert q.claim() is not None and q._beat is not None and q._beat.is_alive()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=20
    )
    assert done.returncode == 0, done.stderr.decode()


def test_close_returns_once_the_heartbeat_has_said_what_it_lost(postgres: PgServer, pg_url: str) -> None:
    """close() waits for the heartbeat thread: what it lost is said (`on_lost`: the interrupt a
    controller gets) before close returns, never to a controller that has closed its queue."""
    said: list[float] = []

    def on_lost(why: str) -> None:
        time.sleep(0.5)
        said.append(time.monotonic())

    q = PgQueue(pg_url, heartbeat_s=0.05, reconnect_s=0.3, on_lost=on_lost)
    add(q, "x", "bed-a")
    assert q.claim() is not None
    back = _outage(postgres, pg_url, 3.0)
    try:
        deadline = time.monotonic() + 10
        while q.lost is None:
            assert time.monotonic() < deadline, "the heartbeat never gave the item up"
            time.sleep(0.01)
        q.close()
        returned = time.monotonic()
        assert said and said[0] <= returned
    finally:
        back.join()
