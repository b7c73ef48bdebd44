"""The report says only what the run's design has: a 2-factor run's page explains no three-way
interaction, a 1-factor run's no effect with another factor held fixed, a proportion-only run's
no numeric effect or Mann-Whitney test (found by the new-user walk: every page explained them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import SMALL_HUNT, Answer, hunt_run, small_hunt, truth_answer
from helpers.page_text import text
from helpers.report_synth import fewer_factors, synthetic_run, write_run

from orchestrator.core import family, power
from orchestrator.core.config import read_matrix
from orchestrator.core.model import Matrix
from orchestrator.report.build import _directions, _power_for, build_report
from orchestrator.report.compare import write_comparison_page
from orchestrator.report.render import render_report, write_report

KEEP2 = ("bf16_index_k", "cuda_graph")
THREE_WAY = "a three-way interaction is how much that two-way interaction changes with the third factor"


@pytest.fixture(scope="module")
def run3() -> tuple:
    return synthetic_run(replicates=3)


def page(manifest, records) -> str:  # type: ignore[no-untyped-def]
    return text(render_report(build_report(manifest, records)))


def test_a_two_factor_page_says_nothing_of_three_way_interactions(run3: tuple) -> None:
    two = page(*fewer_factors(*run3, ("bf16_index_k", "cuda_graph")))
    assert "Interactions for corruption: two-way" in two  # the section is there, with its 2-way
    assert "A two-way interaction is how much one factor's effect changes" in two
    assert "three-way" not in two
    assert "every two-way interaction, the numeric effects)" in two  # the policy names what it corrects
    # 6 vs 6 trials pooled over cuda_graph can pass where 3 vs 3 cannot: the caution says so
    assert "run more replicates to compare it between cells (the factor effects pool trials across cells" in two


def test_a_three_factor_page_still_explains_three_way_interactions(run3: tuple) -> None:
    three = page(*run3)
    assert THREE_WAY in three
    assert "every two-way interaction, every three-way interaction, the numeric effects" in three
    assert '"| x=y" holds another factor fixed' in three
    assert "main effect (average)" in three


def test_a_one_factor_page_holds_no_other_factor_fixed(run3: tuple) -> None:
    one = page(*fewer_factors(*run3, ("bf16_index_k",)))
    assert (
        "(6 tests; corruption: 2, wall: 2, anomalies: 2; "
        "each cell vs the baseline, each factor's main effect, the numeric effects)" in one
    )
    # its factor effect compares the same 3 vs 3 trials as its cell does (p >= 0.10): nothing pools
    assert "wall: with 3 trials per cell and 3 in the baseline, no difference could reach significance" in one
    assert "dispersion 2.58 estimated from 3 trials in 1 cell (2.0 df;" in one  # not "1 cells"
    for absent in (
        "conditional effects",
        "holds another factor fixed",
        "pooled over the other factors",
        "interaction",
        "pool trials across cells",
        "(average)",  # of the one factor's effect: over no other factor
    ):
        assert absent not in one, absent


def test_a_proportion_only_page_has_no_numeric_effects_text(run3: tuple) -> None:
    prop = page(*fewer_factors(*run3, ("bf16_index_k", "cuda_graph"), metrics=("corruption",)))
    assert "for proportions by quasi-binomial" in prop
    for absent in ("Mann-Whitney", "numeric", "Numeric", "van Elteren", "for numbers"):
        assert absent not in prop, absent


def test_a_number_only_page_says_nothing_of_rates(run3: tuple) -> None:
    nums = page(*fewer_factors(*run3, ("bf16_index_k", "cuda_graph"), metrics=("wall", "anomalies")))
    assert "Each cell is compared with the baseline (bf16_index_k=on, cuda_graph=on) by Mann-Whitney U;" in nums
    assert "Rates are k of n sessions" not in nums
    assert "Fisher" not in nums


def test_family_parts_name_each_kind_of_test_once_in_order() -> None:
    main = ((("a", "on", "off"),), ())
    held = ((("a", "on", "off"),), (("b", "on"),))
    two = ((("a", "on", "off"), ("b", "on", "off")), ())
    keys: list[family.TestKey] = [
        ("neighbour", "m", "c1"),
        ("contrast", "m", two),
        ("contrast", "m", main),
        ("rate", "m", "c1"),
        ("contrast", "m", held),
        ("number", "w", "c1"),
    ]
    assert family.parts(keys) == [
        "each cell vs the baseline",
        "each factor's main effect",
        "its conditional effects (another factor held fixed)",
        "every two-way interaction",
        "the highest cell vs each cell one factor away",
    ]
    assert family.parts([("number_effect", "w", ("a", "off"))]) == ["the numeric effects"]


def _compared(tmp_path: Path, metrics: tuple[str, ...]) -> str:
    """The comparison page of two 2-factor runs of these metrics (two seeds), as text."""
    runs = []
    for seed, run_id in ((1, "20260509-070000-a"), (2, "20260510-070000-b")):
        run = fewer_factors(*synthetic_run(replicates=3, seed=seed, run_id=run_id), KEEP2, metrics=metrics)
        runs.append(write_run(tmp_path / "runs" / run_id, *run))
    return text(write_comparison_page(runs[0], runs[1], tmp_path / "page.html").path.read_text())


def test_a_comparison_of_proportion_only_runs_names_no_numbers_test(tmp_path: Path) -> None:
    page_ = _compared(tmp_path, ("corruption",))
    assert "rates pool k of n sessions over trials" in page_
    assert "Mann-Whitney" not in page_ and "Numbers compare" not in page_


def test_a_comparison_of_number_only_runs_says_nothing_of_rates(tmp_path: Path) -> None:
    page_ = _compared(tmp_path, ("wall",))
    assert "Numbers compare medians of trial values (Mann-Whitney)." in page_
    assert "rates pool" not in page_


def _found(base: float, rise: float | None, fall: float | None) -> power.Detectable:
    return power.Detectable(n_cell=80, n_baseline=80, baseline=base, alpha=0.05, power=0.8, rise=rise, fall=fall)


def test_the_reports_power_sentence_says_a_direction_nothing_detects_in_words(run3: tuple) -> None:
    """It read 'about +37.0 points (to 53.7%) or no fall (not even to 0%) (...; to pass Holm's first
    step over 20 tests: no rise (not even to 100%) or no fall (not even to 0%))': the same numbers,
    now a direction nothing detects says so."""
    two = page(*fewer_factors(*run3, KEEP2))
    assert "had 80% power only for differences of about +37.5 points (to 54.2%) or -16.6 points (to 0.1%)" in two
    holm = "to pass Holm's first step over 20 tests: +83.1 points (to 99.8%), but no fall at all (not even to 0%))."
    assert holm in two
    assert _directions(_found(0.3, None, None)) == "no rise or fall at all (not even to 100% or 0%)"
    assert _directions(_found(0.0, 0.097, None)) == "+9.7 points (to 9.7%), as a rate of 0% cannot fall"
    assert _directions(_found(0.05, 0.05, 0.031)) == "+5.0 points (to 10.0%) or -3.1 points (to 1.9%)"
    assert _directions(_found(1.0, None, None)) == "no fall at all (not even to 0%), as a rate of 100% cannot rise"


def _hunt_page(tmp_path: Path, matrix: Matrix, answer: Answer) -> str:
    hunt_run(tmp_path / "runs" / "r1", matrix, answer)
    write_report(tmp_path / "runs" / "r1")
    return text((tmp_path / "runs" / "r1" / "hunt.html").read_text())


def test_a_one_flag_hunts_page_names_no_other_flag_and_no_interaction(tmp_path: Path) -> None:
    """One suspect flag: one flag at a time is the full factorial, its reproducer has no other flag
    to keep clean, and its drop no rest to run; the page said '(misses interactions)', 'every other
    flag clean' and explained the rest's trials."""
    (tmp_path / "one.yaml").write_text(SMALL_HUNT.split("  cuda_graph:")[0] + "hunt:" + SMALL_HUNT.split("hunt:")[1])
    matrix = read_matrix(tmp_path / "one.yaml")
    failing = matrix.hunt.failing["bf16_index_k"] if matrix.hunt else ""
    one = _hunt_page(
        tmp_path, matrix, lambda step, _: ("completed", 4 * (step.trial.cell.as_dict()["bf16_index_k"] == failing))
    )
    assert "Only bf16_index_k at the failing level (tested: 8/40 sessions failed (fails))" in one
    assert "from 2 trials in 1 configuration, 1.0 df;" in one  # not "1 configurations"
    assert "one flag at a time, 80 sessions each 160 2 full factorial" in one
    assert "every other flag" not in one and "interactions" not in one and "rest of the flag's set" not in one
    assert "a drop is checked when the failing configuration without the flag showed the verdict the answer " in one


def test_a_four_flag_hunts_page_still_says_both(tmp_path: Path) -> None:
    matrix = small_hunt(tmp_path)
    four = _hunt_page(tmp_path, matrix, truth_answer(matrix))
    assert "at the failing level, every other flag clean" in four
    assert "and the rest of the flag's set alone, every other flag clean, ran 2 trials without a failure" in four
    assert "one flag at a time, 80 sessions each 400 5 (misses interactions)" in four


def test_a_power_sentence_where_nothing_reaches_80_percent_says_so_plainly() -> None:
    """It read 'had 80% power only for differences of about no rise or fall at all (not even to 100%
    or 0%)' (the eighth new-user walk: 2 trials of 6 sessions a cell, dispersion 2.82)."""
    from orchestrator.report.build import quasi_power_sentence

    design = power.Design(sessions=6, trials=2, other_rates=(0.0, 0.0, 0.0, 0.083), phi=2.82)
    text = quasi_power_sentence(design, 1 / 12, 23)
    assert "differences of about no" not in text, text
    assert "comparison had 80% power for no rise or fall at all (not even to 100% or 0%) (simulated" in text, text
    assert _power_for(_found(0.05, 0.05, None)).startswith("only for differences of about +5.0 points (to 10.0%)")
    assert _power_for(_found(0.0, None, None)) == "for no rise at all (not even to 100%), as a rate of 0% cannot fall"


def test_a_comparisons_numeric_difference_says_it_has_no_interval(tmp_path: Path) -> None:
    """The column is "B − A [95% CI]", and a rate's row gives one; a number's row gave a bare
    "+0.1" (a difference of medians, with no interval), read as exact under that heading."""
    page_ = _compared(tmp_path, ("wall",))
    assert "B − A [95% CI]" in page_
    assert "(of medians, no interval)" in page_
