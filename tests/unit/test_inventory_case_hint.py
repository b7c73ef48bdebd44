"""A name in the wrong case among many close names (the eighth mutation round): the case match
comes first and the hint still suggests at most three names, as for any typo."""

from __future__ import annotations

from orchestrator.core.inventory import known_names_hint


def test_a_wrong_case_among_close_names_gets_three_suggestions_the_case_match_first() -> None:
    known = ["NODE-1", "node-2", "node-3", "node-4", "node-5"]
    hint = known_names_hint("node-1", known, "testbed")
    suggested = hint.split("did you mean ", 1)[1].split("?", 1)[0]
    assert suggested.startswith("'NODE-1' or "), hint
    assert suggested.count("'") == 6, suggested  # three names, quoted
