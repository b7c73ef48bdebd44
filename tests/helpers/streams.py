"""Hostile HTTP answers for httpx.MockTransport (no sockets): bodies that trickle, never end or
expand, each counting how much of it the client pulled, so a test asserts on bytes read instead
of measuring memory."""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Callable, Iterator, Mapping

import httpx


class Body:
    """A streamed body of `chunks` chunks of `size` bytes, `interval` seconds apart; `pulled`
    counts the bytes handed to the client so far (over every answer built from it)."""

    def __init__(self, size: int, chunks: int, interval: float = 0.0, fill: bytes = b"x") -> None:
        self.size, self.chunks, self.interval, self.fill = size, chunks, interval, fill
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        block = self.fill * self.size
        for _ in range(self.chunks):
            if self.interval:
                time.sleep(self.interval)
            self.pulled += len(block)
            yield block


def trickle(seconds: float, interval: float = 0.1) -> Body:
    """One byte every `interval` seconds for `seconds`: httpx's per-read timeout never fires."""
    return Body(1, int(seconds / interval), interval, fill=b" ")


def gzip_bomb(inflated: int, layers: int = 2) -> bytes:
    """`inflated` zero bytes gzipped `layers` times: 64 MiB in two layers is a few hundred bytes."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    data = b"".join([inner.compress(block) for _ in range(inflated >> 20)] + [inner.flush()])
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


def client(
    body: Callable[[], object],
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    seen: list[httpx.Request] | None = None,
) -> httpx.Client:
    """A client whose every request gets `status`, `headers` and a fresh stream of `body()`
    (iterated lazily: nothing is pulled before the client reads); requests go into `seen`."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        made = body()
        if isinstance(made, bytes):
            made = iter([made])  # streamed all the same: a bytes content would be read (and decoded) up front
        return httpx.Response(status, headers=dict(headers or {}), content=made)

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)
