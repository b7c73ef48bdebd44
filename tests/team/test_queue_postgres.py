"""The shared queue on a real PostgreSQL server the tests start themselves (helpers/postgres.py).

What only the real server can show: claims raced by two controller processes (no item run twice,
none lost, never two items on one testbed at once), a controller killed with -9 mid-item (its
session's advisory locks vanish with it; another controller resumes the item), a controller whose
connection the server terminates (it reconnects and finishes, or gives the item up without
writing over another's claim), the deadline and priorities as with SQLite, and two `orch queue
run` controllers completing a shared queue of real simulator sweeps on two testbeds.
Fake sweeps (helpers/pg_controller.py) stand in where the sweep is not the point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.postgres import PgServer

from orchestrator.cli.main import main
from orchestrator.team.queue import NewItem, QueueItem, SweepOutcome, open_store, run_queue, store_spec
from orchestrator.team.queuestore import Claimer
from orchestrator.team.queuestore_pg import PgQueue, lock_key, shown_url

from .helpers import REPO, inventory_text, make_site, matrix_text, start_orch

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("postgres")]  # one server per worker: keep them on one
CONTROLLER = REPO / "tests" / "helpers" / "pg_controller.py"


def add(q: PgQueue, name: str, testbed: str = "tb", priority: int = 0) -> QueueItem:
    return q.add_item(NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, priority, testbeds=(testbed,)))


def quiet(url: str) -> PgQueue:
    """A store without heartbeat (in-process tests drive every call themselves)."""
    return PgQueue(url, heartbeat_s=0, reconnect_s=5)


def controller(url: str, reports: Path, log: Path, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, str(CONTROLLER), url, str(reports), str(log)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def events(log: Path) -> list[tuple[float, str, int, str, int]]:
    rows = []
    for line in log.read_text().splitlines():
        t, event, item, testbeds, pid = line.split()
        rows.append((float(t), event, int(item), testbeds, int(pid)))
    return rows


def _removed_once_free(queue, item_id: int, removed: list) -> bool:  # noqa: ANN001
    """Remove the item if its controller's session is gone; False while the server still holds it."""
    try:
        removed.append(queue.remove(item_id))
    except Exception as exc:  # noqa: BLE001 - "is running" until the server has ended the session
        if "is running" not in str(exc):
            raise
        return False
    return True


def wait_for(check, timeout: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def sessions_of(postgres: PgServer, url: str, pid: int) -> list[int]:
    """Backend pids of the queue sessions opened by process `pid`."""
    rows = postgres.sql(url, "SELECT pid, application_name FROM pg_stat_activity")
    return [int(r[0]) for r in rows if f":{pid}:" in str(r[1]) and str(r[1]).startswith("orch queue")]  # type: ignore[call-overload]


# ---------------------------------------------------------------------------- in one process
def test_fields_copies_priority_and_order(pg_url: str, tmp_path: Path) -> None:
    with quiet(pg_url) as q:
        item = q.add_item(
            NewItem(
                Path("/m/x.yaml"),
                Path("/i/y.yaml"),
                "a,b",
                -3,
                ("https://h/1",),
                matrix_text="name: x\n",
                inventory_text="testbeds: {}\n",
                testbeds=("a", "b"),
            )
        )
        assert (item.matrix_text, item.inventory_text, item.testbeds) == ("name: x\n", "testbeds: {}\n", ("a", "b"))
        assert item.queued_by.endswith("@" + os.uname().nodename) and "@" in item.queued_by
        assert item.webhooks == ("https://h/1",) and item.priority == -3 and item.state == "queued"
        a, b, c = add(q, "a", "t1"), add(q, "b", "t2", 5), add(q, "c", "t3")
        assert [i.id for i in q.items()] == [b.id, a.id, c.id, item.id]
        got = [q.claim(), q.claim(), q.claim(), q.claim(), q.claim()]
        assert [i.id if i else None for i in got] == [b.id, a.id, c.id, item.id, None]
        assert q.get(a.id).claimed_by == Claimer.current().encode()
    assert store_spec(None, tmp_path) == str(tmp_path / "queue.db")
    assert store_spec(pg_url, tmp_path) == pg_url and isinstance(open_store(pg_url), PgQueue)
    assert shown_url("postgresql://u:secret@h:5/db") == "postgresql://u:***@h:5/db"
    assert lock_key("testbed", "a") == lock_key("testbed", "a") != lock_key("testbed", "b")


def test_one_testbed_is_driven_by_one_controller(pg_url: str) -> None:
    """Two sessions (two controllers): an item whose testbed the other drives is passed over,
    taken once it is free; a running item cannot be removed while its controller lives."""
    a, b = quiet(pg_url), quiet(pg_url)
    try:
        first, second, other = add(a, "first", "tb1"), add(a, "second", "tb1"), add(a, "other", "tb2")
        assert a.claim().id == first.id  # type: ignore[union-attr]
        assert b.claim().id == other.id  # type: ignore[union-attr]  (second waits: tb1 is driven)
        assert b.claim() is None and a.claim() is None  # tb1 by a, tb2 by b
        with pytest.raises(Exception, match="is running"):
            b.remove(first.id)
        a.finish(first.id, "completed", "ok")
        assert b.claim().id == second.id  # type: ignore[union-attr]
        assert [i.state for i in a.items()] == ["completed", "running", "running"]
        b.close()  # b's controller is gone: its session and locks with it
        # the server ends b's backend (dropping its locks) a moment after the client closes
        removed = []
        wait_for(lambda: _removed_once_free(a, other.id, removed), timeout=10)
        assert removed[0].id == other.id  # a dead controller's running item may be removed
        assert [i.id for i in a.items()] == [first.id, second.id]
        assert a.claim().id == second.id  # type: ignore[union-attr]  (taken back: b is gone)
        assert "lost its queue session" in a.get(second.id).message
    finally:
        a.close()
        b.close()


def test_a_dead_session_gives_its_item_back_and_never_overwrites_the_new_claim(pg_url: str, postgres: PgServer) -> None:
    a, b = quiet(pg_url), quiet(pg_url)
    try:
        item = add(a, "x", "tb1")
        assert a.claim() is not None
        postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (a._conn.info.backend_pid,))
        wait_for(lambda: b.claim(claimer=Claimer("other-controller", 1, 1)) is not None, timeout=10)
        taken = b.get(item.id)
        assert taken.state == "running" and taken.claimed_by == "other-controller:1:1"
        a.finish(item.id, "completed", "a thinks it finished")  # reconnects; the item is not a's any more
        assert a.lost and "gave up item" in a.lost
        after = b.get(item.id)
        assert after.state == "running" and after.claimed_by == "other-controller:1:1"
        assert b.finish(item.id, "completed", "b").state == "completed"
    finally:
        a.close()
        b.close()


def test_deadline_and_resume_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """run_queue's rules hold on the server store: nothing starts after the deadline; a sweep cut
    by it stays resumable and is resumed (same run dir) by the next run."""
    now = [0.0]
    calls: list[tuple[str, str | None]] = []

    def sweep(item: QueueItem, deadline: float | None, record) -> SweepOutcome:  # noqa: ANN001
        calls.append((Path(item.matrix).stem, item.run_dir))
        run_dir = item.resumable_run or tmp_path / f"run-{item.id}"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "run.json").write_text("{}")
        record(run_dir)
        if deadline is not None:
            now[0] = 50.0  # the deadline passes during this sweep
            return SweepOutcome("interrupted", 130, run_dir, "deadline reached")
        return SweepOutcome("completed", 0, run_dir, "ok")

    with quiet(pg_url) as q:
        a, b = add(q, "a", priority=1), add(q, "b")
        assert run_queue(q, sweep, deadline=0.0, clock=lambda: 0.0).deadline_reached and calls == []
        first = run_queue(q, sweep, deadline=40.0, clock=lambda: now[0])
        assert first.deadline_reached and first.exit_code == 0 and calls == [("a", None)]
        assert q.get(a.id).state == "resumable" and q.get(b.id).state == "queued"
        second = run_queue(q, sweep)
        assert second.exit_code == 0 and calls[1:] == [("a", str(tmp_path / f"run-{a.id}")), ("b", None)]
        assert {i.state for i in q.items()} == {"completed"}


def test_cli_list_status_and_remove_on_a_server_store(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiet(pg_url) as q:
        a, b = add(q, "listed", "tb1"), add(q, "other", "tb2")
    reports = ["--reports", str(tmp_path / "r")]
    assert main(["queue", "list", "--store", pg_url, *reports]) == 0
    listed = capsys.readouterr().out
    assert "listed.yaml" in listed and "other.yaml" in listed and "@" in listed  # who queued it
    monkeypatch.setenv("ORCH_QUEUE_STORE", pg_url)  # the environment names the store too
    assert main(["status", *reports]) == 0
    assert "listed.yaml" in capsys.readouterr().out
    assert main(["queue", "remove", str(a.id), *reports]) == 0
    with quiet(pg_url) as q:
        assert [i.id for i in q.items()] == [b.id]
    assert main(["queue", "remove", str(a.id), *reports]) == 2  # gone: bad input
    assert not (tmp_path / "r" / "queue.db").exists()  # the SQLite queue was never opened


# ---------------------------------------------------------------------------- controller processes
def test_two_controllers_race_for_one_queue(pg_url: str, tmp_path: Path) -> None:
    """30 items on 3 testbeds, two controllers at once: every item runs exactly once, all end
    completed, and no testbed ever runs two items at the same time."""
    with quiet(pg_url) as q:
        ids = {add(q, f"s0.05-{k}", f"tb{k % 3}").id for k in range(30)}
    log = tmp_path / "events.log"
    procs = [controller(pg_url, tmp_path / "reports", log, tmp_path / f"out-{k}") for k in range(2)]
    for p in procs:
        p.wait(timeout=120)
    outs = [json.loads((tmp_path / f"out-{k}").read_text().splitlines()[-1]) for k in range(2)]
    assert [o["exit"] for o in outs] == [0, 0], [(tmp_path / f"out-{k}").read_text() for k in range(2)]
    rows = events(log)
    starts = [r[2] for r in rows if r[1] == "start"]
    assert sorted(starts) == sorted(ids), "an item ran twice or was lost"
    assert {r[4] for r in rows} == {p.pid for p in procs}, "one controller never got an item: no race"
    spans: dict[int, list[float]] = {}
    for t, _event, item, _, _ in rows:
        spans.setdefault(item, []).append(t)
    for tb in ("tb0", "tb1", "tb2"):
        runs = sorted(spans[r[2]] for r in rows if r[1] == "start" and r[3] == tb)
        assert all(prev[1] <= nxt[0] for prev, nxt in zip(runs, runs[1:], strict=False)), (
            f"{tb} drove two items at once"
        )
    with quiet(pg_url) as q:
        assert {i.state for i in q.items()} == {"completed"} and len(q.items()) == 30


def test_a_controller_killed_mid_item_is_resumed_by_another(pg_url: str, tmp_path: Path, postgres: PgServer) -> None:
    with quiet(pg_url) as q:
        slow, fast = add(q, "s60-slow", "tb1"), add(q, "s0.05-fast", "tb2")
    log = tmp_path / "events.log"
    first = controller(pg_url, tmp_path / "reports", log, tmp_path / "out-1")
    try:
        wait_for(lambda: log.exists() and any(r[1] == "start" and r[2] == slow.id for r in events(log)))
    finally:
        first.send_signal(signal.SIGKILL)  # by PID: the controller this test started
        first.wait(timeout=30)
    wait_for(lambda: sessions_of(postgres, pg_url, first.pid) == [])  # the server saw its session end
    second = controller(pg_url, tmp_path / "reports", log, tmp_path / "out-2")
    assert second.wait(timeout=60) == 0, (tmp_path / "out-2").read_text()
    mine = [(r[1], r[2]) for r in events(log) if r[4] == second.pid]
    assert ("resume", slow.id) in mine and ("done", slow.id) in mine
    assert [r[2] for r in events(log) if r[1] == "start"].count(slow.id) == 1  # resumed, not started again
    with quiet(pg_url) as q:
        item = q.get(slow.id)
        assert item.state == "completed" and item.run_dir == str(tmp_path / "reports" / f"run-{slow.id}")
        assert item.message == f"done by {second.pid}" and q.get(fast.id).state == "completed"


def test_a_controller_whose_connection_is_cut_reconnects_and_finishes(
    pg_url: str, tmp_path: Path, postgres: PgServer
) -> None:
    with quiet(pg_url) as q:
        item = add(q, "s3-cut", "tb1")
    log = tmp_path / "events.log"
    proc = controller(pg_url, tmp_path / "reports", log, tmp_path / "out")
    try:
        wait_for(lambda: log.exists() and any(r[1] == "start" for r in events(log)))
        (backend,) = sessions_of(postgres, pg_url, proc.pid)
        assert postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (backend,)) == [(True,)]
        assert proc.wait(timeout=60) == 0, (tmp_path / "out").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = json.loads((tmp_path / "out").read_text().splitlines()[-1])
    assert out["pids"][0] == backend and out["pids"][-1] != backend  # a new session took over
    assert out["lost"] is None and out["ran"] == 1
    assert [r[1] for r in events(log)] == ["start", "done"]
    with quiet(pg_url) as q:
        assert q.get(item.id).state == "completed"


def test_a_controller_cut_off_while_another_takes_its_item_stops_its_sweep(
    pg_url: str, tmp_path: Path, postgres: PgServer
) -> None:
    """The controller's session is terminated and it cannot reconnect at once (its role may not
    log in); meanwhile another controller takes the item back. Once back, the first finds the item
    is not its own: it stops its sweep (an interrupt: the sweep would restore its hosts) and leaves
    the other's claim alone. Two controllers never drive one testbed."""
    role = f"ctl_{os.getpid()}_{int(time.monotonic() * 1000) % 100000}"
    postgres.sql(pg_url, f"CREATE ROLE {role} LOGIN")
    postgres.sql(pg_url, f"GRANT ALL ON SCHEMA public TO {role}")
    with quiet(pg_url) as q:
        item = add(q, "s30-cut", "tb1")
    postgres.sql(pg_url, f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
    postgres.sql(pg_url, f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    ctl_url = pg_url.replace("postgresql://postgres@", f"postgresql://{role}@")
    log = tmp_path / "events.log"
    proc = controller(ctl_url, tmp_path / "reports", log, tmp_path / "out")
    other = quiet(pg_url)
    try:
        wait_for(lambda: log.exists() and any(r[1] == "start" for r in events(log)))
        postgres.sql(pg_url, f"ALTER ROLE {role} CONNECTION LIMIT 0")  # it cannot come back yet
        (backend,) = sessions_of(postgres, pg_url, proc.pid)
        postgres.sql(pg_url, "SELECT pg_terminate_backend(%s)", (backend,))
        wait_for(lambda: other.claim(claimer=Claimer("other-controller", 1, 1)) is not None, timeout=10)
        postgres.sql(pg_url, f"ALTER ROLE {role} CONNECTION LIMIT -1")  # now it reconnects
        assert proc.wait(timeout=60) == 130, (tmp_path / "out").read_text()
        out = json.loads((tmp_path / "out").read_text().splitlines()[-1])
        assert "gave up item " + str(item.id) in out["lost"]
        assert [r[1] for r in events(log)] == ["start"]  # stopped, never reported done
        taken = other.get(item.id)
        assert taken.state == "running" and taken.claimed_by == "other-controller:1:1"  # untouched
        assert other.finish(item.id, "completed").state == "completed"
    finally:
        other.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------- real sweeps
def test_orch_controllers_complete_a_shared_queue_of_sim_sweeps_after_one_is_killed(
    pg_url: str, tmp_path: Path, postgres: PgServer
) -> None:
    """The issue's "done when": `orch queue run --store URL` controllers on one PostgreSQL queue,
    three real simulator sweeps on two testbeds. The first controller is killed (-9) inside its
    first sweep; two more then complete the queue together: the killed sweep is resumed (its
    finished trial not rerun), every item runs once, all complete, hosts are restored. The
    matrices are deleted after `queue add`: the queue runs its copies."""
    sites = []
    for name in ("bed-a", "bed-b"):
        site = make_site(tmp_path / name)
        site.inventory.write_text(inventory_text(site.ports, testbed=name))  # type: ignore[arg-type]
        sites.append(site)
    reports = tmp_path / "reports"
    for k, site in enumerate([sites[0], sites[1], sites[0]]):  # in-process `queue add`: a process costs seconds
        matrix = tmp_path / f"m{k}.yaml"
        matrix.write_text(matrix_text(f"shared{k}"))
        args = ["queue", "add", str(matrix), "-i", str(site.inventory), "--reports", str(reports), "--store", pg_url]
        assert main(args) == 0
        matrix.unlink()

    def controller_run(name: str) -> subprocess.Popen[bytes]:
        args = ("queue", "run", "--store", pg_url, "--reports", str(reports))
        return start_orch(*args, cwd=tmp_path, log=tmp_path / f"{name}.log")

    doomed = controller_run("doomed")
    try:
        wait_for(lambda: "[1/2]" in (tmp_path / "doomed.log").read_text(), timeout=120)  # inside its first sweep
    finally:
        doomed.send_signal(signal.SIGKILL)  # by PID: the controller this test started
        doomed.wait(timeout=30)
    wait_for(lambda: sessions_of(postgres, pg_url, doomed.pid) == [])
    runners = [controller_run(f"c{k}") for k in range(2)]
    for r in runners:
        r.wait(timeout=240)
    logs = [(tmp_path / f"c{k}.log").read_text() for k in range(2)]
    assert [r.returncode for r in runners] == [0, 0], logs
    with quiet(pg_url) as q:
        items = q.items()
    assert [i.state for i in items] == ["completed"] * 3, [(i.state, i.message) for i in items]
    killed = items[0]
    assert "item 1 (m0.yaml): starting" in (tmp_path / "doomed.log").read_text()
    assert sum(log.count("item 1 (m0.yaml): resuming") for log in logs) == 1
    assert sum(log.count(": starting") for log in logs) == 2  # items 2 and 3, once each
    run_dirs = [Path(i.run_dir or "") for i in items]
    assert len(set(run_dirs)) == 3 and sorted(p.name for p in reports.iterdir() if p.is_dir()) == sorted(
        p.name for p in run_dirs
    )
    assert all(json.loads((d / "run.json").read_text())["status"] == "completed" for d in run_dirs)
    journal = [json.loads(line) for line in (run_dirs[0] / "journal.jsonl").read_text().splitlines()]
    finished = [r["trial"] for r in journal if r.get("status") in ("completed", "failed")]
    assert sorted(finished) == [0, 1], finished  # trial 0 (done before the kill) was not run again
    assert killed.run_dir == str(run_dirs[0])
    for site in sites:
        assert site.env_files_unchanged() == [] and site.listening() == []
