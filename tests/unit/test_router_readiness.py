"""Readiness against an SGLang PD router, on httpx.MockTransport (no sockets): both /readiness
shapes, a 503, a 200 that is not ready (too few healthy workers), and the generate probe that
must go through the router before the wait ends (the router's view of its workers lags)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fakes import Role, make_bed

from orchestrator.edges.health import HealthCheck, probe_url, readiness_problem, wait_all, wait_ready
from orchestrator.edges.preflight import preflight
from orchestrator.errors import HealthTimeout

ROUTER = "http://10.0.0.3:30001"
READY_FLAT = {"status": "ready", "healthy_workers": 2, "total_workers": 2}
READY_PER_ROLE = {"status": "ready", "prefill": {"healthy": 1, "total": 1}, "decode": {"healthy": 2, "total": 2}}
NOT_READY = {"status": "not ready", "reason": "insufficient healthy workers"}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (READY_FLAT, None),
        (READY_PER_ROLE, None),
        ({"status": "ready", "healthy_workers": 1, "total_workers": 2}, "1/2 workers healthy"),
        (
            {"status": "ready", "prefill": {"healthy": 1, "total": 1}, "decode": {"healthy": 1, "total": 2}},
            "decode 1/2 workers healthy",
        ),
        (
            {"status": "ready", "prefill": {"healthy_workers": 0, "total_workers": 0}, "decode": {"healthy": 1}},
            "no prefill workers registered",
        ),
        (NOT_READY, "status 'not ready'"),
        ({"status": "not_ready"}, "status 'not_ready'"),
        ({"status": "ok"}, None),  # the simulator's worker /health
    ],
)
def test_readiness_bodies(body: dict[str, object], problem: str | None) -> None:
    assert readiness_problem(json.dumps(body)) == problem


@pytest.mark.parametrize("text", ["", "OK", "[1, 2]", "{not json", "x" * 100])
def test_bodies_that_are_not_a_json_object_say_nothing(text: str) -> None:
    assert readiness_problem(text) is None


def test_probe_url_only_for_a_readiness_url() -> None:
    assert probe_url(f"{ROUTER}/readiness") == f"{ROUTER}/generate"
    assert probe_url("http://127.0.0.1:41234/readiness/") == "http://127.0.0.1:41234/generate"
    assert probe_url("http://10.0.0.4:30002/health") is None
    assert probe_url(f"{ROUTER}/health") is None  # a router's /health is not readiness: no probe either


@dataclass
class Router:
    """A scripted router and its two workers: answers come from lists (the last one repeats)."""

    readiness: list[tuple[int, object]]
    generate: list[tuple[int, object]] = field(default_factory=lambda: [(200, {"text": "ok"})])
    worker_health: list[int] = field(default_factory=lambda: [200])
    log: list[str] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.log.append(f"{request.method} {request.url.host}:{request.url.port}{path}")
        if request.url.port != 30001:
            return httpx.Response(_next(self.worker_health), text="")
        if path == "/health":
            return httpx.Response(200, text="OK")  # 200 even with every worker down
        if path == "/readiness":
            status, body = _next(self.readiness)
            return httpx.Response(status, json=body)
        if path == "/generate" and request.method == "POST":
            assert json.loads(request.content)["sampling_params"]["max_new_tokens"] == 1
            status, body = _next(self.generate)
            return httpx.Response(status, json=body)
        return httpx.Response(404)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))


def _next(answers: list) -> Any:
    return answers.pop(0) if len(answers) > 1 else answers[0]


def checks(timeout: float = 5.0) -> list[HealthCheck]:
    readiness = f"{ROUTER}/readiness"
    return [
        HealthCheck("prefill", "http://10.0.0.2:30000/health", timeout),
        HealthCheck("decode", "http://10.0.0.4:30002/health", timeout),
        HealthCheck("router", readiness, timeout, probe=probe_url(readiness)),
    ]


def _first(log: list[str], match: Callable[[str], bool]) -> int:
    return next(i for i, line in enumerate(log) if match(line))


@pytest.mark.parametrize("ready", [READY_FLAT, READY_PER_ROLE], ids=["flat", "per-role"])
def test_503_then_ready_then_one_generate(ready: dict[str, object]) -> None:
    router = Router(readiness=[(503, NOT_READY), (503, NOT_READY), (200, ready)])
    with router.client() as client:
        waited = wait_all(checks(), client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert set(waited) == {"prefill", "decode", "router"}
    readiness = [line for line in router.log if line.endswith("/readiness")]
    generates = [line for line in router.log if line.endswith("/generate")]
    assert len(readiness) == 3 and len(generates) == 1
    assert _first(router.log, lambda s: s.endswith("/generate")) > max(
        i for i, s in enumerate(router.log) if s.endswith("/readiness")
    )
    assert not any(line.endswith("30001/health") for line in router.log)  # /health is never asked


def test_a_200_with_too_few_healthy_workers_is_not_ready() -> None:
    partial = {"status": "ready", "prefill": {"healthy": 1, "total": 1}, "decode": {"healthy": 1, "total": 2}}
    router = Router(readiness=[(200, partial), (200, partial), (200, READY_PER_ROLE)])
    with router.client() as client:
        wait_all(checks(), client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert sum(line.endswith("/readiness") for line in router.log) == 3


def test_a_200_with_too_few_healthy_workers_times_out_naming_them() -> None:
    partial = {"status": "ready", "healthy_workers": 1, "total_workers": 2}
    router = Router(readiness=[(200, partial)])
    with router.client() as client, pytest.raises(HealthTimeout) as info:
        wait_ready(checks(0.2)[2], client=client, poll_initial_s=0.01, poll_max_s=0.02)
    assert "not ready after 0.2 s (last answer: 200 but 1/2 workers healthy:" in str(info.value)
    assert not any(line.endswith("/generate") for line in router.log)


def test_router_503_never_ends_the_wait() -> None:
    router = Router(readiness=[(503, NOT_READY)])
    with router.client() as client, pytest.raises(HealthTimeout) as info:
        wait_all(checks(0.2), client=client, poll_initial_s=0.01, poll_max_s=0.02)
    assert str(info.value).startswith(f"router: {ROUTER}/readiness not ready after 0.2 s (last answer: 503 ")
    assert "insufficient healthy workers" in str(info.value)
    assert not any(line.endswith("/generate") for line in router.log)


def test_ready_router_whose_generate_fails_is_waited_on_until_it_goes_through() -> None:
    """The router still believes in the old worker (or its circuit breaker is open): /readiness
    is 200 but a request fails. The wait ends at the first generate that succeeds."""
    stale = {"error": {"code": "decode_server_error", "message": "error sending request"}}
    router = Router(
        readiness=[(200, READY_FLAT)], generate=[(502, stale), (503, {"error": "no available servers"}), (200, {})]
    )
    with router.client() as client:
        wait_all(checks(), client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert sum(line.endswith("/generate") for line in router.log) == 3


def test_generate_probe_that_never_succeeds_times_out_naming_it() -> None:
    router = Router(readiness=[(200, READY_FLAT)], generate=[(502, {"error": "decode_server_error"})])
    with router.client() as client, pytest.raises(HealthTimeout) as info:
        wait_all(checks(0.3), client=client, poll_initial_s=0.01, poll_max_s=0.02)
    message = str(info.value)
    assert message.startswith(f"router: {ROUTER}/readiness is ready, but a generate through it ({ROUTER}/generate)")
    assert "(last answer: 502 " in message and "decode_server_error" in message


def test_generate_waits_for_the_workers_own_health() -> None:
    """The router may say ready before a restarted worker answers itself (stale view): no probe is
    sent until every worker's own /health is 200."""
    router = Router(readiness=[(200, READY_FLAT)], worker_health=[503, 503, 503, 503, 200])
    with router.client() as client:
        wait_all(checks(), client=client, poll_initial_s=0.001, poll_max_s=0.002)
    first_generate = _first(router.log, lambda s: s.endswith("/generate"))
    last_worker_poll = max(i for i, s in enumerate(router.log) if s.endswith("/health") and ":30001" not in s)
    assert first_generate > last_worker_poll


def test_when_the_last_worker_turns_ready_the_router_is_asked_again_at_once() -> None:
    """Roles restarted together turn ready together: once decode's own /health answers 200, the
    router's /readiness is asked again at once, not a poll interval (here 3 s) later. It still
    needs its own 200, and the one generate still follows every readiness poll."""
    t0, up_at, log = time.monotonic(), 0.3, []

    def handler(request: httpx.Request) -> httpx.Response:
        up = time.monotonic() - t0 >= up_at
        log.append(f"{request.url.port}{request.url.path} {'up' if up else 'down'}")
        if request.url.port == 30002:
            return httpx.Response(200 if up else 503, text="")
        if request.url.path == "/readiness":
            return httpx.Response(200, json=READY_FLAT) if up else httpx.Response(503, json=NOT_READY)
        return httpx.Response(200, json={"text": "ok"})  # prefill's /health, the router's /generate

    readiness = f"{ROUTER}/readiness"
    polled = [
        HealthCheck("prefill", "http://10.0.0.2:30000/health", 10.0),
        HealthCheck("decode", "http://10.0.0.4:30002/health", 10.0, expected=(up_at, up_at)),
        HealthCheck("router", readiness, 10.0, probe=probe_url(readiness)),
    ]
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        waited = wait_all(polled, client=client, poll_initial_s=3.0, poll_max_s=3.0)
    assert up_at - 0.05 < waited["router"] < 2.0  # not before decode was up, not a 3 s poll later
    router_polls = [line for line in log if line.startswith("30001/readiness")]
    assert router_polls[-1].endswith(" up") and all(line.endswith(" down") for line in router_polls[:-1])
    assert [line for line in log if "/generate" in line] == [log[-1]]  # one, after every readiness poll


def test_without_a_probe_no_generate_is_sent() -> None:
    router = Router(readiness=[(200, READY_FLAT)])
    plain = [HealthCheck(c.role, c.url, c.timeout_s) for c in checks()]
    with router.client() as client:
        wait_all(plain, client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert not any(line.endswith("/generate") for line in router.log)


def test_preflight_warns_when_a_router_is_polled_on_its_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])  # the fake hosts' names resolve
    bed = make_bed({"router": Role("X=1\n")})  # the fake hosts' health URLs end in /health
    warnings = preflight(bed.deployment, client=bed.client)
    assert len(warnings) == 1 and "answers 200 even with every worker down" in warnings[0]
    assert "point it at /readiness" in warnings[0]
    assert preflight(make_bed({"decode": Role("X=1\n")}).deployment, client=bed.client) == []
