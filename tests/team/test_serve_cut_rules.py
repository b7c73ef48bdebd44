"""`orch serve`'s rules for cutting a connection off, held where the thirteenth mutation round
found them untested (serve.ReportsHandler.cut_off): a connection still reading its request is cut
once, and what it had sent is never served as a request; one whose request is read is never cut,
however late the deadline's timer or an evicting newcomer reaches it (the header deadline ends once
the request is read: a slow download goes on). Also: a file that can no longer be opened as a
regular one after it was located (a FIFO put in its place) is answered 404, not left unanswered."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from helpers.serving import run_folder, serving

from orchestrator.team import serve

RUN = "20260701-000000-cut"


@contextmanager
def handler_on_a_socket(armed: bool) -> Iterator[tuple[serve.ReportsHandler, socket.socket]]:
    """A handler (not started: no thread, no timer) over one end of a socket pair, its deadline
    armed (still reading its request) or not (its request read); the other end is the client's."""
    ours, client = socket.socketpair()
    handler = serve.ReportsHandler.__new__(serve.ReportsHandler)
    handler.connection = ours
    handler._deadline_lock = threading.Lock()
    handler._armed, handler._cut = armed, False
    handler.close_connection = False
    try:
        yield handler, client
    finally:
        ours.close()
        client.close()


def test_a_connection_still_reading_its_request_is_cut_once_and_its_fragment_never_served() -> None:
    with handler_on_a_socket(armed=True) as (handler, client):
        handler.cut_off()
        client.settimeout(2)
        assert client.recv(1) == b""  # the server's side is shut: the client sees the end
        assert handler.parse_request() is False and handler.close_connection  # never read as a request
        handler.cut_off()  # the timer and an evicting newcomer may both come: the second does nothing
        assert handler._cut


def test_a_connection_whose_request_is_read_is_never_cut() -> None:
    with handler_on_a_socket(armed=False) as (handler, client):
        handler.cut_off()  # the deadline's timer firing late, or a newcomer evicting it
        assert not handler._cut
        handler.connection.sendall(b"still served")
        client.settimeout(2)
        assert client.recv(64) == b"still served"


def test_the_servers_run_cache_is_kept_between_requests() -> None:
    """The index and /api/runs read each run once and keep it (report.site.EntryCache): a cache
    made anew for each request read every run's files on every poll of a team page."""
    runs = serve._Runs()
    first = runs.cache()
    assert first is not None and runs.cache() is first


def test_a_file_that_cannot_be_opened_as_located_is_answered_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    run_folder(reports / RUN, {"notes.csv": "a,b\n"})
    monkeypatch.setattr(serve, "_open_regular", lambda path: None)  # swapped for a FIFO since it was located
    with serving(reports) as base:
        got = httpx.get(f"{base}/{RUN}/notes.csv", trust_env=False, timeout=10)
    assert (got.status_code, got.text) == (404, "not found\n")
