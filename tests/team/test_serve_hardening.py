"""`orch serve` against hostile clients and hostile run folders, over real loopback HTTP.

Found in review: a client that opened a connection and never finished its request held a server
thread forever (no socket timeout, no header deadline, no cap on connections); and the served
path was checked against the run folder only, by the URL's parts, so a run folder symlinked out
of the reports folder was served whole, and a symlink inside a run into its backup/ served the
hosts' original env files with their tokens."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import run_folder, serving

from orchestrator.team import serve
from orchestrator.team.serve import MAX_CONNECTIONS, SOCKET_TIMEOUT_S

pytestmark = pytest.mark.timeout(120)

RUN = "20260101-000000-hard"
BIG = 32 << 20  # sparse: no disk used
PARTIAL = f"GET /{RUN}/notes.csv HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()  # the blank line never comes


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    run = run_folder(reports / RUN, {"notes.csv": "a,b\n"})
    with open(run / "chart.png", "wb") as f:
        f.truncate(BIG)
    return reports


@pytest.fixture
def port(reports: Path) -> Iterator[int]:
    with serving(reports) as base:
        yield int(urlsplit(base).port or 0)


def idle_clients(port: int, count: int) -> list[socket.socket]:
    """`count` connections that each sent part of a request and then nothing. A pause of a
    millisecond after each lets the server's thread (in this process: the GIL) accept as they
    come; without it, 70 connects in a few milliseconds could outrun it past the listen backlog
    and one SYN would wait out the kernel's 1 s retransmit."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(PARTIAL)
        socks.append(s)
        time.sleep(0.001)
    return socks


def closed_by_server(socks: list[socket.socket], within_s: float, enough: int | None = None) -> set[socket.socket]:
    """The sockets the server closed (EOF, a reset or an answer) within `within_s`, looking no
    longer once `enough` of them (default: all) are closed."""
    closed: set[socket.socket] = set()
    end = time.monotonic() + within_s
    want = len(socks) if enough is None else enough
    while len(closed) < want and (left := end - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], left)
        for s in readable:
            try:
                s.recv(1024)
            except OSError:
                pass
            closed.add(s)
    return closed


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def get_notes(port: int, within_s: float = 10) -> httpx.Response:
    """A normal request, retried while the server is still letting go of closed clients."""
    end = time.monotonic() + within_s
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/{RUN}/notes.csv", trust_env=False, timeout=5)
        except httpx.TransportError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


# ---------------------------------------------------------------------------- slow clients
IDLE_TIMEOUT_S = 0.3  # the socket timeout under test, scaled down from SOCKET_TIMEOUT_S's 10 s
HEADER_DEADLINE_S = 0.4  # the header deadline under test, scaled down from serve.HEADER_DEADLINE_S's 15 s


def test_idle_clients_are_dropped_and_their_threads_freed(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket timeout (not the header deadline, kept longer here) drops clients that send
    nothing more; the test runs it at IDLE_TIMEOUT_S instead of waiting out the shipped 10 s."""
    assert serve.ReportsHandler.timeout == SOCKET_TIMEOUT_S  # what ships is what is scaled here
    monkeypatch.setattr(serve.ReportsHandler, "timeout", IDLE_TIMEOUT_S)
    monkeypatch.setattr(serve.ReportsHandler, "header_deadline_s", 60.0)
    with serving(reports) as base:
        port = int(urlsplit(base).port or 0)
        before = threading.active_count()
        socks = idle_clients(port, 50)
        try:
            within = IDLE_TIMEOUT_S + 15
            dropped = closed_by_server(socks, within)
            assert len(dropped) == 50, f"{50 - len(dropped)} unfinished requests still held after {within} s"
        finally:
            close_all(socks)
        end = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < end:
            time.sleep(0.05)
        assert threading.active_count() <= before
        assert get_notes(port).status_code == 200


def test_a_trickling_client_is_cut_off_at_the_header_deadline(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte every 0.1 s keeps every read under the socket timeout: only a deadline for the
    whole request (here HEADER_DEADLINE_S, not the shipped 15 s) ends it."""
    monkeypatch.setattr(serve.ReportsHandler, "header_deadline_s", HEADER_DEADLINE_S, raising=False)
    with serving(reports) as base, socket.create_connection(("127.0.0.1", urlsplit(base).port or 0)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        t0 = time.monotonic()
        cut = False
        while not cut and time.monotonic() - t0 < HEADER_DEADLINE_S + 7:
            try:
                s.sendall(b"a")
            except OSError:
                cut = True
                break
            cut = bool(select.select([s], [], [], 0.1)[0])
        assert cut, f"a client trickling its headers still holds its connection after {HEADER_DEADLINE_S + 7} s"
        assert time.monotonic() - t0 < HEADER_DEADLINE_S + 4


def test_a_slow_download_outlives_the_header_deadline(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline ends once the request is read: a client that pauses (four times the
    deadline) while a big file streams still gets all of it."""
    deadline_s = 0.3
    monkeypatch.setattr(serve.ReportsHandler, "header_deadline_s", deadline_s, raising=False)
    with serving(reports) as base, socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # the server blocks while we pause
        s.settimeout(10)
        s.connect(("127.0.0.1", urlsplit(base).port or 0))
        s.sendall(f"GET /{RUN}/chart.png HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        got = bytearray(s.recv(64 << 10))
        time.sleep(4 * deadline_s)
        while chunk := s.recv(1 << 20):
            got += chunk
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and f"Content-Length: {BIG}".encode() in head
    assert len(body) == BIG


def test_connections_beyond_the_cap_are_closed_at_once(port: int) -> None:
    """MAX_CONNECTIONS wait for their request (and are answered once it is whole); each one
    beyond takes the slot of the one waiting longest, which is cut off (serve's module doc). (It
    watched all of them for 3 s; now the cut ones end the watch, and each held one shows it was
    never closed by answering its request.)"""
    extra = 6
    socks = idle_clients(port, MAX_CONNECTIONS + extra)
    try:
        closed = closed_by_server(socks, 3, enough=extra)
        assert len(closed) == extra  # refused at once
        held = [s for s in socks if s not in closed]
        for s in held:
            s.sendall(b"\r\n")  # the blank line: each request is whole now
        for s in held:  # the first MAX_CONNECTIONS waited for their request: each is answered
            assert answer_head(s).startswith(b"HTTP/1.0 200")
    finally:
        close_all(socks)
    assert get_notes(port).status_code == 200  # the slots came back


def answer_head(s: socket.socket) -> bytes:
    """The status line and headers the server answers on `s` (or what came before it closed)."""
    got = b""
    while b"\r\n\r\n" not in got and (chunk := s.recv(65536)):
        got += chunk
    return got


# ---------------------------------------------------------------------------- symlinks
def get(reports: Path, path: str) -> httpx.Response:
    with serving(reports) as base:
        return httpx.get(base + path, trust_env=False, timeout=10)


def test_a_run_folder_symlinked_out_of_the_reports_folder_is_not_served(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    outside = run_folder(tmp_path / "elsewhere", {"notes.csv": "private\n", "notes.log": "private\n"})
    (reports / "ext").symlink_to(outside, target_is_directory=True)
    for path in ("/ext/notes.csv", "/ext/notes.log", "/ext/run.json", "/ext/"):  # .log: masked, it crashed
        r = get(reports, path)
        assert r.status_code == 404 and "private" not in r.text, path


@pytest.mark.parametrize("link", ["trials/saved", "saved", "trials/0000/decode.env"])
def test_a_symlink_into_backup_is_not_served(reports: Path, link: str) -> None:
    run = reports / RUN
    (run / "backup" / "local").mkdir(parents=True)
    (run / "backup" / "local" / "decode.env").write_text("HF_TOKEN=hf_supersecret123\n")
    (run / link).parent.mkdir(parents=True, exist_ok=True)
    if link.endswith(".env"):
        (run / link).symlink_to(run / "backup" / "local" / "decode.env")
        url = f"/{RUN}/{link}"
    else:
        (run / link).symlink_to(run / "backup", target_is_directory=True)
        url = f"/{RUN}/{link}/local/decode.env"
    r = get(reports, url)
    assert r.status_code == 404 and "hf_supersecret123" not in r.text


def test_a_symlink_to_a_dot_file_or_another_runs_backup_is_not_served(reports: Path) -> None:
    run = reports / RUN
    (run / ".private").write_text("dot-file\n")
    (run / "public.txt").symlink_to(run / ".private")
    other = run_folder(reports / "20260102-000000-other", {"backup/local/run.json": "{}"})
    (other / "backup" / "local" / "notes.csv").write_text("backup-copy\n")
    (reports / "20260103-000000-alias").symlink_to(other / "backup" / "local", target_is_directory=True)
    assert get(reports, f"/{RUN}/public.txt").status_code == 404
    assert get(reports, "/20260103-000000-alias/notes.csv").status_code == 404


def test_an_env_file_outside_backup_is_served_masked(reports: Path) -> None:
    (reports / RUN / "trials" / "0000").mkdir(parents=True)
    (reports / RUN / "trials" / "0000" / "decode.env").write_text("HF_TOKEN=hf_supersecret123\nTP=8\n")
    r = get(reports, f"/{RUN}/trials/0000/decode.env")
    assert r.status_code == 200 and "hf_supersecret123" not in r.text and "TP=8" in r.text


def test_a_symlinked_run_is_served_masked_with_its_own_declared_secrets(tmp_path: Path) -> None:
    """A run folder may be a symlink to a run kept elsewhere in the reports folder: it is served,
    and its raw texts are masked with the secrets the real run's run.json declares."""
    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1, run_id=RUN)
    manifest = manifest.model_copy(update={"secret_names": ["LAB_DOOR_CODE"]})
    real = write_run(reports / "archive" / "2026" / RUN, manifest, records)
    (real / "repro.out").write_text("LAB_DOOR_CODE=door-declared-1\nCORRUPTION sessions: 1/40\n")
    (reports / RUN).symlink_to(real, target_is_directory=True)
    r = get(reports, f"/{RUN}/repro.out")
    assert r.status_code == 200 and "CORRUPTION sessions: 1/40" in r.text
    assert "door-declared-1" not in r.text
    assert json.loads(get(reports, f"/{RUN}/run.json").text)["run_id"] == RUN
