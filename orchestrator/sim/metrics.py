"""Prometheus `/metrics` of a simulated worker, with SGLang's `sglang:*` names (EDGE).

The exposition is written by prometheus_client (its registry, metric families and
generate_latest), so orch's collector meets the real format (HELP/TYPE lines, `_total`/`_created`,
`le` buckets) rather than a hand-written imitation. Names, types and buckets follow SGLang
(python/sglang/srt/metrics/collector.py): gauges num_running_reqs, num_queue_reqs, gen_throughput,
token_usage, cache_hit_rate; counters num_requests, prompt_tokens, generation_tokens; histograms
time_to_first_token_seconds and e2e_request_latency_seconds. They are fed by the requests the
simulator serves: the gauges are read at scrape time from the engine, latencies observed as each
request ends.

prometheus_client is imported in the background after the server's first request (a health poll
during warm-up, usually), never at start-up: the servers start on the stdlib alone (restart to
listening is on every trial's path, and the import costs more than the rest of the start-up).
Until then, the numbers are kept in plain counters here.

Simulated timings: e2e is the request's time in the server. The first token of a prefill server
is its whole answer (TTFT = e2e); a decode server's first token comes after its admission wait
and the first of FIRST_TOKEN_PARTS parts of its decode time.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Callable, Protocol, TypeVar

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


class Hist:
    """One histogram's observations: counts per bucket (+Inf last), their sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


class WorkerMetrics:
    """One worker's numbers; `instrument` wraps its routes (timing POSTs) and adds GET /metrics."""

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
        self.requests = self.prompt_tokens = self.generation_tokens = 0.0
        self.ttft, self.e2e = Hist(FAST_BUCKETS + TTFT_BUCKETS), Hist(FAST_BUCKETS + E2E_BUCKETS)
        self._exposition: Callable[[], bytes] | None = None
        self._loader: threading.Thread | None = None

    def instrument(
        self, routes: dict[tuple[str, str], R], reply: Callable[[int, bytes], Any]
    ) -> dict[tuple[str, str], R]:
        """The routes with each POST timed and counted, plus GET /metrics (`reply` makes the
        server's reply value: passed in, as the server module imports this one)."""
        out: dict[tuple[str, str], Any] = {
            k: self._timed(r) if k[0] == "POST" else self._first(r) for k, r in routes.items()
        }
        out[("GET", "/metrics")] = lambda _body: reply(200, self.exposition())
        return out

    def exposition(self) -> bytes:
        """The text format, by prometheus_client (waits for its import if still under way)."""
        self._load()
        assert self._loader is not None
        self._loader.join()
        assert self._exposition is not None
        return self._exposition()

    def _first(self, route: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def first(body: bytes) -> Any:
            self._load()
            return route(body)

        return first

    def _load(self) -> None:
        """Import prometheus_client and build the registry, once, in a background thread."""
        with self.lock:
            if self._loader is None:
                self._loader = threading.Thread(target=self._build, name="metrics-import", daemon=True)
                self._loader.start()

    def _build(self) -> None:
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # type: ignore[arg-type]  # a custom collector: collect() below
        self._exposition = lambda: generate_latest(registry)

    def collect(self) -> Iterator[object]:
        """The metric families, read now (prometheus_client calls this at each scrape)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        labels = ["model_name"]
        with self.lock:
            counters = [
                ("sglang:num_requests", "Number of requests processed.", self.requests),
                ("sglang:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
                ("sglang:generation_tokens", "Number of generation tokens processed.", self.generation_tokens),
            ]
            hists = [
                ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
                ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", self.e2e),
            ]
            cumulative = [(name, doc, h.cumulative(), h.total) for name, doc, h in hists]
        for name, doc, value in counters:
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric([MODEL], value)
            yield counter
        for name, doc, buckets, total in cumulative:
            hist = HistogramMetricFamily(name, doc, labels=labels)
            hist.add_metric([MODEL], buckets, sum_value=total)
            yield hist
        gauges = [
            ("sglang:num_running_reqs", "The number of running requests.", float(self.running())),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", self._queued()),
            ("sglang:gen_throughput", "The generation throughput (token/s).", self._throughput()),
            ("sglang:token_usage", "The token usage.", self._token_usage()),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),  # the sim caches nothing
        ]
        for name, doc, value in gauges:
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            gauge.add_metric([MODEL], value)
            yield gauge

    def _timed(self, route: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def timed(body: bytes) -> Any:
            start = time.perf_counter()
            self._load()
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
        with self.lock:
            self.requests += 1
            self.prompt_tokens += request_bytes // 4
            self.generation_tokens += tokens
            self.ttft.observe(ttft)
            self.e2e.observe(e2e)
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
