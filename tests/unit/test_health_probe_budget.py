"""A router's wait (readiness, then the generate probe) ends within the check's one timeout: the
probe gets only what the readiness wait left of it, so a router whose generates never go through
fails the trial at its timeout, not at up to twice it (found by mutation testing: bench/README.md,
"Fifth round"). On httpx.MockTransport: no sockets."""

from __future__ import annotations

import time

import httpx
import pytest

from orchestrator.edges.health import HealthCheck, probe_url, wait_ready
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
