"""`orch serve` keeps each run's index entry between page views (report.site.EntryCache) and reads
a run folder again only when a file it was read from changed, or its controller died: 2,000 runs
took seconds a view, re-read whole each time. Never a stale page: every view here is checked
against an uncached one (what `write_index` writes), after each kind of change.

No process is started: a controller dies here by store.liveness.process_alive answering no."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import serving

import orchestrator.report.render as render
import orchestrator.report.site as site
import orchestrator.store.liveness as liveness
from orchestrator.core.records import RunManifest
from orchestrator.report.render import fresh_summary, write_report_and_summary
from orchestrator.report.site import EntryCache, index_page, run_entries, write_index
from orchestrator.report.summary import RunSummary
from orchestrator.report.trends import TREND_RUNS
from orchestrator.store.liveness import StatusFile
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.processes import process_start

KEPT = ("run.json", "journal.jsonl", "summary.json")  # what the index reads of a finished run


def later() -> int:
    """A clock a minute ahead: every file here counts as written long before the view (settled)."""
    return time.time_ns() + 60 * 10**9


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run with its report and summary.json, copied to make the runs of a test."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    run = write_run(tmp_path_factory.mktemp("seed") / manifest.run_id, manifest, records)
    write_report_and_summary(run)
    return run


def runs(reports: Path, seed: Path, n: int, *, summary: bool = True) -> list[Path]:
    made = []
    for i in range(n):
        run = reports / f"20260509-{i:06d}-x"
        run.mkdir(parents=True)
        for name in KEPT if summary else KEPT[:2]:
            shutil.copy2(seed / name, run / name)  # summary.json stays newer than its inputs
        made.append(run)
    return made


class Counting:
    """fresh_summary, counting the runs it rebuilds: a run without summary.json is rebuilt on each read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __call__(self, run_dir: Path, manifest: RunManifest | None = None) -> RunSummary:
        self.read.append(run_dir.name)
        return fresh_summary(run_dir, manifest)


def same_as_uncached(reports: Path, cache: EntryCache, rebuild: Counting) -> str:
    """The cached page, checked equal to the uncached one (read after it: nothing cached in it)."""
    page = index_page(reports, rebuild, cache)
    assert page == index_page(reports, fresh_summary)
    return page


def test_a_second_view_reads_no_run_again_and_a_changed_run_alone_is_read(tmp_path: Path, seed: Path) -> None:
    reports = tmp_path / "reports"
    made = runs(reports, seed, 3, summary=False)
    cache, rebuild = EntryCache(later), Counting()
    same_as_uncached(reports, cache, rebuild)
    assert sorted(rebuild.read) == [r.name for r in made]
    rebuild.read.clear()
    same_as_uncached(reports, cache, rebuild)
    assert rebuild.read == []
    journal = made[1] / "journal.jsonl"
    journal.write_bytes(journal.read_bytes())  # the same bytes, written again: read again all the same
    same_as_uncached(reports, cache, rebuild)
    assert rebuild.read == [made[1].name]


def test_another_rebuild_reads_every_run_again(tmp_path: Path, seed: Path) -> None:
    """The entries kept were made by one rebuild: another (the same files) may summarise otherwise."""
    reports = tmp_path / "reports"
    runs(reports, seed, 2, summary=False)
    cache, first, second = EntryCache(later), Counting(), Counting()
    run_entries(reports, first, cache)
    run_entries(reports, second, cache)
    assert (len(first.read), len(second.read)) == (2, 2)


def test_a_summary_edited_in_place_same_size_same_mtime_is_on_the_next_view(tmp_path: Path, seed: Path) -> None:
    """Only its ctime tells this edit: same inode, same size, its mtime put back."""
    reports = tmp_path / "reports"
    (run,) = runs(reports, seed, 1)
    summary = RunSummary.model_validate_json((run / "summary.json").read_bytes())
    (run / "summary.json").write_text(summary.model_copy(update={"headline": "headline AAAA"}).model_dump_json())
    cache, rebuild = EntryCache(later), Counting()
    assert "headline AAAA" in same_as_uncached(reports, cache, rebuild)
    before = os.stat(run / "summary.json")
    with open(run / "summary.json", "r+b") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace(b"headline AAAA", b"headline BBBB"))
    os.utime(run / "summary.json", ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(run / "summary.json")
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    page = same_as_uncached(reports, cache, rebuild)
    assert "headline BBBB" in page and "headline AAAA" not in page
    assert rebuild.read == []  # summary.json was trusted each time: nothing rebuilt, only read again


def test_a_changed_status_file_or_run_json_is_on_the_next_view(tmp_path: Path, seed: Path) -> None:
    reports = tmp_path / "reports"
    (run,) = runs(reports, seed, 1)
    cache, rebuild = EntryCache(later), Counting()
    assert "NOT restored" not in same_as_uncached(reports, cache, rebuild)
    manifest = load_manifest(run)
    (run / "status.json").write_text(
        StatusFile(
            run_id=manifest.run_id, name=manifest.name, testbed="local", host="h", pid=1, pid_start=1,
            state="finished", started=manifest.started, updated=manifest.started, done=8, total=8, failed=0,
            not_restored=("decode",),
        ).model_dump_json()
    )  # fmt: skip
    assert f"orch restore {run}" in same_as_uncached(reports, cache, rebuild)
    save_manifest(run, manifest.model_copy(update={"name": "renamed_matrix"}))
    assert "renamed_matrix" in same_as_uncached(reports, cache, rebuild)
    (entry,) = run_entries(reports, rebuild, cache)
    assert entry.name == "renamed_matrix" and entry.not_restored == ("decode",)


def test_a_deleted_folder_vanishes_and_the_cache_never_outgrows_the_folder(tmp_path: Path, seed: Path) -> None:
    reports = tmp_path / "reports"
    made = runs(reports, seed, 3)
    (reports / "not-a-run").mkdir()  # no run.json: never listed, never kept
    cache, rebuild = EntryCache(later), Counting()
    same_as_uncached(reports, cache, rebuild)
    assert len(cache) == 3
    shutil.rmtree(made[0])
    page = same_as_uncached(reports, cache, rebuild)
    assert page.count("<tr data-matrix=") == 2
    assert [e.directory for e in run_entries(reports, rebuild, cache)] == [made[2].name, made[1].name]
    assert len(cache) == 2
    other = tmp_path / "other"
    runs(other, seed, 1)
    assert len(run_entries(other, rebuild, cache)) == 1 and len(cache) == 1  # another folder: only its runs


def test_a_run_turns_stale_when_its_controller_dies_though_no_file_changes(
    tmp_path: Path, seed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    (run,) = runs(reports, seed, 1, summary=False)
    manifest = load_manifest(run)
    save_manifest(run, manifest.model_copy(update={"status": "running", "ended": None}))
    me = os.getpid()
    (run / "status.json").write_text(
        StatusFile(
            run_id=manifest.run_id, name=manifest.name, testbed="local", host=os.uname().nodename, pid=me,
            pid_start=process_start(me) or 0, state="running", started=manifest.started,
            updated=manifest.started, done=8, total=8, failed=0,
        ).model_dump_json()
    )  # fmt: skip
    cache, rebuild = EntryCache(later), Counting()
    same_as_uncached(reports, cache, rebuild)
    assert [e.status for e in run_entries(reports, rebuild, cache)] == ["running"]
    stamps = {p.name: os.stat(p).st_ctime_ns for p in run.iterdir()}
    monkeypatch.setattr(liveness, "process_alive", lambda host, pid, start: False)  # killed with -9
    same_as_uncached(reports, cache, rebuild)
    assert [e.status for e in run_entries(reports, rebuild, cache)] == ["stale"]
    assert {p.name: os.stat(p).st_ctime_ns for p in run.iterdir()} == stamps


def test_a_run_written_just_before_the_view_is_read_again(tmp_path: Path, seed: Path) -> None:
    """A write in the same clock tick as the stamp could leave every stamp as it was (file times
    are coarse): an entry is kept only once its files are SETTLE_NS older than the view."""
    reports = tmp_path / "reports"
    (run,) = runs(reports, seed, 1, summary=False)
    written = max(os.stat(p).st_ctime_ns for p in run.iterdir())
    cache, rebuild = EntryCache(lambda: written), Counting()
    same_as_uncached(reports, cache, rebuild)
    same_as_uncached(reports, cache, rebuild)
    assert rebuild.read == [run.name, run.name] and len(cache) == 0
    cache = EntryCache(lambda: written + site.SETTLE_NS + 1)
    same_as_uncached(reports, cache, rebuild)
    same_as_uncached(reports, cache, rebuild)
    assert rebuild.read == [run.name] * 3 and len(cache) == 1


def test_the_written_index_is_the_page_the_server_shows(tmp_path: Path, seed: Path) -> None:
    reports = tmp_path / "reports"
    made = runs(reports, seed, 3)
    cache, rebuild = EntryCache(later), Counting()
    index_page(reports, rebuild, cache)
    shutil.rmtree(made[1])
    served = index_page(reports, rebuild, cache)
    assert write_index(reports, fresh_summary).read_bytes() == served.encode()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counting]:
    """The server's rebuild, counted; every file settled (the server's clock is the real one)."""
    rebuild = Counting()
    monkeypatch.setattr(render, "fresh_summary", rebuild)
    monkeypatch.setattr(site, "SETTLE_NS", -60 * 10**9)
    yield rebuild


def test_the_server_reads_a_run_once_and_shows_its_change(tmp_path: Path, seed: Path, counted: Counting) -> None:
    reports = tmp_path / "reports"
    made = runs(reports, seed, 2, summary=False)
    with serving(reports) as url, httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
        assert http.get("/").status_code == 200 and len(counted.read) == 2
        assert len(http.get("/api/runs").json()["runs"]) == 2 and len(counted.read) == 2  # one cache for both
        write_report_and_summary(made[0])
        shown = {r["directory"]: r["has_report"] for r in http.get("/api/runs").json()["runs"]}
        assert shown == {made[0].name: True, made[1].name: False}
        shutil.rmtree(made[1])
        page = http.get("/").text
        assert made[1].name not in page and f'href="{made[0].name}/index.html"' in page


def with_series(cache: EntryCache) -> list[str]:
    return sorted(k.name for k in cache._kept.values() if k.read.entry.series)


def test_the_cache_holds_series_only_for_the_runs_a_trend_draws(tmp_path: Path, seed: Path) -> None:
    """A run's series is 98% of its entry (~35 KB): 20,000 runs held 761 MB to draw 30 points a
    group. Of 40 runs of one group, the cache keeps the series of the newest TREND_RUNS, the page
    unchanged; once the newest are removed, the older ones entering the trend are read again."""
    reports = tmp_path / "reports"
    made = runs(reports, seed, TREND_RUNS + 10)
    newest = sorted(r.name for r in made)[-TREND_RUNS:]  # same `started`: the folder name orders them
    cache = EntryCache(clock=later)
    page = index_page(reports, fresh_summary, cache)
    assert page == site._render_index(run_entries(reports, fresh_summary))  # every series read: the same page
    assert with_series(cache) == newest and len(cache) == TREND_RUNS + 10
    for gone in made[-5:]:
        shutil.rmtree(gone)
    page = index_page(reports, fresh_summary, cache)
    assert page == site._render_index(run_entries(reports, fresh_summary))
    assert with_series(cache) == sorted(r.name for r in made[:-5])[-TREND_RUNS:]


def test_an_index_written_whole_reads_series_only_for_its_trends(tmp_path: Path, seed: Path) -> None:
    reports = tmp_path / "reports"
    runs(reports, seed, TREND_RUNS + 3)
    shown = run_entries(reports, fresh_summary, all_series=False)
    assert sum(bool(e.series) for e in shown) == TREND_RUNS
    assert index_page(reports, fresh_summary) == site._render_index(run_entries(reports, fresh_summary))
