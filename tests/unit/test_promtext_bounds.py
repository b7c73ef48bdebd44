"""The caps on one scrape (core.promtext), each at its edge: what it allows reads, one more is a
ScrapeError saying which cap (recorded as the scrape's missing reason, the trial goes on). The
caps bound what a hostile or runaway exporter costs orch at every scrape of every trial; a cap
one off would still pass every test that only sends far more."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.promtext import (
    MAX_FAMILIES,
    MAX_KEPT_LINES,
    MAX_TEXT,
    Histogram,
    Scrape,
    name_filter,
    parse,
)
from orchestrator.errors import ScrapeError

KEEP_ALL = name_filter(["*"])


def gauges(families: int, series: int = 1) -> str:
    return "".join(f"g{f} {s}\n" for f in range(families) for s in range(series))


def test_as_many_families_as_the_cap_read_one_more_is_refused() -> None:
    assert len(parse(gauges(MAX_FAMILIES), KEEP_ALL).gauges) == MAX_FAMILIES
    with pytest.raises(ScrapeError, match=f"more than {MAX_FAMILIES} metric families kept"):
        parse(gauges(MAX_FAMILIES + 1), KEEP_ALL)


def test_a_family_is_counted_once_however_many_series_it_has() -> None:
    assert len(parse(gauges(MAX_FAMILIES, series=3), KEEP_ALL).gauges) == MAX_FAMILIES


def test_as_many_kept_lines_as_the_cap_read_one_more_is_refused() -> None:
    lines = "".join(f'g{{w="{i}"}} 1\n' for i in range(MAX_KEPT_LINES))
    assert parse(lines, KEEP_ALL).gauges == {"g": 1.0}
    with pytest.raises(ScrapeError, match=f"more than {MAX_KEPT_LINES:,} lines"):
        parse(lines + 'g{w="last"} 1\n', KEEP_ALL)


def test_as_many_characters_as_the_cap_read_one_more_is_refused() -> None:
    sample = "g 1\n"
    text = "#" * (MAX_TEXT - len(sample) - 1) + "\n" + sample  # a comment no family keeps, then g
    assert len(text) == MAX_TEXT
    assert parse(text, KEEP_ALL).gauges == {"g": 1.0}
    with pytest.raises(ScrapeError, match=f"{MAX_TEXT + 1} characters of metrics, more than {MAX_TEXT}"):
        parse("#" + text, KEEP_ALL)


def test_names_counts_every_kept_metric_of_each_kind() -> None:
    """What edges.metrics reads to say an endpoint's scrape kept nothing (`names == 0`)."""
    hist = Histogram(((float("inf"), 1.0),), 1.0, 0.5)
    assert Scrape().names == 0
    assert Scrape({"a_total": 1.0}, {"b": 1.0, "c": 2.0}, {"h": hist}).names == 4


def test_the_caps_are_the_ones_the_readme_states() -> None:
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
    stated = "an answer is read up to {} MB, and one that keeps more than {:,} lines of the endpoint's names, "
    stated += "a line a series, or more than {} metric families, is recorded as missing"
    assert stated.format(MAX_TEXT // 1_000_000, MAX_KEPT_LINES, MAX_FAMILIES) in readme
