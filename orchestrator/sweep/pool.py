"""Thread pools of the sweep: the same step on every host at once, and every outcome gathered.

Why gather: when three hosts are unreachable, raising only the first host's failure makes the
user fix them one run at a time. Like Fabric's GroupResult, every host runs to its end and every
failure is reported together (GroupError). One failure is raised as itself, so its type (a
ServiceError, a TransportError, a CommandTimedOut) still decides what the caller does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.interrupts import uninterrupted
from orchestrator.errors import GroupError, Interrupted, OrchError

T = TypeVar("T")
K = TypeVar("K")


def per_host(deployment: Deployment, work: Callable[[HostHandle], T]) -> dict[str, T]:
    """Run `work` on every host at once (one thread per host: their connections are separate);
    host key (the role, for a role of one host) -> result, or every failure at once."""
    return gather(dict(deployment.hosts), work)


def gather(items: dict[str, K], work: Callable[[K], T], *, what: str = "hosts") -> dict[str, T]:
    """key -> work(item), all at once (in the calling thread when there is one item); after
    every item has finished, raise_group on any failure."""
    if len(items) == 1:
        ((key, item),) = items.items()
        return {key: work(item)}
    futures: dict[str, Future[T]] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(items)))
    try:
        with uninterrupted():  # every item submitted, so every one is waited for
            for key, item in items.items():
                futures[key] = pool.submit(work, item)
        settle(list(futures.values()))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    failures = {key: exc for key, f in futures.items() if (exc := f.exception()) is not None}
    if failures:
        raise_group(failures, what)
    return {key: f.result() for key, f in futures.items()}


def settle(futures: list[Future[T]]) -> None:
    """Wait until every future is done. An interrupt while waiting cancels what has not begun
    and still waits for what runs, then propagates: a unit restart left running in a worker
    would race the restore that the interrupt starts, and start a server after it stopped that
    unit. A second interrupt stops the waiting (the user insists; the first one propagates)."""
    try:
        wait(futures)
    except (KeyboardInterrupt, Interrupted):
        for f in futures:
            f.cancel()
        with contextlib.suppress(KeyboardInterrupt, Interrupted):
            wait(futures)
        raise


def raise_group(failures: dict[str, BaseException], what: str = "hosts") -> None:
    """An interrupt or a bug wins (it must not be dressed as a host failure); one host's error
    is raised as itself; several become one GroupError naming each."""
    for exc in failures.values():
        if isinstance(exc, (KeyboardInterrupt, Interrupted)) or not isinstance(exc, OrchError):
            raise exc
    if len(failures) == 1:
        raise next(iter(failures.values()))
    raise GroupError(failures, what=what)
