"""Bounded HTTP answers: one request within a total deadline and a byte cap (EDGE: httpx).

Why not ``client.get(url, timeout=T).json()``:
- httpx's ``timeout=`` bounds each read, not the request: a server that answers 200 and then
  sends one byte every 0.2 s never times out, and a retry loop around it (tenacity's
  stop_after_delay) only looks at the clock between attempts. Here a monotonic deadline is
  checked at every chunk, and each read's own timeout is the time left when the request starts:
  a trickle stops at the deadline, a server that stalls stops at it too; a trickle that stalls
  just before the deadline can add at most one more read timeout (the bound is twice the deadline).
- the body's chunks are not the only place a server can trickle: headers sent a line at a time
  satisfy every per-read timeout too, before any chunk. Each request arms a timer at the deadline
  that shuts its socket down (``_Watchdog``), which wakes the blocked read. httpcore's public
  ``trace`` extension hands over a new connection's stream; a connection reused from the pool is
  announced only by its request's first event, without its socket, so every socket this client
  opened to that origin is remembered (weakly) and the timer shuts down all of them. A server that
  answered whole once proves nothing about its next answer: one that answered a health poll with a
  503 and trickled the next poll's headers on the kept-alive connection held a sweep past its
  10 s health timeout for minutes. Shutting an idle socket of that origin costs a reconnect (the
  pool drops it), a concurrent request to the same late server ends early, as a failure.
- ``.text`` and ``.json()`` read the whole body although a caller needs a few KB of it: the body
  is read raw up to ``max_bytes``, then refused (AnswerTooLarge) or cut to that prefix
  (``keep_prefix``: the caller says which). ``max_bytes=0`` reads none of it (status only).
- httpx decodes each raw chunk whole and chains a decoder per listed encoding, so a 1.8 KB answer
  with ``Content-Encoding: gzip, gzip`` becomes gigabytes before any size check. orch asks for
  ``Accept-Encoding: identity`` and refuses an answer that is encoded anyway (AnswerEncoded):
  the servers orch talks to (SGLang, Prometheus clients, webhooks) compress only when asked to,
  and refusing is simpler to trust than a bounded decompressor.
- ``json.loads`` raises RecursionError on a small, deeply nested body, which is no ValueError:
  ``parse_json`` turns both, and nesting deeper than MAX_JSON_DEPTH, into NotJson.

httpx's own errors (refused, reset, bad URL) pass through unchanged: each caller already says
what they mean for it; a timeout of any kind becomes AnswerTimedOut, since this module owns the
deadline.
"""

from __future__ import annotations

import heapq
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import httpx

from orchestrator.core import jsontext
from orchestrator.errors import OrchError

# A JSON answer (server info, a `verify:` path): SGLang's is a few KB.
MAX_JSON_BYTES = 1 << 20
# Deeper than this is no server's self-description; recursive code downstream stays safe.
MAX_JSON_DEPTH = 64
# How long past its deadline a request's own socket is shut down: httpx's read timeout, which ends
# at the deadline, says what stalled when it can (ReadTimeout); the shutdown ends what it cannot.
WATCHDOG_GRACE_S = 0.2
# The shortest timeout handed to httpx (a deadline already passed still gets one quick look).
MIN_TIMEOUT_S = 0.05
IDENTITY = "identity"


@dataclass(frozen=True)
class Answer:
    """Status, headers and the bytes read (all of the body, or its first ``max_bytes``)."""

    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool = False  # the body went on past max_bytes (keep_prefix only)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class HttpAnswerError(OrchError):
    """An answer orch will not read whole: too slow, too large or encoded. ``problem`` is the
    message without the URL, for a caller whose URL is a secret (a webhook) or already named."""

    def __init__(self, url: str, problem: str, hint: str, status: int | None = None) -> None:
        self.url, self.problem, self.hint, self.status = url, problem, hint, status
        super().__init__(f"{url}: {problem} ({hint})")


class AnswerTimedOut(HttpAnswerError):
    """No complete answer within the deadline; ``how`` names httpx's timeout when one ended it
    (ConnectTimeout: the host is unreachable; ReadTimeout: the server went quiet)."""

    def __init__(self, url: str, deadline_s: float, how: str = "") -> None:
        problem = f"no complete answer within {deadline_s:g} s" + (f" ({how})" if how else "")
        super().__init__(url, problem, "the server is stalled or too slow: check it")


class AnswerTooLarge(HttpAnswerError):
    """The body is longer than the caller's cap."""

    def __init__(self, url: str, max_bytes: int, status: int) -> None:
        super().__init__(
            url, f"more than {max_bytes} bytes", "orch reads no more of an answer: is this the right URL?", status
        )


class AnswerEncoded(HttpAnswerError):
    """The server compressed its answer although orch asked for identity."""

    def __init__(self, url: str, encoding: str, status: int) -> None:
        super().__init__(
            url,
            f"answer is encoded ({encoding}) although orch asked for Accept-Encoding: identity",
            "orch does not decompress answers, a few KB can expand to gigabytes: turn compression off there",
            status,
        )


class NotJson(OrchError):
    """A body that is not JSON orch will use (invalid, or nested too deep)."""


def request(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int,
    keep_prefix: bool = False,
    json_body: object = None,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """One request, its answer read within ``deadline_s`` in all and up to ``max_bytes``.

    Raises AnswerTimedOut, AnswerEncoded, AnswerTooLarge (unless ``keep_prefix``), or httpx's own
    errors for a URL that cannot be reached."""
    deadline = time.monotonic() + deadline_s
    sent = {**(headers or {}), "Accept-Encoding": IDENTITY}
    watchdog = _Watchdog(deadline, _opened(client, url))
    try:
        with client.stream(
            method,
            url,
            json=json_body,
            headers=sent,
            timeout=max(MIN_TIMEOUT_S, deadline - time.monotonic()),
            extensions={"trace": watchdog.trace},
        ) as response:
            if max_bytes <= 0:
                return Answer(response.status_code, response.headers, b"")
            _refuse_encoding(url, response)
            body, truncated = _read(url, response, deadline, deadline_s, max_bytes, keep_prefix)
            return Answer(response.status_code, response.headers, body, truncated)
    except httpx.TimeoutException as exc:
        raise AnswerTimedOut(url, deadline_s, type(exc).__name__) from exc
    except httpx.TransportError as exc:
        if watchdog.fired:  # our shutdown at the deadline, seen by httpcore as the server hanging up
            raise AnswerTimedOut(url, deadline_s, "still sending at the deadline") from exc
        raise
    finally:
        watchdog.cancel()


class _Watchdog:
    """Shuts down the socket a request uses once its deadline passes: the bound that holds while
    the answer's headers trickle in (see the module's doc). ``opened``: the sockets the client
    opened to the request's origin; a new connection's joins them, and a request on a pooled one
    (no connect event before its headers go out) shuts all of them down at the deadline. One
    shared thread keeps every request's timer (_REAPER): a thread started per request doubled a
    health poll's cost (0.55 -> 1.0 ms on loopback)."""

    def __init__(self, deadline: float, opened: weakref.WeakSet[socket.socket] | None) -> None:
        self.deadline, self.opened, self.fired = deadline, opened, False
        self.armed = False
        self.socks: tuple[socket.socket, ...] = ()

    def trace(self, event: str, info: Mapping[str, object]) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            get_extra_info = getattr(stream, "get_extra_info", None)
            sock = get_extra_info("socket") if callable(get_extra_info) else None
            if isinstance(sock, socket.socket):
                if self.opened is not None:
                    with _OPENED_LOCK:
                        self.opened.add(sock)
                _REAPER.arm(self, (sock,))
        elif event.endswith("send_request_headers.started") and not self.armed and self.opened is not None:
            with _OPENED_LOCK:
                pooled = tuple(self.opened)
            _REAPER.arm(self, pooled)

    def cancel(self) -> None:
        _REAPER.cancel(self)


class _Reaper:
    """One daemon thread that fires watchdogs at their deadline (plus WATCHDOG_GRACE_S), started
    on first use (and again in a forked child, which has no threads)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def arm(self, dog: _Watchdog, socks: tuple[socket.socket, ...]) -> None:
        with self._cond:
            dog.socks, dog.armed = socks, True
            self._seq += 1
            entry = (dog.deadline + WATCHDOG_GRACE_S, self._seq, dog)
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="http-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0] is entry:  # sooner than the thread sleeps until: wake it (else no switch)
                self._cond.notify()

    def cancel(self, dog: _Watchdog) -> None:
        with self._cond:
            dog.armed, dog.socks = False, ()  # its heap entry fires nothing; it leaves at its time

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, dog = heapq.heappop(self._heap)
                socks, fire = dog.socks, dog.armed
                if fire:
                    dog.fired, dog.armed, dog.socks = True, False, ()
            for sock in socks if fire else ():
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already: the request ended as the deadline came


_REAPER = _Reaper()


# client -> origin -> the sockets it opened there (weak both ways: a closed client or a socket its
# pool dropped leaves nothing behind; a closed socket's shutdown is a harmless OSError).
_OPENED: weakref.WeakKeyDictionary[httpx.Client, dict[tuple[str, str, int | None], weakref.WeakSet[socket.socket]]]
_OPENED = weakref.WeakKeyDictionary()
_OPENED_LOCK = threading.Lock()


def _opened(client: httpx.Client, url: str) -> weakref.WeakSet[socket.socket] | None:
    """The sockets `client` opened to the origin of `url` (None: a URL httpx will refuse anyway)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return None
    origin = (parsed.scheme, parsed.host, parsed.port)
    with _OPENED_LOCK:
        return _OPENED.setdefault(client, {}).setdefault(origin, weakref.WeakSet())


def _refuse_encoding(url: str, response: httpx.Response) -> None:
    listed = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
    encoded = [e for e in listed if e and e != IDENTITY]
    if encoded:
        raise AnswerEncoded(url, ", ".join(encoded), response.status_code)


def _read(
    url: str, response: httpx.Response, deadline: float, deadline_s: float, max_bytes: int, keep_prefix: bool
) -> tuple[bytes, bool]:
    """The raw body up to max_bytes, and whether it went on past them."""
    length = response.headers.get("content-length", "")
    if not keep_prefix and length.isdigit() and int(length) > max_bytes:
        raise AnswerTooLarge(url, max_bytes, response.status_code)  # said up front: read none of it
    body = bytearray()
    for chunk in _raw_chunks(response):
        if time.monotonic() > deadline:
            raise AnswerTimedOut(url, deadline_s)
        room = max_bytes - len(body)
        if len(chunk) > room:
            if not keep_prefix:
                raise AnswerTooLarge(url, max_bytes, response.status_code)
            body += chunk[:room]
            return bytes(body), True
        body += chunk
    return bytes(body), False


def _raw_chunks(response: httpx.Response) -> Iterable[bytes]:
    """The body as it arrives, undecoded. A transport that hands over a body it already holds
    (httpx.MockTransport with ``content=bytes``) has nothing left to bound: its bytes as they are."""
    if response.is_stream_consumed:
        return (response.content,)
    return response.iter_raw()


def get_json(client: httpx.Client, url: str, *, deadline_s: float) -> tuple[int, object]:
    """GET a JSON answer (a server's self-description, a `verify:` path): its status, and its
    value when the status is 200 (else None), read within ``deadline_s`` and MAX_JSON_BYTES.
    Raises what ``request`` raises, and NotJson for a 200 whose body is not JSON orch reads."""
    answer = request(client, "GET", url, deadline_s=deadline_s, max_bytes=MAX_JSON_BYTES)
    return answer.status, parse_json(answer.body, url) if answer.status == 200 else None


def parse_json(body: bytes | str, where: str) -> object:
    """The JSON value of a body; NotJson for invalid JSON, for a body nested so deep that
    json.loads gives up with RecursionError (60 KB suffice), or deeper than MAX_JSON_DEPTH."""
    try:
        value = jsontext.loads(body)
    except RecursionError:
        raise NotJson(f"{where}: not JSON (nested too deep to parse)") from None
    except ValueError as exc:
        raise NotJson(f"{where}: not JSON ({str(exc)[:100]})") from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise NotJson(f"{where}: not JSON orch reads (nested deeper than {MAX_JSON_DEPTH} levels)")
    return value


def _deeper_than(value: object, limit: int) -> bool:
    """Whether lists and objects nest deeper than `limit`; iterative, so no depth can overflow it."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
