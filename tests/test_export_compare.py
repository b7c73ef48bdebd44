"""`orch export` (tidy table) and `orch compare` (two runs side by side)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli.main import main
from orchestrator.core import clustered, ranks, stats
from orchestrator.core.records import Failure, MetricValue, RunManifest, TrialRecord
from orchestrator.report.compare import compare, write_comparison_page
from orchestrator.store.journal import Journal, write_json_atomic

FACTORS = {"overlap": ["on", "off"]}


def manifest(run_id: str, metrics: dict[str, str] | None = None) -> RunManifest:
    return RunManifest(
        run_id=run_id,
        name="t",
        orch_version="0",
        matrix_path="m.yaml",
        matrix_text="",
        matrix_sha256="x",
        inventory_path="i.yaml",
        inventory_text="",
        inventory_sha256="y",
        testbed="tb",
        seed=1,
        order="randomized",
        replicates=2,
        factors=FACTORS,
        baseline={"overlap": "on"},
        metrics=metrics or {"corruption": "proportion", "wall": "number"},
        plan=[],
        started="2026-11-30T00:00:00Z",
    )


def trial(run_id: str, i: int, level: str, k: int, n: int = 40, wall: float = 1.0, failed: bool = False) -> TrialRecord:
    return TrialRecord(
        run_id=run_id,
        trial=i,
        round=i // 2,
        cell=f"overlap={level}",
        levels={"overlap": level},
        is_baseline=level == "on",
        testbed="tb",
        status="failed" if failed else "completed",
        failure=Failure(kind="workload", error="WorkloadError", message="repro exited 3") if failed else None,
        started="2026-11-30T00:00:00Z",
        ended="2026-11-30T00:00:01Z",
        duration_s=1.0,
        metrics={}
        if failed
        else {
            "corruption": MetricValue(kind="proportion", k=k, n=n),
            "wall": MetricValue(kind="number", value=wall, unit="s"),
        },
    )


def write_run(root: Path, run_id: str, trials: list[TrialRecord]) -> Path:
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "run.json", manifest(run_id))
    with Journal(run_dir / "journal.jsonl") as j:
        for t in trials:
            j.append(t)
    return run_dir


def test_tidy_export_has_one_row_per_trial_and_metric(tmp_path, capsys):
    run = write_run(
        tmp_path, "a", [trial("a", 0, "on", 6), trial("a", 1, "off", 0), trial("a", 2, "on", 0, failed=True)]
    )
    assert main(["export", str(run), "--format", "csv"]) == 0
    frame = pd.read_csv(run / "a.csv")
    assert len(frame) == 5  # 2 completed trials x 2 metrics + 1 failed trial without metric
    row = frame[(frame.trial == 0) & (frame.metric == "corruption")].iloc[0]
    assert (row.k, row.n, row.value, row["factor.overlap"]) == (6, 40, 0.15, "on")
    failed = frame[frame.status == "failed"]
    assert len(failed) == 1 and pd.isna(failed.iloc[0].metric) and failed.iloc[0].failure == "repro exited 3"
    assert main(["export", str(run), "--format", "json", "-o", str(tmp_path / "a.json")]) == 0
    assert len(json.loads((tmp_path / "a.json").read_text())) == 5
    assert main(["export", str(run), "--format", "parquet"]) == 0
    pq = pd.read_parquet(run / "a.parquet")
    assert list(pq.columns) == list(frame.columns) and len(pq) == 5
    assert pq[(pq.trial == 0) & (pq.metric == "corruption")].iloc[0].k == 6


def test_compare_flags_a_real_change_and_not_noise():
    a = [trial("a", 0, "on", 6), trial("a", 1, "off", 0), trial("a", 2, "on", 7), trial("a", 3, "off", 1)]
    b = [trial("b", 0, "on", 0), trial("b", 1, "off", 1), trial("b", 2, "on", 1), trial("b", 3, "off", 0)]
    c = compare(manifest("a"), a, manifest("b"), b)
    rows = {(r.cell, r.metric): r for r in c.rows}
    on = rows[("overlap=on", "corruption")]
    assert (on.a.k, on.a.n, on.b.k, on.b.n) == (13, 80, 1, 80)
    assert on.diff == pytest.approx(1 / 80 - 13 / 80)
    assert on.diff_low < on.diff < on.diff_high < 0
    # 2 trials a side: the trial is the unit, so the p comes from the trials (dispersion on 1.6 df,
    # sparse: core.trialexact), 0.027, and Holm over the page's 2 comparisons that could reach
    # significance makes it 0.054 (the 2 wall rows, 2 trials a side, cannot: not counted; it was 4).
    # Fisher on 80 pooled sessions a side (p < 0.001) called it significant; that treated sessions
    # as independent.
    assert 0.01 < on.p < 0.05 and not on.significant
    assert "likelihood ratio on the trials" in c.methods["corruption"]
    assert not rows[("overlap=off", "corruption")].significant
    assert any("No cell differs significantly" in line and "2 comparisons" in line for line in c.summary)


def test_compare_flags_a_real_change_with_four_trials_a_side():
    """The same change seen in 4 trials a side: the quasi-binomial test (dispersion on 4.7 df) finds it
    after Holm over every comparison on the page, and names itself."""
    on_a, on_b, off_a, off_b = (6, 7, 6, 8), (0, 1, 0, 1), (0, 1, 1, 0), (1, 0, 0, 1)
    a = [trial("a", i, "on", k) for i, k in enumerate(on_a)] + [
        trial("a", 4 + i, "off", k) for i, k in enumerate(off_a)
    ]
    b = [trial("b", i, "on", k) for i, k in enumerate(on_b)] + [
        trial("b", 4 + i, "off", k) for i, k in enumerate(off_b)
    ]
    c = compare(manifest("a"), a, manifest("b"), b)
    rows = {(r.cell, r.metric): r for r in c.rows}
    on = rows[("overlap=on", "corruption")]
    assert on.significant and on.diff_high < 0 and not rows[("overlap=off", "corruption")].significant
    assert c.methods["corruption"].startswith("quasi-binomial, dispersion 0.27 estimated from 16 trials in 4 cells")
    assert any("overlap=on" in line and "27/160" in line for line in c.summary)


def counts_trial(run_id: str, i: int, counts: dict[str, tuple[int, int]], level: str = "on") -> TrialRecord:
    """A completed trial with only these proportion metrics: (k, n) each."""
    metrics = {m: MetricValue(kind="proportion", k=k, n=n) for m, (k, n) in counts.items()}
    return trial(run_id, i, level, 0).model_copy(update={"metrics": metrics})


def test_compare_aa_false_positive_rate_when_trials_vary():
    """A/A, the README's own setting: both runs 4 trials x 50 sessions at 15%, trials vary (beta-binomial,
    intra-trial correlation 0.05). Fisher on pooled sessions flagged 29.8% of such pairs; the trial-level
    test must stay near the nominal 5% (400 pairs: 5% plus one standard error, and a bit)."""
    rng = np.random.default_rng(5)
    rate, icc, trials, sessions, sims = 0.15, 0.05, 4, 50, 400
    alpha, beta = rate * (1 - icc) / icc, (1 - rate) * (1 - icc) / icc
    m = manifest("a", {"corruption": "proportion"})
    hits = 0
    for _ in range(sims):
        ka, kb = (rng.binomial(sessions, rng.beta(alpha, beta, trials)) for _ in range(2))
        ta = [counts_trial("a", i, {"corruption": (int(k), sessions)}) for i, k in enumerate(ka)]
        tb = [counts_trial("b", i, {"corruption": (int(k), sessions)}) for i, k in enumerate(kb)]
        hits += compare(m, ta, m, tb).rows[0].significant
    assert hits / sims <= 0.07, f"{hits / sims:.1%} of A/A comparisons flagged significant"


def test_compare_rates_are_widened_by_the_dispersion_of_both_runs():
    m = manifest("a", {"corruption": "proportion"})
    ta = [counts_trial("a", i, {"corruption": (k, 50)}) for i, k in enumerate((2, 12, 5, 9))]
    tb = [counts_trial("b", i, {"corruption": (k, 50)}) for i, k in enumerate((11, 3, 8, 1))]
    row = compare(m, ta, m, tb).rows[0]
    disp = clustered.dispersion([[(2, 50), (12, 50), (5, 50), (9, 50)], [(11, 50), (3, 50), (8, 50), (1, 50)]])
    assert disp.estimable and disp.inflation() > 1
    assert (row.a.rate.low, row.a.rate.high) == pytest.approx(clustered.rate_interval(28, 200, disp))
    wilson = stats.rate(28, 200)
    assert row.a.rate.low < wilson.low and row.a.rate.high > wilson.high


def test_compare_holm_is_one_family_over_every_metric():
    """Two proportion metrics, four trials a side, each 6/200 vs 16/200: raw p 0.028 each (the
    quasi-binomial test). Holm over the 2 comparisons shown gives 0.057: nothing is significant
    (corrected per metric, each was 'significant (p=0.03, Holm)')."""
    metrics = {"corruption": "proportion", "errors": "proportion"}
    ta = [counts_trial("a", i, {"corruption": (k, 50), "errors": (k, 50)}) for i, k in enumerate((2, 1, 2, 1))]
    tb = [counts_trial("b", i, {"corruption": (k, 50), "errors": (k, 50)}) for i, k in enumerate((4, 4, 4, 4))]
    c = compare(manifest("a", metrics), ta, manifest("b", metrics), tb)
    assert all(0.025 < r.p < 0.05 for r in c.rows) and c.rows[0].p == c.rows[1].p
    assert [r.p_holm for r in c.rows] == pytest.approx([2 * c.rows[0].p] * 2)
    assert not any(r.significant for r in c.rows)
    assert all(method.startswith("quasi-binomial") for method in c.methods.values())
    assert "2 comparisons, Holm-adjusted over all of them, every metric in one family" in c.summary[0]


def test_compare_with_one_trial_a_side_tests_nothing():
    """One trial per cell in both runs: no trial-to-trial variation to test a change against, as in
    the report. Before, Fisher's test on the pooled sessions called 6/200 vs 30/200 significant."""
    metrics = {"corruption": "proportion"}
    ta = [counts_trial("a", 0, {"corruption": (6, 200)})]
    tb = [counts_trial("b", 0, {"corruption": (30, 200)})]
    c = compare(manifest("a", metrics), ta, manifest("b", metrics), tb)
    (row,) = c.rows
    assert not row.tested and not row.significant and row.p_holm == 1.0
    assert row.diff == pytest.approx(0.12) and row.diff_low is not None and row.diff_low > 0  # described
    assert c.methods["corruption"].startswith("not tested (one trial per cell cannot separate")
    assert "0 comparisons" in c.summary[0]


def test_compare_holm_family_leaves_out_rows_without_a_test():
    """A cell whose metric has no sessions on one side is not a test: it does not widen the family."""
    metrics = {"corruption": "proportion", "errors": "proportion"}
    ta = [counts_trial("a", i, {"corruption": (k, 50), "errors": (0, 0)}) for i, k in enumerate((2, 1, 2, 1))]
    tb = [counts_trial("b", i, {"corruption": (k, 50), "errors": (1, 50)}) for i, k in enumerate((7, 8, 7, 8))]
    c = compare(manifest("a", metrics), ta, manifest("b", metrics), tb)
    rows = {r.metric: r for r in c.rows}
    assert not rows["errors"].tested and rows["errors"].p_holm == 1.0
    assert rows["corruption"].p_holm == pytest.approx(rows["corruption"].p) and rows["corruption"].significant


CELLS_A = [("on", 6), ("on", 7), ("on", 5), ("off", 0), ("off", 1), ("off", 2)]
CELLS_B = [("on", 2), ("on", 4), ("on", 3), ("off", 1), ("off", 0), ("off", 1)]


def test_compare_page_names_the_trial_level_method_and_the_one_family(tmp_path):
    ra = write_run(tmp_path, "a", [trial("a", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_A)])
    rb = write_run(tmp_path, "b", [trial("b", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_B)])
    page = write_comparison_page(ra, rb).path.read_text()
    assert "quasi-binomial, dispersion" in page and "pooled over the cells of both runs" in page
    assert "every metric in one family" in page and "over the cells of each metric" not in page


def test_compare_reports_unmatched_cells_and_ignores_failures(tmp_path, capsys):
    ra = write_run(tmp_path, "a", [trial("a", 0, "on", 6), trial("a", 1, "off", 0)])
    rb = write_run(tmp_path, "b", [trial("b", 0, "on", 5), trial("b", 1, "off", 0, failed=True)])
    assert main(["compare", str(ra), str(rb)]) == 0
    page = (tmp_path / "compare-a-vs-b.html").read_text()
    assert "only in A" in page and "overlap=off" in page
    # one trial a side: corruption has nothing to test a change against, and wall's 1 vs 1 can never
    # be significant, so nothing was tested (it said "No cell differs significantly", over wall alone)
    assert "can be called significant or not: 0 comparisons could be tested" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")


def test_compare_refuses_a_run_compared_with_itself(tmp_path, capsys):
    """The same folder twice, or a copy of the run (the same run id) elsewhere: a page saying "No cell
    differs significantly" would read as tonight matching last night when no new run was made (the
    new-user walk; the dispersion pooled each trial twice). Exit 2, no page written."""
    import shutil

    ra = write_run(tmp_path, "a", [trial("a", 0, "on", 6), trial("a", 1, "off", 0)])
    copy = tmp_path / "elsewhere" / "a"
    shutil.copytree(ra, copy)
    for b in (ra, copy):
        assert main(["compare", str(ra), str(b)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "the same run (a): a run compared with itself differs nowhere" in err and "Traceback" not in err
    assert list(tmp_path.glob("compare-*")) == [] and list(copy.parent.glob("compare-*")) == []


def test_export_of_a_missing_run_is_a_clean_error(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope")]) == 2
    assert "Traceback" not in capsys.readouterr().err


CLASHING = {"value": ["a", "b"], "metric": ["x", "y"], "status": ["s", "t"], "trial": ["1", "2"], "k": ["p", "q"]}


def clashing_run(root: Path) -> Path:
    """A run whose factors are named like the fixed columns, one failed trial with a token in its message."""
    run_dir = root / "clash"
    run_dir.mkdir(parents=True)
    m = manifest("clash").model_copy(update={"factors": CLASHING, "baseline": {f: v[0] for f, v in CLASHING.items()}})
    write_json_atomic(run_dir / "run.json", m)
    with Journal(run_dir / "journal.jsonl") as j:
        for i, pick in enumerate((0, 1)):
            levels = {f: v[pick] for f, v in CLASHING.items()}
            t = trial("clash", i, "on", 6 - 6 * pick).model_copy(update={"levels": levels})
            j.append(t)
        failed = trial("clash", 2, "on", 0, failed=True)
        failure = failed.failure.model_copy(update={"message": "HTTP 401 for Authorization: Bearer abcdefghijk"})
        j.append(failed.model_copy(update={"levels": {f: v[1] for f, v in CLASHING.items()}, "failure": failure}))
    return run_dir


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_factors_named_like_fixed_columns_keep_their_own_namespace(tmp_path, capsys, fmt):
    run = clashing_run(tmp_path)
    assert main(["export", str(run), "--format", fmt]) == 0, capsys.readouterr().err
    path = run / f"clash.{fmt}"
    if fmt == "csv":
        frame = pd.read_csv(path, dtype={f"factor.{f}": str for f in CLASHING})
    elif fmt == "json":
        frame = pd.DataFrame(json.loads(path.read_text()))
    else:
        frame = pd.read_parquet(path)
    assert len(frame.columns) == len(set(frame.columns))
    assert [c for c in frame.columns if c.startswith("factor.")] == [f"factor.{f}" for f in CLASHING]
    assert len(frame) == 5  # 2 completed trials x 2 metrics + the failed one
    row = frame[(frame.trial == 0) & (frame.metric == "corruption")].iloc[0]
    assert (row.value, row.status, row.k) == (0.15, "completed", 6)  # the fixed columns are the measurements
    assert [row[f"factor.{f}"] for f in CLASHING] == [v[0] for v in CLASHING.values()]
    second = frame[(frame.trial == 1) & (frame.metric == "wall")].iloc[0]
    assert (second.value, second["factor.value"], second["factor.status"], second["factor.k"]) == (1.0, "b", "t", "q")
    failed = frame[frame.status == "failed"].iloc[0]
    assert (
        failed.failure == "HTTP 401 for Authorization: Bearer ••••"
        and "abcdefghijk" not in path.read_bytes().decode("utf-8", "replace")
    )


def test_compare_shows_each_runs_cell_with_its_reports_interval():
    """Where trial-to-trial variation cannot be estimated (one trial per cell) a rate's interval is
    widened by the least design effect for the cell's trials, as the run's report widens it. Compare
    took the mean trial of both runs instead: beside a run of 200-session trials, a 40-session
    run's baseline read [7.31%, 36.32%] where its report says [8.20%, 33.49%]."""
    from helpers.report_synth import synthetic_run

    from orchestrator.report.build import build_report

    a = synthetic_run(replicates=1, sessions=40, failures=False, run_id="20260509-070000-a")
    b = synthetic_run(replicates=1, sessions=200, failures=False, run_id="20260509-080000-b", seed=2)
    c = compare(*a, *b)
    assert not c.rows[0].tested  # nothing estimates trial-to-trial variation
    for side, run in (("a", a), ("b", b)):
        report = build_report(*run)
        for cell in report.cells:
            shown = getattr(next(r for r in c.rows if r.cell == cell.cell and r.metric == "corruption"), side).rate
            rate = cell.proportions["corruption"].rate
            assert (shown.low, shown.high) == pytest.approx((rate.low, rate.high), rel=1e-12), (side, cell.cell)


def test_compare_with_nothing_tested_does_not_read_as_no_difference():
    """Every row untested (one trial a side): the summary said "No cell differs significantly ... (0
    comparisons ...)", a null result from no test; as the report does, it says nothing was tested."""
    metrics = {"corruption": "proportion"}
    ta = [counts_trial("a", 0, {"corruption": (6, 200)})]
    tb = [counts_trial("b", 0, {"corruption": (30, 200)})]
    (line,) = compare(manifest("a", metrics), ta, manifest("b", metrics), tb).summary
    assert "differs significantly" not in line and "0 comparisons could be tested" in line
    assert line.endswith("the differences shown are descriptive only.")


def test_compare_marks_a_row_whose_cells_lost_unalike_shares_of_their_trials(tmp_path):
    """B's overlap=off lost 2 of its 4 trials (failed for good), A's none: that row carries the
    report's mark (report.missing), in the model, the summary and the page; a failure retried to
    completion is no loss, and overlap=on (both whole) is unmarked."""
    on_a, on_b = (6, 7, 6, 8), (0, 1, 0, 1)
    a = [trial("a", i, "on", k) for i, k in enumerate(on_a)] + [trial("a", 4 + i, "off", 1) for i in range(4)]
    b = [trial("b", i, "on", k) for i, k in enumerate(on_b)] + [trial("b", 4 + i, "off", 1) for i in range(2)]
    b += [trial("b", 6, "off", 0, failed=True), trial("b", 7, "off", 0, failed=True)]
    b[0] = b[0].model_copy(update={"attempt": 2})  # its first attempt failed and was retried
    b.insert(0, trial("b", 0, "on", 0, failed=True).model_copy(update={"retried": True}))
    c = compare(manifest("a"), a, manifest("b"), b)
    rows = {(r.cell, r.metric): r for r in c.rows}
    expected = "caution: B 2 of 4 finished trials without data, A 0 of 4; compared over completed trials only"
    assert rows[("overlap=off", "corruption")].caution == expected
    assert rows[("overlap=off", "wall")].caution == expected
    assert rows[("overlap=on", "corruption")].caution == "" and rows[("overlap=on", "wall")].caution == ""
    ra, rb = write_run(tmp_path, "a", a), write_run(tmp_path, "b", b)
    assert f"({expected})" in write_comparison_page(ra, rb).path.read_text()


def test_compare_marks_a_significant_row_in_its_summary_line():
    """The row found significant lost unalike shares: its summary line says so too."""
    on_a, on_b, off = (6, 7, 6, 8, 7), (0, 1, 0, 1), (0, 1, 1, 0)
    a = [trial("a", i, "on", k) for i, k in enumerate(on_a)] + [trial("a", 5 + i, "off", k) for i, k in enumerate(off)]
    b = [trial("b", i, "on", k) for i, k in enumerate(on_b)] + [trial("b", 4 + i, "off", k) for i, k in enumerate(off)]
    b += [trial("b", 8, "on", 0, failed=True)]  # B's overlap=on: 1 of 5 lost (20%), A's none
    c = compare(manifest("a"), a, manifest("b"), b)
    [line] = [s for s in c.summary if s.startswith("corruption in overlap=on")]
    assert line.endswith(
        "(caution: B 1 of 5 finished trials without data, A 0 of 5; compared over completed trials only)"
    )


MATRIX = """name: t
factors:
  overlap: {env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}, levels: [on, off]}
baseline: {overlap: on}
repro:
  command: python repro.py --router {router_url} --sessions 40
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\\\d+)/(?P<n>\\\\d+)'}
    wall: {regex: 'wall=(?P<value>[0-9.]+)s', unit: s}
"""


def with_matrix(m: RunManifest, text: str, **update: object) -> RunManifest:
    import hashlib

    return m.model_copy(
        update={"matrix_text": text, "matrix_sha256": hashlib.sha256(text.encode()).hexdigest(), **update}
    )


def test_compare_leaves_out_a_metric_defined_otherwise_and_says_what_else_differed(tmp_path, capsys):
    """B's matrix counts 'ERROR sessions' under the name corruption, runs 8 sessions a trial, on
    another host: its corruption rows compared another measurement (the page named none of it; the
    terminal said only "matrix changed: only the cells both ran are compared"). Now corruption is
    not compared, and every other difference is said above the rows, on the page and the terminal."""
    other = MATRIX.replace("CORRUPTION sessions", "ERROR sessions").replace("--sessions 40", "--sessions 8")
    a = with_matrix(manifest("a"), MATRIX)
    b = with_matrix(manifest("b"), other, testbed="gpu", hosts={"decode": {"host": "10.0.0.7"}})
    ta = [trial("a", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_A)]
    tb = [trial("b", i, lvl, k, n=8) for i, (lvl, k) in enumerate(CELLS_B)]
    c = compare(a, ta, b, tb)
    assert {r.metric for r in c.rows} == {"wall"} and set(c.methods) == {"wall"}
    (left_out, command, testbed, host) = c.differences
    assert left_out.startswith("corruption is not compared: its definition differs (regex 'CORRUPTION sessions: ")
    assert "--sessions 40', B ran 'python repro.py --router {router_url} --sessions 8'" in command
    assert testbed == "A ran on testbed 'tb', B on 'gpu'"
    assert host == "the decode role ran on no host in A, on 'host=10.0.0.7' in B"
    assert compare(a, ta, with_matrix(manifest("b"), MATRIX), tb).differences == ()  # one matrix: nothing said
    ra, rb = (write_run(tmp_path, m.run_id, t) for m, t in ((a, ta), (b, tb)))
    for run, m in ((ra, a), (rb, b)):
        write_json_atomic(run / "run.json", m)
    assert main(["compare", str(ra), str(rb), "-o", str(tmp_path / "c.html")]) == 0
    page = (tmp_path / "c.html").read_text()
    assert page.index('id="unlike"') < page.index('id="summary"') < page.index('id="cells"')
    assert "runs measured another thing under one name" in page and ">corruption<" not in page
    err = capsys.readouterr().err
    assert "corruption is not compared" in err and "only the cells both ran are compared" not in err


def test_compare_of_a_metric_of_another_kind_is_refused_when_nothing_else_is_left(tmp_path, capsys):
    """corruption a proportion in A, a number in B (run.json says so, the matrix text aside): the
    kinds were mixed (B's taken for both), now it is not compared; with no other metric, exit 2
    naming why."""
    a = manifest("a", {"corruption": "proportion"})
    b = manifest("b", {"corruption": "number"})
    ta = [trial("a", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_A)]
    tb = [trial("b", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_B)]
    c = compare(a, ta, b, tb)
    assert c.rows == () and c.unlike.metrics == {"corruption": "a proportion in A, a number in B"}
    ra, rb = (write_run(tmp_path, m.run_id, t) for m, t in ((a, ta), (b, tb)))
    for run, m in ((ra, a), (rb, b)):
        write_json_atomic(run / "run.json", m)
    assert main(["compare", str(ra), str(rb), "-o", str(tmp_path / "c.html")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing to compare: the runs measure no metric in common defined alike" in err, err
    assert "corruption is not compared: its definition differs (a proportion in A, a number in B)" in err
    assert not (tmp_path / "c.html").exists()


def test_compare_says_which_server_build_served_each_run_and_a_level_that_set_other_values():
    """The confounders run.json records outside the factors: the server version that served each
    host's trials (a new sglang build), the units' command lines, a level of one name whose env
    value changed, orch's own version. Each is one line above the rows; none was said."""
    from orchestrator.core.records import ServedGroup
    from orchestrator.report.unlike import unlike

    def served(version: str, exec_sha: str) -> list[ServedGroup]:
        return [
            ServedGroup(
                host="gpu1",
                server_version=version,
                server_info_sha="s",
                exec_start_sha=exec_sha,
                env_sha256="e",
                trials="0-5",
                count=6,
            )
        ]

    var = "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"
    factor = f"  overlap: {{levels: {{on: {{decode: {{{var}: '2'}}}}, off: {{decode: {{{var}: '0'}}}}}}}}"
    edited = "\n".join(factor if line.startswith("  overlap:") else line for line in MATRIX.splitlines())
    a = with_matrix(manifest("a"), MATRIX, served=served("0.5.1", "x1"))
    b = with_matrix(manifest("b"), edited, served=served("0.5.2rc0", "x2"), orch_version="1")
    assert unlike(a, b).context == (
        "a level of one name ran other settings: overlap=on sets 'decode:SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1' in A, "
        "'decode:SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=2' in B",
        "gpu1 served A with server 0.5.1, B with 0.5.2rc0",
        "gpu1's units ran other command lines in A and in B (see each run's report: what served it)",
        "orch 0 ran A, orch 1 ran B (how it judges a trial may differ)",
    )
    assert unlike(a, a).context == () and unlike(a, a).metrics == {}


def test_compare_says_a_number_row_with_too_few_trials_shows_nothing_either_way(tmp_path):
    """wall with 2 trials a side: no Mann-Whitney p can go below 0.19, so its rows' p of 1 and the
    summary's "no cell differs significantly" read as "unchanged" where nothing could be seen. Each
    such row and the summary now say so; with 3 trials a side (ties can give p 0.047) nothing is said."""
    ta = [trial("a", i, lvl, k, wall=1.0 + i) for i, (lvl, k) in enumerate(CELLS_A[:2] + CELLS_A[3:5])]
    tb = [trial("b", i, lvl, k, wall=9.0 + i) for i, (lvl, k) in enumerate(CELLS_B[:2] + CELLS_B[3:5])]
    c = compare(manifest("a"), ta, manifest("b"), tb)
    walls = [r for r in c.rows if r.metric == "wall"]
    assert len(walls) == 2 and all(r.too_few.endswith("2 vs 2, the smallest p possible is 0.19") for r in walls)
    assert not any(r.too_few for r in c.rows if r.metric == "corruption")
    (line,) = c.summary
    assert "No cell differs significantly" in line
    assert line.endswith(
        " 2 comparisons (wall) have too few trials for any difference to reach significance (not counted in the "
        "Holm family): no difference is shown there either way (not evidence that it is unchanged); run more "
        "replicates."
    )
    ra, rb = write_run(tmp_path, "a", ta), write_run(tmp_path, "b", tb)
    assert write_comparison_page(ra, rb).path.read_text().count("not shown (too few trials") == 2
    three = compare(manifest("a"), [trial("a", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_A)],
                    manifest("b"), [trial("b", i, lvl, k) for i, (lvl, k) in enumerate(CELLS_B)])  # fmt: skip
    assert not any(r.too_few for r in three.rows) and "too few" not in three.summary[0]
    assert ranks.mann_whitney([1.0] * 3, [0.0] * 3) < 0.05 < ranks.mann_whitney_min_p(3, 3)


def test_compare_leaves_comparisons_that_cannot_reach_significance_out_of_holm():
    """As the report's family (core.family): a number row with 2 trials a side (smallest p 0.19,
    ties included) can never be significant, so Holm over it only made the proportion row's
    correction stricter (p_holm was twice its p). It is said once, as not counted."""
    metrics = {"corruption": "proportion", "wall": "number"}

    def with_wall(t: TrialRecord, wall: float) -> TrialRecord:
        return t.model_copy(update={"metrics": {**t.metrics, "wall": MetricValue(kind="number", value=wall)}})

    ta = [with_wall(counts_trial("a", i, {"corruption": (k, 50)}), 10.0 + i) for i, k in enumerate((2, 1, 2, 1))]
    tb = [with_wall(counts_trial("b", i, {"corruption": (k, 50)}), 20.0 + i) for i, k in enumerate((4, 4, 4, 4))]
    tb = [
        t if i < 2 else t.model_copy(update={"metrics": {"corruption": t.metrics["corruption"]}})
        for i, t in enumerate(tb)
    ]
    ta = [
        t if i < 2 else t.model_copy(update={"metrics": {"corruption": t.metrics["corruption"]}})
        for i, t in enumerate(ta)
    ]
    c = compare(manifest("a", metrics), ta, manifest("b", metrics), tb)
    rows = {r.metric: r for r in c.rows}
    assert rows["wall"].too_few and rows["wall"].p_holm == 1.0
    assert rows["corruption"].p_holm == pytest.approx(rows["corruption"].p)  # Holm over 1 test, not 2
    assert rows["corruption"].significant  # 0.028: it was 0.33 (Holm's step over the wall row)
    assert "1 comparison (wall) has too few trials" in c.summary[0], c.summary
    assert "(not counted in the Holm family)" in c.summary[0], c.summary
