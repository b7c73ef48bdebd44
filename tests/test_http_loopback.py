"""Bounded HTTP answers over real loopback sockets (edges.httpread, review B): httpx's per-read
timeout lets a 200 that trickles one byte at a time last for ever, and a stalled answer is cut by
the per-read timeout handed to httpx (no longer than the time left). A raw-socket server in
threads (bind 127.0.0.1:0, every thread joined at the end), as tests/test_health.py does."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from orchestrator.edges.health import HealthCheck, wait_ready
from orchestrator.edges.httpread import AnswerTimedOut, request
from orchestrator.errors import HealthTimeout

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
Reply = Callable[[socket.socket, threading.Event], int]  # returns the body bytes it sent


def trickling(conn: socket.socket, stop: threading.Event) -> int:
    """A byte every 0.1 s for 6 s (an unbounded read lasts that long, then counts as ready)."""
    conn.sendall(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    end, sent = time.monotonic() + 6.0, 0
    while time.monotonic() < end and not stop.wait(0.1):
        conn.sendall(b"1\r\n \r\n")
        sent += 1
    conn.sendall(b"0\r\n\r\n")
    return sent


def stalling(conn: socket.socket, stop: threading.Event) -> int:
    conn.sendall(HEAD + b"Content-Length: 100\r\n\r\n")
    stop.wait(10)
    return 0


def trickling_headers(conn: socket.socket, stop: threading.Event) -> int:
    """The status line, then a header line every 0.1 s for 6 s: each read gets a few bytes, so
    httpx's per-read timeout never fires and the headers never end (a webhook behind a broken proxy)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    end = time.monotonic() + 6.0
    while time.monotonic() < end and not stop.wait(0.1):
        conn.sendall(b"X-Wait: 1\r\n")
    conn.sendall(b"Content-Length: 0\r\n\r\n")
    return 0


def whole_then_trickling_headers(conn: socket.socket, stop: threading.Event) -> int:
    """One answer whole on a keep-alive connection (a 503, as a worker warming up gives), then the
    next request's headers a line at a time on that same connection: the client's pool reuses it,
    and a reused connection had no deadline on its headers (a sweep hung in its health wait)."""
    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno")
    while b"\r\n\r\n" not in conn.recv(65536):
        pass
    return trickling_headers(conn, stop)


def flooding(conn: socket.socket, stop: threading.Event) -> int:
    total, block, sent = 64 << 20, b"x" * 65536, 0
    conn.sendall(HEAD + b"Content-Length: " + str(total).encode() + b"\r\n\r\n")
    while sent < total and not stop.is_set():
        conn.sendall(block)  # fails once the client has stopped reading and closed
        sent += len(block)
    return sent


class RawServer:
    def __init__(self, reply: Reply) -> None:
        self.reply, self.stop, self.sent = reply, threading.Event(), 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads = [threading.Thread(target=self._accept)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            worker = threading.Thread(target=self._serve, args=(conn,))
            self.threads.append(worker)
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                while b"\r\n\r\n" not in conn.recv(65536):
                    pass
                self.sent += self.reply(conn, self.stop)
            except OSError:
                pass  # the client went away: what a bounded read does

    def close(self) -> None:
        self.stop.set()
        for t in list(self.threads):
            t.join(5)
        self.sock.close()


Serve = Callable[[Reply], RawServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    started: list[RawServer] = []

    def start(reply: Reply) -> RawServer:
        started.append(RawServer(reply))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=2.0, trust_env=False) as c:  # what sweep.runner builds
        yield c


def test_a_health_wait_on_a_trickling_200_ends_at_its_timeout(serve: Serve, client: httpx.Client) -> None:
    timeout_s = 0.5  # far below the 6 s the server trickles
    server = serve(trickling)
    started = time.monotonic()
    with pytest.raises(HealthTimeout, match=f"not ready after {timeout_s:.1f} s"):
        wait_ready(HealthCheck("decode", server.url + "/health", timeout_s), client=client)
    assert time.monotonic() - started < timeout_s + 1.5


def test_a_stalled_answer_ends_within_the_time_left(serve: Serve) -> None:
    server = serve(stalling)
    deadline_s = 0.3  # far below the 10 s the server stalls
    with httpx.Client(timeout=10.0, trust_env=False) as slow:  # the client's own per-read timeout is not used
        started = time.monotonic()
        with pytest.raises(AnswerTimedOut, match="ReadTimeout"):
            request(slow, "GET", server.url, deadline_s=deadline_s, max_bytes=1000)
    assert time.monotonic() - started < deadline_s + 1.0


def test_headers_that_trickle_end_at_the_deadline(serve: Serve) -> None:
    """The deadline was checked only while reading the body: headers sent a line at a time held
    the request (and a sweep's end, posting its webhook) for as long as the server went on."""
    server = serve(trickling_headers)
    deadline_s = 0.5  # far below the 6 s the server trickles
    with httpx.Client(timeout=2.0, trust_env=False) as c:
        started = time.monotonic()
        with pytest.raises(AnswerTimedOut, match=f"within {deadline_s:g} s"):
            request(c, "POST", server.url, deadline_s=deadline_s, max_bytes=0, json_body={"a": 1})
    assert time.monotonic() - started < deadline_s + 1.0


def test_headers_that_trickle_on_a_reused_connection_end_at_the_deadline(serve: Serve, client: httpx.Client) -> None:
    server = serve(whole_then_trickling_headers)
    assert request(client, "GET", server.url + "/health", deadline_s=2.0, max_bytes=100).status == 503
    deadline_s = 0.5  # far below the 6 s the server trickles
    started = time.monotonic()
    with pytest.raises(AnswerTimedOut, match=f"within {deadline_s:g} s"):
        request(client, "GET", server.url + "/health", deadline_s=deadline_s, max_bytes=100)
    assert time.monotonic() - started < deadline_s + 1.0


def test_a_health_wait_on_a_server_that_then_trickles_headers_ends_in_time(serve: Serve, client: httpx.Client) -> None:
    """The measured hang: a worker that answered 503 once, then trickled the next poll's headers on
    the kept-alive connection, held `orch run` past a 10 s health timeout for 5 minutes (and Ctrl-C
    with it: the main thread waits for the poller)."""
    timeout_s = 0.5
    server = serve(whole_then_trickling_headers)
    started = time.monotonic()
    with pytest.raises(HealthTimeout, match=f"not ready after {timeout_s:.1f} s"):
        wait_ready(HealthCheck("decode", server.url + "/health", timeout_s), client=client)
    assert time.monotonic() - started < timeout_s + 1.5


def test_a_health_poll_stops_reading_a_huge_body(serve: Serve, client: httpx.Client) -> None:
    server = serve(flooding)
    wait_ready(HealthCheck("decode", server.url + "/health", 5.0), client=client)
    server.close()  # the body's bytes are counted once its thread has ended
    assert server.sent < 16 << 20, f"the poll let the server send {server.sent >> 20} MiB"
