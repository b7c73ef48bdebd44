"""Flag parsing of the simulated servers: SGLang's boolean quirks and argparse-like extra args."""

from __future__ import annotations

import pytest

from orchestrator.sim.flags import (
    SimConfigError,
    config_from_env,
    parse_env_bool,
    parse_extra_args,
)


@pytest.mark.parametrize("raw", ["true", "1", "yes", "y", "TRUE", "Yes"])
def test_truthy_values_turn_a_flag_on(raw: str) -> None:
    warnings: list[str] = []
    assert parse_env_bool("X", raw, False, warnings) is True
    assert warnings == []


@pytest.mark.parametrize("raw", ["false", "0", "no", "n", "FALSE", "No"])
def test_falsy_values_turn_a_flag_off(raw: str) -> None:
    warnings: list[str] = []
    assert parse_env_bool("X", raw, True, warnings) is False
    assert warnings == []


@pytest.mark.parametrize("raw", ["off", "on", "", " 1", "2", "True "])
def test_anything_else_is_ignored_with_a_warning(raw: str) -> None:
    warnings: list[str] = []
    assert parse_env_bool("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", raw, True, warnings) is True
    assert len(warnings) == 1 and repr(raw) in warnings[0] and "ignoring" in warnings[0]


def test_overlap_off_leaves_overlap_on() -> None:
    cfg = config_from_env("decode", {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "off"})
    assert cfg.multi_stream_overlap is True
    assert any("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP='off'" in w for w in cfg.warnings)


def test_defaults() -> None:
    cfg = config_from_env("decode", {})
    assert (cfg.bf16_index_k, cfg.multi_stream_overlap, cfg.cuda_graph) == (False, True, True)
    assert (cfg.cuda_graph_max_bs, cfg.max_running_requests, cfg.warmup_s, cfg.seed) == (8, None, 1.0, 0)
    assert not cfg.fail_start and not cfg.never_ready and cfg.warnings == ()


def test_full_environment() -> None:
    cfg = config_from_env(
        "decode",
        {
            "SGLANG_DSV4_BF16_INDEX_K": "1",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0",
            "SGLANG_EXTRA_ARGS": "--disable-cuda-graph --cuda-graph-max-bs 32 --max-running-requests=4",
            "SIM_WARMUP_S": "0.25",
            "SIM_SEED": "9",
            "SIM_FAIL_START": "1",
            "SIM_NEVER_READY": "yes",
        },
    )
    assert cfg.bf16_index_k and not cfg.multi_stream_overlap and not cfg.cuda_graph
    assert (cfg.cuda_graph_max_bs, cfg.max_running_requests) == (32, 4)
    assert (cfg.warmup_s, cfg.seed, cfg.fail_start, cfg.never_ready) == (0.25, 9, True, True)


def test_extra_args_are_split_like_a_shell() -> None:
    assert parse_extra_args("  '--cuda-graph-max-bs'   16 ").cuda_graph_max_bs == 16
    assert parse_extra_args("").cuda_graph is True


@pytest.mark.parametrize(
    "text, message",
    [
        ("--enable-foo", "unrecognized arguments: --enable-foo"),
        ("--cuda-graph-max-bs", "expected one argument"),
        ("--cuda-graph-max-bs eight", "invalid int value"),
        ("--max-running-requests 0", "must be >= 1"),
        ("--disable-cuda-graph=1", "unrecognized arguments"),
        ("'unterminated", "cannot split"),
    ],
)
def test_bad_extra_args_are_fatal(text: str, message: str) -> None:
    with pytest.raises(SimConfigError, match=message):
        parse_extra_args(text)


@pytest.mark.parametrize("env", [{"SIM_WARMUP_S": "soon"}, {"SIM_WARMUP_S": "-1"}, {"SIM_SEED": "x"}])
def test_bad_sim_settings_are_fatal(env: dict[str, str]) -> None:
    with pytest.raises(SimConfigError):
        config_from_env("prefill", env)
