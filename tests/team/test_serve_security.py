"""`orch serve` audited as a hostile visitor would meet it (loopback only).

Found in the audit: the DNS-rebinding guard took any Host starting with `127.` for loopback, so a
name like 127.0.0.1.evil.example, pointed at 127.0.0.1, read every report."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.netutil import exchange
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import run_folder, serving

from orchestrator.team.serve import MAX_CONNECTIONS, host_header_ok, locate, running_run

RUN = "20260701-000000-sec"


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    run_folder(reports / RUN, {"notes.csv": "a,b\n"})
    return reports


@pytest.fixture
def base(reports: Path) -> Iterator[str]:
    with serving(reports) as url:
        yield url


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1.evil.example",
        "127.0.0.1.evil.example:8765",
        "127.evil.example",
        "127.0.0.1:80@evil.example",
        "evil.example",
        "localhost.evil.example",
        "0.0.0.0:8765",
        "[::1].evil.example",
        ".",
    ],
)
def test_a_name_that_only_starts_like_loopback_is_refused(host: str) -> None:
    assert not host_header_ok(host)


@pytest.mark.parametrize(
    "host",
    [
        "",
        "127.0.0.1",
        "127.0.0.1:8765",
        "127.1.2.3:1",
        "localhost",
        "LOCALHOST:8765",
        "localhost.",
        "[::1]:8765",
        "[::1]",
        "::1",
    ],
)
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert host_header_ok(host)


def test_a_rebinding_name_is_refused_over_http(base: str) -> None:
    with httpx.Client(base_url=base, trust_env=False, timeout=5) as http:
        assert http.get(f"/{RUN}/notes.csv").text == "a,b\n"
        for host in ("127.0.0.1.evil.example:8765", "127.evil.example"):
            r = http.get(f"/{RUN}/notes.csv", headers={"Host": host})
            assert r.status_code == 421 and "a,b" not in r.text, host


# ---------------------------------------------------------------------------- paths the file system refuses
LONG_PATHS = [
    "/" + "a" * 300,  # a run name longer than a file name may be (ENAMETOOLONG)
    "/" + "a" * 300 + "/index.html",
    f"/{RUN}/" + "b" * 300,
    f"/{RUN}/" + "/".join(["c"] * 3000),  # a path longer than PATH_MAX
]


@pytest.mark.parametrize("path", LONG_PATHS)
def test_a_path_the_file_system_refuses_names_nothing(reports: Path, path: str) -> None:
    """ENAMETOOLONG raised out of pathlib's checks: the request went unanswered."""
    root = reports.resolve()
    assert locate(root, path) is None and running_run(root, path) is None


def test_a_too_long_path_is_answered_404(base: str) -> None:
    with httpx.Client(base_url=base, trust_env=False, timeout=5) as http:
        for path in LONG_PATHS:
            r = http.get(path)
            assert r.status_code == 404 and r.text == "not found\n", path[:40]
        assert http.get(f"/{RUN}/notes.csv").status_code == 200  # the server still serves


# ---------------------------------------------------------------------------- secrets
def test_an_old_runs_run_json_is_served_masked(tmp_path: Path) -> None:
    """orch once wrote run.json's matrix and inventory texts raw; its report masks them, and
    the server handed the file out as it is on disk, tokens and all."""
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1, run_id=RUN)  # its inventory_text holds a raw HF_TOKEN
    run_dir = write_run(reports / RUN, manifest, records)
    on_disk = (run_dir / "run.json").read_text()
    assert "hf_supersecret123" in on_disk
    with serving(reports) as url, httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
        r = http.get(f"/{RUN}/run.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json; charset=utf-8"
    assert "hf_supersecret123" not in r.text and "HF_TOKEN: ••••" in r.json()["inventory_text"]
    assert r.json()["run_id"] == RUN and len(r.json()["plan"]) == len(manifest.plan)  # still the manifest


# ---------------------------------------------------------------------------- idle clients
PARTIAL = f"GET /{RUN}/notes.csv HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()  # the blank line never comes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("idle", [50, MAX_CONNECTIONS, MAX_CONNECTIONS + 30])
def test_idle_connections_do_not_lock_out_a_normal_get(base: str, idle: int) -> None:
    """One client holding every slot with requests it never finishes: each new connection was
    closed at once, for everyone, as long as it kept them open (re-opened as they time out)."""
    port = int(base.rsplit(":", 1)[1])
    socks = []
    try:
        for _ in range(idle):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(PARTIAL)
            socks.append(s)
            time.sleep(0.001)  # let the server's thread accept as they come (see test_serve_hardening)
        time.sleep(0.2)
        t0 = time.monotonic()
        r = httpx.get(f"{base}/{RUN}/notes.csv", trust_env=False, timeout=5)
        elapsed = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    assert r.status_code == 200 and r.text == "a,b\n" and elapsed < 1.0, elapsed


# ---------------------------------------------------------------------------- http.server's own refusals
def raw_answer(base: str, request: bytes) -> tuple[bytes, bytes]:
    """The head and body the server answers to a raw request (what a client library would not send)."""
    got = exchange(int(base.rsplit(":", 1)[1]), request)
    head, _, body = got.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"<svg/onload=alert(1)> / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"501"),  # an unknown method
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431"),  # a header too long
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),  # a request line too long
        # a request line http.server cannot parse got a bare body: no status line, no headers
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", b"505"),
        (b"GET / FOO/1.0\r\n\r\n", b"400"),
        (b"A" * 60000 + b"\r\n\r\n", b"400"),  # 60 KB of one word: under the 64 KiB line cap
        (b"GET /\r\n\r\n", b"505"),  # HTTP/0.9: the index was sent with no header at all (no CSP)
    ],
)
def test_http_servers_own_refusals_are_plain_text_with_nosniff(base: str, request_bytes: bytes, status: bytes) -> None:
    head, body = raw_answer(base, request_bytes)
    lines = head.split(b"\r\n")
    assert lines[0].split(b" ")[1] == status, lines[0]
    assert b"Content-Type: text/plain; charset=utf-8" in lines and b"X-Content-Type-Options: nosniff" in lines
    assert body.startswith(status) and b"<" not in body.replace(b"<svg/onload=alert(1)>", b"")
    assert b"Connection: close" in lines and len(body) < 300  # the client's text is quoted cut, and the slot freed
