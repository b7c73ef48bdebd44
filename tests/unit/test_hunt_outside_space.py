"""What a hunt says when its data leave the hypothesis space (AND sets of up to 3 flags, ORs of
two) and what an OR answer says of each cause's rate (report/hunt.py, core/huntfit.py). Fast:
crafted trials of matrices/dsv4_hunt.yaml (16 suspects) replayed, no processes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from helpers.hunt_runs import hunt_trial

from orchestrator.core.config import read_matrix
from orchestrator.core.hunt import Culprit
from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord
from orchestrator.report.hunt import HuntReport, build_report, render, summary_lines

REPO = Path(__file__).resolve().parents[2]
FULL = (1 << 16) - 1
AND4 = ("bf16_index_k", "cuda_graph", "overlap", "torch_compile")


def matrix(budget: int) -> Matrix:
    m = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    assert m.hunt is not None
    return dataclasses.replace(m, hunt=dataclasses.replace(m.hunt, max_sessions=budget))


def trials(m: Matrix, runs: list[tuple[int, list[int]]]) -> list[TrialRecord]:
    """(configuration, k of 20 per trial) -> the trials, in that order."""
    assert m.hunt is not None
    out: list[TrialRecord] = []
    for config, ks in runs:
        out += [hunt_trial(dict(m.hunt.levels(config)), len(out), k) for k in ks]
    return out


def mask(m: Matrix, *flags: str) -> int:
    assert m.hunt is not None
    return sum(1 << m.hunt.flags.index(f) for f in flags)


def and4_report(m: Matrix) -> HuntReport:
    """The failing configuration fails, each no-op's drop fails, each of the four culprits' drops
    stays clean over 200 sessions (a 4-flag AND, outside the hypothesis space)."""
    culprits = mask(m, *AND4)
    runs = [(FULL, [3, 3]), (0, [0, 0, 0])]
    runs += [(FULL ^ (1 << i), [3]) for i in range(16) if not culprits >> i & 1]
    runs += [(FULL ^ (1 << i), [0] * 10) for i in range(16) if culprits >> i & 1]
    return build_report(m, trials(m, runs))


def said(report: HuntReport) -> str:
    return "\n".join(summary_lines(report)) + render(report)


def test_a_four_flag_and_spends_the_budget_and_says_no_culprit_set_explains_it() -> None:
    """The failing configuration fails, each no-op's drop fails, each of the four culprits' drops
    stays clean over 200 sessions: every set of up to 3 flags (and every OR of two) is contradicted
    by a clean drop. Before, the stop said only "session budget ... spent (top posterior ...)"."""
    m = matrix(budget=1080)
    assert m.hunt is not None
    report = and4_report(m)
    r = report.result
    assert r.state == "budget" and "no culprit set of up to 3 flags (nor an OR of two such sets)" in r.reason, r.reason
    assert r.contradicted >= 1
    assert "top posterior" not in r.reason, r.reason  # no set fits: the likeliest one's posterior is no answer
    lines = summary_lines(report)
    assert lines[0].startswith("hunt budget: session budget 1080 spent") and "no culprit set of up to 3" in lines[0]
    assert not [line for line in lines if line.startswith("culprit:")], lines  # no set named
    assert (
        "  configurations that fail on their own trials (judged at the failing configuration's rate against the "
        "background's) (13):" in lines
    ), lines
    assert "    all (the failing configuration): 6/40 sessions failed" in "\n".join(lines), lines
    assert [line for line in lines if line.startswith("    all but nccl_nvls: 3/20 sessions failed (")], lines
    common = "every failing configuration had bf16_index_k, cuda_graph, overlap and torch_compile on (4 flags)"
    assert [line for line in lines if line.startswith(f"  {common}")], lines
    todo = "what to do: narrow the suspects to those 4 and run them as a full factorial (16 cells)"
    assert [line for line in lines if line.startswith(f"  {todo}")], lines
    page = render(report)
    assert "no culprit set of up to 3 flags" in page and "Likeliest culprit set so far" not in page


def test_the_misfit_is_said_once_and_no_shared_rate_is_claimed() -> None:
    """The summary said the whole misfit reason twice (the verdict, then "no culprit set is named:
    <the same>"), hunt.html too; the list's heading said the configurations "failed at the failing
    configuration's rate" (3/20 against 6/40: consistent, not shown equal); and hunt.html sent its
    reader to hunt.html."""
    m = matrix(budget=1080)
    report = and4_report(m)
    summary, page = "\n".join(summary_lines(report)), render(report)
    assert summary.count("no culprit set of up to 3 flags") == 1, summary
    assert page.count("no culprit set of up to 3 flags") == 1
    assert "no culprit set is named\n" in summary
    assert "failed at the failing configuration's rate" not in summary + page
    assert "(in hunt.html's table 'Every configuration tried')" in summary and "Every configuration tried" in page


def test_an_or_of_three_causes_says_none_explains_it_and_no_flag_is_common_to_the_failures() -> None:
    """Three single-flag causes: each alone fails, and so does the failing configuration without any
    one or two of them; every OR of two sets leaves out a cause whose configuration failed."""
    m = matrix(budget=960)
    a, b, c = (mask(m, f) for f in ("bf16_index_k", "cuda_graph", "overlap"))
    runs = [(FULL, [3, 3]), (0, [0, 0, 0])] + [(FULL ^ (1 << i), [3]) for i in range(3, 16)]
    runs += [(x, [3, 3]) for x in (a, b, c, FULL ^ a, FULL ^ b, FULL ^ c, FULL ^ a ^ b, FULL ^ a ^ c, FULL ^ b ^ c)]
    runs += [(FULL ^ a ^ b ^ c, [0] * 10), (a | b, [3, 3])]
    report = build_report(m, trials(m, runs))
    r = report.result
    text = said(report)
    assert r.state == "budget" and "no culprit set of up to" in r.reason, r.reason
    assert "no culprit set of up to 3 flags (nor an OR of two such sets)" in text
    assert "  no flag was on in every failing configuration: the failure may have more than two causes" in text
    assert "    overlap: 6/40 sessions failed (" in text, text


def test_an_in_space_answer_cut_short_by_the_budget_is_not_called_unexplained() -> None:
    """The DSV4 AND, its drops and the no-ops' as the truth has them: a set of the space fits."""
    m = matrix(budget=600)
    culprits = mask(m, "bf16_index_k", "cuda_graph", "overlap")
    runs = [(FULL, [3, 3]), (0, [0, 0, 0])]
    runs += [(FULL ^ (1 << i), [3] if not culprits >> i & 1 else [0] * 4) for i in range(16)]
    report = build_report(m, trials(m, runs))
    assert report.result.contradicted == 0 and "no culprit set of up to" not in said(report)


def test_an_or_answer_states_each_causes_own_rate_where_only_it_is_on() -> None:
    """The model fits one affected rate for both causes of an OR; the report said none. Each cause's
    own rate is measured where its flags are on and the other cause's are not."""
    m = matrix(budget=3000)
    overlap, pair = mask(m, "overlap"), mask(m, "bf16_index_k", "cuda_graph")
    runs = [(FULL, [4, 3]), (0, [0, 0]), (overlap, [2, 3]), (FULL ^ overlap, [6, 5]), (pair, [4])]
    runs += [(FULL ^ mask(m, "bf16_index_k"), [2])]  # overlap on, the pair not whole: overlap's too
    report = build_report(m, trials(m, runs))
    answer = Culprit((("bf16_index_k", "cuda_graph"), ("overlap",)), 0.97)
    report = dataclasses.replace(report, result=dataclasses.replace(report.result, top=(answer,)))
    lines = summary_lines(report)
    pair_line = [line for line in lines if line.startswith("  bf16_index_k and cuda_graph, the other cause off: ")]
    assert pair_line and pair_line[0].startswith("  bf16_index_k and cuda_graph, the other cause off: 15/60 "), lines
    assert "25.0% (95% interval " in pair_line[0] and "over 2 configurations" in pair_line[0], pair_line
    single = [line for line in lines if line.startswith("  overlap, the other cause off: ")]
    assert single and single[0].startswith("  overlap, the other cause off: 7/60 sessions failed, 11.7%"), lines
    assert "overlap, the other cause off: 7/60 sessions failed" in render(report)


def test_when_only_the_failing_configuration_failed_the_next_step_is_its_own_line() -> None:
    """Every suspect on in every failing configuration (only the failing one failed): the note and
    the advice are two lines, as in the other cases, not one line with two colons."""
    from orchestrator.report.hunt import _what_to_do

    flags = ("a", "b", "c")
    lines = _what_to_do([(0b111, 6, 40)], flags)
    assert lines[0] == "only the failing configuration failed (every suspect flag on)"
    assert lines[1].startswith("what to do: narrow the suspect list and hunt again, or run the failing")
    assert len(lines) == 2
