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


def _flag_model(icc: float) -> SimConfig:
    from orchestrator.sim.culprits import Cause, CulpritModel

    culprits = CulpritModel((Cause(frozenset({"A"}), 0.3),), background=0.0, icc=icc)
    return SimConfig("decode", seed=5, culprits=culprits, culprit_flags=frozenset({"A"}))


def test_the_flag_models_rate_is_drawn_once_per_trial_and_spread_over_a_sessions_requests() -> None:
    """With SIM_CULPRITS, a request's rate is the model's trial rate (drawn once per trial, keyed by
    the part of the session's name before '-') spread over the session's rounds; the DSV4 model's
    batch rule does not apply."""
    from orchestrator.sim.culprits import request_rate

    fixed = _flag_model(icc=0.0)
    assert model.culprit_probability(fixed, "r3-0", 4) == pytest.approx(request_rate(0.3, 4))
    varied = _flag_model(icc=0.3)
    one_trial = {model.culprit_probability(varied, f"r3-{i}", 4) for i in range(20)}
    assert len(one_trial) == 1  # every session of trial r3 fails at the same rate
    trials = [model.culprit_probability(varied, f"r{t}-0", 1) for t in range(300)]
    assert len(set(trials)) == 300 and sum(trials) / 300 == pytest.approx(0.3, abs=0.05)
    u = model.culprit_probability(fixed, "r3-0", 1)  # a draw just under the rate fails, just over passes
    assert model.decide_outcome(fixed, 1, u - 1e-9, 0.99, session="r3-0", rounds=1) == "leak"
    assert model.decide_outcome(fixed, 1, u + 1e-9, 0.0, session="r3-0", rounds=1) == "ok"


def test_the_latencies_follow_their_stated_formulas() -> None:
    assert model.prefill_latency_s(1000, 0.5) == pytest.approx(0.004)  # 2 ms + 2 us per token
    assert model.prefill_latency_s(1000, 0.0) == pytest.approx(0.004 * 0.9)
    assert model.prefill_latency_s(0, 1.0) == pytest.approx(0.002 * 1.1)
    assert model.generate_latency_s(ALL_ON, 20) == pytest.approx(model.decode_latency_s(ALL_ON, 1, 0.5))
    assert model.generate_latency_s(ALL_ON, 1) == pytest.approx(model.decode_latency_s(ALL_ON, 1, 0.5) / 20)
