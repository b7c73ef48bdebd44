"""The status views (/status, /api/status, `orch status`) cost what the runs they show cost: a
server's livestatus.StatusCache reads a run folder again only when its status.json or run.json
changed, judges a running run's controller again on every view (it may die without a file
changing), and answers as an uncached view does. A status file that cannot be read is listed with
the reason, not left out."""

from __future__ import annotations

import builtins
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers.serving import serving
from helpers.status_runs import DEAD_PID, ME, fake_dead, run, settled_cache, status

import orchestrator.team.livestatus as livestatus
from orchestrator.cli.main import main
from orchestrator.core.records import RunManifest
from orchestrator.report.page import environment
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.liveness import MAX_STATUS_BYTES
from orchestrator.store.manifest import save_manifest
from orchestrator.team.livestatus import LiveRun, StatusCache, live_runs, snapshot
from orchestrator.team.serve import STATUS_TEMPLATE, status_json


def mixed(reports: Path) -> dict[str, Path]:
    """Finished, running, stale, unrestored, damaged (status.json: not JSON, over the cap, not a
    status file; run.json: not JSON) and a folder without a status file."""
    runs = {
        "finished": run(reports, "20260501-finished", "completed", status("f")),
        "finished2": run(reports, "20260502-finished2", "failed", status("f2", updated="2026-01-03T00:00:00+00:00")),
        "running": run(reports, "20260503-running", "running", status("r", "running")),
        "dying": run(reports, "20260504-dying", "running", status("d", "running")),
        "stale": run(reports, "20260505-stale", "running", status("s", "running", pid=DEAD_PID)),
        "unrestored": run(reports, "20260506-unrestored", "completed", status("u", not_restored=("decode",))),
        "not-json": run(reports, "20260507-not-json", "completed", "{half"),
        "not-status": run(reports, "20260508-not-status", "running", '{"run_id": 3}'),
        "over-cap": run(reports, "20260509-over-cap", "completed", None),
        "bad-manifest": run(reports, "20260510-bad-manifest", "completed", status("b")),
        "no-status": run(reports, "20260511-no-status", "completed", None),
    }
    with open(runs["over-cap"] / "status.json", "wb") as f:
        f.truncate(MAX_STATUS_BYTES + 1)  # sparse
    (runs["bad-manifest"] / "run.json").write_text("{")
    return runs


@pytest.fixture
def dead(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    return fake_dead(monkeypatch)


def shown(runs: tuple[LiveRun, ...]) -> list[tuple[str, str, str]]:
    return [(r.directory, r.state, r.unreadable) for r in runs]


def test_every_view_of_the_cache_equals_an_uncached_one(tmp_path: Path, dead: set[int]) -> None:
    """Over a mixed folder, after each change a cached view (the server's, kept from the views
    before) answers exactly as a view with nothing kept."""
    reports = tmp_path / "reports"
    runs = mixed(reports)
    cache = settled_cache()

    def same() -> tuple[LiveRun, ...]:
        every = live_runs(reports, finished=1000, cache=cache)  # shown or not (5 finished are)
        assert every == live_runs(reports, finished=1000)
        cached, fresh = snapshot(reports, cache).runs, snapshot(reports).runs
        assert cached == fresh
        return cached

    changes: list[Callable[[], object]] = [
        lambda: None,
        lambda: dead.add(ME.pid + 2),  # no controller of ours: nothing changes
        lambda: write_json_atomic(runs["dying"] / "status.json", status("d", "running", pid=ME.pid + 1)),
        lambda: dead.add(ME.pid + 1),  # `dying`'s controller killed with -9: no file changes
        lambda: write_json_atomic(runs["unrestored"] / "status.json", status("u")),  # `orch restore` put it back
        lambda: (runs["finished"] / "status.json").write_text("x" * 10),  # damaged in place
        lambda: write_json_atomic(runs["not-json"] / "status.json", status("nj")),  # repaired
        lambda: save_manifest(runs["running"], _manifest(runs["running"], "interrupted")),
        lambda: shutil.rmtree(runs["finished2"]),
        lambda: run(reports, "20260512-added", "running", status("a", "running")),
    ]
    for change in changes:
        change()
        same()
    states = {d: state for d, state, _ in shown(same())}
    assert states["20260504-dying"] == "stale" and states["20260512-added"] == "running"
    assert states["20260510-bad-manifest"] == "unreadable"  # its run.json torn: listed (it was left out)
    assert "20260511-no-status" not in states  # as before: its run.json reads, it has no status file
    assert len(cache) == len([d for d in reports.iterdir() if d.is_dir()])  # every run folder, none gone kept


def _manifest(d: Path, run_status: str) -> RunManifest:
    from orchestrator.store.manifest import load_manifest

    return load_manifest(d, plan=False).model_copy(update={"status": run_status})


def test_a_second_view_of_finished_runs_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finished runs' files unchanged: the second view stats them and opens none (before: every
    status.json read on every view, every 5 s)."""
    reports = tmp_path / "reports"
    for i in range(20):
        run(reports, f"20260501-{i:02d}", "completed", status(f"r{i}"))
    cache = settled_cache()
    first = snapshot(reports, cache).runs

    def refused(*args: object, **kw: object) -> object:
        raise AssertionError(f"a file was opened: {args[0]!r}")

    monkeypatch.setattr(builtins, "open", refused)
    monkeypatch.setattr(os, "open", refused)
    assert snapshot(reports, cache).runs == first and len(first) == 5


def test_finished_runs_not_shown_are_kept_slim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of 20 finished runs the cache keeps whole the 5 newest (shown) and of the others when they
    were updated only; the newest removed, the 6th is read again, the view as an uncached one."""
    reports = tmp_path / "reports"
    for i in range(20):
        run(reports, f"20260501-{i:02d}", "completed", status(f"r{i}", updated=f"2026-01-02T00:00:{i:02d}+00:00"))
    calls: list[str] = []
    real = livestatus._live_run
    monkeypatch.setattr(livestatus, "_live_run", lambda d: calls.append(d.name) or real(d))
    cache = settled_cache()
    assert [r.directory for r in snapshot(reports, cache).runs] == [f"20260501-{i:02d}" for i in (19, 18, 17, 16, 15)]
    kept = cache._kept  # noqa: SLF001 - what it holds is the point
    assert sorted(n for n, k in kept.items() if k.run is not None) == [f"20260501-{i:02d}" for i in range(15, 20)]
    assert all(k.slim and k.updated for k in kept.values() if k.run is None) and len(kept) == 20
    calls.clear()
    shutil.rmtree(reports / "20260501-19")
    assert snapshot(reports, cache).runs == snapshot(reports).runs
    assert calls[0] == "20260501-14" and len(calls) == 1 + 19  # the 6th read again, then the uncached view's 19
    assert len(cache) == 19


def test_a_file_written_in_the_last_seconds_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stamp taken in the tick of a write can equal the next write's (coarse file times): a run
    is kept only once its files are SETTLE_NS old, as the index's EntryCache keeps its entries."""
    reports = tmp_path / "reports"
    run(reports, "20260501-a", "completed", status("a"))
    calls: list[Path] = []
    real = livestatus._live_run
    monkeypatch.setattr(livestatus, "_live_run", lambda d: calls.append(d) or real(d))
    fresh = StatusCache()  # the real clock: the files were written just now
    snapshot(reports, fresh), snapshot(reports, fresh)
    assert len(calls) == 2 and len(fresh) == 0
    aged = settled_cache()
    snapshot(reports, aged), snapshot(reports, aged)
    assert len(calls) == 3 and len(aged) == 1


def test_a_status_file_that_cannot_be_read_is_listed_with_why(
    tmp_path: Path, dead: set[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Over the cap, not JSON, not a status file: each run listed as unreadable with the reason in
    /api/status, /status and `orch status` (they were left out: no run at all to be seen)."""
    reports = tmp_path / "reports"
    mixed(reports)
    snap = snapshot(reports)
    why = {r.directory: r.unreadable for r in snap.runs if r.state == "unreadable"}
    assert why == {
        "20260507-not-json": "not JSON at line 1 (key must be a string, column 2)",  # where it breaks
        "20260508-not-status": "not an orch status file (12 errors, first: run_id: Input should be a valid string)",
        "20260509-over-cap": "over 1 MiB",
        "20260510-bad-manifest": "not JSON at line 1 (EOF while parsing an object, column 1)",  # its run.json
    }
    api = {r["directory"]: r for r in status_json(snap)["runs"]}  # type: ignore[attr-defined]
    assert api["20260509-over-cap"]["state"] == "unreadable" and api["20260509-over-cap"]["unreadable"] == "over 1 MiB"
    assert (
        api["20260509-over-cap"]["name"] == _manifest(reports / "20260509-over-cap", "completed").name
    )  # its manifest's
    assert api["20260501-finished"]["unreadable"] == ""
    page = environment().get_template(STATUS_TEMPLATE).render(s=snap, refresh=5, csp="")
    assert page.count("status unreadable: ") == 3 and "status unreadable: over 1 MiB" in page
    assert main(["status", "--reports", str(reports)]) == 0
    out = capsys.readouterr().out
    assert "20260509-over-cap: status unreadable: over 1 MiB" in out
    assert "20260507-not-json: status unreadable: not JSON at line 1 (key must be a string, column 2)" in out


def test_the_server_keeps_what_it_read_between_status_views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTP: the second /api/status and /status read no run folder again (the server held
    none between views: every view read every folder)."""
    reports = tmp_path / "reports"
    for i in range(3):
        run(reports, f"20260501-{i:02d}", "completed", status(f"r{i}"))
    monkeypatch.setattr(livestatus, "SETTLE_NS", -60 * 10**9)  # the files count as settled at once
    calls: list[Path] = []
    real = livestatus._live_run
    monkeypatch.setattr(livestatus, "_live_run", lambda d: calls.append(d) or real(d))
    with serving(reports) as url, httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
        first = http.get("/api/status").json()["runs"]
        assert len(calls) == 3 and len(first) == 3
        assert http.get("/api/status").json()["runs"] == first and http.get("/status").status_code == 200
        assert len(calls) == 3
