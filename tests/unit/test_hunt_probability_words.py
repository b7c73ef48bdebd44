"""A posterior is never shown as certainty it is not: 0.9996 rounded to three places read
"posterior 1.000" on a found hunt's page and in its stop reason (the third new-user walk), which a
reader takes for proof. Shares that round to 1 or 0 are said as bounds."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.core.hunt import probability_text
from orchestrator.report.hunt import posterior_note


@pytest.mark.parametrize(
    ("p", "text"),
    [
        (0.95, "0.950"),
        (0.9994, "0.999"),
        (0.9995, "> 0.999"),
        (0.99999999, "> 0.999"),
        (1.0, "> 0.999"),  # a float at 1: the alternatives underflowed, not ruled out
        (0.0006, "0.001"),
        (0.0004, "< 0.001"),
        (0.0, "< 0.001"),
        (0.5, "0.500"),
    ],
)
def test_a_share_that_rounds_to_certainty_is_said_as_a_bound(p: float, text: str) -> None:
    assert probability_text(p) == text


def test_a_found_hunts_posterior_note_never_reads_1_000() -> None:
    best = dataclasses.make_dataclass("Best", [("probability", float)])(0.99997)
    result = dataclasses.make_dataclass("Result", [("best", object)])(best)
    report = dataclasses.make_dataclass("R", [("result", object), ("found", bool)])(result, True)
    assert posterior_note(report) == "posterior > 0.999"  # type: ignore[arg-type]
