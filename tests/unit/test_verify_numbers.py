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
