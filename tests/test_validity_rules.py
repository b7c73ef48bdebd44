"""edges.workload's `repro.valid` evaluation (pure): each rule kind, what a void names, and a
catastrophic validity regex ends as a workload failure within the match bound (never a hang)."""

from __future__ import annotations

import time

import pytest

from orchestrator.core.model import ValidRule
from orchestrator.core.records import MetricValue
from orchestrator.edges import workload
from orchestrator.edges.workload import InvalidOutput, check_metric_rules, check_output_rules
from orchestrator.errors import WorkloadError
from orchestrator.sim.repro import SessionOutcome, summarize

ERRORS = ValidRule("repro.valid[0]", "regex", r"error=(?P<value>\d+)", max=0)
N40 = ValidRule("repro.valid[1]", "metric", "corruption", min_n=40)
NO_5XX = ValidRule("repro.valid[2]", "absent", r"HTTP 5\d\d")


def sim_output(*kinds: str) -> str:
    return "\n".join(summarize([SessionOutcome(k) for k in kinds], 1.0)) + "\n"  # type: ignore[arg-type]


def test_a_clean_sim_summary_passes() -> None:
    check_output_rules(sim_output(*["done"] * 40), [ERRORS, NO_5XX])
    check_metric_rules({"corruption": MetricValue(kind="proportion", k=2, n=40)}, [N40])


def test_error_sessions_of_the_sim_repro_void_the_trial() -> None:
    with pytest.raises(InvalidOutput, match=r"repro\.valid\[0\] .*max 0\): saw 3") as caught:
        check_output_rules(sim_output(*["done"] * 37, "error", "error", "error"), [ERRORS])
    assert caught.value.kind == "infrastructure"  # retried by the retry policy, never data


def test_fewer_completed_sessions_than_asked_void_the_trial() -> None:
    with pytest.raises(InvalidOutput, match=r"min_n 40\): saw n=37 \(k=1\)"):
        check_metric_rules({"corruption": MetricValue(kind="proportion", k=1, n=37)}, [N40])


def test_an_absent_pattern_that_appears_voids_the_trial() -> None:
    with pytest.raises(InvalidOutput, match=r"absent .*1 match\(es\), last: 'HTTP 503'"):
        check_output_rules("ok\nsession 4: error: HTTP 503: b'busy'\n", [NO_5XX])


def test_bounds_on_a_rate_and_a_number() -> None:
    rate = ValidRule("repro.valid[0]", "metric", "corruption", max=0.5)
    with pytest.raises(InvalidOutput, match="saw 0.75"):
        check_metric_rules({"corruption": MetricValue(kind="proportion", k=3, n=4)}, [rate])
    wall = ValidRule("repro.valid[1]", "metric", "wall", min=1)
    with pytest.raises(InvalidOutput, match="saw 0.5"):
        check_metric_rules({"wall": MetricValue(kind="number", value=0.5)}, [wall])
    check_metric_rules({"wall": MetricValue(kind="number", value=2.0)}, [wall])


def test_a_regex_rule_that_never_matches_voids_the_trial() -> None:
    with pytest.raises(InvalidOutput, match="no match in the output"):
        check_output_rules("CORRUPTION sessions: 0/40\n", [ERRORS])


def test_a_catastrophic_validity_regex_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a match bound scaled down from MATCH_TIMEOUT_S's 1 s: the pattern never finishes, so
    any bound ends it the same way, and the message names the bound in force."""
    monkeypatch.setattr(workload, "MATCH_TIMEOUT_S", 0.2)
    rule = ValidRule("repro.valid[0]", "absent", r"(a+)+$")
    started = time.monotonic()
    with pytest.raises(WorkloadError, match=r"repro\.valid\[0\]: .* took longer than 0\.2 s"):
        check_output_rules("a" * 50_000 + "!", [rule])
    assert time.monotonic() - started < 60  # a hang guard (the bound per rule, slower when loaded), not a speed test
