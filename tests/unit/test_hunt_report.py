"""The hunt page's intervals treat the trial, not the session, as the unit of replication (as the
main report does): a configuration whose trials disagree gets a wider interval than Wilson's on
its pooled sessions, and the page says which interval it shows."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from orchestrator.core.config import read_matrix
from orchestrator.core.hunt import Culprit
from orchestrator.core.model import Matrix
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.core.stats import wilson_interval
from orchestrator.report.hunt import build_report, render, summary_lines, trial_counts

REPO = Path(__file__).resolve().parents[2]
FULL = (1 << 16) - 1  # every suspect at its failing level


def matrix() -> Matrix:
    return read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")


def trial(m: Matrix, index: int, config: int, k: int, n: int = 20, status: str = "completed") -> TrialRecord:
    assert m.hunt is not None
    levels = dict(m.hunt.levels(config))
    return TrialRecord(
        run_id="h",
        trial=index,
        round=0,
        cell=",".join(f"{f}={v}" for f, v in levels.items()),
        levels=levels,
        testbed="local",
        status=status,  # type: ignore[arg-type]
        started="2026-12-01T00:00:00.000Z",
        ended="2026-12-01T00:00:01.000Z",
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=k, n=n)} if status == "completed" else {},
    )


def interval_of(page: str, k: int, n: int) -> tuple[float, float]:
    row = re.search(rf"<td>{k}/{n}</td><td>[0-9.]+% \(([0-9.]+)%-([0-9.]+)%\)</td>", page)
    assert row, page
    return float(row[1]) / 100, float(row[2]) / 100


def test_trial_counts_are_per_configuration_and_only_completed_trials() -> None:
    m = matrix()
    records = [trial(m, 0, FULL, 3), trial(m, 1, 0, 0), trial(m, 2, FULL, 5), trial(m, 3, FULL, 0, status="failed")]
    assert trial_counts(m, records) == {FULL: [(3, 20), (5, 20)], 0: [(0, 20)]}


def test_trials_that_disagree_widen_the_interval_beyond_wilsons_on_pooled_sessions() -> None:
    m = matrix()
    # the failing configuration: 0, 8, 0, 8 of 20 (its trials disagree far beyond the binomial)
    records = [trial(m, i, FULL, k) for i, k in enumerate((0, 8, 0, 8))]
    records += [trial(m, 4 + i, 0, 0) for i in range(3)]  # the clean one, never failing
    page = render(build_report(m, records))
    low, high = interval_of(page, 16, 80)
    w_low, w_high = wilson_interval(16, 80)
    assert low < w_low - 0.01 and high > w_high + 0.01, (low, high, w_low, w_high)
    assert "quasi-binomial" in page and "trial = unit of replication" in page


def test_one_trial_per_configuration_keeps_wilson_and_says_it_assumes_independent_sessions() -> None:
    m = matrix()
    records = [trial(m, 0, FULL, 4), trial(m, 1, 0, 0), trial(m, 2, FULL ^ 1, 5)]
    page = render(build_report(m, records))
    low, high = interval_of(page, 4, 20)
    w_low, w_high = wilson_interval(4, 20)
    assert (round(low, 3), round(high, 3)) == (round(w_low, 3), round(w_high, 3))
    assert "assuming independent sessions" in page


def test_the_summary_says_what_the_minimal_reproducer_did_alone() -> None:
    m = matrix()
    assert m.hunt is not None
    culprits = sum(1 << m.hunt.flags.index(f) for f in ("bf16_index_k", "cuda_graph", "overlap"))
    records = [trial(m, 0, FULL, 4), trial(m, 1, 0, 0)]
    records += [trial(m, 2 + i, FULL ^ (1 << i), 0 if culprits >> i & 1 else 3) for i in range(16)]
    name = "bf16_index_k, cuda_graph and overlap"
    assert f"  minimal reproducer, {name} alone: not run yet" in summary_lines(build_report(m, records))
    records.append(trial(m, 18, culprits, 5))
    lines = summary_lines(build_report(m, records))
    assert lines[1].startswith("culprit: bf16_index_k AND cuda_graph AND overlap (posterior"), lines
    assert f"  minimal reproducer, {name} alone: 5/20 sessions failed (fails)" in lines, lines


def test_an_or_answer_has_a_minimal_reproducer_per_set_each_with_what_it_did_alone() -> None:
    m = matrix()
    assert m.hunt is not None
    overlap = 1 << m.hunt.flags.index("overlap")
    records = [trial(m, 0, FULL, 4), trial(m, 1, 0, 0), trial(m, 2, overlap, 3)]
    report = build_report(m, records)
    answer = Culprit((("bf16_index_k", "cuda_graph"), ("overlap",)), 0.97)
    page = render(dataclasses.replace(report, result=dataclasses.replace(report.result, top=(answer,))))
    section = page[page.index("<h2>Minimal reproducer</h2>") : page.index("<h2>Posterior")]
    assert (
        "Only bf16_index_k and cuda_graph at the failing level, every other flag clean (not tested as such)" in section
    )
    assert re.search(
        r"Only overlap at the failing level, every other flag clean \(tested: 3/20 sessions failed", section
    )
    assert section.count("<code>") == 4, section  # each set: its cell and its env
