"""A queue item cut short is resumed, not started over, by a later `queue run` started from
another working directory (a timer installed from elsewhere, `orch queue run --reports /abs` from
$HOME): the item records its run dir resolved, the run's manifest names the queue's copies
relative to the run dir, and the queue writes the copies again before it resumes. A run.json of
an older orch (paths relative to its cwd) still resumes from that cwd. Found by review."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from helpers.manifests import planned

from orchestrator.sweep import api, session
from orchestrator.sweep.api import SweepRequest, _recorded_file, _recorded_paths
from orchestrator.sweep.progress import QuietProgress
from orchestrator.team.queue import Queue

from .helpers import REPO, make_site, matrix_text, orch_in_process, start_orch


class Connected(Exception):
    """Raised by the fake connect: resume found its files and got past every check."""


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(testbed):  # type: ignore[no-untyped-def]
        raise Connected(testbed.name)

    monkeypatch.setattr(session, "connect", connect)


def resume(run_dir: Path) -> None:
    api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)


def test_orch_resume_from_another_cwd_finds_the_copies_beside_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hosts: None
) -> None:
    _, manifest = planned()
    reports, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    reports.mkdir()
    elsewhere.mkdir()
    shutil.copy(REPO / "matrices/overlap_ablation.yaml", reports / ".queued-x.matrix.yaml")
    shutil.copy(REPO / "inventory/local.yaml", reports / ".queued-x.inventory.yaml")
    beside = {"matrix_path": "../.queued-x.matrix.yaml", "inventory_path": "../.queued-x.inventory.yaml"}
    session.create_run_dir(reports / "r1", manifest.model_copy(update=beside))
    monkeypatch.chdir(elsewhere)
    with pytest.raises(Connected):
        resume(reports / "r1")


def test_an_older_run_json_naming_files_from_its_cwd_resumes_from_that_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hosts: None
) -> None:
    _, manifest = planned()
    old = {"matrix_path": "matrices/overlap_ablation.yaml", "inventory_path": "inventory/local.yaml"}
    session.create_run_dir(tmp_path / "r1", manifest.model_copy(update=old))
    monkeypatch.chdir(REPO)
    with pytest.raises(Connected):
        resume(tmp_path / "r1")


def test_recorded_paths_work_from_any_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    (reports / "run1").mkdir(parents=True)
    elsewhere.mkdir()
    copy = reports / ".queued-x.matrix.yaml"
    copy.write_text("m")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("i")
    monkeypatch.chdir(tmp_path)
    request = SweepRequest(Path("reports/.queued-x.matrix.yaml"), Path("inv.yaml"), None)
    paths = _recorded_paths(request, reports / "run1")
    assert paths == {"matrix_path": "../.queued-x.matrix.yaml", "inventory_path": str(inventory)}
    monkeypatch.chdir(elsewhere)
    assert _recorded_file(paths["matrix_path"], reports / "run1").resolve() == copy
    assert _recorded_file(paths["inventory_path"], reports / "run1") == inventory


def test_an_older_manifests_cwd_relative_path_still_resumes_from_its_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "matrices").mkdir()
    (tmp_path / "matrices" / "x.yaml").write_text("m")
    (tmp_path / "reports" / "run1").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert _recorded_file("matrices/x.yaml", tmp_path / "reports" / "run1") == Path("matrices/x.yaml")


@pytest.mark.sim
def test_a_cut_item_is_resumed_by_a_queue_run_from_another_cwd(tmp_path: Path) -> None:
    proj, other = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    other.mkdir()
    site = make_site(tmp_path / "site")
    (proj / "slow.yaml").write_text(matrix_text("slow", replicates=2, after_repro="sleep 0.3"))
    assert orch_in_process("queue", "add", "slow.yaml", "-i", str(site.inventory), cwd=proj).returncode == 0
    reports = proj / "reports"
    proc = start_orch("queue", "run", cwd=proj, log=tmp_path / "run1.log")
    try:
        _wait_for_a_trial(reports)
        proc.terminate()  # SIGTERM, as systemd stops it: the item stays resumable
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with Queue.in_reports(reports) as q:
        (item,) = q.items()
    assert item.state == "resumable" and item.run_dir is not None and Path(item.run_dir).is_absolute(), item
    for copy in reports.glob(".queued-*"):  # a cleaned reports folder: the item's text writes them again
        copy.unlink()
    done = orch_in_process("queue", "run", "--reports", str(reports), cwd=other)  # nothing signals it
    with Queue.in_reports(reports) as q:
        (item,) = q.items()
    assert done.returncode == 0 and item.state == "completed", (item, done.stdout[-2000:], done.stderr[-2000:])
    assert [p.name for p in reports.iterdir() if p.is_dir()] == [Path(item.run_dir or "").name]


def _wait_for_a_trial(reports: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = list(reports.glob("*/status.json"))
        if status and json.loads(status[0].read_text() or "{}").get("done", 0) >= 1:
            return
        time.sleep(0.1)
    raise AssertionError("no trial finished")
