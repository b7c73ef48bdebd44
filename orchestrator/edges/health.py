"""Readiness waits: poll health URLs until they answer 200 (EDGE: httpx + tenacity).

Why this shape:
- SGLang workers answer 503 on /health while warming up and 200 once ready; the PD router's
  /health is 200 even with no workers, so a router check must point at /readiness (503 until
  its workers are healthy). Only a 200 counts: any other status, a refused or reset
  connection, or a slow answer means "not ready yet". A 200 whose JSON body says otherwise
  counts as not ready too: a `status` such as "not ready", or fewer healthy workers than
  registered (`{"status":"ready","healthy_workers":1,"total_workers":2}`: sglang-router calls
  itself ready with one prefill and one decode up, however many it routes to), flat or per role
  (`{"status":"ready","prefill":{"healthy":1,"total":2},...}`).
- Healthy = total is not enough with several instances of a role: the router registers a worker
  only once it has answered its health check, so a router that (re)started while one instance was
  still warming up answers `{"status":"ready","healthy_workers":3,"total_workers":3}` in front of
  4 instances (measured with sglang-router 0.3.2: 3/3 for ~1 s after the 4th turned healthy). A
  check may carry ``workers``, the instances the inventory puts behind the router (per role): a
  body that registers fewer (in all, or for a role it names) is not ready either. Once ready, a
  check with ``instances`` (their URLs) also asks the router for its list of workers
  (edges.registrations): a worker that is none of them would serve part of the repro, so the
  wait ends at once with an IdentityError naming it (the trial is void, as with a stranger on a
  port); a router without a list is judged by the ready answer's counts (more than the
  instances: the same failure). The list is also read when a 200 is held back by a worker that
  is not healthy: a stale registration of a server that is gone would otherwise hold the wait
  until its timeout (50 minutes on a large model) and never be named.
- The router's own view lags: it checks its workers every --health-check-interval-secs (60 s by
  default) and marks them (un)healthy only after several checks in a row, and its circuit
  breaker can keep a worker out for a minute after errors while /readiness says ready. So a
  check whose URL is a router's /readiness also sends one real 1-token /generate through the
  router once every role's URL is ready (the workers' own /health included, so the probe never
  meets a worker that is still warming up), and only its 200 ends the wait (``probe_url``).
- Start-up takes from a second (the simulator) to many minutes (a large MoE), so polling starts
  fast (20 ms, to keep per-trial overhead near the measured floor) and backs off to a small cap
  (100 ms: ~10 requests/s on a long warm-up is harmless, and it keeps the lag between "ready"
  and "noticed" at ~45 ms on average, ~100 ms at worst; a 250 ms cap measured ~125/240 ms).
- Restarts of one unit take about as long each time, so the runner passes how long the last
  ones took (``expected``): polls then come every 10 ms from just before the earliest of them
  to just after the latest (at most FAST_WINDOW_S of fast polling, ~100 requests a second), and
  the lag drops to ~5 ms where it counts, without hammering a server through a long warm-up. (A
  router's wait ends at the later of its own poll and its workers': at 20 ms each that cost ~13 ms
  on average after the last worker was ready, at 10 ms ~7 ms.)
- Roles that restarted together turn ready together (a router's /readiness follows its workers'),
  so when one role's URL turns ready, every role still waiting looks again at once instead of
  sleeping out its poll interval: the router's readiness, then its generate probe, follow the last
  worker by one round trip instead of half a poll interval more. Each still needs its own 200.
- A unit that dies during warm-up must not make us wait out the whole timeout: between polls
  we call ``check_alive`` (ServiceManager.check_alive), whose ServiceError propagates at once.
- httpx errors are translated here, once, into HealthTimeout / ConfigError. Each poll and probe
  is one bounded request (edges.httpread): a server that answers 200 and then trickles its body
  is cut off at the poll's timeout, only a MAX_READINESS_BODY prefix of a body is read, an
  encoded (compressed) answer is not ready, and a body that is not JSON (a 60 KB one nested
  30,000 deep included) says nothing either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
import tenacity

from orchestrator.edges.httpread import Answer, AnswerTimedOut, HttpAnswerError, NotJson, parse_json, request
from orchestrator.edges.registrations import router_strangers
from orchestrator.errors import ConfigError, HealthTimeout, IdentityError

# Longest single request: a hung server must not hold a poll for long, a slow one still answers.
MAX_REQUEST_S = 2.0
# Shortest request timeout, used for the last look at the deadline.
MIN_REQUEST_S = 0.05
# How much of a not-ready body goes into the error message.
BODY_EXCERPT = 160
# How long a router's readiness wait holds out for workers its command line lists but it has not
# registered yet (see _held_for_configured): late registrations come ~10 ms after the others.
CONFIGURED_HOLD_S = 5.0
# Poll interval inside the window where readiness is expected, and the window's longest span.
FAST_POLL_S = 0.01
FAST_WINDOW_S = 2.0
# The window opens this long before the quickest earlier wait and closes this long after the
# slowest (a restart is rarely faster than the quickest seen).
WINDOW_LEAD_S = 0.1
WINDOW_TAIL_S = 0.3
# A health body larger than this is not read for readiness fields (only its status code counts).
MAX_READINESS_BODY = 64 * 1024
# `status` values that mean "not ready" even with HTTP 200 (lower case, `_`/`-` read as blanks).
NOT_READY_STATUSES = frozenset(
    {"not ready", "notready", "unhealthy", "starting", "loading", "warming up", "draining", "degraded", "initializing"}
)
# (healthy, total) key pairs a readiness body may carry, at top level or per role.
COUNT_KEYS = (("healthy_workers", "total_workers"), ("healthy", "total"), ("healthy_count", "total_count"))
# The generate probe: SGLang's native /generate, one token, greedy.
PROBE_BODY = {"text": "orch readiness probe", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
# Generate probes back off to this interval: each failed one costs the router's retries and counts
# towards its circuit breaker, so they are not fired as fast as the GET polls.
PROBE_MAX_POLL_S = 0.5
# Longest single generate probe (a real model's first token can take a while; a dead path fails fast).
PROBE_REQUEST_S = 30.0


@dataclass(frozen=True)
class HealthCheck:
    """One URL that proves one role is ready, with how long we are willing to wait for it."""

    role: str
    url: str
    timeout_s: float
    # (quickest, slowest) seconds earlier waits of this role took: poll fast in between
    expected: tuple[float, float] | None = None
    # POST one 1-token generate here once every check's URL is ready; only its 200 ends the wait
    probe: str | None = None
    # (role, instances) the inventory puts behind this router: a readiness body must register as many
    workers: tuple[tuple[str, int], ...] = ()
    # (role, instance URLs) behind this router: once ready, it may register no other worker
    instances: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # names of the router's own machine: a worker it lists on loopback runs there
    router_host: tuple[str, ...] = ()
    # a --dp-aware router: its counts are DP ranks, not compared with the instances (core.routerworkers)
    dp_ranks: bool = False
    # workers the router's command line gives it (core.routerworkers.command_workers): a readiness
    # body must register as many, so that the worker list read then has them all
    configured: int = 0


def probe_url(health_url: str) -> str | None:
    """The generate probe of a health URL: an SGLang router's /readiness gets /generate on the
    same origin (a tunnelled URL keeps its tunnel); any other health URL gets none."""
    parts = urlsplit(health_url)
    if parts.path.rstrip("/").endswith("/readiness"):
        return urlunsplit((parts.scheme, parts.netloc, "/generate", "", ""))
    return None


def readiness_problem(body: str, workers: tuple[tuple[str, int], ...] = ()) -> str | None:
    """Why a 200 answer's body says "not ready" (None: it does not). Bodies that are not a JSON
    object (SGLang workers answer an empty 200) say nothing either way; nor do bodies without
    worker counts about ``workers`` (the instances expected behind a router, per role)."""
    value = _json_object(body)
    return None if value is None else _body_problem(value, workers)


def _body_problem(value: dict[str, object], workers: tuple[tuple[str, int], ...]) -> str | None:
    """readiness_problem of a body already read as a JSON object."""
    status = value.get("status")
    if isinstance(status, str) and " ".join(status.lower().replace("_", " ").replace("-", " ").split()) in (
        NOT_READY_STATUSES
    ):
        return f"status {status!r}"
    problem = _count_problem("", value)
    for role, part in value.items():
        if problem is None and isinstance(part, dict):
            problem = _count_problem(f"{role} ", part)
    return problem or _registered_problem(value, dict(workers))


def _counts(value: dict[str, object]) -> tuple[int, int] | None:
    """(healthy, total) of a readiness body or of one role's part of it, if it has them."""
    for healthy_key, total_key in COUNT_KEYS:
        healthy, total = value.get(healthy_key), value.get(total_key)
        if isinstance(healthy, int) and isinstance(total, int) and not isinstance(healthy, bool):
            return healthy, total
    return None


def _count_problem(where: str, value: dict[str, object]) -> str | None:
    counts = _counts(value)
    if counts is None:
        return None
    healthy, total = counts
    if total == 0:
        return f"no {where}workers registered"
    if healthy < total:
        return f"{where}{healthy}/{total} workers healthy"
    return None


def _registered_problem(value: dict[str, object], workers: dict[str, int]) -> str | None:
    """Fewer workers registered than the inventory's instances behind the router: in all (flat
    shape, or per-role totals summed), or for a role the body names as the inventory does."""
    if not workers:
        return None
    expected = sum(workers.values())
    totals = registered_totals(value)
    if not totals:
        return None
    for role, total in totals.items():
        if role in workers and total < workers[role]:
            return f"{role} {total}/{workers[role]} workers registered (the inventory has {workers[role]})"
    registered = sum(totals.values())
    if registered < expected:
        listed = ", ".join(f"{role} {n}" for role, n in workers.items())
        return f"{registered}/{expected} workers registered (the inventory has {listed})"
    return None


def _configured_problem(value: dict[str, object], configured: int) -> str | None:
    """Fewer workers registered than the router's command line gives it: sglang-router 0.3.2
    registers them one at a time and is ready as soon as one prefill and one decode are, so a
    worker the inventory lacks (an extra `--decode URL`) may be registered only after the wait's
    look at its worker list, and serve part of the repro. The wait holds out for them only
    CONFIGURED_HOLD_S (_poll_once): a listed worker that is down is never registered."""
    if not configured:
        return None
    registered = sum(registered_totals(value).values())
    if registered and registered < configured:
        return f"{registered}/{configured} workers registered (its command line lists {configured})"
    return None


def registered_totals(value: dict[str, object]) -> dict[str, int]:
    """Workers a readiness body says are registered: {"": N} (flat shape), or role -> N (per role);
    empty when it gives no counts."""
    flat = _counts(value)
    if flat is not None:
        return {"": flat[1]}
    return {r: c[1] for r, part in value.items() if isinstance(part, dict) and (c := _counts(part)) is not None}


class _NotReady(Exception):
    """One poll said "not yet"; ``answer`` says why, for the timeout message. ``silent``: nothing
    answered in time (a look at the deadline has only MIN_REQUEST_S, so that says little)."""

    def __init__(self, answer: str, silent: bool = False) -> None:
        super().__init__(answer)
        self.answer = answer
        self.silent = silent


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
    any exception from ``check_alive`` (typically ServiceError) propagate immediately. A check
    with a ``probe`` then waits for one generate through it to succeed (within the same timeout)."""
    started = time.monotonic()
    waited, body = _wait(check, client, check_alive, poll_initial_s, poll_max_s, cancel=None)
    check_registered(check, client, body)
    if check.probe is None:
        return waited
    wait_probe(check, client=client, check_alive=check_alive, budget_s=check.timeout_s - waited)
    return time.monotonic() - started


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
    failure (in time) is raised once every thread has stopped: no thread outlives the call.
    Once every URL is ready, each check with a ``probe`` (a router) sends generates through it
    until one succeeds, within what is left of its timeout; its time counts until then."""
    _one_check_a_role(checks)
    alive = check_alive or {}
    started = time.monotonic()
    cancel = threading.Event()
    wakes = {c.role: threading.Event() for c in checks}  # set: that role's poller stops sleeping
    failures: list[BaseException] = []
    lock = threading.Lock()

    def stop_all() -> None:
        cancel.set()
        for wake in wakes.values():
            wake.set()

    def one(check: HealthCheck) -> float | None:
        try:
            seconds, body = _wait(
                check, client, alive.get(check.role), poll_initial_s, poll_max_s, cancel=cancel, wake=wakes[check.role]
            )
            check_registered(check, client, body)
        except _Cancelled:
            return None
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            with lock:
                failures.append(exc)
            stop_all()
            return None
        _wake_others(wakes, check.role)
        return seconds

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
        stop_all()
    if failures:
        raise failures[0]
    _probe_routers(checks, client, alive, started, waited)
    return waited


def _wake_others(wakes: Mapping[str, threading.Event], ready: str) -> None:
    """One role is ready: the other pollers look again now, not at their next poll (roles of a
    deployment turn ready together)."""
    for role, wake in wakes.items():
        if role != ready:
            wake.set()


def _one_check_a_role(checks: Sequence[HealthCheck]) -> None:
    """Waits are kept per role: two checks of one role would overwrite each other's time."""
    roles = [c.role for c in checks]
    if len(set(roles)) != len(roles):
        raise ConfigError(f"health checks: duplicate roles {roles} (give each role one check)")


def _probe_routers(
    checks: Sequence[HealthCheck],
    client: httpx.Client,
    alive: Mapping[str, Callable[[], None]],
    started: float,
    waited: dict[str, float],
) -> None:
    """Once every URL is ready: each check with a probe (a router) sends generates through it
    until one succeeds, within what is left of its timeout; its time (in `waited`) counts until then."""
    for check in checks:
        if check.probe is not None:
            budget = check.timeout_s - (time.monotonic() - started)
            wait_probe(check, client=client, check_alive=alive.get(check.role), budget_s=budget)
            waited[check.role] = time.monotonic() - started


def check_registered(check: HealthCheck, client: httpx.Client, body: str, *, when: str = "") -> None:
    """A ready router registers no worker but the inventory's instances behind it (``instances``;
    ``body``: its last readiness answer, for a router that lists no workers): one that is none of
    them (a teammate's server added through its worker API, a stale registration, an extra URL on
    its command line) would serve part of the repro, so the trial is void like one whose port a
    stranger held (IdentityError; the retry restarts the router). ``when``: words that place the
    look in the trial ("after the repro")."""
    if not check.instances:
        return
    value = _json_object(body)
    totals = registered_totals(value) if value is not None else {}
    problem = router_strangers(
        client, check.url, dict(check.instances), totals, check.router_host, dp_ranks=check.dp_ranks
    )
    if problem is not None:
        raise IdentityError(
            f"{check.role} {problem}{' ' + when if when else ''} (the trial is void: a server orch did not start "
            "would serve part of the "
            "repro; orch restarts the router on the retry, which drops workers added through its API; take any "
            "other worker off the router's command line or env file, or, if it is one of the instances under "
            "another name, write the URL the router lists as that instance's url: in the inventory)",
            roles=(check.role,),
        )


def _json_object(body: str) -> dict[str, object] | None:
    """A body's JSON object (None: empty, too large, not JSON, or not an object)."""
    if not body or len(body) > MAX_READINESS_BODY or not body.lstrip().startswith("{"):
        return None
    try:
        value = parse_json(body, "readiness body")
    except NotJson:
        return None
    return value if isinstance(value, dict) else None


def wait_probe(
    check: HealthCheck,
    *,
    client: httpx.Client,
    check_alive: Callable[[], None] | None = None,
    budget_s: float,
    poll_initial_s: float = FAST_POLL_S,
) -> float:
    """POST the check's generate probe until it answers 200; return the seconds it took.

    Called once the router's /readiness and its workers' /health are ready: the router may still
    send the request to a worker it has not rechecked (stale healthy), keep a restarted one out
    (stale unhealthy, an open circuit breaker): only a generate that went through proves the path
    the repro will take. Polls back off to PROBE_MAX_POLL_S; at least one probe is always sent."""
    assert check.probe is not None
    started = time.monotonic()
    deadline = started + max(budget_s, MIN_REQUEST_S)
    delay = poll_initial_s
    while True:
        answer = _probe_once(check, client, deadline)
        if answer is None:
            return time.monotonic() - started
        if check_alive is not None:
            check_alive()
        now = time.monotonic()
        if now >= deadline:
            raise HealthTimeout(
                f"{check.role}: {check.url} is ready, but a generate through it ({check.probe}) did not succeed "
                f"within {check.timeout_s:.1f} s (last answer: {answer})",
                role=check.role,
            )
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, PROBE_MAX_POLL_S)


def _probe_once(check: HealthCheck, client: httpx.Client, deadline: float) -> str | None:
    """One generate; None if it answered 200, else what it answered."""
    assert check.probe is not None
    timeout = max(MIN_REQUEST_S, min(PROBE_REQUEST_S, deadline - time.monotonic()))
    try:
        response = _bounded(client, "POST", check.probe, timeout, json_body=PROBE_BODY)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise ConfigError(f"{check.role}: bad probe URL {check.probe!r}: {exc}", hint="use http://HOST:PORT") from exc
    except _NotReady as exc:
        return exc.answer
    if response.status == 200:
        return None
    return f"{response.status} {_excerpt(response.text)}".rstrip()


def _wait(
    check: HealthCheck,
    client: httpx.Client,
    check_alive: Callable[[], None] | None,
    poll_initial_s: float,
    poll_max_s: float,
    cancel: threading.Event | None,
    wake: threading.Event | None = None,
) -> tuple[float, str]:
    """Seconds until the check's URL answered ready, and the body of that answer."""
    started = time.monotonic()
    deadline = started + check.timeout_s

    heard: list[str] = []  # the last answer the server gave (not a look that timed out)
    ready: list[str] = []
    listed: list[str] = []  # the held-back answer whose worker list was read last (_poll_once)
    held: list[float] = []  # when an answer was first ready but for the command line's workers

    def attempt() -> None:
        if cancel is not None and cancel.is_set():
            raise _Cancelled()
        try:
            ready[:] = [_poll_once(check, client, deadline, listed, held)]
        except _NotReady as exc:
            if not exc.silent:
                heard[:] = [exc.answer]
            if check_alive is not None:
                check_alive()
            if cancel is not None and cancel.is_set():
                raise _Cancelled() from None
            raise

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(_NotReady),
        stop=tenacity.stop_after_delay(check.timeout_s),
        wait=_capped_backoff(poll_initial_s, poll_max_s, deadline, _fast_window(check, started)),
        sleep=_sleeper(cancel, wake),
        reraise=True,
    )
    try:
        retrying(attempt)
    except _NotReady as exc:
        raise HealthTimeout(
            f"{check.role}: {check.url} not ready after {check.timeout_s:.1f} s (last answer: {_last(exc, heard)})",
            role=check.role,
        ) from None
    return time.monotonic() - started, ready[0] if ready else ""


def _last(exc: _NotReady, heard: list[str]) -> str:
    """What the timeout message quotes: the last poll's answer, and the server's own last answer
    when that poll only timed out (the final look at the deadline gets MIN_REQUEST_S: a loaded
    machine misses it, and "no answer within 0.05 s" alone would hide the 503 that says why)."""
    if exc.silent and heard:
        return f"{heard[0]}; the last look got {exc.answer}"
    return exc.answer


def _held_for_configured(value: dict[str, object], configured: int, held: list[float]) -> str | None:
    """_configured_problem, for at most CONFIGURED_HOLD_S from the first answer that was ready but
    for it (``held``: that moment): the router registers its command line's workers within
    milliseconds of each other once they are healthy (measured: ~10 ms), while one that is down or
    still loading would hold every trial to its timeout. After the hold the wait goes on as before:
    a worker registered later is still named by the look after the repro."""
    problem = _configured_problem(value, configured)
    if problem is None:
        return None
    now = time.monotonic()
    if not held:
        held.append(now)
    return problem if now - held[0] < CONFIGURED_HOLD_S else None


def _poll_once(check: HealthCheck, client: httpx.Client, deadline: float, listed: list[str], held: list[float]) -> str:
    """One GET; return its body if it answered 200 (and ready), else raise _NotReady describing it.
    ``listed``: the held-back answer whose worker list this wait last read (read again only when
    the answer changes: polls come every 10 ms around the expected ready time). ``held``: when an
    answer was first ready but for the workers the router's command line gives it."""
    remaining = deadline - time.monotonic()
    timeout = max(MIN_REQUEST_S, min(MAX_REQUEST_S, remaining))
    try:
        response = _bounded(client, "GET", check.url, timeout)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise ConfigError(
            f"{check.role}: bad health URL {check.url!r}: {exc}",
            hint="use http://HOST:PORT/PATH",
        ) from exc
    if response.status != 200:
        raise _NotReady(f"{response.status} {_excerpt(response.text)}".rstrip())
    # a body cut at MAX_READINESS_BODY is not read for readiness fields: its status alone counts
    value = None if response.truncated else _json_object(response.text)
    problem = None
    if value is not None:  # read once: the wait polls every 10 ms around the expected ready time
        problem = _body_problem(value, check.workers) or _held_for_configured(value, check.configured, held)
    if problem is not None:
        # a router held back by a worker that is not healthy: if that is a stranger (a stale
        # registration of a server that is gone), say so now instead of waiting out the timeout
        if listed != [response.text]:
            listed[:] = [response.text]
            check_registered(check, client, response.text)
        raise _NotReady(f"200 but {problem}: {_excerpt(response.text)}")
    return "" if response.truncated else response.text


def _bounded(client: httpx.Client, method: str, url: str, timeout: float, *, json_body: object = None) -> Answer:
    """One request whose whole answer (not each read) ends within `timeout`, of which only a
    MAX_READINESS_BODY prefix is read; what keeps it from counting becomes _NotReady. A bad URL
    (UnsupportedProtocol, InvalidURL) passes through for the caller to name."""
    try:
        return request(
            client, method, url, deadline_s=timeout, max_bytes=MAX_READINESS_BODY, keep_prefix=True, json_body=json_body
        )
    except (httpx.UnsupportedProtocol, httpx.InvalidURL):
        raise
    except AnswerTimedOut as exc:
        raise _NotReady(f"no answer within {timeout:.2f} s", silent=True) from exc
    except HttpAnswerError as exc:  # encoded: its body cannot be trusted to say "ready"
        raise _NotReady(f"{exc.status} but {exc.problem} ({exc.hint})") from exc
    except httpx.TransportError as exc:
        raise _NotReady(_describe_transport_error(exc)) from exc


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


def _sleeper(cancel: threading.Event | None, wake: threading.Event | None = None) -> Callable[[float], None]:
    """A sleep that wakes early when wait_all cancels (the next attempt then stops), or, given
    `wake`, when it is set (another role turned ready, or a cancel): the next poll comes at once."""
    if wake is not None:

        def woken(seconds: float) -> None:
            if wake.wait(seconds):
                wake.clear()

        return woken
    if cancel is None:
        return time.sleep

    def sleep(seconds: float) -> None:
        cancel.wait(seconds)

    return sleep
