"""What status.json says while a sweep runs (team.livestatus.LiveStatus): the trials done and
failed, and the ETA at this process's pace; a hunt, which has no total, says none. On a run folder
made as `orch run` makes it, with a hand-moved clock; no process is started."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.fakeclock import FakeClock
from helpers.status_runs import started_run

from orchestrator.store.rundir import RunDir
from orchestrator.team.livestatus import QUEUE_SHOWN, LiveStatus, live_runs, queue_shown
from orchestrator.team.queue import NewItem, Queue

RUN = "20261207-101500-counts"


def status_of(run_dir: Path) -> dict[str, object]:
    return json.loads(RunDir(run_dir).status_json.read_text())  # type: ignore[no-any-return]


def test_done_failed_and_the_eta_follow_the_trials_as_they_end(tmp_path: Path) -> None:
    run_dir, records = started_run(tmp_path, RUN)
    clock = FakeClock(1_800_000_000.0)
    live = LiveStatus(run_dir, clock=clock)
    live.start(total=16, done=0)
    clock.sleep(10.0)
    live.trial_done(records[0])
    clock.sleep(10.0)
    live.trial_done(records[1].model_copy(update={"status": "failed"}))
    status = status_of(run_dir)
    assert (status["done"], status["failed"], status["total"]) == (2, 1, 16)
    assert status["eta_s"] == 140.0  # 14 trials left at 10 s each, this process's pace
    assert live.error == ""


def test_a_hunt_has_no_total_and_so_no_eta(tmp_path: Path) -> None:
    run_dir, records = started_run(tmp_path, RUN, hunt=True)
    clock = FakeClock(1_800_000_000.0)
    live = LiveStatus(run_dir, clock=clock)
    live.start(total=16, done=0)
    clock.sleep(10.0)
    live.trial_done(records[0])
    status = status_of(run_dir)
    assert (status["done"], status["failed"], status["total"], status.get("eta_s")) == (1, 0, None, None)


def test_a_readable_run_has_no_unreadable_line(tmp_path: Path) -> None:
    run_dir, _ = started_run(tmp_path, RUN)
    LiveStatus(run_dir).start(total=16, done=0)
    [run] = live_runs(tmp_path)
    assert (run.unreadable, run.unreadable_line) == ("", "")
    RunDir(run_dir).status_json.write_text("{not json")
    [run] = live_runs(tmp_path)
    assert run.unreadable_line.startswith("status unreadable: "), run.unreadable_line


def test_the_status_views_show_the_first_queued_items_and_count_only_those_left_out(tmp_path: Path) -> None:
    with Queue(tmp_path / "queue.db") as q:
        items = [q.add_item(NewItem(Path(f"/m/{i}.yaml"), Path("/i/inv.yaml"), testbeds=("sim",))) for i in range(3)]
    shown, left_out = queue_shown(items)
    assert (len(shown), left_out) == (3, 0)
    shown, left_out = queue_shown(items * 20)  # 60 items: QUEUE_SHOWN of them, the rest counted
    assert (len(shown), left_out) == (QUEUE_SHOWN, 60 - QUEUE_SHOWN)
