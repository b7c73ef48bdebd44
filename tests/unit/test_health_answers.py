"""What a health wait says and how often it asks, pinned where mutation testing found no test
(bench/README.md, "Fifth round"): the timeout message names a reset, a closed connection and any
other transport error in words, and a role woken by another's readiness goes back to its own poll
interval afterwards (not a busy loop against a server still warming up). On httpx.MockTransport."""

from __future__ import annotations

import time

import httpx
import pytest

from orchestrator.edges.health import HealthCheck, wait_all, wait_ready
from orchestrator.errors import HealthTimeout

URL = "http://10.0.0.4:30002/health"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (httpx.ReadError("[Errno 104] Connection reset by peer"), "(last answer: connection reset)"),
        (httpx.ConnectError("[Errno 111] Connection refused"), "(last answer: connection refused)"),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            "(last answer: connection closed without an answer (Server disconnected without sending a response.))",
        ),
        (httpx.ConnectError("[Errno -2] Name or service not known"), "(last answer: ConnectError: [Errno -2] Name"),
        (httpx.WriteError(""), "(last answer: WriteError)"),
    ],
)
def test_the_timeout_names_the_transport_error_in_words(error: httpx.TransportError, said: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(HealthTimeout) as info:
        wait_ready(HealthCheck("decode", URL, 0.1), client=client, poll_initial_s=0.01, poll_max_s=0.02)
    assert str(info.value).startswith(f"decode: {URL} not ready after 0.1 s ")
    assert said in str(info.value)


def test_a_role_woken_by_another_goes_back_to_its_poll_interval() -> None:
    """prefill is ready at once and wakes decode's poller; decode stays 503 for 0.6 s and must be
    polled at its own backoff (20 ms up to 100 ms: about ten polls), not in a loop."""
    polls: list[float] = []
    ready_at = time.monotonic() + 0.6

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 30000:
            return httpx.Response(200)
        polls.append(time.monotonic())
        return httpx.Response(200) if time.monotonic() >= ready_at else httpx.Response(503)

    checks = [HealthCheck("prefill", "http://10.0.0.2:30000/health", 5.0), HealthCheck("decode", URL, 5.0)]
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        waited = wait_all(checks, client=client)
    assert set(waited) == {"prefill", "decode"} and waited["decode"] >= 0.55
    assert 4 <= len(polls) <= 25, len(polls)
