"""verify: a number written in the matrix arrives as text (the bounded YAML reader keeps scalars
as written), and must still match the number the server reports; text that is not that number
must not."""

from __future__ import annotations

from pathlib import Path

from orchestrator.core.config import read_matrix
from orchestrator.core.serverconf import VerifyRule, reported_mismatch

REPO = Path(__file__).resolve().parents[2]


def test_a_matrix_number_matches_the_reported_number() -> None:
    rule = VerifyRule("verify[0]", "decode", "/server_info", {}, (("cuda_graph_max_bs", "64"),))
    assert reported_mismatch({"cuda_graph_max_bs": 64}, rule) is None
    assert reported_mismatch({"cuda_graph_max_bs": 64.0}, rule) is None
    assert reported_mismatch({"cuda_graph_max_bs": 32}, rule) == ("cuda_graph_max_bs", "64", 32)
    assert reported_mismatch({"cuda_graph_max_bs": True}, rule) == ("cuda_graph_max_bs", "64", True)
    words = VerifyRule("verify[0]", "decode", "/server_info", {}, (("mode", "sixty-four"),))
    assert reported_mismatch({"mode": 64}, words) == ("mode", "sixty-four", 64)


def test_the_shipped_flag_matrix_checks_max_bs_as_a_number() -> None:
    matrix = read_matrix(REPO / "matrices/cuda_graph_flags.yaml")
    rules = [r for r in matrix.verify if any(k == "cuda_graph_max_bs" for k, _ in r.expect)]
    assert [r.when for r in rules] == [{"max_bs": "64"}, {"max_bs": "default"}]
    assert reported_mismatch({"cuda_graph_max_bs": 64}, rules[0]) is None
    assert reported_mismatch({"cuda_graph_max_bs": 8}, rules[0]) is not None
    assert reported_mismatch({"cuda_graph_max_bs": 8}, rules[1]) is None


def test_a_matrix_word_or_list_matches_only_the_same_reported_value() -> None:
    """Text against text (a dtype, an attention backend), and lists, compare as they are: a
    number written as text matches a reported number (above), never a reported "64" string."""
    rule = VerifyRule("verify[0]", "decode", "/server_info", {}, (("kv_cache_dtype", "fp8_e5m2"),))
    assert reported_mismatch({"kv_cache_dtype": "fp8_e5m2"}, rule) is None
    assert reported_mismatch({"kv_cache_dtype": "bf16"}, rule) == ("kv_cache_dtype", "fp8_e5m2", "bf16")
    assert reported_mismatch({"kv_cache_dtype": ["fp8_e5m2"]}, rule) == ("kv_cache_dtype", "fp8_e5m2", ["fp8_e5m2"])
    listed = VerifyRule("verify[0]", "decode", "/server_info", {}, (("tp_ranks", [0, 1]),))
    assert reported_mismatch({"tp_ranks": [0, 1]}, listed) is None
    assert reported_mismatch({"tp_ranks": [1, 0]}, listed) == ("tp_ranks", [0, 1], [1, 0])
    text = VerifyRule("verify[0]", "decode", "/server_info", {}, (("port", "64"),))
    assert reported_mismatch({"port": "64"}, text) is None
