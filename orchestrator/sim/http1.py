"""Just enough HTTP/1.1 for the simulator's servers and its repro client (EDGE, stdlib only).

Why not http.server and http.client: importing them pulls in email, ssl, calendar, mimetypes
and more, ~17 ms of CPU at every start of a process that then serves a few hundred requests, and
one run of the test suite starts the simulated servers ~900 times and the repro ~600 times
(bench/bench_startup.py prints both starts beside the previous commit's). What is spoken here is
what the simulator's peers send and answer: the real PD router (Rust, hyper), orch's health
probes (httpx), curl and urllib: requests with a Content-Length or a chunked body, keep-alive,
`Expect: 100-continue`; answers with a Content-Length, chunked, or read to the close.

Everything else is answered with a status and a closed connection, never a hang: the HTTP/2
preface the real router probes worker ports with gets 505, a request line or header block over
its limit 414 or 431, a body over MAX_BODY 413, a method other than GET or POST 501 (by the
server). The caller's socket timeout bounds every read.
"""

from __future__ import annotations

import socket
from io import BufferedIOBase
from typing import Callable, NamedTuple

MAX_LINE = 65536  # a request, status or header line (http.server's limit)
MAX_HEADERS = 100  # header lines of one message (http.client's limit)
MAX_BODY = 64 << 20  # a request or response body: the simulator's are a few KB

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    413: "Content Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class RequestError(Exception):
    """A request refused before it is routed: the server answers `status` and closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ResponseError(ConnectionError):
    """An answer the client cannot read (malformed, too large, or the connection closed before it
    was complete): a ConnectionError, so it is handled as a dropped connection is."""


class Request(NamedTuple):
    method: str
    target: str
    body: bytes
    keep_alive: bool


Headers = dict[str, str]  # lower-case name -> value (a repeated header keeps its last value)


# ---- reading, both sides ----------------------------------------------------------------------

Fail = Callable[[int, str], Exception]  # how a side reports what it cannot read: (status, message)


def _refuse(status: int, message: str) -> Exception:
    """The server's side: the request is answered with `status`."""
    return RequestError(status, message)


def _unreadable(_status: int, message: str) -> Exception:
    """The client's side: the answer cannot be used."""
    return ResponseError(message)


def _line(rfile: BufferedIOBase, fail: Fail, status: int = 431) -> bytes:
    line = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise fail(status, f"a line over {MAX_LINE} bytes")
    return line


def read_headers(rfile: BufferedIOBase, fail: Fail) -> Headers:
    """Header lines up to the empty line that ends them."""
    headers: Headers = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(rfile, fail)
        if line in (b"\r\n", b"\n"):
            return headers
        name, colon, value = line.decode("latin-1").partition(":")
        if not line.endswith(b"\n") or not colon or not name or name != name.strip():
            raise fail(400, f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    raise fail(431, f"more than {MAX_HEADERS} headers")


def _exact(rfile: BufferedIOBase, n: int) -> bytes:
    data = rfile.read(n)
    if len(data) != n:
        raise ResponseError(f"connection closed {len(data)} bytes into a body of {n}")
    return data


def _read_chunked(rfile: BufferedIOBase, fail: Fail, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_text = _line(rfile, fail).split(b";", 1)[0].strip()
        if not size_text or not size_text.isascii() or size_text.strip(b"0123456789abcdefABCDEF"):
            raise fail(400, f"bad chunk size {size_text[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            read_headers(rfile, fail)  # trailers, if any
            return b"".join(parts)
        total += size
        if total > limit:
            raise fail(413, f"a body over {limit} bytes")
        parts.append(_exact(rfile, size))
        if _line(rfile, fail) not in (b"\r\n", b"\n"):
            raise fail(400, "a chunk not followed by its line end")


def _length(headers: Headers, fail: Fail, limit: int) -> int | None:
    """The Content-Length (None when absent): digits only (RFC 9110), at most `limit`."""
    text = headers.get("content-length")
    if text is None:
        return None
    if not text.isdigit() or not text.isascii():
        raise fail(400, f"bad Content-Length {text[:40]!r}")
    if int(text) > limit:
        raise fail(413, f"a body of {text} bytes, over {limit}")
    return int(text)


def _body(rfile: BufferedIOBase, headers: Headers, fail: Fail) -> bytes | None:
    """The message body framed by its headers; None when they frame none (a response is then
    read to the connection's close, a request has none)."""
    coding = headers.get("transfer-encoding")
    if coding is not None:
        if coding.lower() != "chunked":
            raise fail(501, f"Transfer-Encoding {coding[:40]!r} is not supported")
        return _read_chunked(rfile, fail, MAX_BODY)
    length = _length(headers, fail, MAX_BODY)
    return None if length is None else _exact(rfile, length)


# ---- server side ------------------------------------------------------------------------------


def read_request(rfile: BufferedIOBase, wfile: BufferedIOBase) -> Request | None:
    """The next request on a connection, None when the client closed it (or sent an empty line,
    as http.server took it). Sends `100 Continue` when the client waits for it."""
    line = _line(rfile, _refuse, 414)
    words = line.decode("latin-1").split()
    if not words:
        return None
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        raise RequestError(400, f"bad request line {line[:80]!r}")
    method, target, version = words
    major, _, minor = version[5:].partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise RequestError(400, f"bad HTTP version {version[:20]!r}")
    if major != "1":
        raise RequestError(505, f"Invalid HTTP version ({version[5:20]})")
    if target.startswith("//"):  # as http.server: the real router asks `http://host:port/` + `/health`
        target = "/" + target.lstrip("/")
    headers = read_headers(rfile, _refuse)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if minor != "0" else "keep-alive" in connection
    if minor != "0" and headers.get("expect", "").lower() == "100-continue":
        _length(headers, _refuse, MAX_BODY)  # a body over the limit is refused before it is sent
        wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = _body(rfile, headers, _refuse)
    return Request(method, target, body or b"", keep_alive)


def write_response(wfile: BufferedIOBase, status: int, body: bytes, keep_alive: bool) -> None:
    """One answer, head and body in one write (no delayed-ACK stall between them)."""
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if not keep_alive:
        lines.append("Connection: close")
    wfile.write("\r\n".join([*lines, "", ""]).encode("latin-1") + body)


# ---- client side ------------------------------------------------------------------------------


class Connection:
    """One HTTP/1.1 keep-alive connection, opened at the first request and again after the server
    closed it. Any error closes it: a half-read answer never leaks into the next request."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.sock: socket.socket | None = None
        self.rfile: BufferedIOBase | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """Send one request, read its whole answer: (status, body)."""
        try:
            return self._exchange(method, path, body, read_body=True)
        except BaseException:
            self.close()
            raise

    def status(self, method: str, path: str) -> int:
        """Send one request and read only its status and headers, then close: a worker's answer
        of gigabytes is never read to learn its status."""
        try:
            return self._exchange(method, path, None, read_body=False)[0]
        finally:
            self.close()

    def close(self) -> None:
        if self.rfile is not None:
            self.rfile.close()
        if self.sock is not None:
            self.sock.close()
        self.sock = self.rfile = None

    def _exchange(self, method: str, path: str, body: bytes | None, read_body: bool) -> tuple[int, bytes]:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.rfile = self.sock.makefile("rb")
        assert self.rfile is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.sock.sendall(head.encode("latin-1") + b"\r\n" + (body or b""))
        status, version, headers = self._head(self.rfile)
        if not read_body:
            return status, b""
        data = _body(self.rfile, headers, _unreadable)
        closing = "close" in headers.get("connection", "").lower() or version == "HTTP/1.0"
        if data is None:  # framed by the close
            data, closing = self._to_close(self.rfile), True
        if closing:
            self.close()
        return status, data

    @staticmethod
    def _head(rfile: BufferedIOBase) -> tuple[int, str, Headers]:
        """The final answer's status line and headers (interim 1xx answers skipped)."""
        while True:
            line = _line(rfile, _unreadable)
            if not line:
                raise ResponseError("the server closed the connection without answering")
            version, _, rest = line.decode("latin-1").partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise ResponseError(f"malformed status line {line[:80]!r}")
            headers = read_headers(rfile, _unreadable)
            if not 100 <= int(code) < 200:
                return int(code), version, headers

    @staticmethod
    def _to_close(rfile: BufferedIOBase) -> bytes:
        data = rfile.read(MAX_BODY + 1)
        if len(data) > MAX_BODY:
            raise ResponseError(f"body over {MAX_BODY} bytes")
        return data
