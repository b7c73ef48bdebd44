"""Every HTTP answer orch reads is bounded in time, size and depth, at each place that reads one
(review B), on httpx.MockTransport: a 200 that trickles its body, a body far larger than what is
looked at, a gzip bomb, a 60 KB JSON body nested 30,000 deep. Before edges.httpread each of these
held a poll, a trial or the end of a sweep for as long as the server liked, read the whole body,
or escaped as RecursionError (no OrchError) and aborted the sweep."""

from __future__ import annotations

import time
import types

import httpx
import pytest
from helpers.streams import Body, client, gzip_bomb, trickle

from orchestrator.edges import health, metrics, preflight, provenance, reported
from orchestrator.edges.health import HealthCheck, readiness_problem, wait_all, wait_probe, wait_ready
from orchestrator.errors import HealthTimeout, PreflightError, VerificationError
from orchestrator.sweep import phases
from orchestrator.sweep.phases import Services
from orchestrator.team import notify

BASE = "http://decode.fake:30000"
DEEP = b'{"a":' + b"[" * 30000 + b"]" * 30000 + b"}"


def deep() -> Body:
    return Body(1, 1, fill=DEEP)


# ----------------------------------------------------------------------------- time
def test_a_health_wait_ends_at_its_timeout_on_a_trickling_200() -> None:
    """httpx's timeout is per read and tenacity looks at the clock between attempts only: the one
    GET lasted as long as the stranger trickled, and the wait then ended READY."""
    with client(lambda: trickle(5.0)) as c:
        started = time.monotonic()
        with pytest.raises(HealthTimeout, match="last answer: no answer within"):
            wait_ready(HealthCheck("decode", BASE + "/health", 0.3), client=c)
    assert time.monotonic() - started < 0.3 + 1.0


def test_a_generate_probe_ends_within_its_budget_on_a_trickle() -> None:
    check = HealthCheck("router", BASE + "/readiness", 0.3, probe=BASE + "/generate")
    with client(lambda: trickle(5.0)) as c:
        started = time.monotonic()
        with pytest.raises(HealthTimeout, match="did not succeed"):
            wait_probe(check, client=c, budget_s=0.3)
    assert time.monotonic() - started < 0.3 + 1.0


def test_server_info_ends_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "INFO_TIMEOUT_S", 0.3)  # scaled down from the shipped 2 s
    with client(lambda: trickle(5.0)) as c:
        started = time.monotonic()
        assert provenance.server_info(BASE, c) is None
    assert time.monotonic() - started < 0.3 + 1.0  # 0.3 s in all


def test_a_verify_fetch_ends_within_its_timeout_as_a_verification_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reported, "TIMEOUT_S", 0.3)
    with client(lambda: trickle(5.0)) as c:
        started = time.monotonic()
        with pytest.raises(VerificationError, match=f"^decode: {BASE}/server_info: no complete answer within 0.3 s"):
            reported.fetch(BASE, "/server_info", "decode", c)
    assert time.monotonic() - started < 1.0


def test_the_identity_checks_reported_pid_ends_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "REPORTED_PID_TIMEOUT_S", 0.3)  # scaled down from the shipped 2 s
    services = Services.__new__(Services)  # only its client is used
    with client(lambda: trickle(5.0)) as c:
        services.client = c
        started = time.monotonic()
        assert services._reported_pid(BASE) is None
    assert time.monotonic() - started < 0.3 + 1.0  # 0.3 s in all


def test_preflight_needs_only_the_status_of_a_running_unit() -> None:
    host = types.SimpleNamespace(label="decode (fake)", health=BASE + "/health")
    with client(lambda: trickle(5.0)) as c:
        started = time.monotonic()
        preflight._check_answers(host, ["decode-server"], c)  # type: ignore[arg-type]
    assert time.monotonic() - started < 1.0


def test_preflight_names_a_server_that_answers_nothing_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    host = types.SimpleNamespace(label="decode (fake)", health=BASE + "/health")
    with httpx.Client(transport=httpx.MockTransport(stall)) as c, pytest.raises(PreflightError) as caught:
        preflight._check_answers(host, ["decode-server"], c)  # type: ignore[arg-type]
    assert f"{BASE}/health does not answer: no complete answer within 10 s (ReadTimeout)" in str(caught.value)


def test_a_webhook_reply_that_trickles_does_not_hold_the_sweeps_end() -> None:
    with client(lambda: trickle(4.0)) as c:
        started = time.monotonic()
        (delivery,) = notify.send(notify.error_summary("m", "x"), [notify.Webhook(BASE + "/hook")], client=c)
    assert delivery.ok and delivery.attempts == 1
    assert time.monotonic() - started < 1.0


def test_a_webhook_that_never_answers_is_retried_and_its_url_stays_hidden() -> None:
    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    warnings: list[str] = []
    with httpx.Client(transport=httpx.MockTransport(stall)) as c:
        (delivery,) = notify.send(
            notify.error_summary("m", "x"),
            [notify.Webhook(BASE + "/secret")],
            client=c,
            warn=warnings.append,
            backoff_s=0.01,
        )
    assert not delivery.ok and delivery.attempts == notify.ATTEMPTS
    assert "no complete answer within" in delivery.error and "secret" not in warnings[0]


# ----------------------------------------------------------------------------- size
def test_a_health_poll_reads_only_a_prefix_of_a_huge_body() -> None:
    body = Body(1 << 20, 32)  # 32 MiB: the poll looks at MAX_READINESS_BODY (64 KiB)
    with client(lambda: body) as c:
        waited = wait_ready(HealthCheck("decode", BASE + "/health", 5.0), client=c)
    assert waited < 1.0 and body.pulled == 1 << 20  # one chunk, then the poll stops reading


def test_a_not_ready_body_is_still_read_for_its_fields() -> None:
    with client(lambda: b'{"status":"ready","healthy_workers":1,"total_workers":2}') as c:
        with pytest.raises(HealthTimeout, match="200 but 1/2 workers healthy"):
            wait_ready(HealthCheck("router", BASE + "/readiness", 0.2), client=c)


def test_a_compressed_health_answer_is_not_ready_and_says_why() -> None:
    body = Body(1, 1, fill=gzip_bomb(64 << 20))
    with client(lambda: body, headers={"Content-Encoding": "gzip, gzip"}) as c:
        with pytest.raises(HealthTimeout, match=r"200 but answer is encoded \(gzip, gzip\)"):
            wait_ready(HealthCheck("decode", BASE + "/health", 0.2), client=c)
    assert body.pulled == 0


def test_a_metrics_scrape_refuses_a_gzip_bomb_undecoded() -> None:
    """Telemetry._fetch's MAX_BYTES check ran after httpx had decoded each chunk whole: a 1.8 KB
    `Content-Encoding: gzip, gzip` answer became ~1 GiB in memory before it."""
    seen: list[httpx.Request] = []
    body = Body(1, 1, fill=gzip_bomb(64 << 20))
    tele = metrics.Telemetry.__new__(metrics.Telemetry)  # only its config and client are used
    tele.config = types.SimpleNamespace(timeout_s=2.0)  # type: ignore[assignment]
    with client(lambda: body, headers={"Content-Encoding": "gzip, gzip"}, seen=seen) as c:
        tele.client = c
        text, reason = tele._fetch(metrics.Target(types.SimpleNamespace(name="m"), BASE + "/metrics", lambda n: True))  # type: ignore[arg-type]
    assert text is None and "answer is encoded (gzip, gzip)" in reason and body.pulled == 0
    assert seen[0].headers["accept-encoding"] == "identity" and seen[0].headers["accept"] == metrics.ACCEPT


@pytest.mark.parametrize("status, expected", [(200, f"more than {metrics.MAX_BYTES} bytes"), (500, "HTTP 500")])
def test_a_metrics_scrape_above_max_bytes_is_refused_and_an_error_status_wins(status: int, expected: str) -> None:
    tele = metrics.Telemetry.__new__(metrics.Telemetry)
    tele.config = types.SimpleNamespace(timeout_s=2.0)  # type: ignore[assignment]
    target = metrics.Target(types.SimpleNamespace(name="m"), BASE + "/metrics", lambda n: True)  # type: ignore[arg-type]
    body = Body(1 << 20, 64)
    with client(lambda: body, status=status) as c:
        tele.client = c
        text, reason = tele._fetch(target)
    assert text is None and expected in reason and body.pulled <= metrics.MAX_BYTES + (1 << 20)


# ----------------------------------------------------------------------------- depth
def test_readiness_problem_says_nothing_of_a_deeply_nested_body() -> None:
    assert len(DEEP) < health.MAX_READINESS_BODY
    assert readiness_problem(DEEP.decode()) is None


def test_wait_all_on_a_deeply_nested_200_is_ready_not_a_recursion_error() -> None:
    with client(deep) as c:
        waited = wait_all([HealthCheck("decode", BASE + "/health", 1.0)], client=c)
    assert set(waited) == {"decode"}


def test_server_info_of_a_deeply_nested_answer_is_none() -> None:
    with client(deep) as c:
        assert provenance.server_info(BASE, c) is None


def test_a_deeply_nested_verify_answer_voids_the_trial_not_the_sweep() -> None:
    with client(deep) as c, pytest.raises(VerificationError, match="not JSON"):
        reported.fetch(BASE, "/server_info", "decode", c)


def test_the_identity_check_reads_no_pid_from_a_deeply_nested_answer() -> None:
    services = Services.__new__(Services)
    with client(deep) as c:
        services.client = c
        assert services._reported_pid(BASE) is None


def test_a_timeout_message_keeps_the_servers_last_answer_when_the_last_look_times_out() -> None:
    """The final look at the deadline gets only MIN_REQUEST_S: on a loaded machine it times out,
    and the message said only "no answer within 0.05 s", hiding the 503 body that said why."""
    hits = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal hits
        hits += 1
        if hits <= 2:
            return httpx.Response(503, text="loading weights")
        raise httpx.ReadTimeout("slow", request=request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(HealthTimeout) as info:
            wait_ready(HealthCheck("decode", BASE + "/health", 0.3), client=c)
    message = str(info.value)
    assert "(last answer: 503 loading weights; the last look got no answer within" in message, message
    assert hits > 2
