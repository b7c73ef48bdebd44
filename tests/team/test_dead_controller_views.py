"""A run whose controller was killed (-9) mid-sweep reads the same in every view, and a run not
finished never gets the advice meant for a finished one.

From an audit: after a kill -9 of the queue worker, `orch status --json` and /api/status said
"state": "running" with an ETA in the future (the status file's own `state` overwrote the
liveness answer), /api/runs and the runs index said running, while `orch status` and /status
said stale. And the index's headline of a run cut off after 3 of 16 trials (replicates: 2) was
"No finding ... one trial per cell ... rerun with replicates >= 2", where a run at 6 of 16 said
"The run is running: 6 of 16 ...": the rounds had simply not finished.

No process is started: a controller is dead here when status.json names this process's pid with
another start time (a reused pid), which is what store.liveness checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run

from orchestrator.cli.main import main
from orchestrator.report.page import environment
from orchestrator.report.render import fresh_summary, load_report
from orchestrator.report.site import index_page, run_entries
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.team.livestatus import StatusFile, snapshot
from orchestrator.team.notify import summarize_run
from orchestrator.team.queue import Claimer, Queue
from orchestrator.team.serve import STATUS_TEMPLATE, runs_json, status_json

RUN = "20260509-070000-q_ablation-q1"


def cut_off_run(reports: Path, done: int, *, alive: bool, run: str = RUN) -> Path:
    """A run of 8 cells x 2 replicates whose manifest says running, `done` trials journaled, and
    a status.json naming its controller: this process (alive) or a dead one (same pid, another
    start time: the pid was reused)."""
    manifest, records = synthetic_run(replicates=2, failures=False, status="running", run_id=run)
    manifest = manifest.model_copy(update={"ended": None})
    run_dir = reports / run
    run_dir.mkdir(parents=True)
    save_manifest(run_dir, manifest)
    ordered = sorted(records, key=lambda r: r.trial)[:done]
    (run_dir / "journal.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in ordered))
    me = Claimer.current()
    status = StatusFile(
        run_id=run,
        name=manifest.name,
        testbed=manifest.testbed,
        host=me.host,
        pid=me.pid,
        pid_start=me.start if alive else me.start + 1,
        state="running",  # what a controller killed with -9 leaves: it never wrote "finished"
        started=manifest.started,
        updated=manifest.started,
        done=done,
        total=len(manifest.plan),
        failed=0,
        current_trial=done,
        current_cell=manifest.plan[done].cell,
        eta_s=30.0,
        eta_at="2999-01-01T00:00:00+00:00",  # an ETA in the future
    )
    (run_dir / "status.json").write_text(status.model_dump_json())
    return run_dir


def test_a_dead_controllers_run_is_stale_in_every_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, 8, alive=False)

    api = status_json(snapshot(reports))  # /api/status
    (shown,) = api["runs"]  # type: ignore[misc]
    assert shown["state"] == "stale" and shown["eta_at"] is None and shown["eta_s"] is None, shown
    assert shown["run_status"] == "running"  # what its manifest still says

    assert main(["status", "--reports", str(reports), "--json"]) == 0  # orch status --json
    assert json.loads(capsys.readouterr().out)["runs"][0]["state"] == "stale"
    assert main(["status", "--reports", str(reports)]) == 0  # orch status (the table)
    assert re.search(rf"{RUN}\s*│\s*stale", capsys.readouterr().out)

    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(reports), refresh=5, csp="")  # /status
    assert 'badge stale">stale' in page and "its controller is gone" in page

    assert [e.status for e in run_entries(reports, fresh_summary)] == ["stale"]  # the runs index
    assert [r["status"] for r in runs_json(reports)] == ["stale"]  # /api/runs
    index = index_page(reports, fresh_summary)
    assert 'badge stale">stale' in index and "(live status)" in index  # its link shows its live status

    assert summarize_run(run_dir).status == "stale"  # orch notify
    assert load_report(run_dir).status == "stale"  # its report page


def test_a_live_controllers_run_stays_running(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    cut_off_run(reports, 8, alive=True)
    (shown,) = status_json(snapshot(reports))["runs"]  # type: ignore[misc]
    assert shown["state"] == "running" and shown["eta_at"] == "2999-01-01T00:00:00+00:00"
    assert [e.status for e in run_entries(reports, fresh_summary)] == ["running"]


@pytest.mark.parametrize("alive", [True, False], ids=["running", "stale"])
@pytest.mark.parametrize("done", [3, 6, 8])
def test_a_cut_off_runs_headline_says_how_far_it_got_and_never_to_rerun(tmp_path: Path, alive: bool, done: int) -> None:
    """3 and 6 of 16 are the audit's two runs; 8 of 16 is one whole round: one trial per cell."""
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, done, alive=alive)
    (entry,) = run_entries(reports, fresh_summary)
    lead = f"The run is running: {done} of 16" if alive else "its controller is gone"
    assert lead in entry.headline.split(".")[0], entry.headline
    assert "rerun" not in entry.headline, entry.headline
    assert summarize_run(run_dir).headline == entry.headline  # the webhook's words are the index's
    for finding in load_report(run_dir).headline:  # nor anywhere in its report's headline
        assert "rerun" not in finding.text, finding.text


def test_one_trial_per_cell_planned_is_still_told_to_rerun_with_replicates(tmp_path: Path) -> None:
    """The advice stays where it is true: a finished run planned with one trial per cell."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    run_dir = tmp_path / "reports" / manifest.run_id
    run_dir.mkdir(parents=True)
    save_manifest(run_dir, manifest)
    (run_dir / "journal.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    (entry,) = run_entries(tmp_path / "reports", fresh_summary)
    assert entry.status == "completed" and "rerun with replicates >= 2" in entry.headline, entry.headline


def test_the_dead_controllers_queue_item_is_stale_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its queue item still says running until the next `queue run` takes it back: the views say
    stale, as of its run, and what happens next."""
    reports = tmp_path / "reports"
    cut_off_run(reports, 8, alive=False)
    me = Claimer.current()
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/q1.yaml"), Path("/i.yaml"), None)
        q.add(Path("/m/q2.yaml"), Path("/i.yaml"), None)
        q.claim(claimer=me)  # item 1: a live worker
        q.claim(claimer=Claimer(me.host, me.pid, me.start + 1))  # item 2: the worker killed with -9
    (live, dead) = status_json(snapshot(reports))["queue"]  # type: ignore[misc]
    assert (live["state"], dead["state"]) == ("running", "stale")
    assert "the next `orch queue run` takes it back" in dead["message"]
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"1\s*│\s*running", listed) and re.search(r"2\s*│\s*stale", listed), listed


def test_a_stale_runs_way_back_names_its_folder_in_every_live_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From an audit (kill -9 of a `queue run` mid-item): /status said "its controller is gone: orch
    resume 20261205-095233-qa-q3", the bare folder name, which `orch resume` refuses from any
    folder but the reports folder ("not a run directory"); `orch status` and the JSON views named
    no way back at all, though the hosts hold the run's edits and lock until it is resumed or
    restored. Each now names the run's folder as a path that works from anywhere."""
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, 8, alive=False).resolve()
    monkeypatch.chdir(tmp_path)
    resume, restore = f"orch resume {run_dir}", f"orch restore {run_dir}"

    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(Path("reports")), refresh=5, csp="")
    assert resume in page and restore in page, page  # /status

    (shown,) = status_json(snapshot(Path("reports")))["runs"]  # type: ignore[misc]
    assert resume in str(shown["way_back"]) and restore in str(shown["way_back"]), shown  # /api/status

    assert main(["status", "--reports", "reports"]) == 0  # orch status (the table)
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert resume in out and restore in out, out


def test_a_live_or_finished_run_names_no_way_back(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    cut_off_run(reports, 8, alive=True)
    (shown,) = status_json(snapshot(reports))["runs"]  # type: ignore[misc]
    assert shown["way_back"] == ""


def test_an_interrupted_runs_resume_command_is_named_in_every_live_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a walk (Ctrl-C at 23 of 96 trials): `orch status` listed the run as interrupted and
    nothing else; the command that takes it up again was printed once, by the run itself, and the
    status views are where one looks the next morning."""
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, 8, alive=True).resolve()
    manifest = load_manifest(run_dir)
    save_manifest(run_dir, manifest.model_copy(update={"status": "interrupted", "ended": manifest.started}))
    status = StatusFile.model_validate_json((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(status.model_copy(update={"state": "finished"}).model_dump_json())
    monkeypatch.chdir(tmp_path)
    resume = f"orch resume {run_dir}"

    (shown,) = status_json(snapshot(Path("reports")))["runs"]  # type: ignore[misc]
    assert shown["run_status"] == "interrupted" and resume in str(shown["way_back"]), shown  # /api/status
    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(Path("reports")), refresh=5, csp="")
    assert resume in page, page  # /status
    assert main(["status", "--reports", "reports"]) == 0  # orch status
    out = " ".join(capsys.readouterr().out.split())
    assert f"interrupted: continue with {resume}" in out, out
    assert "orch restore" not in out  # its hosts were put back as it stopped


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_finished_run_names_no_resume(tmp_path: Path, status: str) -> None:
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, 15, alive=True)
    manifest = load_manifest(run_dir)
    save_manifest(run_dir, manifest.model_copy(update={"status": status, "ended": manifest.started}))
    state = StatusFile.model_validate_json((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(state.model_copy(update={"state": "finished"}).model_dump_json())
    (shown,) = status_json(snapshot(reports))["runs"]  # type: ignore[misc]
    assert (shown["run_status"], shown["way_back"]) == (status, ""), shown


def test_a_restored_runs_last_cell_is_not_shown_as_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """From walk10 (real hosts): after `orch restore` of a run killed with -9, `orch status` still
    showed a "current cell", a trial no longer running on hosts put back (restore rewrites run.json,
    not the dead controller's status.json). A cell is current only while its run runs or is stale
    (its hosts still on that cell)."""
    reports = tmp_path / "reports"
    run_dir = cut_off_run(reports, 8, alive=False)
    cell = StatusFile.model_validate_json((run_dir / "status.json").read_text()).current_cell
    assert cell and main(["status", "--reports", str(reports)]) == 0
    assert cell in " ".join(capsys.readouterr().out.split())  # stale: the hosts are on it
    manifest = load_manifest(run_dir)
    save_manifest(run_dir, manifest.model_copy(update={"status": "interrupted", "ended": manifest.started}))

    (shown,) = status_json(snapshot(reports))["runs"]  # type: ignore[misc]
    assert (shown["state"], shown["current_cell"], shown["current_trial"]) == ("finished", None, None), shown
    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(reports), refresh=5, csp="")
    assert cell.replace(",", ", ") not in page
    assert main(["status", "--reports", str(reports)]) == 0
    assert cell not in " ".join(capsys.readouterr().out.split())
