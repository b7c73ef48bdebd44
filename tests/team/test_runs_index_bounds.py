"""The runs index and /api/runs are bounded whatever the reports folder holds: the index lists the
newest INDEX_ROWS runs and counts the rest (2,000 run folders made a 1.8 MB page, rendered on every
`orch serve /`), /api/runs answers a page at a time (`?offset=&limit=`, 1.7 MB for 2,000 at once),
and a run folder's own texts are cut with an ellipsis (20 runs named 1 MB each made a 42 MB index)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import serving

from orchestrator.report.render import fresh_summary, write_report_and_summary
from orchestrator.report.site import HEADLINE_CHARS, INDEX_ROWS, EntryCache, index_page, run_entries
from orchestrator.store.liveness import StatusFile
from orchestrator.store.rundir import RunDir
from orchestrator.team.serve import RUNS_PAGE, runs_page

KEPT = ("run.json", "journal.jsonl", "summary.json")  # what the index reads of a run (no report page)


def _status(manifest_name: str, run_id: str, started: str, roles: tuple[str, ...], restore_with: str) -> str:
    return StatusFile(
        run_id=run_id, name=manifest_name, testbed="local", host="h", pid=1, pid_start=1, state="finished",
        started=started, updated=started, done=8, total=8, failed=0, not_restored=roles, restore_with=restore_with,
    ).model_dump_json()  # fmt: skip


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """INDEX_ROWS + 10 finished runs (copies of one, summary.json kept newer than its inputs); the
    oldest left its testbed changed."""
    root = tmp_path_factory.mktemp("many")
    manifest, records = synthetic_run(replicates=1, failures=False)
    seed = write_run(root / "seed" / manifest.run_id, manifest, records)
    write_report_and_summary(seed)
    reports = root / "reports"
    for i in range(INDEX_ROWS + 10):
        run = reports / f"20260509-{i:06d}-x"
        run.mkdir(parents=True)
        for name in KEPT:
            shutil.copy2(seed / name, run / name)
    oldest = reports / "20260509-000000-x"
    (oldest / "status.json").write_text(_status(manifest.name, manifest.run_id, manifest.started, ("decode",), ""))
    return reports


def test_the_index_lists_the_newest_runs_and_counts_the_rest(many: Path) -> None:
    page = index_page(many, fresh_summary)
    assert page.count("<tr data-matrix=") == INDEX_ROWS
    assert f"{INDEX_ROWS + 10} runs, newest first" in page and "… and 10 older runs not listed" in page
    # the oldest run is past the rows listed, but its testbed is still changed: said at the top
    assert f"finish with: <code>orch restore {many / '20260509-000000-x'}</code>" in page


def test_api_runs_answers_a_page_at_a_time(many: Path) -> None:
    first = runs_page(many)
    assert len(first["runs"]) == RUNS_PAGE and first["total"] == INDEX_ROWS + 10  # type: ignore[arg-type]
    assert first["next_offset"] == RUNS_PAGE
    rest = runs_page(many, RUNS_PAGE, RUNS_PAGE)
    assert [r["directory"] for r in rest["runs"]][-1] == "20260509-000000-x"  # type: ignore[attr-defined, index]
    assert len(rest["runs"]) == 10 and rest["next_offset"] is None  # type: ignore[arg-type]


def test_api_runs_over_http_pages_and_refuses_a_bad_query(many: Path) -> None:
    with serving(many) as url, httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
        page = http.get("/api/runs", params={"offset": 505, "limit": 3}).json()
        assert [r["directory"] for r in page["runs"]] == [f"20260509-00000{i}-x" for i in (4, 3, 2)]
        assert (page["total"], page["offset"], page["next_offset"]) == (510, 505, 508)
        for bad in ("limit=abc", f"limit={RUNS_PAGE + 1}", "offset=-1", "offset=１"):
            r = http.get("/api/runs?" + bad)
            assert r.status_code == 400 and "must be a whole number" in r.text, (bad, r.text)


def test_a_run_folders_huge_texts_are_cut_in_the_index_and_api(tmp_path: Path) -> None:
    """A run.json name of 1 MB (orch refuses one over 200 characters since; a hand edit or an
    older run), and a status.json of 10,000 roles with a 500 KB restore command."""
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1)
    manifest = manifest.model_copy(update={"name": "N" * 1_000_000})
    run = write_run(reports / manifest.run_id, manifest, records)
    roles = tuple(f"tb{i}/decode" for i in range(10_000))
    RunDir(run).status_json.write_text(
        _status("x", manifest.run_id, manifest.started, roles, "orch restore " + "x" * 500_000)
    )
    page = index_page(reports, fresh_summary)
    assert len(page.encode()) < 100_000, len(page.encode())
    assert "N" * 199 + "…" in page and f"orch restore {run}" in page
    (entry,) = run_entries(reports, fresh_summary)
    assert entry.name == "N" * 199 + "…" and entry.restore_with == f"orch restore {run}"
    assert len(entry.not_restored) == 21 and entry.not_restored[-1] == "… and 9,980 more"


def test_api_runs_links_a_folder_whose_name_holds_url_characters_as_the_index_does(tmp_path: Path) -> None:
    """A run folder named `a#b?c d` was linked as `a#b?c d/index.html`: a client following it asked for
    folder `a` (the rest read as a fragment or a query). Quoted now, as the index's own links are."""
    from orchestrator.team.serve import runs_json

    manifest, records = synthetic_run(replicates=1, failures=False)
    run = write_run(tmp_path / "reports" / "a#b?c d", manifest, records)
    write_report_and_summary(run)
    (entry,) = runs_json(tmp_path / "reports")
    assert entry["link"] == "a%23b%3Fc%20d/index.html"
    assert 'href="a%23b%3Fc%20d/' in index_page(tmp_path / "reports", fresh_summary)


def test_orch_serves_cached_entries_are_cut_as_the_index_cuts_them(tmp_path: Path) -> None:
    """`orch serve` keeps each run's entry between page views (site.EntryCache): read through the
    cache, a 1 MB name is cut just as write_index cuts it (the sixteenth mutation round: deleting
    the cache's cut changed nothing any test saw)."""
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1)
    manifest = manifest.model_copy(update={"name": "N" * 1_000_000})
    write_run(reports / manifest.run_id, manifest, records)
    (cached,) = EntryCache().entries(reports, fresh_summary)
    (written,) = run_entries(reports, fresh_summary)
    assert cached == written and cached.name == "N" * 199 + "…"
    assert all(len(text) <= HEADLINE_CHARS for text in (cached.headline, cached.adaptive, cached.error))


def test_a_summary_that_names_no_testbed_takes_the_runs_own(tmp_path: Path) -> None:
    """summary.json written before summaries named the testbed: the index groups and labels the run
    by run.json's testbed, not by nothing."""
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1)
    run = write_run(reports / manifest.run_id, manifest, records)
    write_report_and_summary(run)
    summary = RunDir(run).summary_json
    data = json.loads(summary.read_text())
    assert data["testbed"] == manifest.testbed == "local"
    data["testbed"] = ""
    summary.write_text(json.dumps(data))  # newer than its inputs: read, not rebuilt
    (entry,) = run_entries(reports, fresh_summary)
    assert entry.testbed == "local" and entry.headline == data["headline"]
