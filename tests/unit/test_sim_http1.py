"""The simulator's HTTP/1.1 (orchestrator.sim.http1): its server, in a thread on loopback, against
httpx, urllib and raw sockets (what the real router, orch's probes and curl send); its client
against scripted loopback servers (what a real server may answer). Every refusal is a status and
a closed connection, never a hang."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator

import httpx
import pytest
from helpers.netutil import exchange
from helpers.serving import in_thread

from orchestrator.sim import http1
from orchestrator.sim.server import App, Reply, SimServer, Upstream


class Echo(App):
    """Answers every GET and POST with what it got."""

    def __init__(self) -> None:
        self.routes = {}
        self.seen: list[tuple[str, str, bytes]] = []

    def handle(self, method: str, path: str, body: bytes) -> Reply:
        self.seen.append((method, path, body))
        return Reply.json(200, {"method": method, "path": path, "length": len(body)})


class CountingServer(SimServer):
    connections = 0

    def process_request(self, request: object, client_address: object) -> None:  # type: ignore[override]
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


@pytest.fixture
def echo() -> Iterator[tuple[CountingServer, Echo]]:
    app = Echo()
    server = CountingServer(("127.0.0.1", 0), app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server, app
    server.shutdown()
    server.server_close()
    thread.join(5)


def _port(server: SimServer) -> int:
    return int(server.server_address[1])


def test_httpx_requests_share_one_keep_alive_connection(echo: tuple[CountingServer, Echo]) -> None:
    server, app = echo
    with httpx.Client(base_url=f"http://127.0.0.1:{_port(server)}") as client:
        first = client.post("/generate", content=b'{"text": "hi"}')
        second = client.get("/health")
    assert first.status_code == 200 and first.json() == {"method": "POST", "path": "/generate", "length": 14}
    assert second.json()["path"] == "/health"
    assert server.connections == 1 and len(app.seen) == 2


def test_urllib_and_a_leading_double_slash_reach_the_route(echo: tuple[CountingServer, Echo]) -> None:
    server, app = echo
    with urllib.request.urlopen(f"http://127.0.0.1:{_port(server)}//health", timeout=5) as answer:
        assert json.loads(answer.read())["path"] == "/health"  # the real router asks for `URL/` + `/health`


def test_expect_100_continue_gets_its_interim_answer_before_the_body(echo: tuple[CountingServer, Echo]) -> None:
    server, app = echo
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as s:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b"hello")
        answer = s.recv(1000)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'"length": 5}')
    assert app.seen == [("POST", "/x", b"hello")]


def test_a_chunked_request_body_is_read_whole(echo: tuple[CountingServer, Echo]) -> None:
    server, app = echo
    body = b"4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nTrailer: x\r\n\r\n"
    got = exchange(_port(server), b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in got
    assert app.seen == [("POST", "/c", b"abcdefg")]


def test_http_1_0_without_keep_alive_is_answered_and_closed(echo: tuple[CountingServer, Echo]) -> None:
    server, _ = echo
    got = exchange(_port(server), b"GET /old HTTP/1.0\r\n\r\n")  # returns only because the server closed
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in got


@pytest.mark.parametrize(
    ("request_bytes", "status", "said"),
    [
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"505", b"Invalid HTTP version"),  # the router's HTTP/2 probe
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414", b"line over"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431", b"line over"),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", b"431", b"more than 100 headers"),
        (b"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", b"413", b"over"),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400", b"Content-Length"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"501", b"gzip"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400", b"chunk size"),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", b"400", b"malformed header"),
        (b"GET /\r\n\r\n", b"400", b"bad request line"),
        (b"GET / HTTP/x.y\r\n\r\n", b"400", b"bad HTTP version"),
        (b"PUT / HTTP/1.1\r\nConnection: close\r\n\r\n", b"501", b"unsupported method"),
    ],
    ids=["http2", "long-line", "long-header", "many-headers", "huge-body", "bad-length", "gzip", "bad-chunk",
         "no-colon", "http-0.9", "bad-version", "put"],
)  # fmt: skip
def test_a_request_it_cannot_serve_gets_a_status_and_a_close(
    echo: tuple[CountingServer, Echo], request_bytes: bytes, status: bytes, said: bytes
) -> None:
    server, app = echo
    got = exchange(_port(server), request_bytes)
    assert got.startswith(b"HTTP/1.1 " + status + b" "), got[:100]
    assert said in got and b"Connection: close\r\n" in got
    assert app.seen == []


# ---- the client --------------------------------------------------------------------------------


def _scripted(answers: list[Callable[[socket.socket], None]]) -> tuple[int, threading.Thread, list[bytes]]:
    """A server taking one connection per answer; each gets the connection after its request
    head was read (the requests are kept)."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve() -> None:
        with listener:
            for answer in answers:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(5)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    requests.append(data)
                    answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return int(listener.getsockname()[1]), thread, requests


def _send(data: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(data)


def test_the_client_reads_chunked_and_read_to_close_answers_after_an_interim_100() -> None:
    port, thread, requests = _scripted([
        _send(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
        _send(b"HTTP/1.0 201 Created\r\n\r\nto the close"),
    ])  # fmt: skip
    first = http1.Connection("127.0.0.1", port, 5)
    assert first.request("POST", "/a", b"{}") == (200, b"abcde")
    first.close()
    assert http1.Connection("127.0.0.1", port, 5).request("GET", "/b") == (201, b"to the close")
    thread.join(5)
    assert requests[0].startswith(b"POST /a HTTP/1.1\r\n") and b"Content-Length: 2\r\n" in requests[0]


def test_a_stale_keep_alive_connection_is_retried_once_by_the_stand_in_router() -> None:
    """The worker answers, then closes the connection without saying so; the next request on it
    finds it closed and the stand-in router sends it again on a new one."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    port, thread, requests = _scripted([_send(ok), _send(ok)])
    upstream = Upstream(f"http://127.0.0.1:{port}")
    assert upstream.post("/generate", b"{}") == (200, b"ok")
    assert upstream.post("/generate", b"{}") == (200, b"ok")
    thread.join(5)
    assert len(requests) == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnot hex\r\n",
        b"",
        b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 OK 200\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["not-http", "huge-length", "cut-short", "bad-chunk", "closed", "http-2", "no-code"],
)
def test_an_answer_the_client_cannot_read_is_a_connection_error(answer: bytes) -> None:
    port, thread, _ = _scripted([_send(answer)])
    connection = http1.Connection("127.0.0.1", port, 5)
    with pytest.raises(http1.ResponseError):
        connection.request("GET", "/health")
    assert connection.sock is None  # closed: nothing half-read is left for a next request
    thread.join(5)


def test_a_server_that_never_answers_times_out() -> None:
    done = threading.Event()
    port, thread, _ = _scripted([lambda conn: done.wait(10)])
    try:
        with pytest.raises(TimeoutError):
            http1.Connection("127.0.0.1", port, 0.3).request("GET", "/health")
    finally:
        done.set()
        thread.join(5)


def test_a_chunked_body_with_trailers_leaves_the_connection_at_the_next_request(
    echo: tuple[CountingServer, Echo],
) -> None:
    """The trailers after the last chunk are read with it: left unread, they were taken for the
    next request on the keep-alive connection."""
    server, app = echo
    first = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n"
    second = b"GET /next HTTP/1.1\r\nConnection: close\r\n\r\n"
    got = exchange(_port(server), first + second)
    assert got.count(b"HTTP/1.1 200 OK\r\n") == 2, got
    assert app.seen == [("POST", "/c", b"abc"), ("GET", "/next", b"")]


class Failing(Echo):
    def handle(self, method: str, path: str, body: bytes) -> Reply:
        return Reply.json(500, {"error": "boom"})


def test_a_500_answer_says_its_reason() -> None:
    with in_thread(SimServer(("127.0.0.1", 0), Failing())) as server:
        got = exchange(_port(server), b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 500 Internal Server Error\r\n"), got[:60]


@pytest.mark.parametrize(
    ("request_bytes", "quoted"),
    [
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"z" * 100 + b"\r\n", b"'" + b"z" * 40 + b"'"),
        (b"GET / HTTP/2.0\r\n\r\n", b"(2.0)"),
        (b"GET / HTTP/" + b"3" * 30 + b".0\r\n\r\n", b"(" + b"3" * 15 + b")"),
    ],
)
def test_a_refusal_quotes_what_it_refuses_cut_to_its_stated_length(
    echo: tuple[CountingServer, Echo], request_bytes: bytes, quoted: bytes
) -> None:
    server, _ = echo
    assert quoted in exchange(_port(server), request_bytes)


def test_an_answer_never_sent_is_said_so() -> None:
    port, thread, _ = _scripted([_send(b"")])
    with pytest.raises(http1.ResponseError, match="the server closed the connection without answering"):
        http1.Connection("127.0.0.1", port, 5).request("GET", "/health")
    thread.join(5)


def test_closing_a_connection_never_opened_or_closed_before_does_nothing() -> None:
    connection = http1.Connection("127.0.0.1", 1, 5)  # nothing is dialled until the first request
    connection.close()
    connection.close()
    assert connection.sock is None and connection.rfile is None


class Recording(CountingServer):
    errors: list[BaseException | None]

    def handle_error(self, request: object, client_address: object) -> None:  # type: ignore[override]
        import sys

        self.errors.append(sys.exc_info()[1])


@pytest.mark.parametrize("sent", [b"", b"\r\n"])
def test_a_client_that_closes_without_a_request_is_no_error(sent: bytes) -> None:
    """Connected and gone (a port probe, a health check's TCP connect), or an empty line as
    http.server reads it: the connection ends quietly, no error in the simulator's log."""
    with in_thread(Recording(("127.0.0.1", 0), Echo())) as server:
        server.errors = []
        if sent:
            assert exchange(_port(server), sent) == b""  # answered by the close
        else:
            socket.create_connection(("127.0.0.1", _port(server)), timeout=5).close()
        assert exchange(_port(server), b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert server.errors == []
