"""Readiness waits: poll health URLs until they answer 200 (EDGE: httpx + tenacity).

Why this shape:
- SGLang workers answer 503 on /health while warming up and 200 once ready; the PD router's
  /health is 200 even with no workers, so a router check must point at /readiness (503 until
  its workers are healthy). Only a 200 counts: any other status, a refused or reset
  connection, or a slow answer means "not ready yet".
- Start-up takes from a second (the simulator) to many minutes (a large MoE), so polling starts
  fast (20 ms, to keep per-trial overhead near the measured floor) and backs off to a small cap
  (100 ms: ~10 requests/s on a long warm-up is harmless, and it keeps the lag between "ready"
  and "noticed" at ~45 ms on average, ~100 ms at worst; a 250 ms cap measured ~125/240 ms).
- Restarts of one unit take about as long each time, so the runner passes how long the last
  ones took (``expected``): polls then come every 20 ms from just before the earliest of them
  to just after the latest (at most FAST_WINDOW_S of fast polling, ~50 requests a second), and
  the lag drops to ~10 ms where it counts, without hammering a server through a long warm-up.
- A unit that dies during warm-up must not make us wait out the whole timeout: between polls
  we call ``check_alive`` (ServiceManager.check_alive), whose ServiceError propagates at once.
- httpx errors are translated here, once, into HealthTimeout / ConfigError.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import tenacity

from orchestrator.errors import ConfigError, HealthTimeout

# Longest single request: a hung server must not hold a poll for long, a slow one still answers.
MAX_REQUEST_S = 2.0
# Shortest request timeout, used for the last look at the deadline.
MIN_REQUEST_S = 0.05
# How much of a not-ready body goes into the error message.
BODY_EXCERPT = 160
# Poll interval inside the window where readiness is expected, and the window's longest span.
FAST_POLL_S = 0.02
FAST_WINDOW_S = 2.0
# The window opens this long before the quickest earlier wait and closes this long after the
# slowest (a restart is rarely faster than the quickest seen).
WINDOW_LEAD_S = 0.1
WINDOW_TAIL_S = 0.3


@dataclass(frozen=True)
class HealthCheck:
    """One URL that proves one role is ready, with how long we are willing to wait for it."""

    role: str
    url: str
    timeout_s: float
    # (quickest, slowest) seconds earlier waits of this role took: poll fast in between
    expected: tuple[float, float] | None = None


class _NotReady(Exception):
    """One poll said "not yet"; ``answer`` says why, for the timeout message."""

    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.answer = answer


class _Cancelled(Exception):
    """wait_all stopped this wait because another role already failed."""


def wait_ready(
    check: HealthCheck,
    *,
    client: httpx.Client,
    check_alive: Callable[[], None] | None = None,
    poll_initial_s: float = 0.02,
    poll_max_s: float = 0.1,
) -> float:
    """Poll until the URL answers 200; return the seconds waited.

    Raises HealthTimeout naming the role, URL and last answer when the timeout passes, and lets
    any exception from ``check_alive`` (typically ServiceError) propagate immediately."""
    return _wait(check, client, check_alive, poll_initial_s, poll_max_s, cancel=None)


def wait_all(
    checks: Sequence[HealthCheck],
    *,
    client: httpx.Client,
    check_alive: Mapping[str, Callable[[], None]] | None = None,
    poll_initial_s: float = 0.02,
    poll_max_s: float = 0.1,
) -> dict[str, float]:
    """Wait on several roles at once (one thread each); return role -> seconds waited.

    Roles warm up in parallel after a restart, so waiting on them one after another would add
    their times. When one role fails the others are cancelled at their next poll, and the first
    failure (in time) is raised once every thread has stopped: no thread outlives the call."""
    roles = [c.role for c in checks]
    if len(set(roles)) != len(roles):
        raise ConfigError(f"health checks: duplicate roles {roles} (give each role one check)")
    alive = check_alive or {}
    cancel = threading.Event()
    failures: list[BaseException] = []
    lock = threading.Lock()

    def one(check: HealthCheck) -> float | None:
        try:
            return _wait(check, client, alive.get(check.role), poll_initial_s, poll_max_s, cancel=cancel)
        except _Cancelled:
            return None
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            with lock:
                failures.append(exc)
            cancel.set()
            return None

    waited: dict[str, float] = {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(checks)), thread_name_prefix="health") as pool:
            futures = {c.role: pool.submit(one, c) for c in checks}
            for role, future in futures.items():
                seconds = future.result()
                if seconds is not None:
                    waited[role] = seconds
    finally:
        # Ctrl-C in the caller's thread: stop the pollers instead of leaving them running.
        cancel.set()
    if failures:
        raise failures[0]
    return waited


def _wait(
    check: HealthCheck,
    client: httpx.Client,
    check_alive: Callable[[], None] | None,
    poll_initial_s: float,
    poll_max_s: float,
    cancel: threading.Event | None,
) -> float:
    started = time.monotonic()
    deadline = started + check.timeout_s

    def attempt() -> None:
        if cancel is not None and cancel.is_set():
            raise _Cancelled()
        try:
            _poll_once(check, client, deadline)
        except _NotReady:
            if check_alive is not None:
                check_alive()
            if cancel is not None and cancel.is_set():
                raise _Cancelled() from None
            raise

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(_NotReady),
        stop=tenacity.stop_after_delay(check.timeout_s),
        wait=_capped_backoff(poll_initial_s, poll_max_s, deadline, _fast_window(check, started)),
        sleep=_sleeper(cancel),
        reraise=True,
    )
    try:
        retrying(attempt)
    except _NotReady as exc:
        raise HealthTimeout(
            f"{check.role}: {check.url} not ready after {check.timeout_s:.1f} s (last answer: {exc.answer})"
        ) from None
    return time.monotonic() - started


def _poll_once(check: HealthCheck, client: httpx.Client, deadline: float) -> None:
    """One GET; return if it answered 200, else raise _NotReady describing the answer."""
    remaining = deadline - time.monotonic()
    timeout = max(MIN_REQUEST_S, min(MAX_REQUEST_S, remaining))
    try:
        response = client.get(check.url, timeout=timeout)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise ConfigError(
            f"{check.role}: bad health URL {check.url!r}: {exc}",
            hint="use http://HOST:PORT/PATH",
        ) from exc
    except httpx.TimeoutException as exc:
        raise _NotReady(f"no answer within {timeout:.2f} s") from exc
    except httpx.TransportError as exc:
        raise _NotReady(_describe_transport_error(exc)) from exc
    if response.status_code != 200:
        raise _NotReady(f"{response.status_code} {_excerpt(response.text)}".rstrip())


def _describe_transport_error(exc: httpx.TransportError) -> str:
    text = str(exc)
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "reset" in lowered:
        return "connection reset"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"connection closed without an answer ({text})" if text else "connection closed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _excerpt(body: str) -> str:
    flat = " ".join(body.split())
    return flat if len(flat) <= BODY_EXCERPT else flat[: BODY_EXCERPT - 3] + "..."


def _fast_window(check: HealthCheck, started: float) -> tuple[float, float] | None:
    """The monotonic times between which readiness is expected (None: no earlier waits)."""
    if check.expected is None:
        return None
    quickest, slowest = check.expected
    opens = started + max(0.0, quickest - WINDOW_LEAD_S)
    return opens, min(started + slowest + WINDOW_TAIL_S, opens + FAST_WINDOW_S)


def _capped_backoff(
    initial: float, cap: float, deadline: float, fast: tuple[float, float] | None = None
) -> Callable[[tenacity.RetryCallState], float]:
    """Exponential backoff from `initial` to `cap`, never sleeping past the deadline, so the
    last look happens right at the deadline instead of one full backoff after it. Inside the
    `fast` window polls come every FAST_POLL_S, and a sleep never overshoots the window's start."""
    backoff = tenacity.wait_exponential(multiplier=initial, min=initial, max=cap)

    def wait(state: tenacity.RetryCallState) -> float:
        now = time.monotonic()
        delay = backoff(state)
        if fast is not None and now < fast[1]:
            delay = min(delay, max(FAST_POLL_S, fast[0] - now))
        return max(0.0, min(delay, deadline - now))

    return wait


def _sleeper(cancel: threading.Event | None) -> Callable[[float], None]:
    """A sleep that wakes early when wait_all cancels (the next attempt then stops)."""
    if cancel is None:
        return time.sleep

    def sleep(seconds: float) -> None:
        cancel.wait(seconds)

    return sleep
