"""A router's wait (readiness, then the generate probe) ends within the check's one timeout: the
probe gets only what the readiness wait left of it, so a router whose generates never go through
fails the trial at its timeout, not at up to twice it (found by mutation testing: bench/README.md,
"Fifth round"). On httpx.MockTransport: no sockets."""

from __future__ import annotations

import time

import httpx
import pytest

from orchestrator.edges.health import HealthCheck, probe_url, wait_probe, wait_ready
from orchestrator.errors import HealthTimeout

ROUTER = "http://10.0.0.3:30001"
READY = {"status": "ready", "healthy_workers": 2, "total_workers": 2}


def test_the_probe_gets_only_what_the_readiness_wait_left_of_the_timeout() -> None:
    ready_at = time.monotonic() + 0.6  # /readiness answers 503 until then

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readiness":
            return httpx.Response(200, json=READY) if time.monotonic() >= ready_at else httpx.Response(503)
        return httpx.Response(502, json={"error": "decode_server_error"})  # every generate fails

    url = f"{ROUTER}/readiness"
    check = HealthCheck("router", url, 1.0, probe=probe_url(url))
    started = time.monotonic()
    with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(HealthTimeout) as info:
        wait_ready(check, client=client, poll_initial_s=0.01, poll_max_s=0.02)
    elapsed = time.monotonic() - started
    assert str(info.value).startswith(f"router: {url} is ready, but a generate through it ({ROUTER}/generate)")
    assert "within 1.0 s" in str(info.value)
    # 1.0 s in all; the probe given the whole timeout again would end near 0.6 + 1.0
    assert 0.9 <= elapsed < 1.4, elapsed


def test_failing_generates_are_spaced_out_by_a_growing_interval() -> None:
    """Each failed probe costs the router its retries and counts towards its circuit breaker: the
    interval doubles from 10 ms to PROBE_MAX_POLL_S, so 0.6 s of failures is under ten probes
    (10, 20, 40, 80, 160, 320 ms apart), not a stream of them."""
    probes: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        probes.append(time.monotonic())
        return httpx.Response(503, json={"error": "no available servers"})

    url = f"{ROUTER}/readiness"
    check = HealthCheck("router", url, 0.6, probe=probe_url(url))
    with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(HealthTimeout):
        wait_probe(check, client=client, budget_s=0.6)
    assert 3 <= len(probes) <= 9, len(probes)
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert max(gaps) >= 0.1, gaps  # the interval grew past 100 ms
