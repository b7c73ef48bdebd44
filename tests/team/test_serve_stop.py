"""`orch serve` stops on SIGTERM even when the signal's exception is lost on its way up.

Seen twice in full-suite runs under load (bench_status): a serving `orch serve`, SIGTERM caught
(SigCgt), not pending, one thread polling, still serving 30 s later. Two ways it could lose the
Interrupted, each closed here: a slot given back twice (the connection's thread and the except
both released the BoundedSemaphore, and its ValueError replaced the Interrupted, which socketserver
swallows as a request's error); and the loop now ends on the handler's `stopping` flag itself."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from orchestrator.errors import Interrupted
from orchestrator.team import serve


def _server(tmp_path: Path) -> serve.ReportsServer:
    (tmp_path / "reports").mkdir()
    return serve.make_server(tmp_path / "reports", "127.0.0.1", 0)


def test_an_interrupt_after_the_connections_thread_started_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(tmp_path)
    start = threading.Thread.start

    def start_then_interrupted(thread: threading.Thread) -> None:
        monkeypatch.setattr(threading.Thread, "start", start)  # the connection's thread alone: its timer starts as ever
        start(thread)
        thread.join(5)  # the connection's thread has ended and given its slot back
        raise Interrupted("received SIGTERM")  # the signal lands in the main thread right after

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)
    a, b = socket.socketpair()
    b.close()  # the client is gone: the connection's thread reads nothing and ends at once
    try:
        with pytest.raises(Interrupted):  # not "ValueError: Semaphore released too many times"
            server.process_request(a, ("127.0.0.1", 1))  # type: ignore[arg-type]
    finally:
        server.server_close()
    taken = [server._slots.acquire(blocking=False) for _ in range(serve.MAX_CONNECTIONS + 1)]
    assert taken.count(True) == serve.MAX_CONNECTIONS  # every slot back, none twice


def test_the_loop_ends_on_a_stop_asked_for_even_without_its_exception(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.stopping = threading.Event()
    server.stopping.set()  # the handler set it; its raise never arrived
    ended: list[BaseException] = []
    watchdog = threading.Timer(5.0, server.shutdown)  # the old loop served on: end it, and fail below
    watchdog.start()
    try:
        server.serve_forever(poll_interval=0.05)
    except Interrupted as exc:
        ended.append(exc)
    finally:
        watchdog.cancel()
        server.server_close()
    assert [str(e) for e in ended] == ["received SIGTERM"]
