"""The simulated workers' /metrics (sim.metrics.WorkerMetrics), what orch's traffic check and
server-metrics scrapes read in the end-to-end tests, where the thirteenth mutation round found
its arithmetic untested: a decode request's time to first token (its queue wait plus the first of
its answer's parts), its tokens from its answer's size, and a request that never joined the batch
(a native /generate) taking none of an earlier request's admission time."""

from __future__ import annotations

import pytest

from orchestrator.sim.flags import SimConfig
from orchestrator.sim.metrics import FIRST_TOKEN_PARTS, WorkerMetrics


class Engine:
    """The decode engine's part WorkerMetrics hooks: its batch and the moment a request joins it."""

    running: dict[int, str] = {}

    def _enter(self, arguments_json: str) -> tuple[int, int]:
        return 0, 0


def _metrics(role: str) -> tuple[WorkerMetrics, Engine]:
    engine = Engine()
    return WorkerMetrics(SimConfig(role), engine), engine  # type: ignore[arg-type]


def test_a_decode_requests_first_token_is_its_wait_plus_the_first_part_of_its_answer() -> None:
    metrics, _ = _metrics("decode")
    metrics.local.admitted = 1.5
    metrics._observe(1.0, 3.1, request_bytes=400, reply_bytes=41)
    assert metrics.ttft.total == pytest.approx(0.5 + 1.6 / FIRST_TOKEN_PARTS)
    assert metrics.e2e.total == pytest.approx(2.1)
    assert (metrics.requests, metrics.prompt_tokens, metrics.generation_tokens) == (1, 100, 10)
    metrics._observe(0.0, 0.1, request_bytes=3, reply_bytes=3)  # a tiny answer: still one token
    assert (metrics.prompt_tokens, metrics.generation_tokens) == (100, 11)


def test_a_prefill_counts_one_token_and_its_first_token_is_its_whole_time() -> None:
    metrics, _ = _metrics("prefill")
    metrics.local.admitted = 1.5  # never read for a prefill
    metrics._observe(1.0, 3.1, request_bytes=400, reply_bytes=4000)
    assert metrics.ttft.total == pytest.approx(2.1) and metrics.generation_tokens == 1


def test_a_request_that_never_joined_the_batch_takes_no_earlier_admission_time() -> None:
    """On one thread, a chat admitted to the batch, then a native /generate (it never joins it):
    the second one's first token is its whole time, not measured from the chat's admission."""
    metrics, engine = _metrics("decode")

    class Reply:
        status, body = 200, b"x" * 40

    def chat(body: bytes) -> Reply:
        engine._enter("{}")  # joins the batch: WorkerMetrics notes the moment
        return Reply()

    timed_chat, timed_generate = metrics._timed(chat), metrics._timed(lambda body: Reply())
    timed_chat(b"{}")
    ttft_before, e2e_before = metrics.ttft.total, metrics.e2e.total
    timed_generate(b"{}")
    ttft, e2e = metrics.ttft.total - ttft_before, metrics.e2e.total - e2e_before
    assert ttft == pytest.approx(e2e) and metrics.requests == 2
    assert metrics.local.admitted is None  # cleared at the start of the request that never joined


def test_the_queue_is_the_decodes_requests_in_flight_beyond_its_batch() -> None:
    decode, engine = _metrics("decode")
    engine.running = {1: "{}"}
    decode.inflight = 3
    assert decode._queued() == 2.0
    decode.inflight = 0
    assert decode._queued() == 0.0  # never negative
    prefill, prefill_engine = _metrics("prefill")
    prefill_engine.running = {}
    prefill.inflight = 3
    assert prefill._queued() == 0.0  # a prefill queues nothing here


def test_throughput_counts_only_the_tokens_of_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.sim import metrics as sim_metrics

    decode, _ = _metrics("decode")
    now = 1000.0
    monkeypatch.setattr(sim_metrics.time, "monotonic", lambda: now)
    decode.recent.extend([(now - sim_metrics.THROUGHPUT_WINDOW_S - 1, 500), (now - 1, 30)])
    assert decode._throughput() == 30 / sim_metrics.THROUGHPUT_WINDOW_S
    assert list(decode.recent) == [(now - 1, 30)]  # the old one is dropped, not counted again
