"""LiveStatus (the status.json progress sink) and the reader shared by `orch status` / `orch serve`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.errors import OrchError
from orchestrator.report.page import environment
from orchestrator.store.manifest import save_manifest
from orchestrator.store.stamps import SETTLE_NS
from orchestrator.sweep.progress import QuietProgress, Tee
from orchestrator.team import livestatus
from orchestrator.team.livestatus import (
    QUEUE_SHOWN,
    LiveStatus,
    StatusCache,
    StatusFile,
    item_view,
    judge,
    live_runs,
    read_queue,
    snapshot,
)
from orchestrator.team.queue import Claimer, Queue
from orchestrator.team.serve import STATUS_TEMPLATE


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def running_run(tmp_path: Path, run_id: str = "20260509-070000-a") -> tuple[Path, RunManifest, list[TrialRecord]]:
    """A run dir whose manifest says running and whose journal is empty (the runner writes it)."""
    manifest, records = synthetic_run(replicates=1, failures=False, run_id=run_id)
    manifest = manifest.model_copy(update={"status": "running", "ended": None})
    run_dir = tmp_path / "reports" / run_id
    run_dir.mkdir(parents=True)
    save_manifest(run_dir, manifest)
    return run_dir, manifest, sorted(records, key=lambda r: r.trial)


def read(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "status.json").read_text())


def test_status_file_follows_the_sweep(tmp_path: Path) -> None:
    run_dir, manifest, records = running_run(tmp_path)
    clock = Clock()
    live = LiveStatus(run_dir, clock=clock)
    live.start(8, 0)
    s = read(run_dir)
    assert (s["state"], s["done"], s["total"], s["failed"]) == ("running", 0, 8, 0)
    assert s["current_trial"] == 0 and s["current_cell"] == manifest.plan[0].cell
    assert s["eta_s"] is None and s["pid"] == Claimer.current().pid and s["testbed"] == manifest.testbed
    assert s["name"] == manifest.name and s["run_id"] == manifest.run_id

    clock.t += 10
    live.trial_done(records[0])
    clock.t += 20
    live.trial_done(records[1].model_copy(update={"status": "failed", "metrics": {}}))
    s = read(run_dir)
    assert (s["done"], s["failed"], s["current_trial"]) == (2, 1, 2)
    assert s["current_cell"] == manifest.plan[2].cell
    assert s["eta_s"] == pytest.approx(15.0 * 6)  # 30 s for 2 trials, 6 left
    assert "FAILED" in str(s["last"]) and manifest.plan[1].cell in str(s["last"])

    live.note("deadline reached: no new trial starts")
    assert read(run_dir)["note"] == "deadline reached: no new trial starts"
    live.stop()
    s = read(run_dir)
    assert s["state"] == "finished" and s["current_cell"] is None and s["eta_s"] is None
    assert not list(run_dir.glob(".status.json*")), "temp files left behind"


def test_resumed_run_starts_at_the_first_unfinished_trial(tmp_path: Path) -> None:
    run_dir, manifest, records = running_run(tmp_path)
    with (run_dir / "journal.jsonl").open("w") as f:
        for r in (records[0], records[1], records[3]):
            f.write(r.model_dump_json() + "\n")
    live = LiveStatus(run_dir)
    live.start(8, 3)
    s = read(run_dir)
    assert (s["done"], s["current_trial"], s["current_cell"]) == (3, 2, manifest.plan[2].cell)
    live.trial_done(records[2])
    assert read(run_dir)["current_trial"] == 4  # 3 was done before the resume


def test_a_resumed_run_starts_at_a_trial_cut_off_during_its_retry(tmp_path: Path) -> None:
    """Trial 1's attempt 1 failed and was journaled `retried`; the controller died in attempt 2.
    Resume runs trial 1 again, but the status said trial 2 was running (it counted the retried
    attempt as the trial's end); it reads the journal as resume does now (trial_statuses)."""
    run_dir, manifest, records = running_run(tmp_path)
    cut = records[1].model_copy(update={"status": "failed", "retried": True, "metrics": {}})
    with (run_dir / "journal.jsonl").open("w") as f:
        for r in (records[0], cut):
            f.write(r.model_dump_json() + "\n")
    live = LiveStatus(run_dir)
    live.start(8, 1)
    s = read(run_dir)
    assert (s["done"], s["current_trial"], s["current_cell"]) == (1, 1, manifest.plan[1].cell)


def test_an_unwritable_status_never_fails_the_sweep(tmp_path: Path) -> None:
    run_dir, _, records = running_run(tmp_path)
    (run_dir / "status.json").mkdir()  # rename over a directory fails
    live = LiveStatus(run_dir)
    live.start(8, 0)
    live.trial_done(records[0])
    live.stop()
    assert live.error and (run_dir / "status.json").is_dir()


def test_missing_manifest_makes_a_silent_sink(tmp_path: Path) -> None:
    live = LiveStatus(tmp_path)
    live.start(3, 0)
    live.note("x")
    live.stop()
    assert "not a run directory" in live.error and not (tmp_path / "status.json").exists()


def test_tee_forwards_everything(tmp_path: Path) -> None:
    run_dir, _, records = running_run(tmp_path)
    calls: list[str] = []

    class Spy(QuietProgress):
        def start(self, total: int, done: int) -> None:
            calls.append(f"start {total} {done}")

        def trial_done(self, record: TrialRecord) -> None:
            calls.append(f"done {record.trial}")

        def retotal(self, left: int) -> None:
            calls.append(f"retotal {left}")

        def note(self, message: str) -> None:
            calls.append(f"note {message}")

        def stop(self) -> None:
            calls.append("stop")

    tee = Tee(Spy(), LiveStatus(run_dir))
    tee.start(8, 0)
    tee.trial_done(records[0])
    tee.retotal(3)  # an adaptive sweep stopped cells: 1 done + 3 left
    tee.note("hi")
    tee.stop()
    assert calls == ["start 8 0", "done 0", "retotal 3", "note hi", "stop"]
    assert read(run_dir)["done"] == 1 and read(run_dir)["total"] == 4


def status(**kw: object) -> StatusFile:
    me = Claimer.current()
    base = dict(
        run_id="r",
        name="n",
        testbed="t",
        host=me.host,
        pid=me.pid,
        pid_start=me.start,
        state="running",
        started="2026-01-01T00:00:00+00:00",
        updated="2026-01-01T00:00:00+00:00",
        done=1,
        total=2,
        failed=0,
    )
    return StatusFile(**{**base, **kw})  # type: ignore[arg-type]


def test_judge() -> None:
    me = Claimer.current()
    assert judge(status(), "running") == "running"
    assert judge(status(pid_start=me.start + 1), "running") == "stale"  # its process is gone
    assert judge(status(pid_start=me.start + 1), "interrupted") == "finished"
    assert judge(status(state="finished"), "completed") == "finished"
    assert judge(status(state="finished"), "running") == "running"  # writing its report
    assert judge(status(host="elsewhere", pid_start=0), "running") == "running"  # cannot tell: trust it


@pytest.mark.process
def test_live_runs_and_queue_view(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    run_a, _, records = running_run(tmp_path, "20260509-070000-a")
    run_b, _, _ = running_run(tmp_path, "20260509-080000-b")
    LiveStatus(run_a).start(8, 0)
    # b's controller was killed (-9): it wrote `running` and is gone
    proc = subprocess.Popen(["true"])
    proc.wait()
    (run_b / "status.json").write_text(status(run_id=run_b.name, pid=proc.pid, pid_start=1).model_dump_json())
    done_manifest, done_records = synthetic_run(replicates=1, run_id="20260508-070000-old")
    write_run(reports / "20260508-070000-old", done_manifest, done_records)
    (reports / "20260508-070000-old" / "status.json").write_text(status(state="finished").model_dump_json())
    (reports / "not-a-run").mkdir()

    runs = live_runs(reports)
    assert [(r.directory, r.state) for r in runs] == [  # active ones by start, then finished ones
        ("20260509-080000-b", "stale"),
        ("20260509-070000-a", "running"),
        ("20260508-070000-old", "finished"),
    ]
    assert runs[0].percent == 50.0 and runs[1].percent == 0.0 and runs[2].run_status == "completed"

    assert read_queue(reports) == ([], "")  # no queue.db: none, none created, and nothing to say
    assert not (reports / "queue.db").exists()
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/x.yaml"), Path("/i.yaml"), None, 2, ("https://hooks.example/secret",))
    items, unreadable = read_queue(reports)
    assert unreadable == ""
    view = [item_view(i) for i in items]
    assert [(v.id, v.state, v.matrix, v.priority) for v in view] == [(1, "queued", "x.yaml", 2)]
    assert "secret" not in repr(view)
    snap = snapshot(reports)
    assert len(snap.runs) == 3 and len(snap.queue) == 1


def test_orch_status_prints_runs_and_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    run_a, manifest, records = running_run(tmp_path, "20260509-070000-a")
    live = LiveStatus(run_a)
    live.start(8, 0)
    live.trial_done(records[0])
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/nightly.yaml"), Path("/i.yaml"), "tb1")
    assert main(["status", "--reports", str(reports)]) == 0
    text = capsys.readouterr().out
    for part in ("20260509-070000-a", "running", "1/8", "nightly.yaml", "queued", "tb1"):
        assert part in text, part
    assert main(["status", "--reports", str(reports), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"][0]["current_cell"] == manifest.plan[1].cell and data["runs"][0]["done"] == 1
    assert data["queue"][0]["matrix"] == "nightly.yaml"


def test_orch_status_says_when_the_reports_folder_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --reports read like an idle machine ("no sweep is running in ..."); it is bad
    input (exit 2), as for every command that only reads the folder (`queue list` too)."""
    assert main(["status", "--reports", str(tmp_path / "nope")]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "nope: no such folder (check --reports)" in said, said
    assert main(["status", "--reports", str(tmp_path / "nope"), "--json"]) == 2
    assert not (tmp_path / "nope").exists()
    (tmp_path / "empty").mkdir()
    assert main(["status", "--reports", str(tmp_path / "empty")]) == 0
    assert "no such folder" not in capsys.readouterr().out


def test_a_long_queue_is_shown_as_its_first_items_and_a_count_of_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch status`, --json, /status and /api/status listed every pending item: 10,000 queued
    made `orch status` print 10,006 lines (6.6 s) and each JSON or page 2 MB. They show the first
    QUEUE_SHOWN, in the order `queue run` takes them, and how many more (`orch queue list` has all)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    with Queue.in_reports(reports) as q:
        for i in range(QUEUE_SHOWN + 150):
            q.add(Path(f"/m/n{i}.yaml"), Path("/i.yaml"), None, priority=1 if i == 199 else 0)
    snap = snapshot(reports)
    assert len(snap.queue) == QUEUE_SHOWN and snap.queue_more == 150
    assert [v.matrix for v in snap.queue[:2]] == ["n199.yaml", "n0.yaml"]  # run order: priority, then age
    assert main(["status", "--reports", str(reports)]) == 0
    text = capsys.readouterr().out
    assert "n48.yaml" in text and "n49.yaml" not in text and "… and 150 more queued" in text
    assert main(["status", "--reports", str(reports), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["queue"]) == QUEUE_SHOWN and data["queue_more"] == 150
    page = environment().get_template(STATUS_TEMPLATE).render(s=snap, refresh=5, csp="")
    assert page.count('<td class="num">') == 2 * QUEUE_SHOWN and "… and 150 more queued" in page


def test_the_status_views_read_an_unchanged_run_json_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/status and /api/status parsed every run's run.json on every view (20,000 runs: 20 s a view)."""
    import orchestrator.team.livestatus as livestatus

    manifest, records = synthetic_run(replicates=1, failures=False)
    run = write_run(tmp_path / "reports" / "20260509-a", manifest, records)
    (run / "status.json").write_text(status(state="finished").model_dump_json())
    read: list[Path] = []
    real = livestatus.manifest_or_why  # the status views' reading of run.json

    def counting(run_dir: Path) -> RunManifest | str:
        read.append(run_dir)
        return real(run_dir)

    monkeypatch.setattr(livestatus, "manifest_or_why", counting)
    cache = StatusCache(lambda: time.time_ns() + SETTLE_NS + 1)  # the files settled, as a past night's
    first = snapshot(tmp_path / "reports", cache)
    assert snapshot(tmp_path / "reports", cache).runs == first.runs
    assert len(read) == 1 and first.runs[0].run_status == manifest.status
    save_manifest(run, manifest.model_copy(update={"status": "interrupted"}))  # changed: read again
    assert snapshot(tmp_path / "reports", cache).runs[0].run_status == "interrupted" and len(read) == 2


def test_a_restore_whose_status_cannot_be_written_says_why_and_never_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RestoreStatus (`orch restore`, a resume's restore): the hosts are back whatever happens to
    the file; `error` keeps why it was not written (found by mutation testing: nothing read it)."""
    run_dir, _, _ = running_run(tmp_path)
    live = LiveStatus(run_dir)
    live.start(8, 0)  # a status file to update
    before = (run_dir / "status.json").read_bytes()

    def disk_full(path: Path, value: object) -> None:
        raise OrchError(f"{path}: No space left on device")

    monkeypatch.setattr(livestatus, "write_json_atomic", disk_full)
    restore = livestatus.RestoreStatus(run_dir)
    restore.restore_ended(["decode"])
    assert restore.error == f"{run_dir / 'status.json'}: No space left on device"
    assert (run_dir / "status.json").read_bytes() == before
