"""A `queue run` killed between locking its testbed and making the run's folder (bench_kill_points
--command queue, `locked:1:0:KILL`: ~35 ms) left a lock naming a run whose folder never appeared;
the next `queue run` started the item under a new run id, met that stale lock and refused the item
(exit 1), every night until someone broke the lock by hand. Nothing had been touched on any host.

Now the item records the run's folder just before its testbeds are locked (SweepRequest.on_locking),
and the next `queue run` starts that run again under the same id: the sweep takes over its own dead
start's lock, and says so in one line. Any other stale lock is refused as before, and so is the
run's own when a host holds its changes (its folder deleted after it edited them). The whole
`api.run` path runs on the fakes (no process, no socket); the kill is played by a death right after
the lock was written (the lock left naming a dead pid, the item put back as a killed runner's is)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.edges.lock import TestbedLock
from orchestrator.sweep import api
from orchestrator.team.queue import NewItem, Queue, QueueItem, QueueRunResult, run_queue

from .helpers import queue_sweep

DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process
ROLES = ("prefill", "decode")


class Killed(BaseException):
    """The controller's death (no handler runs: not an Exception, not an interrupt)."""


def lock_of(fleet: Fleet, role: str) -> dict[str, object] | None:
    data = fleet.transports[("A", role)].files.get(f"/etc/orch/{role}.env.orch-lock")
    return None if data is None else dict(json.loads(data))


def set_lock(fleet: Fleet, role: str, **changes: object) -> None:
    path = f"/etc/orch/{role}.env.orch-lock"
    holder = {**json.loads(fleet.transports[("A", role)].files[path]), **changes}
    fleet.transports[("A", role)].files[path] = (json.dumps(holder) + "\n").encode()


def dies_once_locked(monkeypatch: pytest.MonkeyPatch, fleet: Fleet) -> None:
    """The first acquire writes its locks, then its controller dies: the locks name a dead pid."""
    real, died = TestbedLock.acquire, []

    def acquire(self: TestbedLock, *, break_stale: bool = False) -> None:
        real(self, break_stale=break_stale)
        if not died:
            died.append(True)
            for role in ROLES:
                set_lock(fleet, role, pid=DEAD_PID)
            raise Killed

    monkeypatch.setattr(TestbedLock, "acquire", acquire)


@pytest.fixture
def killed_between_lock_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Fleet, Queue, QueueItem, Path]]:
    """The state the kill leaves: the item back in line naming its run's folder, never made; the
    testbed's locks naming that run, held by a dead pid; no host edited."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    monkeypatch.setattr(
        api, "preflight_testbeds", lambda deployments, plan, inventory: []
    )  # the fakes' URLs resolve nowhere
    m, i = write_files(tmp_path, fake_matrix("early", 1), ["A"])
    reports = tmp_path / "reports"
    q = Queue(reports / "queue.db")
    item = q.add_item(NewItem(m, i, "A"))
    dies_once_locked(monkeypatch, fleet)
    with pytest.raises(Killed):
        run_queue(q, queue_sweep(reports, api))
    left = q.get(item.id)
    assert left.state == "queued" and left.run_dir is not None, left  # recorded before the lock
    run_dir = Path(left.run_dir)
    assert run_dir.parent == reports.resolve() and not run_dir.exists()
    for role in ROLES:
        assert lock_of(fleet, role) == {**(lock_of(fleet, role) or {}), "run_id": run_dir.name, "pid": DEAD_PID}
    assert [fleet.file("A", r) for r in ROLES] == [b"P=0\n", b"D=0\n"]  # nothing was edited
    yield fleet, q, item, run_dir
    q.close()


def again(q: Queue, reports: Path) -> tuple[QueueRunResult, list[str]]:
    warned: list[str] = []
    return run_queue(q, queue_sweep(reports, api, warned.append)), warned


def test_the_next_queue_run_starts_that_run_again_taking_its_stale_lock(killed_between_lock_and_folder) -> None:  # type: ignore[no-untyped-def]
    fleet, q, item, run_dir = killed_between_lock_and_folder
    result, warned = again(q, run_dir.parent)
    after = q.get(item.id)
    assert result.exit_code == 0 and result.blocked == [], result
    assert (after.state, after.run_dir) == ("completed", str(run_dir)), after  # the run it meant, under its id
    assert (run_dir / "run.json").is_file()
    assert [p.name for p in run_dir.parent.iterdir() if p.is_dir()] == [run_dir.name]  # no second run
    (said,) = [w for w in warned if "took over" in w]  # said once, for both hosts
    assert said.startswith(f"testbed 'A': took over the stale lock of run {run_dir.name} by ")
    assert f"pid {DEAD_PID}" in said and "starts again as new" in said
    assert said.count("on prefill (") == 1 and said.count(", decode (") == 1  # both hosts, one line
    assert [fleet.extra_files("A", r) for r in ROLES] == [[], []]  # no lock, no copy left
    assert [fleet.file("A", r) for r in ROLES] == [b"P=0\n", b"D=0\n"]


def test_another_runs_stale_lock_is_still_refused(killed_between_lock_and_folder) -> None:  # type: ignore[no-untyped-def]
    fleet, q, item, run_dir = killed_between_lock_and_folder
    for role in ROLES:
        set_lock(fleet, role, run_id="20261206-000000-other", run_dir=str(run_dir.parent / "20261206-000000-other"))
    result, warned = again(q, run_dir.parent)
    assert result.exit_code == 1 and result.blocked == [item.id], result
    assert q.get(item.id).state == "queued" and not any("took over" in w for w in warned)
    assert [(lock_of(fleet, r) or {}).get("run_id") for r in ROLES] == ["20261206-000000-other"] * 2  # untouched
    assert not run_dir.exists()


def test_its_own_lock_is_refused_when_a_host_holds_its_changes(killed_between_lock_and_folder) -> None:  # type: ignore[no-untyped-def]
    """The folder gone does not prove nothing was edited (someone deleted it): the hosts' copies
    of their env files say what the run left, and the lock stays as it is."""
    fleet, q, item, run_dir = killed_between_lock_and_folder
    decode = fleet.transports[("A", "decode")]
    decode.files[f"/etc/orch/decode.env.orch-backup-{run_dir.name}"] = b"D=0\n"
    decode.files["/etc/orch/decode.env"] = b"D=1\n"  # its cell's value, never restored
    result, warned = again(q, run_dir.parent)
    after = q.get(item.id)
    assert result.exit_code != 0 and after.state == "failed", (result, after)
    assert f"still holds the changes of an earlier start of this run {run_dir.name}" in after.message
    assert not any("took over" in w for w in warned)
    assert [(lock_of(fleet, r) or {}).get("pid") for r in ROLES] == [DEAD_PID, DEAD_PID]  # not taken
    assert decode.files["/etc/orch/decode.env"] == b"D=1\n" and not run_dir.exists()


def test_only_a_folder_of_this_reports_folder_that_was_never_made_is_unborn(tmp_path: Path) -> None:
    from orchestrator.team.overnight import unborn_run

    reports = tmp_path / "reports"
    (reports / "made").mkdir(parents=True)
    with Queue(tmp_path / "q.db") as q:
        item = q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "inv.yaml", None))
        assert unborn_run(item, reports) is None  # no run recorded
        q.set_run_dir(item.id, reports / "never")
        assert unborn_run(q.get(item.id), reports) == reports.resolve() / "never"
        q.set_run_dir(item.id, reports / "made")
        assert unborn_run(q.get(item.id), reports) is None  # made: resumed, or started anew, as before
        q.set_run_dir(item.id, tmp_path / "elsewhere" / "never")  # another controller's folder
        assert unborn_run(q.get(item.id), reports) is None
