"""Readiness waits against real local HTTP servers on 127.0.0.1 (no mocked sockets)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from helpers.netutil import free_ports

from orchestrator.edges.health import HealthCheck, wait_all, wait_ready
from orchestrator.errors import ConfigError, HealthTimeout, ServiceError

NOT_READY_BODY = b'{"status":"not_ready","reason":"no healthy decode worker"}'


@dataclass
class Behaviour:
    """What the fake server answers: 503 with a body until `ready_at` (monotonic), then 200.
    With `peers`, it stays at 503 until every peer has also been polled."""

    ready_at: float = float("inf")
    hits: int = 0
    first_ok_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    peers: list[Behaviour] = field(default_factory=list)


def _handler(behaviour: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            now = time.monotonic()
            with behaviour.lock:
                behaviour.hits += 1
                ready = now >= behaviour.ready_at and all(peer.hits for peer in behaviour.peers)
                if ready and behaviour.first_ok_at is None:
                    behaviour.first_ok_at = now
            status, body = (200, b"{}") if ready else (503, NOT_READY_BODY)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


class Server:
    def __init__(self, behaviour: Behaviour, port: int = 0) -> None:
        self.behaviour = behaviour
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(behaviour))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01})
        self.thread.start()

    def url(self, path: str = "/health") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as c:  # never route loopback through a proxy
        yield c


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


def _serve(servers: list[Server], behaviour: Behaviour, port: int = 0) -> Server:
    server = Server(behaviour, port)
    servers.append(server)
    return server


def _free_port() -> int:
    return free_ports(1)[0]  # this xdist worker's own slice, if any (helpers.netutil)


def test_503_then_200_returns_seconds_waited(client: httpx.Client, servers: list[Server]) -> None:
    behaviour = Behaviour(ready_at=time.monotonic() + 0.3)
    server = _serve(servers, behaviour)
    waited = wait_ready(HealthCheck("decode", server.url(), 10.0), client=client)
    assert 0.25 <= waited < 1.0
    assert behaviour.hits >= 3  # it polled through the 503s rather than sleeping blindly


@pytest.mark.parametrize("flip_after", [0.15, 0.45, 1.0])
def test_detection_lag_is_small(client: httpx.Client, servers: list[Server], flip_after: float) -> None:
    behaviour = Behaviour(ready_at=time.monotonic() + flip_after)
    server = _serve(servers, behaviour)
    wait_ready(HealthCheck("prefill", server.url(), 10.0), client=client)
    returned = time.monotonic()
    lag = returned - behaviour.ready_at
    print(f"\ndetection lag (ready after {flip_after:.2f} s): {lag * 1000:.1f} ms")
    assert 0 <= lag < 0.5


def test_never_ready_times_out_with_last_answer(client: httpx.Client, servers: list[Server]) -> None:
    server = _serve(servers, Behaviour())
    url = server.url("/readiness")
    started = time.monotonic()
    with pytest.raises(HealthTimeout) as info:
        wait_ready(HealthCheck("router", url, 0.5), client=client)
    elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 1.2  # honours the timeout, does not overshoot by a backoff step
    message = str(info.value)
    assert message.startswith(f"router: {url} not ready after 0.5 s (last answer: 503 ")
    assert '"status":"not_ready"' in message
    assert message.endswith(")")


def test_connection_refused_reported_on_timeout(client: httpx.Client) -> None:
    url = f"http://127.0.0.1:{_free_port()}/health"
    with pytest.raises(HealthTimeout) as info:
        wait_ready(HealthCheck("decode", url, 0.3), client=client)
    assert str(info.value) == f"decode: {url} not ready after 0.3 s (last answer: connection refused)"


def test_connection_refused_then_up(client: httpx.Client, servers: list[Server]) -> None:
    port = _free_port()
    behaviour = Behaviour(ready_at=0.0)  # ready as soon as it listens
    timer = threading.Timer(0.3, lambda: _serve(servers, behaviour, port))
    started = time.monotonic()
    timer.start()
    try:
        waited = wait_ready(HealthCheck("prefill", f"http://127.0.0.1:{port}/health", 10.0), client=client)
    finally:
        timer.join()
    assert 0.25 <= waited < 1.5
    assert time.monotonic() - started >= 0.3
    assert behaviour.hits >= 1


def test_silent_server_is_not_ready(client: httpx.Client) -> None:
    """A port that accepts but never answers (a wedged server) counts as not ready."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/health"
        started = time.monotonic()
        with pytest.raises(HealthTimeout, match=r"last answer: no answer within"):
            wait_ready(HealthCheck("decode", url, 0.4), client=client)
        assert time.monotonic() - started < 1.5


def test_check_alive_aborts_at_once(client: httpx.Client, servers: list[Server]) -> None:
    server = _serve(servers, Behaviour())
    calls = 0

    def check_alive() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise ServiceError("decode", "sglang-decode", "failed during warm-up")

    started = time.monotonic()
    with pytest.raises(ServiceError, match="failed during warm-up"):
        wait_ready(HealthCheck("decode", server.url(), 30.0), client=client, check_alive=check_alive)
    assert time.monotonic() - started < 1.0  # nowhere near the 30 s timeout
    assert calls == 3


def test_check_alive_not_called_when_ready(client: httpx.Client, servers: list[Server]) -> None:
    server = _serve(servers, Behaviour(ready_at=0.0))

    def check_alive() -> None:
        raise AssertionError("must not be called after a 200")

    waited = wait_ready(HealthCheck("decode", server.url(), 5.0), client=client, check_alive=check_alive)
    assert waited < 0.5


def test_bad_url_is_a_config_error(client: httpx.Client) -> None:
    with pytest.raises(ConfigError, match="decode: bad health URL"):
        wait_ready(HealthCheck("decode", "ftp://127.0.0.1/health", 5.0), client=client)


def test_wait_all_runs_concurrently(client: httpx.Client, servers: list[Server]) -> None:
    """No server turns ready before all three have been polled, so waits run one after another
    would leave the first at 503 until its timeout (a HealthTimeout, which fails the test) however
    loaded the machine is; a wall-clock bound would only hold on an idle one."""
    now = time.monotonic()
    behaviours = [Behaviour(ready_at=now + 0.6), Behaviour(ready_at=now + 0.6), Behaviour(ready_at=now + 0.3)]
    for behaviour in behaviours:
        behaviour.peers = behaviours
    prefill, decode, router = (_serve(servers, behaviour) for behaviour in behaviours)
    checks = [
        HealthCheck("prefill", prefill.url(), 5.0),
        HealthCheck("decode", decode.url(), 5.0),
        HealthCheck("router", router.url("/readiness"), 5.0),
    ]
    waited = wait_all(checks, client=client)
    assert set(waited) == {"prefill", "decode", "router"}
    assert 0.25 <= waited["router"] < waited["prefill"]  # each role's own time
    assert waited["prefill"] >= 0.55 and waited["decode"] >= 0.55


def test_wait_all_raises_first_failure_and_cancels_others(client: httpx.Client, servers: list[Server]) -> None:
    never = _serve(servers, Behaviour())
    checks = [
        HealthCheck("prefill", never.url(), 30.0),
        HealthCheck("decode", never.url(), 30.0),
    ]

    def decode_dies() -> None:
        raise ServiceError("decode", "sglang-decode", "start-limit-hit")

    started = time.monotonic()
    with pytest.raises(ServiceError, match="start-limit-hit"):
        wait_all(checks, client=client, check_alive={"decode": decode_dies})
    # prefill (30 s timeout, never ready) was cancelled rather than waited out
    assert time.monotonic() - started < 1.5
    assert not [t for t in threading.enumerate() if t.name.startswith("health")]


def test_wait_all_timeout_message_names_role(client: httpx.Client, servers: list[Server]) -> None:
    ok = _serve(servers, Behaviour(ready_at=0.0))
    never = _serve(servers, Behaviour())
    checks = [HealthCheck("prefill", ok.url(), 5.0), HealthCheck("router", never.url("/readiness"), 0.3)]
    with pytest.raises(HealthTimeout, match=r"^router: .*/readiness not ready after 0.3 s"):
        wait_all(checks, client=client)


def test_wait_all_refuses_duplicate_roles(client: httpx.Client) -> None:
    checks = [HealthCheck("decode", "http://127.0.0.1:1/", 1.0)] * 2
    with pytest.raises(ConfigError, match="duplicate roles"):
        wait_all(checks, client=client)


# ---- the poll schedule around the expected ready time (pure: a fake clock) -------------------


def _delays(
    monkeypatch: pytest.MonkeyPatch, fast: tuple[float, float] | None, times: list[float], attempt: int = 10
) -> list[float]:
    """The sleep chosen after a failed poll at each of `times` (seconds after the start)."""
    import tenacity

    from orchestrator.edges import health

    now = [0.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: now[0])
    wait = health._capped_backoff(0.02, 0.1, 100.0, fast)
    state = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = attempt
    out = []
    for t in times:
        now[0] = t
        out.append(round(wait(state), 6))
    return out


def test_polls_fast_only_inside_the_expected_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.edges.health import FAST_POLL_S

    # no earlier waits: the plain backoff, capped at 100 ms
    assert _delays(monkeypatch, None, [0.5, 1.0, 3.0]) == [0.1, 0.1, 0.1]
    # window 0.9..1.5 s: a sleep never overshoots its start, inside it polls every 20 ms
    assert _delays(monkeypatch, (0.9, 1.5), [0.5, 0.85, 0.9, 1.2, 1.49, 1.5, 2.0]) == [
        0.1,
        0.05,
        FAST_POLL_S,
        FAST_POLL_S,
        FAST_POLL_S,
        0.1,
        0.1,
    ]
    # the first polls stay as fast as the backoff makes them
    assert _delays(monkeypatch, (0.9, 1.5), [0.0], attempt=1) == [0.02]


def test_fast_window_spans_the_earlier_waits_and_is_bounded() -> None:
    from orchestrator.edges.health import FAST_WINDOW_S, WINDOW_LEAD_S, WINDOW_TAIL_S, _fast_window

    assert _fast_window(HealthCheck("d", "http://x", 10), 100.0) is None
    opens, closes = _fast_window(HealthCheck("d", "http://x", 10, expected=(1.2, 1.4)), 100.0)
    assert opens == pytest.approx(100.0 + 1.2 - WINDOW_LEAD_S)
    assert closes == pytest.approx(100.0 + 1.4 + WINDOW_TAIL_S)
    opens, closes = _fast_window(HealthCheck("d", "http://x", 10, expected=(30.0, 300.0)), 0.0)
    assert closes - opens == pytest.approx(FAST_WINDOW_S)  # a long, erratic warm-up: bounded
    assert _fast_window(HealthCheck("d", "http://x", 10, expected=(0.05, 0.1)), 0.0)[0] == 0.0


def test_expected_window_still_finds_a_late_server(
    client: httpx.Client, servers: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readiness later than every earlier wait: the plain backoff takes over after the window
    (which closes WINDOW_TAIL_S after the slowest earlier wait: 0.1 s here, 0.3 s shipped)."""
    from orchestrator.edges import health

    monkeypatch.setattr(health, "WINDOW_TAIL_S", 0.1)
    late_s = 0.2 + 0.1 + 0.2  # the window closes at 0.3 s; ready 0.2 s after it (0.3 s after it at 0.8 s, shipped)
    behaviour = Behaviour(ready_at=time.monotonic() + late_s)
    server = _serve(servers, behaviour)
    # ready_at was fixed before the server started: the wait is measured from its own start (a
    # loaded machine took 0.09 s to start the server, and the wait looked 0.41 s long)
    start = time.monotonic()
    waited = wait_ready(HealthCheck("decode", server.url(), 10.0, expected=(0.1, 0.2)), client=client)
    assert behaviour.ready_at - start - 0.01 <= waited < late_s + 1.2
