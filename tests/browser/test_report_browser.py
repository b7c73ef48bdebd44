"""Open the rendered report and the runs index in headless Chromium and check what a user sees.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
separated by NUL bytes on fds 3 and 4), so the test needs only the standard library. It proves:
no console error or exception, the key elements are there and visible, the sortable table and
the expand-all button work, a screenshot is saved, and the page asked the network for nothing
but itself (seen both by the browser, via Network.requestWillBeSent, and by the local server).
"""

from __future__ import annotations

import base64
import functools
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.chromium import HOSTILE, DevTools, evaluate, open_page, page_problems, page_requests, visible_text
from helpers.report_synth import ALL_OFF, synthetic_run, write_run

from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import write_index

# one worker runs this module (pytest-xdist), so its tests share one Chromium (helpers.chromium)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-report")]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A local http.server on 127.0.0.1 (free port) serving tmp_path/reports; logs each path."""
    reports = tmp_path / "reports"
    reports.mkdir()
    seen: list[str] = []

    class Handler(_Quiet):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(reports)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_report_page_in_chromium(tmp_path: Path, served: tuple[str, list[str]], browser: DevTools) -> None:
    base_url, seen = served
    manifest, records = synthetic_run(replicates=2, baseline=ALL_OFF, stdout=HOSTILE)
    run_dir = write_run(tmp_path / "reports" / manifest.run_id, manifest, records)
    write_report(run_dir)
    write_index(tmp_path / "reports", fresh_summary)
    url = f"{base_url}/{manifest.run_id}/index.html"

    session = open_page(browser, url)
    shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
    (tmp_path / "report.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000

    assert page_problems(browser, session) == []
    for selector in (
        "#headline li.finding",
        "#cell-table",
        "#cell-table tbody tr",
        "svg.chart",
        "#failures",
        "#provenance",
    ):
        assert visible_text(browser, session, selector) == "visible", selector
    assert evaluate(browser, session, "document.querySelectorAll('#cell-table tbody tr').length") == 8
    assert evaluate(browser, session, "document.querySelectorAll('svg.chart').length") >= 4
    headline = evaluate(browser, session, "document.querySelector('#headline').innerText")
    assert "Corruption is" in headline and "Holm" in headline
    # hostile repro output is shown as text, and never ran
    assert evaluate(browser, session, f"document.body.textContent.includes({json.dumps(HOSTILE)})")
    assert evaluate(browser, session, "typeof window.__pwned") == "undefined"

    # sorting by the rate column puts the corrupted cell first (descending on second click)
    column = evaluate(
        browser,
        session,
        """Array.prototype.findIndex.call(
        document.querySelectorAll('#cell-table th'), function (th) {
          return th.textContent.indexOf('corruption rate') === 0; })""",
    )
    assert column > 0
    click = f"document.querySelectorAll('#cell-table th')[{column}].click()"
    evaluate(browser, session, click)
    evaluate(browser, session, click)
    first = evaluate(browser, session, "document.querySelector('#cell-table tbody tr').title")
    assert first == "bf16_index_k=on,cuda_graph=on,overlap=on"

    # expand-all opens every trial's drill-down
    evaluate(browser, session, "document.querySelector('button[data-toggle=open]').click()")
    assert evaluate(
        browser,
        session,
        "Array.prototype.every.call("
        "document.querySelectorAll('#trials details.trial'), function (d) { return d.open; })",
    )
    (tmp_path / "report-expanded.png").write_bytes(
        base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
    )

    assert page_requests(browser, session) == [url]
    assert seen == [f"/{manifest.run_id}/index.html"]
    assert page_problems(browser, session) == []


def test_index_page_in_chromium(tmp_path: Path, served: tuple[str, list[str]], browser: DevTools) -> None:
    base_url, seen = served
    for run_id, replicates in (("20260509-070000-a", 2), ("20260510-070000-b", 1)):
        manifest, records = synthetic_run(replicates=replicates, run_id=run_id)
        write_report(write_run(tmp_path / "reports" / run_id, manifest, records))
    write_index(tmp_path / "reports", fresh_summary)
    url = f"{base_url}/index.html"

    session = open_page(browser, url)
    (tmp_path / "index.png").write_bytes(
        base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
    )
    assert page_problems(browser, session) == []
    assert visible_text(browser, session, "#runs") == "visible"
    links = evaluate(
        browser,
        session,
        "Array.prototype.map.call(document.querySelectorAll('#runs a'), function (a) { return a.href; })",
    )
    assert links == [f"{base_url}/20260510-070000-b/index.html", f"{base_url}/20260509-070000-a/index.html"]
    assert page_requests(browser, session) == [url]
    assert seen == ["/index.html"]
