"""`orch serve` over real HTTP (httpx): what it serves, and everything it must refuse."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from helpers.netutil import exchange
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import serving

from orchestrator.core.redact import Redactor
from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import write_index
from orchestrator.store.manifest import save_manifest
from orchestrator.team.livestatus import LiveStatus
from orchestrator.team.queue import Queue
from orchestrator.team.serve import masked, safe_path

RUN = "20260509-070000-overlap_ablation"
LIVE = "20260510-070000-live"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reports folder with a finished run (report, trial files, backup), a running run with a
    status file, the index, a queue with a secret webhook, and things that must stay private."""
    root = tmp_path_factory.mktemp("serve")
    reports = root / "reports"
    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(reports / RUN, manifest, records)
    write_report(run_dir)
    (run_dir / "trials" / "0000").mkdir(parents=True, exist_ok=True)
    (run_dir / "trials" / "0000" / "repro.out").write_text("CORRUPTION sessions: 1/40\n")
    (run_dir / "backup").mkdir()
    (run_dir / "backup" / "decode.env").write_text("HF_TOKEN=hf_secret\n")
    (run_dir / ".hidden").write_text("no")
    live_manifest, live_records = synthetic_run(replicates=1, run_id=LIVE)
    live_dir = reports / LIVE
    live_dir.mkdir()
    save_manifest(live_dir, live_manifest.model_copy(update={"status": "running", "ended": None}))
    status = LiveStatus(live_dir)
    status.start(len(live_manifest.plan), 0)
    status.trial_done(sorted(live_records, key=lambda r: r.trial)[0])
    write_index(reports, fresh_summary)
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/nightly.yaml"), Path("/i.yaml"), None, 1, ("https://hooks.example/T/B/supersecret",))
    (root / "outside.txt").write_text("outside")
    os.symlink(root / "outside.txt", run_dir / "link-out.txt")
    (reports / "not-a-run").mkdir()
    (reports / "not-a-run" / "file.txt").write_text("x")
    return reports


@pytest.fixture(scope="module")
def base(reports: Path) -> Iterator[str]:
    with serving(reports) as url:
        yield url


@pytest.fixture
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, trust_env=False, timeout=10) as client:
        yield client


def test_index_and_report(http: httpx.Client, reports: Path) -> None:
    for path in ("/", "/index.html"):
        r = http.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.content == (reports / "index.html").read_bytes()
    r = http.get(f"/{RUN}/index.html")
    assert (
        r.status_code == 200
        and "overlap_ablation" in r.text
        and r.content == (reports / RUN / "index.html").read_bytes()
    )
    assert r.headers["content-security-policy"].startswith("default-src 'none'; script-src 'sha256-")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert http.get(f"/{RUN}/").content == r.content  # a run's folder means its report


def test_a_browsers_favicon_request_is_answered_with_no_content(http: httpx.Client) -> None:
    """A browser asks every site for /favicon.ico (opening /api/status did): it got a 404 in the
    console of a page that works (the browser walk). It gets 204: no content, no error."""
    for method in ("GET", "HEAD"):
        r = http.request(method, "/favicon.ico")
        assert (r.status_code, r.content) == (204, b""), (method, r.status_code)
        assert "content-length" not in r.headers  # RFC 9110: never on a 204


def test_run_files(http: httpx.Client, reports: Path) -> None:
    r = http.get(f"/{RUN}/trials/0000/repro.out")
    assert r.status_code == 200 and r.text == "CORRUPTION sessions: 1/40\n"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    r = http.get(f"/{RUN}/journal.jsonl")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    # served through the run's redactor: the synthetic journal holds a raw HF_TOKEN, which must not go out
    assert r.content == masked((reports / RUN / "journal.jsonl").read_bytes(), Redactor())
    assert b"hf_supersecret123" in (reports / RUN / "journal.jsonl").read_bytes() and "hf_supersecret123" not in r.text
    assert all(json.loads(line) for line in r.text.splitlines())  # still JSON lines
    assert http.get(f"/{RUN}/run.json").json()["run_id"] == RUN


@pytest.mark.parametrize(
    "path",
    [
        "/queue.db",
        "/queue.db-wal",
        f"/{RUN}/backup/decode.env",
        f"/{RUN}/backup/",
        f"/{RUN}/.hidden",
        f"/{RUN}/../../outside.txt",
        f"/{RUN}/%2e%2e/%2e%2e/outside.txt",
        f"/{RUN}/..%2f..%2foutside.txt",
        "/%2e%2e/outside.txt",
        f"/{RUN}/link-out.txt",
        "/not-a-run/file.txt",
        "/not-a-run/",
        f"/{RUN}/trials/",
        f"/{RUN}/trials",
        "/etc/passwd",
        "//etc/passwd",
        f"/{RUN}/nope.html",
        f"/{RUN}/%00.html",
        f"/{RUN}/..\\..\\outside.txt",
    ],
)
def test_refused_paths_are_404(http: httpx.Client, path: str) -> None:
    r = http.get(path)
    assert r.status_code == 404, (path, r.text[:200])
    assert "supersecret" not in r.text and "hf_secret" not in r.text and "outside" not in r.text


def test_raw_traversal_request_line(base: str) -> None:
    """Clients normalise `..` away; send the raw request line as an attacker would."""
    port = int(base.rsplit(":", 1)[1])
    for target in (f"/{RUN}/../../outside.txt", "/../outside.txt", f"/{RUN}/./backup/decode.env"):
        reply = exchange(port, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        assert reply.startswith((b"HTTP/1.0 404", b"HTTP/1.1 404")), (target, reply[:80])
        assert b"outside" not in reply.split(b"\r\n\r\n", 1)[1] and b"hf_secret" not in reply


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_read_only(http: httpx.Client, method: str, reports: Path) -> None:
    before = sorted(p.name for p in reports.iterdir())
    r = http.request(method, f"/{RUN}/index.html", content=b"x")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert sorted(p.name for p in reports.iterdir()) == before


def test_head_has_headers_but_no_body(http: httpx.Client, reports: Path) -> None:
    r = http.head(f"/{RUN}/index.html")
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len((reports / RUN / "index.html").read_bytes())


def test_foreign_host_header_is_refused_on_loopback(http: httpx.Client) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not read reports."""
    r = http.get("/index.html", headers={"Host": "evil.example:8765"})
    assert r.status_code == 421
    assert http.get("/index.html", headers={"Host": "localhost:8765"}).status_code == 200


def test_api_runs(http: httpx.Client) -> None:
    runs = http.get("/api/runs").json()["runs"]
    by_dir = {r["directory"]: r for r in runs}
    assert set(by_dir) == {RUN, LIVE}
    assert by_dir[RUN]["status"] == "completed" and by_dir[RUN]["link"] == f"{RUN}/index.html"
    assert by_dir[RUN]["headline"] and by_dir[RUN]["planned"] == 8
    assert by_dir[LIVE]["link"] == ""  # no report yet


def test_api_status(http: httpx.Client) -> None:
    r = http.get("/api/status")
    assert r.headers["cache-control"] == "no-store"
    data = r.json()
    live = [x for x in data["runs"] if x["directory"] == LIVE]
    assert live and live[0]["state"] == "running" and live[0]["done"] == 1 and live[0]["total"] == 8
    assert live[0]["current_cell"] and live[0]["percent"] == 12.5
    assert [q["matrix"] for q in data["queue"]] == ["nightly.yaml"]
    assert "supersecret" not in r.text


def test_status_page(http: httpx.Client) -> None:
    r = http.get("/status")
    assert r.status_code == 200 and "script-src" not in r.headers["content-security-policy"]
    assert LIVE in r.text and "1/8" in r.text and "nightly.yaml" in r.text
    assert re.search(r'<meta http-equiv="refresh" content="\d+">', r.text)
    assert "supersecret" not in r.text


def test_safe_path_unit(reports: Path) -> None:
    root = reports.resolve()
    assert safe_path(root, f"/{RUN}/index.html") == root / RUN / "index.html"
    assert safe_path(root, f"/{RUN}") == root / RUN / "index.html"
    for bad in ("", "relative", f"/{RUN}/backup/decode.env", "/queue.db", f"/{RUN}/a\x00b"):
        assert safe_path(root, bad) is None, bad


@pytest.mark.process
def test_orch_serve_command(reports: Path, tmp_path: Path) -> None:
    """The CLI binds 127.0.0.1 by default, prints its URL, serves, and stops on SIGINT."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.main", "serve", "--reports", str(reports), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"on http://127\.0\.0\.1:(\d+)/", line)
        assert match, line
        r = httpx.get(f"http://127.0.0.1:{match.group(1)}/api/runs", trust_env=False, timeout=10)
        assert r.status_code == 200 and len(r.json()["runs"]) == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()  # by PID: the server this test started
            proc.wait()


def test_missing_reports_folder_is_a_usage_error(tmp_path: Path) -> None:
    from orchestrator.cli.main import main

    assert main(["serve", "--reports", str(tmp_path / "none"), "--port", "0"]) == 2
    time.sleep(0)  # nothing started: nothing to stop


def test_a_running_sweep_is_listed_and_its_report_link_shows_its_live_status(http: httpx.Client) -> None:
    """The index lists the running sweep with a link to its report; until the report exists, that
    link answers with the run's live status (it used to answer 404)."""
    index = http.get("/")
    assert index.status_code == 200 and f'href="{LIVE}/index.html"' in index.text and "(live status)" in index.text
    for path in (f"/{LIVE}/index.html", f"/{LIVE}/"):
        r = http.get(path)
        assert r.status_code == 200, path
        assert LIVE in r.text and "1/8" in r.text and r.headers["cache-control"] == "no-store"
    assert http.get(f"/{LIVE}/nope.html").status_code == 404


def test_a_running_sweeps_live_page_links_to_the_index_and_to_itself(http: httpx.Client) -> None:
    """Served at /RUN/index.html (or /RUN/), the live status page's links are read against that
    folder: its 'all runs' must reach the runs index, not the page itself, and the run's own link
    must reach /RUN/index.html, not /RUN/RUN/index.html (a 404)."""
    for path in (f"/{LIVE}/index.html", f"/{LIVE}/", f"/{LIVE}", "/status"):
        page = http.get(path)
        hrefs = re.findall(r'<a href="([^"]*)"', page.text)
        resolved = [urlsplit(urljoin(f"http://x{path}", h)).path for h in hrefs]
        assert resolved == ["/index.html", f"/{LIVE}/index.html"], (path, hrefs)
        for target in resolved:
            assert http.get(target).status_code == 200, (path, target)
