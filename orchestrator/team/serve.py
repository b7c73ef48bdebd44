"""`orch serve`: the team's read-only web view of a reports folder (EDGE).

Serves reports/index.html, the files of each run directory (its report, journal, trial logs),
a live status page of running sweeps and the queue (/status), and JSON (/api/runs, /api/status).

Why so strict about what it serves: a reports folder also holds the queue database (webhook URLs)
and each run's backup/ (original env files, which may hold tokens); the server may be bound to a
lab network. So only GET and HEAD; only the top index and files inside run directories (those
with a run.json), never backup/, never a dot-file, never a directory listing; every path is
resolved (symlinks included) and must stay inside the reports folder, and the rules hold for the
real path as for the URL (a symlink, a run folder or one inside it, cannot lead out of the folder,
into a backup/ or to a dot-file). Bound to loopback, it also checks the Host header, so a web page
elsewhere cannot read it through DNS rebinding. Raw texts (repro output, unit logs, the journal,
env files) and run.json are served through the Redactor of the real run directory: a token a
repro printed, or an inventory recorded, stays masked even in a run written before orch masked
those files on disk.

Why no response costs more memory than MAX_MASKED_BYTES: a repro's output goes to a file of any
size, and the server read, decoded, masked and encoded a whole file (a HEAD of a 512 MiB repro.out
cost 1.5 GiB). A raw text larger than that is served as its last MAX_MASKED_BYTES, whole lines
only (so a secret is never cut apart from its name), under a note saying so; the whole file stays
on disk. Every other file (report pages, charts, JSON) is served whole, streamed from disk. A HEAD
reads nothing of a raw text, so it carries no Content-Length there (only masking tells it).

Why no client can hold the server: each connection holds a thread, and a client that opens one and
never finishes its request held it forever (50 such clients, 50 threads). So every read or write
that makes no progress for SOCKET_TIMEOUT_S ends the connection, the request line and headers must
arrive within HEADER_DEADLINE_S in all (a client trickling a byte every few seconds is cut off; the
deadline ends once the request is read, so a slow download of a big file goes on), and at most
MAX_CONNECTIONS are served at once. When all are taken, a newcomer takes the slot of the connection
that has waited longest for its request (cut off as the deadline would): refused at once instead,
one client holding MAX_CONNECTIONS idle connections (re-opened as they time out) locked every
other client out; a newcomer is refused only when every slot is serving a request it has read.
"""

from __future__ import annotations

import errno
import functools
import html
import ipaddress
import json
import mimetypes
import os
import socket
import stat
import sys
import threading
from dataclasses import asdict, dataclass, fields
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Sequence
from urllib.parse import parse_qs, quote, unquote, urlsplit

from orchestrator.core.clip import clip
from orchestrator.core.endpoints import LOOPBACK_NAMES, host_port
from orchestrator.core.redact import Redactor
from orchestrator.errors import Interrupted, OrchError, UsageError
from orchestrator.store.rundir import BACKUP, INDEX_HTML, JOURNAL, RUN_JSON, STATUS_JSON, RunDir
from orchestrator.team.livestatus import LiveRun, Snapshot, StatusCache, snapshot

if TYPE_CHECKING:
    from orchestrator.report.site import EntryCache

DEFAULT_PORT = 8765
REFRESH_S = 5
HIDDEN_PARTS = (BACKUP,)  # the hosts' original env files: secrets
LIVE_FILES = frozenset({STATUS_JSON, JOURNAL, RUN_JSON})  # change while a sweep runs: never cached
TEXT_TYPES = {
    ".jsonl": "application/x-ndjson",
    ".log": "text/plain",
    ".out": "text/plain",
    ".err": "text/plain",
    ".env": "text/plain",
    ".yaml": "text/plain",
    ".yml": "text/plain",
}
# raw texts a run folder holds (repro output, unit logs, the journal): masked as they are served,
# with the run's own declared secrets, also for runs written before orch masked them on disk
MASKED_SUFFIXES = frozenset({".jsonl", ".log", ".out", ".err", ".txt", ".yaml", ".yml", ".env"})
# run.json too: it holds the matrix and inventory texts, written raw by orch before it masked
# them (the report masks them as it renders; served whole, an old run's inventory gave its tokens)
MASKED_NAMES = frozenset({RUN_JSON})
MAX_MASKED_BYTES = 8 << 20  # a raw text beyond this is served as its tail (see the module's doc)
CHUNK_BYTES = 64 << 10  # a file served whole is streamed in pieces of this size
SOCKET_TIMEOUT_S = 10.0  # a read or a write (one chunk) that makes no progress this long ends the connection
HEADER_DEADLINE_S = 15.0  # the request line and headers, in all (see the module's doc)
MAX_CONNECTIONS = 64  # served at once, a thread each (see the module's doc for the excess)
EVICT_WAIT_S = 1.0  # how long a newcomer waits for the slot of the connection it cut off
CSP_HEAD_BYTES = 8192  # where a report page carries its CSP meta tag
QUOTED_CHARS = 200  # of a refused request's own text, quoted in the refusal
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_Request = socket.socket | tuple[bytes, socket.socket]  # what socketserver hands a server (TCP: a socket)

STATUS_TEMPLATE = "status.html.j2"  # in orchestrator/report/templates, beside the report's


def make_server(reports_dir: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ReportsServer:
    """A server (not yet serving) for reports_dir; port 0 picks a free port."""
    root = reports_dir.resolve()
    if not root.is_dir():
        raise UsageError(f"reports folder {reports_dir} not found", hint="pass --reports DIR")
    shown = host_port(host, port)
    try:
        return ReportsServer((host, port), _handler(root, host), MAX_CONNECTIONS, family=_family(host))
    except OSError as exc:
        hint = (
            "pick another --port, or stop what uses it"
            if exc.errno == errno.EADDRINUSE
            else "--host takes an address of this machine, e.g. 127.0.0.1 or ::1"
        )
        raise UsageError(f"--host/--port: cannot listen on {shown}: {exc.strerror}", hint=hint) from exc


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for an IPv6 address (`--host ::1`): the server's socket was IPv4 whatever the address,
    and `::1` failed with `Address family for hostname not supported`."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name (localhost): resolved for IPv4, as before
        return socket.AF_INET


class ReportsServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at once: without a cap, clients that
    never finish a request could make the process start threads until it runs out of memory."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS  # listen()'s backlog (socketserver's 5 made the kernel drop SYNs)

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int,
        family: socket.AddressFamily = socket.AF_INET,
    ) -> None:
        self.address_family = family  # before binding: socketserver makes its socket of this family
        self._slots = threading.BoundedSemaphore(max_connections)  # before binding: it is used once serving
        self._waiting: dict[ReportsHandler, None] = {}  # connections still reading their request, oldest first
        self._waiting_lock = threading.Lock()
        self.stopping: threading.Event | None = None  # set by the signal handler (sweep.signals)
        super().__init__(address, handler)

    def waiting(self, handler: ReportsHandler, waits: bool) -> None:
        """A handler tells when it starts and stops waiting for its request."""
        with self._waiting_lock:
            if waits:
                self._waiting[handler] = None
            else:
                self._waiting.pop(handler, None)

    def process_request(self, request: _Request, client_address: object) -> None:
        """Every slot taken: the newcomer takes the slot of the connection waiting longest for its
        request, else (every slot serving a request) it is closed at once. The slot is given back
        once, by the connection's thread or, if the thread never ran, here: a SIGTERM landing after
        the thread had started gave it back twice, and the BoundedSemaphore's ValueError replaced
        the Interrupted, which socketserver then swallowed as a request's error (the server served on)."""
        if not self._slots.acquire(blocking=False) and not self._take_a_waiting_slot():
            self.shutdown_request(request)
            return
        slot = _Slot(self._slots)
        thread = threading.Thread(
            target=self._serve_one, args=(request, client_address, slot), daemon=self.daemon_threads
        )
        try:
            thread.start()
        except BaseException:
            slot.give_back()
            raise

    def _serve_one(self, request: _Request, client_address: object, slot: _Slot) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            slot.give_back()

    def service_actions(self) -> None:
        """Between polls: a stop asked for (the signal handler sets `stopping` before it raises)
        ends the loop even if the handler's exception was lost on its way up."""
        if self.stopping is not None and self.stopping.is_set():
            raise Interrupted("received SIGTERM")

    def _take_a_waiting_slot(self) -> bool:
        """Cut off the connection that has waited longest for its request and take its slot once
        its thread has let go (at once: its blocked read ends with the shutdown)."""
        with self._waiting_lock:
            oldest = next(iter(self._waiting), None)
            if oldest is None:
                return False
            del self._waiting[oldest]
        oldest.cut_off()
        return self._slots.acquire(timeout=EVICT_WAIT_S)

    def handle_error(self, request: _Request, client_address: object) -> None:
        """Quiet when the client went away or was cut off (a deadline, a timeout): that is not a bug."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Slot:
    """One connection's place among the server's slots, given back exactly once."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots, self._lock, self._held = slots, threading.Lock(), True

    def give_back(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._slots.release()


def _handler(root: Path, bind_host: str) -> type[BaseHTTPRequestHandler]:
    class Handler(ReportsHandler):
        reports = root
        runs = _Runs()  # this server's: the runs it read, kept between page views
        statuses = StatusCache()  # this server's: the status views' runs, kept between views
        check_host = bind_host in LOOPBACK_NAMES or _loopback_address(bind_host)

    return Handler


class _Runs:
    """A server's report.site.EntryCache, made on its first page view (the report stack loads only
    when a page needs it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: EntryCache | None = None

    def cache(self) -> EntryCache:
        with self._lock:
            if self._cache is None:
                from orchestrator.report.site import EntryCache

                self._cache = EntryCache()
            return self._cache


class ReportsHandler(BaseHTTPRequestHandler):
    reports: Path
    runs: _Runs
    statuses: StatusCache
    check_host: bool
    server_version = "orch"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S  # StreamRequestHandler puts it on the socket: no read or write waits forever
    header_deadline_s = HEADER_DEADLINE_S

    # ------------------------------------------------------------------ the header deadline
    def setup(self) -> None:
        """Arm the header deadline: the socket timeout alone lets a client that sends a byte every
        few seconds keep its thread for ever."""
        super().setup()
        self._deadline_lock = threading.Lock()
        self._armed, self._cut = True, False
        self._deadline = threading.Timer(self.header_deadline_s, self.cut_off)
        self._deadline.daemon = True
        self._deadline.start()
        if isinstance(self.server, ReportsServer):
            self.server.waiting(self, True)

    def cut_off(self) -> None:
        """The request is not read in time (or a newcomer needs the slot): shut the socket down,
        which ends the blocked read."""
        with self._deadline_lock:
            if not self._armed:
                return
            self._armed, self._cut = False, True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:  # the client has gone already
                pass

    def _disarm(self) -> bool:
        """Stop the deadline (the request is read, or the connection ends); True if it was cut."""
        with self._deadline_lock:
            self._armed = False
        self._deadline.cancel()
        if isinstance(self.server, ReportsServer):
            self.server.waiting(self, False)
        return self._cut

    def parse_request(self) -> bool:
        """The request as BaseHTTPRequestHandler reads it, refused when it was cut off part-way
        (what was read is a fragment). Once read, the deadline ends: a slow download goes on."""
        if self._cut:
            self.close_connection = True
            return False
        parsed = super().parse_request()
        if self._disarm():
            self.close_connection = True
            return False
        if parsed and self.request_version == "HTTP/0.9":  # `GET /`: its answer would have no headers
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/0.9 is not served: send HTTP/1.0 or later")
            return False
        return parsed

    def finish(self) -> None:
        self._disarm()
        super().finish()

    # ------------------------------------------------------------------ methods
    def do_GET(self) -> None:  # noqa: N802
        self._respond()

    def do_HEAD(self) -> None:  # noqa: N802 - same answer without the body (see _send)
        self._respond()

    def _refuse_method(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n", "text/plain", extra={"Allow": "GET, HEAD"}
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method  # noqa: N815

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (400, 414, 431, 501...) in plain text under this server's
        headers: its default was an HTML page with neither nosniff nor a CSP, quoting the method
        or line the client sent. A request line it cannot parse (`GARBAGE`, `GET / HTTP/9.9`) left
        the version at HTTP/0.9, whose answers have no status line and no headers: the client got
        a bare body. Such a refusal is answered as HTTP/1.0, and the client's text it quotes is cut."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        text = clip(" ".join((message or HTTPStatus(code).phrase).split()), QUOTED_CHARS)
        body = f"{code} {text}\n".encode("utf-8", errors="replace")
        self._send(HTTPStatus(code), body, "text/plain; charset=utf-8", cache=False, extra={"Connection": "close"})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet by default
        pass

    # ------------------------------------------------------------------ routing
    def _respond(self) -> None:
        if self.check_host and not self._host_ok():
            return self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unexpected Host header\n", "text/plain")
        path = urlsplit(self.path).path
        routes: dict[str, Callable[[], None]] = {
            "/": self._index,
            "/index.html": self._index,
            "/status": self._status_page,
            "/api/status": self._api_status,
            "/api/runs": self._api_runs,
            # a browser asks every site for it: answered with nothing, not a 404 in its console
            "/favicon.ico": lambda: self._headers(HTTPStatus.NO_CONTENT, None, "image/x-icon"),
        }
        route = routes.get(path)
        if route is not None:
            return route()
        running = running_run(self.reports, path)
        if running is not None:
            nested = path.endswith("/") or "/" in path.strip("/")  # /RUN/ or /RUN/index.html, not /RUN
            return self._run_status_page(running, "../" if nested else "")
        served = locate(self.reports, path)
        if served is None:
            return self._not_found()
        self._file(served)

    def _host_ok(self) -> bool:
        hosts = self.headers.get_all("Host") or [""]
        return len(hosts) == 1 and host_header_ok(hosts[0])

    def _index(self) -> None:
        """The index rendered now (running sweeps listed, trends up to date), not the file on disk."""
        from orchestrator.report.render import fresh_summary
        from orchestrator.report.site import index_page

        body = index_page(self.reports, fresh_summary, self.runs.cache()).encode()
        self._send(HTTPStatus.OK, body, "text/html; charset=utf-8", cache=False, csp=_page_csp(body))

    def _run_status_page(self, run_dir: str, root: str) -> None:
        """A running sweep has no report yet: its link shows its live status instead of a 404.
        root leads from the URL's folder back to the reports folder (`../` for /RUN/index.html and
        /RUN/), so the page's links reach the index and the run as /status's do."""
        s = snapshot(self.reports, self.statuses)
        mine = Snapshot(s.generated, tuple(r for r in s.runs if r.directory == run_dir), ())
        html = render_status(mine, root)
        self._send(HTTPStatus.OK, html.encode(), "text/html; charset=utf-8", cache=False, csp=PAGE_CSP)

    def _status_page(self) -> None:
        html = render_status(snapshot(self.reports, self.statuses))
        self._send(HTTPStatus.OK, html.encode(), "text/html; charset=utf-8", cache=False, csp=PAGE_CSP)

    def _api_status(self) -> None:
        self._json(status_json(snapshot(self.reports, self.statuses)))

    def _api_runs(self) -> None:
        page = runs_page_asked(urlsplit(self.path).query)
        if isinstance(page, str):
            return self._send(HTTPStatus.BAD_REQUEST, f"/api/runs: {page}\n".encode(), "text/plain; charset=utf-8")
        self._json(runs_page(self.reports, *page, cache=self.runs.cache()))

    # ------------------------------------------------------------------ responses
    def _file(self, served: Served) -> None:
        path = served.path
        f = _open_regular(path)
        if f is None:
            return self._not_found()
        with f:
            size = os.fstat(f.fileno()).st_size
            ctype = _content_type(path)
            if path.suffix in MASKED_SUFFIXES or path.name in MASKED_NAMES:
                return self._masked_file(served, f, size, ctype)
            self._whole_file(path, f, size, ctype)

    def _masked_file(self, served: Served, f: BinaryIO, size: int, ctype: str) -> None:
        """A raw text through the run's Redactor: read (at most MAX_MASKED_BYTES of it) only for
        a GET."""
        live = served.path.name in LIVE_FILES
        if self.command == "HEAD":
            return self._headers(HTTPStatus.OK, None, ctype, cache=not live)
        try:
            body = masked_text(f, size, served.path.name, run_redactor(served.run_dir))
        except OSError:
            return self._not_found()
        self._send(HTTPStatus.OK, body, ctype, cache=not live)

    def _whole_file(self, path: Path, f: BinaryIO, size: int, ctype: str) -> None:
        """Any other file as it is on disk, streamed: its size is known, nothing is masked."""
        try:
            head = f.read(min(size, CSP_HEAD_BYTES)) if ctype.startswith("text/html") else b""
        except OSError:
            return self._not_found()
        csp = _page_csp(head) if ctype.startswith("text/html") else None
        self._headers(HTTPStatus.OK, size, ctype, cache=path.name not in LIVE_FILES, csp=csp)
        if self.command != "HEAD":
            self.wfile.write(head)
            _stream(f, self.wfile.write, size - len(head))

    def _json(self, value: object) -> None:
        body = (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode()
        self._send(HTTPStatus.OK, body, "application/json; charset=utf-8", cache=False)

    def _not_found(self) -> None:
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        ctype: str,
        *,
        cache: bool = True,
        csp: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self._headers(status, len(body), ctype, cache=cache, csp=csp, extra=extra)
        if self.command != "HEAD":
            view = memoryview(body)  # in chunks: the socket timeout bounds each write, so a slow reader
            for at in range(0, len(view), CHUNK_BYTES):  # of a masked 8 MiB text is not cut off
                self.wfile.write(view[at : at + CHUNK_BYTES])

    def _headers(
        self,
        status: HTTPStatus,
        length: int | None,
        ctype: str,
        *,
        cache: bool = True,
        csp: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        """The status line and headers; `length` None: unknown (the connection's end ends the body)."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-cache" if cache else "no-store")
        if csp:
            self.send_header("Content-Security-Policy", csp)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()


def host_header_ok(header: str) -> bool:
    """Whether a Host header names this machine's loopback: `localhost` or a loopback address,
    with or without a port (empty: an HTTP/1.0 client that sent none). Any other name is refused,
    a name that only starts like an address too: DNS can point 127.0.0.1.evil.example at
    127.0.0.1, and a page of evil.example would then read the reports (DNS rebinding)."""
    host = header.strip()
    if not host:
        return True
    if host.startswith("["):  # [::1] or [::1]:8765
        host, _, port = host[1:].partition("]")
        port = port.removeprefix(":") if port.startswith(":") else port or "0"
    elif host.count(":") == 1:
        host, port = host.split(":")
    else:
        port = "0"
    if not (port.isascii() and port.isdigit()):
        return False
    host = host.lower().removesuffix(".")
    return host in LOOPBACK_NAMES or _loopback_address(host)


def _loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _page_csp(body: bytes) -> str:
    """A report carries its own CSP (script by hash) in a meta tag; repeat it as a header."""
    head = body[:8192].decode("utf-8", errors="replace")
    marker = 'http-equiv="Content-Security-Policy" content="'
    at = head.find(marker)
    if at < 0:
        return PAGE_CSP
    end = head.find('"', at + len(marker))
    return html.unescape(head[at + len(marker) : end]) if end > 0 else PAGE_CSP  # attribute: &#39; -> '


def running_run(root: Path, url_path: str) -> str | None:
    """The run directory name when url_path is a run's report page (`run/` or `run/index.html`)
    that does not exist yet because the run has not finished writing it; else None."""
    parts = [p for p in unquote(url_path).split("/") if p]
    if not parts or len(parts) > 2 or (len(parts) == 2 and parts[1] != INDEX_HTML):
        return None
    name = parts[0]
    if name.startswith(".") or "\0" in name or "\\" in name:
        return None
    run = RunDir(root / name)
    try:
        if not run.is_run() or run.index_html.exists() or not (root / name).resolve().is_relative_to(root):
            return None
    except OSError:  # a name too long for the file system, a folder we may not read: not a run
        return None
    return name


def _content_type(path: Path) -> str:
    ctype = TEXT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype in ("application/json", "application/x-ndjson"):
        ctype += "; charset=utf-8"
    return ctype


def _open_regular(path: Path) -> BinaryIO | None:
    """The file opened for reading, or None. Non-blocking, then checked: safe_path saw a regular
    file, but a FIFO put there since must not hold a server thread forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        return None
    return f


def _stream(src: BinaryIO, write: Callable[[bytes], object], length: int) -> None:
    """Copy `length` bytes (fewer if the file shrank meanwhile: the client sees a short body)."""
    while length > 0:
        chunk = src.read(min(length, CHUNK_BYTES))
        if not chunk:
            return
        write(chunk)
        length -= len(chunk)


def masked_text(f: BinaryIO, size: int, name: str, redactor: Redactor) -> bytes:
    """The text of a file of `size` bytes, masked; beyond MAX_MASKED_BYTES only its last whole
    lines, under a note (a JSON line in a .jsonl, so the body still parses line by line)."""
    if size <= MAX_MASKED_BYTES:
        return masked(f.read(size), redactor)
    f.seek(size - MAX_MASKED_BYTES - 1)  # one byte before: does the window start a line?
    window = f.read(MAX_MASKED_BYTES + 1)
    # a cut line could hold a secret without its name (unmasked): only whole lines are shown
    tail = window[window.find(b"\n") + 1 :] if b"\n" in window else b""
    note = (
        f"orch serve: {name} holds {size:,} bytes; shown are its last {len(tail):,} "
        f"(whole lines, up to {MAX_MASKED_BYTES >> 20} MiB); the whole file is in the run folder on the server"
    )
    head = json.dumps({"orch_serve_note": note}) if name.endswith(".jsonl") else f"[{note}]"
    return head.encode() + b"\n" + masked(tail, redactor)


def masked(data: bytes, redactor: Redactor) -> bytes:
    text = data.decode("utf-8", errors="surrogateescape")
    return redactor.text(text).encode("utf-8", errors="surrogateescape")


def run_redactor(run_dir: Path) -> Redactor:
    """The redactor of the run (its real directory: the run.json that declares the secrets of the
    files it holds), cached by run.json's size and time: the journal of a running sweep is served
    every few seconds."""
    run_json = RunDir(run_dir).run_json
    try:
        st = run_json.stat()
    except OSError:
        return Redactor()
    return _redactor_of(run_json, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _redactor_of(run_json: Path, mtime_ns: int, size: int) -> Redactor:
    from orchestrator.store.manifest import load_manifest

    try:
        return load_manifest(run_json.parent, plan=False).redactor
    except OrchError:  # a torn or foreign run.json: the name patterns still apply
        return Redactor()


@dataclass(frozen=True)
class Served:
    """A file that may be served (its real path), and the real run directory that holds it."""

    path: Path
    run_dir: Path


def safe_path(root: Path, url_path: str) -> Path | None:
    """The real path of the file under root that url_path names, or None (see locate)."""
    served = locate(root, url_path)
    return served.path if served is not None else None


def locate(root: Path, url_path: str) -> Served | None:
    """The file under root that url_path names, or None when it must not be served (pure but
    for the file-system checks): inside a run directory, no hidden part, no backup/, no
    traversal (`..`, encoded or not, symlinks out), a regular file; `run/` means run/index.html."""
    parts = _url_parts(url_path)
    if parts is None:
        return None
    try:
        return _existing(root, parts)
    except (OSError, RuntimeError):  # a name too long for the file system, a folder we may not read, a loop
        return None


def _existing(root: Path, parts: list[str]) -> Served | None:
    """locate's file-system half: the allowed URL parts' file, if it is there and may be served.
    Raises OSError where the file system refuses to answer (ENAMETOOLONG, EACCES: pathlib's
    checks raise those); an uncaught one dropped the connection unanswered and printed the path
    in a traceback to the server's terminal, 64 KiB per request."""
    run_dir = root / parts[0]
    if not RunDir(run_dir).is_run():
        return None
    target = run_dir.joinpath(*parts[1:]) if len(parts) > 1 else run_dir
    if target.is_dir():
        target = target / INDEX_HTML
    resolved, real_run, real_root = target.resolve(strict=True), run_dir.resolve(strict=True), root.resolve()
    if not resolved.is_file() or not _real_path_allowed(real_root, real_run, resolved):
        return None
    return Served(resolved, real_run)


def _url_parts(url_path: str) -> list[str] | None:
    """The URL path's parts, or None when they name something never served."""
    decoded = unquote(url_path)
    if "\0" in decoded or "\\" in decoded or not decoded.startswith("/"):
        return None
    parts = [p for p in decoded.split("/") if p]
    return parts if _allowed_parts(parts) else None


def _real_path_allowed(root: Path, run_dir: Path, path: Path) -> bool:
    """The URL's rules again on the real paths (symlinks followed): a symlink, the run folder
    itself or one inside it, can lead out of the reports folder, into a backup/ or to a dot-file."""
    if run_dir == root or not run_dir.is_relative_to(root) or not path.is_relative_to(run_dir):
        return False
    return _allowed_parts(path.relative_to(root).parts)


def _allowed_parts(parts: Sequence[str]) -> bool:
    """No dot-part (a dot-file, `.`, `..`), and no backup/ inside a run (the hosts' originals)."""
    if not parts or any(p.startswith(".") for p in parts):
        return False
    return not any(p in HIDDEN_PARTS for p in parts[1:])


def render_status(s: Snapshot, root: str = "") -> str:
    """The live status page (/status, and a running sweep's link before it has a report); root is
    prefixed to its links (index.html, RUN/index.html): the way from the page's URL to the reports."""
    from orchestrator.report.page import environment

    return environment().get_template(STATUS_TEMPLATE).render(s=s, root=root, refresh=REFRESH_S, csp=PAGE_CSP)


def status_json(s: Snapshot) -> dict[str, object]:
    """/api/status and `orch status --json`: `queue` holds the first livestatus.QUEUE_SHOWN pending
    items, `queue_more` counts the rest (`orch queue list` lists them all), `queue_unreadable` says
    why the queue file cannot be read ("" when it was, or there is none)."""
    return {
        "generated": s.generated,
        "runs": [_run_json(r) for r in s.runs],
        "queue": [asdict(q) for q in s.queue],
        "queue_more": s.queue_more,
        "queue_unreadable": s.queue_unreadable,
    }


RUNS_PAGE = 500  # runs an /api/runs answer holds at most (2,000 runs answered 1.7 MB at once)


def runs_page_asked(query: str) -> tuple[int, int] | str:
    """(offset, limit) of `?offset=N&limit=M` (0 and RUNS_PAGE when absent), or why not."""
    asked = parse_qs(query, keep_blank_values=True)
    values = []
    for key, default, top in (("offset", 0, 10**9), ("limit", RUNS_PAGE, RUNS_PAGE)):
        text = (asked.get(key) or [str(default)])[-1]
        if not text.isascii() or not text.isdigit() or len(text) > 10 or not 0 <= int(text) <= top:
            return f"{key} must be a whole number from 0 to {top:,}, got {text[:20]!r}"
        values.append(int(text))
    return values[0], values[1]


def runs_page(
    reports_dir: Path, offset: int = 0, limit: int = RUNS_PAGE, *, cache: EntryCache | None = None
) -> dict[str, object]:
    """/api/runs: `limit` runs from `offset` (newest first), with `total` and `next_offset` (None
    on the last page), so a client reads thousands of runs a page at a time. `cache`: the server's
    (an unchanged run is not read again)."""
    runs = runs_json(reports_dir, cache)
    end = offset + limit
    return {
        "runs": runs[offset:end],
        "total": len(runs),
        "offset": offset,
        "next_offset": end if end < len(runs) else None,
    }


def runs_json(reports_dir: Path, cache: EntryCache | None = None) -> list[dict[str, object]]:
    """Every run, as the index lists it (newest first), with the link to its report."""
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import run_entries  # the index's own reading of a run: one truth for both

    return [
        {
            **{f.name: getattr(e, f.name) for f in fields(e) if f.name != "series"},  # series: trends' raw data
            "link": _link(e.directory) if e.has_report else "",
        }
        for e in run_entries(reports_dir, fresh_summary, cache)
    ]


def _run_json(r: LiveRun) -> dict[str, object]:
    """One run of /api/status and `orch status --json`: its status file's fields, with `state` the
    answer of store.liveness (running, stale or finished) that the table and /status show. The
    file's own `state` (what its controller last wrote: running, for ever after a kill -9) is not
    shown, nor an ETA for a run not running."""
    shown = r.status.model_dump(exclude={"state"})
    if r.state != "running":
        shown.update(eta_s=None, eta_at=None)
    if not r.current_cell:  # ended: no trial is current (LiveRun.current_cell)
        shown.update(current_cell=None, current_trial=None)
    return {
        "directory": r.directory,
        "state": r.state,
        # a stale run's `orch resume` / `orch restore`, an interrupted one's resume, its folder named whole
        "way_back": r.way_back,
        "run_status": r.run_status,
        "percent": None if r.percent is None else round(r.percent, 1),  # None for a hunt: no total
        "unreadable": r.unreadable,  # why its unreadable_file cannot be read ("" when read)
        "unreadable_file": r.unreadable_file,  # status.json (its fields empty) or run.json (the status file's, if read)
        **shown,
        "link": _link(r.directory),
    }


def _link(directory: str) -> str:
    """A run's report, relative to the server's root, quoted as the index's links are: a folder
    named `a#b` or `a?b` otherwise linked to `a` with a fragment or a query."""
    return f"{quote(directory, safe='/')}/index.html"
