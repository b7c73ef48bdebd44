"""`orch serve` in headless Chromium: the live status page, and the index and a report served by
orch itself (not a generic file server), with no console error and nothing fetched from
elsewhere. Drives Chromium with the report tests' DevTools pipe client."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.chromium import DevTools, evaluate, open_page, page_problems, page_requests, visible_text
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import serving

from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import write_index
from orchestrator.store.manifest import save_manifest
from orchestrator.team.livestatus import LiveStatus
from orchestrator.team.queue import Queue

# one worker runs this module (pytest-xdist), so its tests share one Chromium (helpers.chromium)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-serve")]

DONE, LIVE = "20260509-070000-overlap_ablation", "20260510-070000-live"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1, run_id=DONE)
    write_report(write_run(reports / DONE, manifest, records))
    live_manifest, live_records = synthetic_run(replicates=1, run_id=LIVE)
    (reports / LIVE).mkdir()
    save_manifest(reports / LIVE, live_manifest.model_copy(update={"status": "running", "ended": None}))
    status = LiveStatus(reports / LIVE)
    status.start(len(live_manifest.plan), 0)
    for r in sorted(live_records, key=lambda r: r.trial)[:3]:
        status.trial_done(r)
    write_index(reports, fresh_summary)
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/nightly.yaml"), Path("/i.yaml"), "dsv4-pd", 3)
    with serving(reports) as url:
        yield f"{url}", reports


def test_status_page_in_chromium(served: tuple[str, Path], browser: DevTools, tmp_path: Path) -> None:
    base, _ = served
    url = f"{base}/status"
    session = open_page(browser, url)
    shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
    (tmp_path / "status.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG")
    assert page_problems(browser, session) == []
    for selector in ("#live", "#live tbody tr.running", "#live progress", "#queue"):
        assert visible_text(browser, session, selector) == "visible", selector
    row = evaluate(browser, session, "document.querySelector('#live tr.running').innerText")
    assert LIVE in row and "3/8" in row and "running" in row
    current = evaluate(browser, session, "document.querySelector('#live tr.running td:nth-child(4)').innerText")
    assert current and current != "–"  # the cell being run now
    eta = evaluate(browser, session, "document.querySelector('#live tr.running td:nth-child(6)').innerText")
    assert " s" in eta
    assert evaluate(browser, session, "document.querySelector('#live tr.running progress').value") == 3
    queue = evaluate(browser, session, "document.querySelector('#queue tbody').innerText")
    assert "nightly.yaml" in queue and "dsv4-pd" in queue and "queued" in queue
    # the run's name links to its report folder, served by orch
    href = evaluate(browser, session, "document.querySelector('#live tr.running a').href")
    assert href == f"{base}/{LIVE}/index.html"
    assert page_requests(browser, session) == [url]


def test_index_and_report_served_by_orch(served: tuple[str, Path], browser: DevTools) -> None:
    base, _ = served
    session = open_page(browser, f"{base}/")
    assert page_problems(browser, session) == []
    links = evaluate(
        browser,
        session,
        "Array.prototype.map.call(document.querySelectorAll('#runs a'), function (a) { return a.href; })",
    )
    assert f"{base}/{DONE}/index.html" in links
    report = open_page(browser, f"{base}/{DONE}/index.html")
    assert page_problems(browser, report) == []  # the CSP header orch adds lets the report's own script run
    assert visible_text(browser, report, "#cell-table") == "visible"
    evaluate(browser, report, "document.querySelector('button[data-toggle=open]').click()")
    assert evaluate(
        browser,
        report,
        "Array.prototype.every.call("
        "document.querySelectorAll('#trials details.trial'), function (d) { return d.open; })",
    )
    assert page_requests(browser, report) == [f"{base}/{DONE}/index.html"]
