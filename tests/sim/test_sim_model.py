"""The simulated behaviour, checked against the DSV4 facts it is calibrated on (pure)."""

from __future__ import annotations

import itertools
import random

import pytest

from orchestrator.sim import model
from orchestrator.sim.flags import SimConfig

GOLDEN = 0.015148654290721875  # model.request_rng(0, "decode", "x", "y").random(), computed once
ALL_ON = SimConfig("decode", bf16_index_k=True, multi_stream_overlap=True, cuda_graph=True)


def test_session_rate_matches_the_observed_15_to_18_percent() -> None:
    assert 0.15 <= model.session_corruption_rate(model.Q_BUG, 3) <= 0.18
    assert model.session_corruption_rate(model.Q_BACKGROUND, 3) == pytest.approx(0.005, abs=0.001)


@pytest.mark.parametrize("bf16, overlap, graph", list(itertools.product([True, False], repeat=3)))
def test_only_all_three_flags_with_a_batch_trigger_the_bug(bf16: bool, overlap: bool, graph: bool) -> None:
    cfg = SimConfig("decode", bf16_index_k=bf16, multi_stream_overlap=overlap, cuda_graph=graph)
    expected = model.Q_BUG if (bf16 and overlap and graph) else model.Q_BACKGROUND
    assert model.corruption_probability(cfg, batch=4) == expected
    assert model.corruption_probability(cfg, batch=1) == model.Q_BACKGROUND


def test_overlap_changes_nothing_with_cuda_graph_off() -> None:
    off = ALL_ON._replace(cuda_graph=False)
    for batch in (1, 2, 40):
        assert model.corruption_probability(off, batch) == model.corruption_probability(
            off._replace(multi_stream_overlap=False), batch
        )


def test_outcomes_mostly_leak_sometimes_no_tool() -> None:
    rng = random.Random(1)
    outcomes = [model.decide_outcome(ALL_ON, 8, rng.random(), rng.random()) for _ in range(40_000)]
    bad = [o for o in outcomes if o != "ok"]
    assert len(bad) / len(outcomes) == pytest.approx(model.Q_BUG, rel=0.1)
    assert 0.1 < bad.count("no_tool") / len(bad) < 0.3 and set(bad) == {"leak", "no_tool"}


def test_decode_latency_is_15_to_40_ms_and_responds_to_graph_flags() -> None:
    eager = ALL_ON._replace(cuda_graph=False)
    for u in (0.0, 0.5, 0.999):
        assert 0.010 <= model.decode_latency_s(ALL_ON, 4, u) <= 0.045
        assert model.decode_latency_s(ALL_ON, 4, u) < model.decode_latency_s(eager, 4, u)
    small_bs = ALL_ON._replace(cuda_graph_max_bs=8)
    big_bs = ALL_ON._replace(cuda_graph_max_bs=64)
    assert model.decode_latency_s(small_bs, 32, 0.5) > model.decode_latency_s(big_bs, 32, 0.5)


def test_larger_batches_cost_more_per_request() -> None:
    cfg = ALL_ON._replace(cuda_graph_max_bs=64)
    assert model.decode_latency_s(cfg, 40, 0.5) > model.decode_latency_s(cfg, 2, 0.5)


def test_anomaly_means_match_the_canary_counts() -> None:
    rng = random.Random(3)
    fp8 = ALL_ON._replace(bf16_index_k=False)
    bf16_total = sum(model.poisson(rng, model.anomaly_mean(ALL_ON)) for _ in range(12_000))
    fp8_total = sum(model.poisson(rng, model.anomaly_mean(fp8)) for _ in range(12_000))
    # 320 and 997 per 120 requests
    assert bf16_total / 100 == pytest.approx(320, rel=0.05)
    assert fp8_total / 100 == pytest.approx(997, rel=0.05)


def test_request_rng_is_stable_and_separates_streams() -> None:
    a = model.request_rng(0, "decode", "s1/1", "decode").random()
    assert a == model.request_rng(0, "decode", "s1/1", "decode").random()
    assert a != model.request_rng(1, "decode", "s1/1", "decode").random()
    assert a != model.request_rng(0, "decode", "s1/1", "anomaly").random()
    # fixed across processes and Python runs (string seeds hash with SHA-512, not hash())
    assert model.request_rng(0, "decode", "x", "y").random() == pytest.approx(GOLDEN, abs=1e-12)
