"""The simulator's configurable flag model (sim.culprits), where the thirteenth mutation round found
no unit test: which flags are on (the server's own from its parsed flags, any other from its env,
SGLang-style booleans), the per-request rate that gives a session rate, and the refusals of a
spec the simulator cannot read (it refuses to start: a benchmark must never run on a truth other
than the one it set)."""

from __future__ import annotations

import random

import pytest

from orchestrator.sim.culprits import (
    MAX_FLAGS,
    Cause,
    CulpritModel,
    CulpritSpecError,
    flags_on,
    model_from_env,
    request_rate,
)
from orchestrator.sim.flags import SimConfigError, config_from_env

MODEL = CulpritModel(
    (Cause(frozenset({"cuda_graph", "SIM_FLAG_A"}), 0.2),), effects=(("SIM_FLAG_B", 0.01), ("bf16_index_k", 0.02))
)


def test_the_servers_own_flags_come_from_its_config_and_the_others_from_its_env() -> None:
    builtin = {"cuda_graph": True, "bf16_index_k": False, "multi_stream_overlap": True}
    env = {"SIM_FLAG_A": " Yes ", "SIM_FLAG_B": "0", "bf16_index_k": "1", "cuda_graph": "0"}
    # bf16_index_k is the server's own: its env entry of that name is not read; a flag off in env stays off
    assert flags_on(MODEL, builtin, env) == frozenset({"cuda_graph", "SIM_FLAG_A"})
    for word in ("true", "1", "yes", "y", "TRUE"):
        assert "SIM_FLAG_B" in flags_on(MODEL, builtin, {"SIM_FLAG_B": word})
    for word in ("", "0", "false", "no", "on?"):
        assert "SIM_FLAG_B" not in flags_on(MODEL, builtin, {"SIM_FLAG_B": word})
    assert flags_on(MODEL, {}, {}) == frozenset()  # the multi-stream flag is on, but not the model's


@pytest.mark.parametrize("rounds", [1, 2, 7, 40])
def test_a_sessions_requests_fail_at_the_rate_that_gives_the_session_rate(rounds: int) -> None:
    per_request = request_rate(0.15, rounds)
    assert 1.0 - (1.0 - per_request) ** rounds == pytest.approx(0.15)
    assert (rounds == 1) == (per_request == pytest.approx(0.15)) and per_request < 0.15 + 1e-12


def test_a_session_of_no_rounds_is_read_as_one() -> None:
    assert request_rate(0.15, 0) == pytest.approx(0.15) == request_rate(0.15, -3)


def test_more_flags_than_the_model_holds_are_refused() -> None:
    names = [f"F{i}" for i in range(MAX_FLAGS + 1)]
    at_most = {"SIM_CULPRITS": "&".join(names[:MAX_FLAGS]) + ":0.1"}
    model = model_from_env(at_most)
    assert model is not None and len(model.flags) == MAX_FLAGS
    with pytest.raises(CulpritSpecError, match=f"name {MAX_FLAGS + 1} flags \\(at most {MAX_FLAGS}\\)"):
        model_from_env({"SIM_CULPRITS": "F0:0.1", "SIM_FLAG_EFFECTS": ",".join(f"{n}:0.01" for n in names)})


def test_an_effect_without_its_rate_is_refused() -> None:
    with pytest.raises(CulpritSpecError, match="SIM_FLAG_EFFECTS: 'F1' has no rate"):
        model_from_env({"SIM_CULPRITS": "F0:0.1", "SIM_FLAG_EFFECTS": "F1"})


def test_a_server_given_a_spec_it_cannot_read_refuses_to_start_saying_why() -> None:
    with pytest.raises(SimConfigError, match="SIM_CULPRITS: 'F0' has no rate"):
        config_from_env("decode", {"SIM_CULPRITS": "F0"})


def test_a_trials_rate_varies_about_the_mean_only_with_an_icc() -> None:
    on = frozenset({"cuda_graph", "SIM_FLAG_A"})
    fixed = MODEL.trial_rate(on, random.Random(1))
    assert fixed == MODEL.session_rate(on) == pytest.approx(1 - 0.995 * 0.8)
    varied = MODEL._replace(icc=0.3)
    rates = [varied.trial_rate(on, random.Random(seed)) for seed in range(400)]
    assert len(set(rates)) == 400 and sum(rates) / 400 == pytest.approx(fixed, abs=0.03)
