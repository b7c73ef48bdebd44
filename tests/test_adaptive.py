"""Adaptive stopping in the runner's step source: which trials are handed out, and when a cell
stops (pure: fake trial records, no servers)."""

from __future__ import annotations

import pytest
from helpers.adaptive_runs import MATRIX, REPO, drive, plan_of, record

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.records import EventRecord, MetricValue, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.sweep.adaptive import AdaptiveSource


def test_baseline_runs_twice_per_round(tmp_path):
    _, plan = plan_of(tmp_path)
    for r in range(8):
        in_round = [s for s in plan.steps if s.trial.round == r]
        assert sum(s.trial.is_baseline for s in in_round) == 2 and len(in_round) == 5


def test_clean_cells_stop_early_against_a_broken_baseline(tmp_path):
    m, plan = plan_of(tmp_path)
    decided = {}
    source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.setdefault(c, d))
    ran = drive(source, lambda s: 2 if s.trial.is_baseline else 0)  # baseline 20%, cells 0%
    assert set(decided) == {s.trial.cell.id for s in plan.steps if not s.trial.is_baseline}
    assert all(d.state == "different" for d in decided.values())
    assert len(ran) < len(plan.steps) / 2  # well under half the planned trials
    assert "decided different" in next(iter(decided.values())).reason
    # nothing runs after its cell was decided, and the baseline stops when every cell is decided
    last_round = max(s.trial.round for s in ran)
    assert not [s for s in ran if s.trial.round > last_round]


def test_remaining_shrinks_as_cells_are_decided(tmp_path):
    """What the progress bar is told after each trial: trials not handed out yet whose cell
    is still open (and the baseline's while any is). Cells with overlap off are clean against a
    20% baseline and get decided; overlap=on,cuda_graph=off matches the baseline and stays open."""
    m, plan = plan_of(tmp_path)
    decided = []
    source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.append(c))
    assert source.shrinks and source.remaining() == len(plan.steps) == 40

    def k(step) -> int:
        return 0 if "overlap=off" in step.trial.cell.id else 2

    handed = []
    while not decided:
        handed.append(source.next())
        source.record(record(handed[-1], k(handed[-1])))
        left = source.remaining()
    assert sorted(decided) == ["overlap=off,cuda_graph=off", "overlap=off,cuda_graph=on"]
    rounds_left = 8 - (handed[-1].trial.round + 1)  # the round just finished, then the rest
    assert left == rounds_left * 3  # per round: the open cell and the baseline's two trials
    ran = drive(source, k)
    assert len(ran) == left and source.remaining() == 0


def test_equal_cells_are_called_no_difference_or_run_to_the_end(tmp_path):
    m, plan = plan_of(tmp_path)
    decided = {}
    source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.setdefault(c, d))
    drive(source, lambda s: 0)  # A/A at 0%: nothing differs
    assert all(d.state == "no_difference" for d in decided.values())


def test_resume_rebuilds_the_same_decisions_from_the_journal(tmp_path):
    m, plan = plan_of(tmp_path)
    first = AdaptiveSource(plan.steps, set(), m)
    ran = drive(first, lambda s: 2 if s.trial.is_baseline else 0)
    prior = [record(s, 2 if s.trial.is_baseline else 0) for s in ran]
    again = AdaptiveSource(plan.steps, {s.trial.index for s in ran}, m, prior=prior)
    assert again.next() is None  # everything left is decided: nothing to rerun
    assert set(again.closed) == set(first.closed)


def test_adaptive_needs_a_proportion_metric_and_rounds(tmp_path):
    with pytest.raises(ConfigError, match="'wall' is not a proportion metric"):
        plan_of(tmp_path, MATRIX.replace("metric: corruption", "metric: wall"))
    with pytest.raises(ConfigError, match="adaptive stopping needs replicates >= 2"):
        plan_of(tmp_path, MATRIX.replace("replicates: 8", "replicates: 1"))


def test_report_sentences_for_decisions_and_testbeds():
    from orchestrator.core.records import EventRecord
    from orchestrator.report.build import adaptive_findings, testbed_findings

    events = [
        EventRecord(
            run_id="r",
            event="cell_decided",
            at="t",
            cell="overlap=off",
            state="different",
            message="stopped after 3 rounds (30 sessions): cell 0/30 vs baseline 7/30 decided different",
        )
    ]
    [finding] = adaptive_findings(events * 2)  # a resume repeats a decision: said once
    assert "overlap=off ran no more trials" in finding.text and "0/30 vs baseline 7/30" in finding.text

    def rec(tb: str, k: int, i: int) -> TrialRecord:
        return TrialRecord(
            run_id="r",
            trial=i,
            round=0,
            cell="c=a",
            levels={"c": "a"},
            testbed=tb,
            status="completed",
            started="x",
            ended="y",
            duration_s=1.0,
            metrics={"corruption": MetricValue(kind="proportion", k=k, n=40)},
        )

    same = testbed_findings([rec("tb1", 6, 0), rec("tb2", 5, 1)], "corruption")
    assert same[0].kind == "info" and "agree" in same[0].text
    assert same[0].text.startswith(
        "Testbeds tb1, tb2 were not shown to differ: no cell's corruption differs significantly"
    )
    differ = testbed_findings([rec("tb1", 20, 0), rec("tb2", 0, 1)], "corruption")
    assert differ[0].kind == "caution" and "tb1 20/40, tb2 0/40" in differ[0].text
    assert testbed_findings([rec("tb1", 1, 0)], "corruption") == []  # one testbed: nothing to say


def test_a_one_sided_question_reaches_the_policy_and_its_words(tmp_path):
    m, plan = plan_of(tmp_path, MATRIX.replace("baseline_runs: 2}", "baseline_runs: 2, direction: lower}"))
    assert m.adaptive.direction == "lower"
    decided = {}
    source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.setdefault(c, d))
    assert source.policy.direction == "lower"
    drive(source, lambda s: 0 if s.trial.is_baseline else 6)  # cells 60% above a clean baseline
    assert decided and all(d.state == "no_difference" and "decided no drop" in d.reason for d in decided.values())


def test_an_unknown_direction_is_a_config_error_with_its_line(tmp_path):
    with pytest.raises(ConfigError) as caught:
        plan_of(tmp_path, MATRIX.replace("baseline_runs: 2}", "baseline_runs: 2, direction: down}"))
    assert caught.value.line == 11 and "adaptive.direction" in str(caught.value)
    assert "lower" in str(caught.value)


def test_report_summary_of_the_sequential_decisions():
    from orchestrator.core.records import EventRecord
    from orchestrator.report.build import adaptive_summary

    def decided(cell: str, state: str, message: str) -> EventRecord:
        return EventRecord(run_id="r", event="cell_decided", at="t", cell=cell, state=state, message=message)

    low = (
        "stopped after 3 rounds (30 sessions): cell 0/30 vs baseline 5/30 decided different "
        "(cell lower; e-value 25 >= 20)"
    )
    high = low.replace("cell lower", "cell higher")
    same = "stopped after 3 rounds (30 sessions): cell 0/30 vs baseline 0/30 decided no drop (difference 0%; ...)"
    assert adaptive_summary([], 7, "corruption") is None
    one_way = adaptive_summary(
        [decided("a=off", "different", low), decided("b=off", "different", low), decided("a=off", "different", low)],
        3,
        "corruption",
    )
    assert one_way is not None and one_way.kind == "info"  # per-comparison alpha, no correction: not a finding
    assert one_way.text.startswith(
        "Adaptive stopping in corruption: 2 of 3 cells decided lower than the "
        "baseline: a=off and b=off; 1 ran every round undecided"
    )
    assert "anytime-valid" in one_way.text and "fixed analysis below" in one_way.text
    mixed = adaptive_summary(
        [
            decided("a=off", "different", low),
            decided("b=off", "different", high),
            decided("c=off", "no_difference", same),
        ],
        3,
        "corruption",
    )
    assert mixed is not None
    assert (
        "2 of 3 cells decided different from the baseline (either way): a=off and b=off; "
        "1 decided without the difference asked about: c=off." in mixed.text
    )
    assert "undecided" not in mixed.text


def test_no_cell_is_decided_on_one_round_and_varying_trials_slow_the_decision(tmp_path):
    """The trial is the unit: a cell is decided only with two paired rounds behind it, and when
    the baseline's trials vary far beyond the binomial (0, 10, 0, 10 of 10 in turn) the sessions
    weigh less, so the same clean cells take more rounds than against a steady baseline."""

    def rounds_to_decide(baseline_k) -> dict[str, int]:
        m, plan = plan_of(tmp_path)
        decided: dict[str, int] = {}
        source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.setdefault(c, d.rounds))
        drive(source, lambda s: baseline_k(s) if s.trial.is_baseline else 0)
        return decided

    steady = rounds_to_decide(lambda s: 5)  # 50% every trial
    wild = rounds_to_decide(lambda s: 10 * (s.trial.index % 2))  # 0% or 100% by trial: same mean
    assert steady and min(steady.values()) == 2  # 0/10 vs 10/20 would decide after one round: it waits
    assert all(wild.get(cell, 9) > rounds for cell, rounds in steady.items())


def test_each_cells_stopping_sentence_says_its_decision_is_not_a_corrected_finding():
    """The per-cell sentence ('... ran no more trials after its comparison with the baseline was
    decided (different): ... decided different') stood at the end of the headline, far from the summary
    that says the stopping rule's decisions are per comparison and not corrected across cells: read
    alone, it called a difference with no correction and no label."""
    from orchestrator.core.records import EventRecord
    from orchestrator.report.build import adaptive_findings

    message = "stopped after 3 rounds (30 sessions): cell 0/30 vs baseline 7/30 decided different"
    event = EventRecord(
        run_id="r", event="cell_decided", at="t", cell="overlap=off", state="different", message=message
    )
    [finding] = adaptive_findings([event])
    assert finding.kind == "info" and "not corrected across cells" in finding.text and "not a finding" in finding.text


def test_report_gives_stopped_cells_an_anytime_interval_and_says_why(tmp_path):
    """The cells the rule stopped early (overlap off: clean against a 20% baseline) ran fewer
    trials than planned, on their own data: the report's interval for their rate is the anytime-
    valid one (clustered.stopped_rate), marked on the page with a note naming them; the cells that
    ran every round keep the fixed-sample interval (clustered.widened_rate)."""
    from orchestrator.core import clustered
    from orchestrator.report.build import build_report, stopped_note
    from orchestrator.report.render import render_report
    from orchestrator.store.planrecord import make_manifest

    m, plan = plan_of(tmp_path)
    source = AdaptiveSource(plan.steps, set(), m)
    ran = drive(source, lambda s: 0 if "overlap=off" in s.trial.cell.id else 2)
    records = [record(s, 0 if "overlap=off" in s.trial.cell.id else 2) for s in ran]
    inventory = read_inventory(REPO / "inventory/local.yaml")
    manifest = make_manifest(plan, inventory, "r", "x").model_copy(update={"status": "completed", "ended": "y"})
    report = build_report(manifest, records)
    stopped = {c.cell for c in report.cells if c.completed < (c.planned or 0)}
    assert stopped == {"overlap=off,cuda_graph=off", "overlap=off,cuda_graph=on"}
    for c in report.cells:
        view = c.proportions["corruption"]
        args = (view.rate.k, view.rate.n, report_dispersion(records), view.trials)
        expected = clustered.stopped_rate(*args) if c.cell in stopped else clustered.widened_rate(*args)
        assert view.stopped == (c.cell in stopped)
        assert (view.rate.low, view.rate.high) == pytest.approx((expected.low, expected.high))
        if c.cell in stopped:  # 0/30: the fixed-sample interval would claim a tighter bound
            assert view.rate.high > clustered.widened_rate(*args).high
    note = stopped_note(report)
    assert note.startswith("Stopped early (2 of 4 cells: overlap=off,cuda_graph=on and overlap=off,cuda_graph=off)")
    assert "anytime-valid" in note
    page = render_report(report)
    assert page.count("(stopped early: anytime-valid interval)") == 2 and note in page
    fixed = build_report(manifest.model_copy(update={"adaptive": False}), records)  # not an adaptive run
    assert not any(c.proportions["corruption"].stopped for c in fixed.cells) and stopped_note(fixed) == ""


def report_dispersion(records: list[TrialRecord]):
    """The pooled trial-to-trial spread the report estimates (every cell's trials, in order)."""
    from orchestrator.core import clustered

    by_cell: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        m = r.metrics["corruption"]
        by_cell.setdefault(r.cell, []).append((m.k or 0, m.n or 0))
    return clustered.dispersion(list(by_cell.values()))


def test_findings_after_a_stop_say_the_correction_that_allows_for_it(tmp_path):
    """The fixed analysis' p-values assume rounds fixed in advance; after a rule stopped cells on
    their data its tests comparing them are also read off the anytime-valid intervals (report.stopped;
    A/A: a finding in 6% of runs without it, bench_adaptive_honesty). The headline says which
    correction the findings survived, after the sequential summary; not when no cell was decided
    (every cell ran its rounds: a fixed design), nor when the page names no finding."""
    from orchestrator.report import stopped
    from orchestrator.report.build import adaptive_caution, build_report, names_a_finding, with_adaptive_facts
    from orchestrator.store.planrecord import make_manifest

    m, plan = plan_of(tmp_path)
    decided: list[EventRecord] = []

    def journal(cell: str, d) -> None:
        decided.append(
            EventRecord(run_id="r", event="cell_decided", at="t", message=d.reason, cell=cell, state=d.state)
        )

    source = AdaptiveSource(plan.steps, set(), m, on_decision=journal)
    ran = drive(source, lambda s: 0 if "overlap=off" in s.trial.cell.id else 3)
    records = [record(s, 0 if "overlap=off" in s.trial.cell.id else 3) for s in ran]
    inventory = read_inventory(REPO / "inventory/local.yaml")
    manifest = make_manifest(plan, inventory, "r", "x").model_copy(update={"status": "completed", "ended": "y"})
    report = build_report(manifest, records)
    assert decided and names_a_finding(report)  # the clean cells differ from the 30% baseline
    headline = with_adaptive_facts(report, decided).headline
    assert headline[0].text.startswith("Adaptive stopping in corruption") and headline[1].kind == "info"
    assert "anytime-valid 95% intervals" in headline[1].text and "allow for the stopping" in headline[1].text
    assert report.policy.endswith(stopped.POLICY)  # the correction the Holm family was read with
    assert headline[2 : 2 + len(report.headline)] == report.headline
    assert adaptive_caution(report, []) is None  # nothing decided: nothing stopped on its data
    quiet = report.model_copy(
        update={
            "headline": [f for f in report.headline if f.kind != "finding"],
            "cells": [c.model_copy(update={"proportions": {}}) for c in report.cells],
            "effects": [], "interactions": [], "neighbours": [],
        }
    )  # fmt: skip
    assert not names_a_finding(quiet) and adaptive_caution(quiet, decided) is None


# A/A at 15% (bench_adaptive_honesty's run 209 of `A/A 15%, ICC 0.03, lower`): k of 10 per round. The
# bf16_index_k=off cells stopped early ("no drop") on high early rounds; the others ran all 8 rounds.
STOPPED_HIGH = {
    "bf16_index_k=on,cuda_graph=on,overlap=on": [2, 0, 1, 2, 1, 2, 0, 1],
    "bf16_index_k=on,cuda_graph=on,overlap=off": [1, 3, 1, 0, 1, 1, 0, 2],
    "bf16_index_k=on,cuda_graph=off,overlap=on": [0, 1, 1, 4, 1, 2, 2],
    "bf16_index_k=on,cuda_graph=off,overlap=off": [1, 1, 3, 0, 0, 2, 0, 2],
    "bf16_index_k=off,cuda_graph=on,overlap=on": [4, 1, 0, 2, 3],
    "bf16_index_k=off,cuda_graph=on,overlap=off": [3, 3, 5],
    "bf16_index_k=off,cuda_graph=off,overlap=on": [3, 3, 2],
    "bf16_index_k=off,cuda_graph=off,overlap=off": [1, 4, 0, 2, 1, 2, 1, 4],
}


def test_a_factor_effect_between_cells_stopped_high_and_cells_run_on_is_no_finding_after_the_stop():
    """Every cell at the same rate; three bf16_index_k=off cells stopped after 3-5 rounds that ran
    high. The fixed analysis of these trials calls bf16_index_k's main effect a finding (as it
    would, rightly, had the rounds been fixed in advance: the same data as a non-adaptive run); the
    adaptive run's report reads each test comparing a stopped cell off the anytime-valid intervals
    too (report.stopped), names nothing, and its policy says the correction."""
    from orchestrator.report import stopped
    from orchestrator.report.build import build_report, names_a_finding
    from orchestrator.store.planrecord import make_manifest

    matrix = read_matrix(REPO / "matrices/overlap_hunt.yaml")
    plan = make_plan(matrix, read_inventory(REPO / "inventory/local.yaml").testbed(None), seed=1)
    records = []
    for step in plan.steps:
        ks = STOPPED_HIGH[step.trial.cell.id]
        if step.trial.round < len(ks):
            records.append(record(step, ks[step.trial.round]))
    manifest = make_manifest(plan, read_inventory(REPO / "inventory/local.yaml"), "r", "x")
    adaptive = manifest.model_copy(
        update={"metrics": {"corruption": "proportion"}, "adaptive": True, "status": "completed", "ended": "y"}
    )
    fixed = build_report(adaptive.model_copy(update={"adaptive": False}), records)
    effect = next(e for e in fixed.effects if e.factor == "bf16_index_k" and not e.given)
    assert effect.finding and effect.p_holm < 0.05 and fixed.policy and stopped.POLICY not in fixed.policy
    report = build_report(adaptive, records)
    assert {c.cell for c in report.cells if c.proportions["corruption"].stopped} == {
        c for c, ks in STOPPED_HIGH.items() if len(ks) < 8
    }
    after = next(e for e in report.effects if e.factor == "bf16_index_k" and not e.given)
    assert after.p > effect.p and after.p_holm >= 0.05 and not after.finding
    assert after.low <= effect.low and after.high >= effect.high  # the hull of both readings
    assert not names_a_finding(report)
    assert report.policy.endswith(stopped.POLICY) and "anytime-valid" in stopped.POLICY


def test_a_wall_driven_by_the_failures_of_cells_stopped_high_is_no_finding_after_the_stop():
    """The rule stops on the proportion; a number metric of the same trials is tested unchanged
    (report.stopped's docstring). Its worst case: STOPPED_HIGH's run, each trial's wall rising with
    its own failures (a shared trial effect, rank correlation 1). The wall's bf16_index_k effect
    leans the way the stops left the rates (raw p 0.017: ranks of 51 trials, the trial the unit),
    and stays far from a finding once Holm counts it with the report's every other test, adaptive
    or not: the number tests are the same in both readings. bench_adaptive_numbers.py measures it:
    A/A wall findings after a stop at or below the fixed design's at trial correlation 0-0.9."""
    from orchestrator.report.build import build_report, names_a_finding
    from orchestrator.store.planrecord import make_manifest

    inventory = read_inventory(REPO / "inventory/local.yaml")
    plan = make_plan(read_matrix(REPO / "matrices/overlap_hunt.yaml"), inventory.testbed(None), seed=1)
    records = []
    for step in plan.steps:
        ks = STOPPED_HIGH[step.trial.cell.id]
        if step.trial.round < len(ks):
            made = record(step, ks[step.trial.round])
            wall = MetricValue(kind="number", value=30.0 + 3.0 * ks[step.trial.round] + 0.01 * step.trial.index)
            records.append(made.model_copy(update={"metrics": {**made.metrics, "wall": wall}}))
    manifest = make_manifest(plan, inventory, "r", "x").model_copy(
        update={"metrics": {"corruption": "proportion", "wall": "number"}, "status": "completed", "ended": "y"}
    )
    adaptive = build_report(manifest.model_copy(update={"adaptive": True}), records)
    fixed = build_report(manifest.model_copy(update={"adaptive": False}), records)
    effect = next(e for e in adaptive.number_effects if e.factor == "bf16_index_k")
    assert effect.stratified and effect.shift > 0 and 0.01 < effect.p < 0.05  # leans, as the stops left it
    assert effect.p_holm > 0.5 and not effect.finding  # one family with the proportion tests
    assert not any(c.numbers["wall"].significant for c in adaptive.cells) and not names_a_finding(adaptive)
    assert [e.p for e in fixed.number_effects] == [e.p for e in adaptive.number_effects]
    assert [c.numbers["wall"].p for c in fixed.cells] == [c.numbers["wall"].p for c in adaptive.cells]


def _rounds_handed_out(source: AdaptiveSource, plan, rounds: int) -> list:  # type: ignore[no-untyped-def]
    """The steps of the first `rounds` rounds, handed out and not recorded yet."""
    count = sum(1 for s in plan.steps if s.trial.round < rounds)
    steps = [source.next() for _ in range(count)]
    assert all(s is not None and s.trial.round < rounds for s in steps)
    return steps


@pytest.mark.parametrize("closed", [False, True])
def test_a_closed_source_decides_nothing_on_the_trials_recorded_after(tmp_path, closed: bool) -> None:
    """close() (the sweep is stopping): a round it cut short is never complete, so a trial recorded
    after it (a parallel testbed finishing) decides nothing; open, the same trial decides."""
    m, plan = plan_of(tmp_path)
    reference = AdaptiveSource(plan.steps, set(), m)
    drive(reference, lambda s: 2 if s.trial.is_baseline else 0)
    first = min(reference.stopped_at.values())  # the first boundary that decides a cell
    decided: list[str] = []
    source = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: decided.append(c))
    steps = _rounds_handed_out(source, plan, first)
    for step in steps[:-1]:
        source.record(record(step, 2 if step.trial.is_baseline else 0))
    assert decided == []  # the last round before it is not whole yet
    if closed:
        source.close()
    source.record(record(steps[-1], 2 if steps[-1].trial.is_baseline else 0))  # decided here, when known
    assert (decided == []) is closed and (source.closed == {}) is closed
    if closed:
        assert source.next() is None and source.remaining() == 0  # and nothing more is handed out


def test_only_a_journaled_decision_of_a_cell_of_this_plan_is_adopted_once(tmp_path) -> None:
    m, plan = plan_of(tmp_path)
    cell = next(s.trial.cell.id for s in plan.steps if not s.trial.is_baseline)

    def event(kind: str, on: str | None, state: str, rounds: int) -> EventRecord:
        message = f"stopped after {rounds} rounds: decided {state}"
        return EventRecord(run_id="r", event=kind, at="t", cell=on, state=state, message=message)

    ignored = [event("run_started", cell, "different", 3), event("cell_decided", None, "different", 3),
               event("cell_decided", "nosuch=cell", "different", 3)]  # fmt: skip
    assert AdaptiveSource(plan.steps, set(), m, decided=ignored).closed == {}
    twice = [event("cell_decided", cell, "different", 3), event("cell_decided", cell, "no_difference", 5)]
    closed = AdaptiveSource(plan.steps, set(), m, decided=twice).closed
    assert list(closed) == [cell] and (closed[cell].state, closed[cell].rounds) == ("different", 3)


def test_the_spread_counts_no_trial_of_a_later_round_or_of_a_cell_stopped_before_it(tmp_path) -> None:
    """The variance inflation at a boundary pools the trials of the rounds before it, leaving out
    a stopped cell's trials from its stop on (a parallel testbed ran them meanwhile)."""
    from orchestrator.core.clustered import dispersion

    m, plan = plan_of(tmp_path)
    source = AdaptiveSource(plan.steps, set(), m)
    source.trials = {
        0: ("a", 0, 1, 10), 1: ("a", 1, 5, 10), 2: ("a", 2, 9, 10),  # a stopped at boundary 2
        3: ("b", 0, 2, 10), 4: ("b", 1, 2, 10), 5: ("b", 2, 8, 10), 6: ("b", 3, 0, 10),
    }  # fmt: skip
    source.stopped_at = {"a": 2}
    expected = dispersion([[(1, 10), (5, 10)], [(2, 10), (2, 10), (8, 10)]]).inflation()
    assert source._inflation(3) == expected


def test_a_failed_trial_or_one_without_the_metric_counts_for_no_decision(tmp_path) -> None:
    m, plan = plan_of(tmp_path)
    source = AdaptiveSource(plan.steps, set(), m)
    step = source.next()
    assert step is not None
    failed = record(step, 3).model_copy(update={"status": "failed"})
    source.record(failed)
    without = record(step, 3).model_copy(update={"metrics": {}})
    source.record(without)
    assert source.counts == {} and source.trials == {}
    source.record(record(step, 3))
    assert source.counts == {(step.trial.cell.id, step.trial.round): [3, 10]}


def test_a_journaled_decision_without_its_rounds_in_words_is_adopted_at_0_rounds(tmp_path) -> None:
    m, plan = plan_of(tmp_path)
    cell = next(s.trial.cell.id for s in plan.steps if not s.trial.is_baseline)
    event = EventRecord(run_id="r", event="cell_decided", at="t", cell=cell, state="no_difference", message="old")
    decision = AdaptiveSource(plan.steps, set(), m, decided=[event]).closed[cell]
    assert (decision.state, decision.rounds, decision.reason) == ("no_difference", 0, "old")
