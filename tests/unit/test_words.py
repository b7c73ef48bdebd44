"""core.words: a noun in the form its count asks for. Reports and messages said "1 cell(s)" and
"3 trial attempt(s) failed" where the count was known; a reader of a team's report should read
"1 cell" and "3 cells"."""

from __future__ import annotations

import pytest

from orchestrator.core.words import counted, listed, noun, plural_of


@pytest.mark.parametrize(
    ("n", "want"),
    [(0, "0 trials"), (1, "1 trial"), (2, "2 trials"), (1234, "1,234 trials"), (-1, "-1 trials")],
)
def test_counted_regular(n: int, want: str) -> None:
    assert counted(n, "trial") == want


def test_counted_phrase_pluralizes_its_last_word() -> None:
    assert counted(1, "trial attempt") == "1 trial attempt"
    assert counted(3, "trial attempt") == "3 trial attempts"


@pytest.mark.parametrize(
    ("singular", "plural"),
    [("process", "processes"), ("box", "boxes"), ("match", "matches"), ("entry", "entries"), ("day", "days")],
)
def test_regular_spelling_rules(singular: str, plural: str) -> None:
    assert plural_of(singular) == plural
    assert counted(2, singular) == f"2 {plural}" and counted(1, singular) == f"1 {singular}"


def test_irregular_plural_is_the_callers() -> None:
    assert counted(1, "person", "people") == "1 person"
    assert counted(0, "person", "people") == "0 people"
    assert counted(2_000, "analysis", "analyses") == "2,000 analyses"
    assert noun(1, "index", "indices") == "index" and noun(5, "index", "indices") == "indices"


def test_listed_takes_its_form_from_the_list() -> None:
    assert listed("item", [3]) == "item 3"
    assert listed("item", [3, 4]) == "items 3, 4"
    assert listed("item", iter([7, 8, 9])) == "items 7, 8, 9"  # any iterable, read once
