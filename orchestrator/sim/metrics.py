"""Prometheus `/metrics` of a simulated worker, with SGLang's `sglang:*` names (EDGE).

Built with prometheus_client's own registry and exposition, so orch's collector meets the real
format (HELP/TYPE lines, `_total`/`_created`, `le` buckets) rather than a hand-written imitation.
Names, types and buckets follow SGLang (python/sglang/srt/metrics/collector.py): gauges
num_running_reqs, num_queue_reqs, gen_throughput, token_usage, cache_hit_rate; counters
num_requests, prompt_tokens, generation_tokens; histograms time_to_first_token_seconds and
e2e_request_latency_seconds. They are fed by the requests the simulator serves: the gauges are
read at scrape time from the engine, latencies are observed as each request ends.

Simulated timings: e2e is the request's time in the server. The first token of a prefill server
is its whole answer (TTFT = e2e); a decode server's first token comes after its admission wait
and the first of FIRST_TOKEN_PARTS parts of its decode time.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from orchestrator.sim.flags import SimConfig

R = TypeVar("R", bound=Callable[[bytes], Any])


class Engine(Protocol):
    running: dict[int, str]  # the batch: request number -> its arguments

    def _enter(self, arguments_json: str) -> tuple[int, int]: ...


MODEL = "sim-dsv4"
THROUGHPUT_WINDOW_S = 5.0  # gen_throughput: tokens of the last few seconds, like SGLang's log interval
FIRST_TOKEN_PARTS = 8
KV_TOKENS_PER_REQUEST = 64  # the simulated KV cache: token_usage = running requests' share of it
# SGLang's default buckets (collector.py)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    800.0,
)
FAST_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)  # the sim answers in milliseconds: resolve them too


class WorkerMetrics:
    """One worker's registry; `instrument` wraps its request routes and adds GET /metrics."""

    def __init__(self, cfg: SimConfig, engine: Engine) -> None:
        self.cfg, self.running = cfg, lambda: len(engine.running)
        enter = engine._enter  # the moment a request joins the batch ends its queue wait

        def entered(arguments_json: str) -> tuple[int, int]:
            self.local.admitted = time.perf_counter()
            return enter(arguments_json)

        engine._enter = entered  # type: ignore[method-assign]
        self.lock = threading.Lock()
        self.inflight = 0
        self.recent: deque[tuple[float, int]] = deque()  # (end time, tokens generated)
        self.local = threading.local()  # the admission time of the request this thread serves
        self.registry = r = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        self.requests = Counter("sglang:num_requests", "Number of requests processed.", labels, registry=r)
        self.prompt = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generated = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=FAST_BUCKETS + TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            labels,
            buckets=FAST_BUCKETS + E2E_BUCKETS,
            registry=r,
        )
        gauges: dict[str, tuple[str, Callable[[], float]]] = {
            "sglang:num_running_reqs": ("The number of running requests.", lambda: float(self.running())),
            "sglang:num_queue_reqs": ("The number of requests in the waiting queue.", self._queued),
            "sglang:gen_throughput": ("The generation throughput (token/s).", self._throughput),
            "sglang:token_usage": ("The token usage.", self._token_usage),
            "sglang:cache_hit_rate": ("The prefix cache hit rate.", lambda: 0.0),  # the sim caches nothing
        }
        for series in (self.requests, self.prompt, self.generated, self.ttft, self.e2e):
            series.labels(MODEL)  # every series exists from the start (at 0), as in SGLang
        for name, (doc, read) in gauges.items():
            Gauge(name, doc, labels, registry=r).labels(MODEL).set_function(read)

    def instrument(
        self, routes: dict[tuple[str, str], R], reply: Callable[[int, bytes], Any]
    ) -> dict[tuple[str, str], R]:
        """The routes with each POST timed and counted, plus GET /metrics (`reply` makes the
        server's reply value: passed in, as the server module imports this one)."""
        out: dict[tuple[str, str], Any] = {k: (self._timed(r) if k[0] == "POST" else r) for k, r in routes.items()}
        out[("GET", "/metrics")] = lambda _body: reply(200, generate_latest(self.registry))
        return out

    def _timed(self, route: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def timed(body: bytes) -> Any:
            start = time.perf_counter()
            self.local.admitted = None
            with self.lock:
                self.inflight += 1
            try:
                reply = route(body)
            finally:
                with self.lock:
                    self.inflight -= 1
            if getattr(reply, "status", 500) == 200:
                self._observe(start, time.perf_counter(), len(body), len(getattr(reply, "body", b"")))
            return reply

        return timed

    def _observe(self, start: float, end: float, request_bytes: int, reply_bytes: int) -> None:
        e2e = end - start
        admitted = getattr(self.local, "admitted", None)
        if self.cfg.role == "prefill" or admitted is None:
            ttft = e2e
        else:
            ttft = (admitted - start) + (end - admitted) / FIRST_TOKEN_PARTS
        tokens = max(1, reply_bytes // 4) if self.cfg.role == "decode" else 1
        self.requests.labels(MODEL).inc()
        self.prompt.labels(MODEL).inc(request_bytes // 4)
        self.generated.labels(MODEL).inc(tokens)
        self.ttft.labels(MODEL).observe(ttft)
        self.e2e.labels(MODEL).observe(e2e)
        with self.lock:
            self.recent.append((time.monotonic(), tokens))

    def _queued(self) -> float:
        with self.lock:
            inflight = self.inflight
        return float(max(0, inflight - self.running())) if self.cfg.role == "decode" else 0.0

    def _throughput(self) -> float:
        cutoff = time.monotonic() - THROUGHPUT_WINDOW_S
        with self.lock:
            while self.recent and self.recent[0][0] < cutoff:
                self.recent.popleft()
            tokens = sum(t for _, t in self.recent)
        return tokens / THROUGHPUT_WINDOW_S

    def _token_usage(self) -> float:
        capacity = (self.cfg.max_running_requests or self.cfg.cuda_graph_max_bs * 8) * KV_TOKENS_PER_REQUEST
        return min(1.0, self.running() * KV_TOKENS_PER_REQUEST / capacity)
