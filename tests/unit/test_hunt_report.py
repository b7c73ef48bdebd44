"""The hunt page's intervals treat the trial, not the session, as the unit of replication (as the
main report does): a configuration whose trials disagree gets a wider interval than Wilson's on
its pooled sessions, and the page says which interval it shows. And the report never says more
than the data: culprits and dependencies are facts only once the hunt found them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.hunt import Culprit, Hunt
from orchestrator.core.huntplan import hunt_plan
from orchestrator.core.huntreplay import settings_of, stopped
from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord, MetricValue, RunManifest, TrialRecord
from orchestrator.core.stats import wilson_interval
from orchestrator.errors import ConfigError
from orchestrator.report import hunt as hunt_module
from orchestrator.report.hunt import HuntReport, build_report, hunt_report, render, summary_lines, trial_counts
from orchestrator.report.render import load_report
from orchestrator.store.journal import Journal
from orchestrator.store.manifest import save_manifest
from orchestrator.store.planrecord import make_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep import api
from orchestrator.sweep.hunt import HuntSource

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


AND3 = ("bf16_index_k", "cuda_graph", "overlap")
BARE = ("changes nothing unless", "alone causes the failure", "either cause suffices", "fails too")
STAMP = "2026-12-01T00:00:00.000Z"


def five_trials(m: Matrix) -> list[TrialRecord]:
    """A hunt interrupted after its endpoints and three drops: posterior ~0.02, far from an answer."""
    records = [trial(m, 0, FULL, 3), trial(m, 1, 0, 0), trial(m, 2, FULL ^ 1, 0), trial(m, 3, FULL ^ 2, 0)]
    return records + [trial(m, 4, FULL ^ 4, 2)]


def hunted(m: Matrix, truth: int, budget: int | None = None) -> HuntReport:
    """A hunt driven to its end against a deterministic oracle (culprit set `truth`, 15% / 0.5%)."""
    assert m.hunt is not None
    spec = m.hunt if budget is None else dataclasses.replace(m.hunt, max_sessions=budget)
    hunt, records, step = Hunt(settings_of(spec)), [], 0
    while (x := hunt.propose()) is not None:
        step += 1
        k = int(step % 7 == 0) if x & truth != truth else (3 if step % 2 else 2)
        hunt.observe(x, k, 20)
        records.append(trial(m, len(records), x, k))
    return build_report(dataclasses.replace(m, hunt=spec), records)


def said(report: HuntReport) -> str:
    return "\n".join(summary_lines(report)) + render(report)


def test_a_failing_configuration_that_never_failed_has_no_culprit_and_no_claim_about_the_clean_one() -> None:
    m = matrix()
    records = [trial(m, 0, 0, 0)] + [trial(m, 1 + i, FULL ^ (1 << i), 0) for i in range(16)]
    records += [trial(m, 17 + i, FULL, 0) for i in range(20)]  # 0/400: the failing one never failed
    report = build_report(m, records)
    assert report.result.state == "not_failing"
    lines, page = summary_lines(report), render(report)
    assert "fails too" not in said(report) and "does not need the suspect flags" not in said(report)
    full, clean = report.tried(FULL), report.tried(0)
    assert full is not None and clean is not None
    assert lines[1:5] == [
        "no culprit: the failing configuration did not confirm the failure: the suspect flags have nothing to explain",
        f"  the failing configuration: 0/400 sessions failed ({full.verdict})",
        f"  the all-clean configuration: 0/20 sessions failed ({clean.verdict})",
        "  what to check: the failing levels (hunt.failing, else each factor's first level) are the failing "
        "deployment's, and the repro's metric 'corruption' counts its failures (run the repro by hand "
        "against it); a hunt gives the failing configuration 400 sessions to show 2 failures",
    ], lines
    assert not any(line.startswith("culprit:") for line in lines), lines
    assert "culprit set:" not in page and "<h3>Dependencies</h3>" not in page and "Minimal reproducer" not in page


def test_an_unfinished_hunt_states_its_likeliest_set_as_a_condition_not_a_finding() -> None:
    m = matrix()
    report = build_report(m, five_trials(m))
    assert report.result.state == "running" and report.result.best.probability < 0.95
    lines = summary_lines(report)
    assert lines[0] == "hunt running: no stopping rule met yet", lines
    assert re.fullmatch(r"culprit: .+ \(posterior 0\.\d+ < target 0\.95; likeliest so far, not established\)", lines[1])
    assert not [line for line in lines if any(b in line for b in BARE)], lines
    assert any(line.startswith("  if so, ") and " would " in line for line in lines), lines
    assert "Likeliest culprit set so far" in render(report) and "Most probable" not in render(report)


def test_a_hunt_stopped_by_the_end_of_its_run_reads_as_stopped_before_an_answer(tmp_path: Path) -> None:
    """The report learns that the run ended from run.json and why from the journal's last
    run_interrupted event: "hunt running: running" was printed for a run that had stopped."""
    m = matrix()
    save_manifest(tmp_path, interrupted_manifest(m))
    journal = Journal(RunDir(tmp_path).journal)
    for r in [EventRecord(run_id="h", event="run_started", at=STAMP), *five_trials(m)]:
        journal.append(r)
    journal.append(EventRecord(run_id="h", event="run_interrupted", at=STAMP, message="deadline reached"))
    journal.close()
    report = hunt_report(tmp_path)
    assert report is not None
    lines = summary_lines(report)
    assert lines[0] == "hunt stopped before an answer: deadline reached; no stopping rule was met", lines
    assert "<b>stopped before an answer</b>: deadline reached" in render(report)
    assert not [line for line in lines if any(b in line for b in BARE)], lines


def interrupted_manifest(m: Matrix) -> RunManifest:
    """run.json of a hunt whose run ended before the hunt did (status interrupted)."""
    return RunManifest(
        run_id="h", name=m.name, orch_version="0", matrix_path=str(m.path), matrix_text=m.text,
        matrix_sha256="x", inventory_path="i.yaml", inventory_text="", inventory_sha256="y", testbed="local",
        seed=1, order="randomized", replicates=1, factors={}, baseline={}, metrics={"corruption": "proportion"},
        started=STAMP, ended=STAMP, status="interrupted",
    )  # fmt: skip


def test_a_budget_stopped_hunt_states_no_dependency_as_a_fact() -> None:
    m = matrix()
    assert m.hunt is not None
    report = hunted(m, sum(1 << m.hunt.flags.index(f) for f in AND3), budget=400)
    assert report.result.state == "budget", report.result.reason
    page = render(report)
    deps = page[page.index("<h3>Dependencies</h3>") : page.index("<h2>Minimal reproducer</h2>")]
    assert not any(b in deps for b in BARE), deps
    assert "if so, " in deps and "Of the likeliest culprit set so far (not established)" in page
    assert "; likeliest so far, not established)" in summary_lines(report)[1]


def test_a_found_hunt_states_its_dependencies_as_facts() -> None:
    m = matrix()
    assert m.hunt is not None
    report = hunted(m, sum(1 << m.hunt.flags.index(f) for f in AND3))
    assert report.result.state == "found", report.result.reason
    lines = summary_lines(report)
    assert lines[0].startswith("hunt found: ") and re.fullmatch(r"culprit: .+ \(posterior (?:> )?[0-9.]+\)", lines[1])
    assert lines[1].startswith("culprit: bf16_index_k AND cuda_graph AND overlap (posterior"), lines
    inferred = " (the model's inference from the answer, not tested in every configuration)"
    assert "  overlap changes nothing unless bf16_index_k and cuda_graph are on" + inferred in lines, lines
    assert "Most probable culprit set" in render(report) and "not established" not in said(report)


def test_no_flag_explains_it_only_when_the_clean_configuration_failed_on_its_own_trials() -> None:
    m = matrix()
    none = Culprit((), 0.97)
    for clean_k, stated in ((6, True), (0, False)):
        records = [trial(m, 0, FULL, 5), *(trial(m, 1 + i, 0, clean_k) for i in range(4))]
        report = build_report(m, records)
        found = dataclasses.replace(report.result, state="found", top=(none,))
        lines = summary_lines(dataclasses.replace(report, result=found))
        claim = "the failure does not need the suspect flags: the all-clean configuration fails too"
        rate = "whether they change its rate is a matrix's question, not a hunt's (the failing configuration: 5/20)"
        assert (f"  {claim} (24/80 sessions failed); {rate}" in lines) is stated, lines
        assert not [line for line in lines if "does not depend" in line], lines  # the data show no such thing
        assert stated or not [line for line in lines if "fails too" in line], lines
        assert stated or "  the all-clean configuration: 0/80 sessions failed (passes)" in lines, lines


def _hunt_run(tmp_path: Path, m: Matrix, extra: list[TrialRecord]) -> Path:
    """An interrupted hunt's run folder: five finished trials, then `extra`, then the interrupt."""
    save_manifest(tmp_path, interrupted_manifest(m))
    with Journal(RunDir(tmp_path).journal) as journal:
        for r in [EventRecord(run_id="h", event="run_started", at=STAMP), *five_trials(m), *extra]:
            journal.append(r)
        journal.append(EventRecord(run_id="h", event="run_interrupted", at=STAMP, message="killed"))
    return tmp_path


def test_the_report_and_resume_replay_the_same_records_of_a_trial_cut_off_during_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial 5's attempt 1 failed and was journaled `retried`; the controller died during attempt 2.
    Resume's replay leaves the trial out (it runs it again) but the hunt report replayed "the last
    finished record of each trial", so it counted a trial that gave no data, and resume numbered
    its next trial 5 again. Both now read the journal by store.runtrials' rule."""
    m = matrix()
    cut = trial(m, 5, FULL ^ 8, 0, status="failed").model_copy(update={"retried": True})
    run = _hunt_run(tmp_path, m, [cut])
    replayed: list[list[TrialRecord]] = []

    def spy(matrix: Matrix, records: list[TrialRecord]) -> Hunt:
        replayed.append(list(records))
        return stopped(matrix, records)

    monkeypatch.setattr(hunt_module, "stopped", spy)
    report = hunt_report(run)
    assert report is not None and report.ended == "killed"
    resumed = api._journaled(run)
    prior = list(resumed.records())
    assert replayed == [prior] and [r.trial for r in prior] == [0, 1, 2, 3, 4]
    source = api._design(SimpleNamespace(matrix=m), set(), resumed)(None)  # type: ignore[arg-type]
    assert isinstance(source, HuntSource) and source.index == 6  # after every trial the journal holds
    assert source.hunt.empty == 0 and source.hunt.trials == 5


@pytest.mark.parametrize("reader", ["report", "resume"])
def test_a_damaged_hunt_journal_is_refused_at_its_line(tmp_path: Path, reader: str) -> None:
    """A completed trial journaled twice (line 7 repeats line 3): the hunt report and resume's
    replay took the last copy as the trial's; both refuse it now, as the run's report does."""
    m = matrix()
    run = _hunt_run(tmp_path, m, [five_trials(m)[1]])
    with pytest.raises(ConfigError) as caught:
        hunt_report(run) if reader == "report" else api._journaled(run)
    assert caught.value.line == 7 and "trial 1 attempt 1 finished twice (also line 3)" in str(caught.value)


def test_a_hunt_whose_failing_configuration_needed_a_second_trial_is_no_damage(tmp_path: Path) -> None:
    """The live search ran the failing configuration again as trial 1 (its first trial showed no
    failure), where plan.json's first wave has the clean one: the run's report refused the hunt's
    own journal as damaged at line 3. The report, the hunt page and resume all read it now."""
    m = matrix()
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    save_manifest(tmp_path, make_manifest(hunt_plan(m, inventory.testbed(None), 1), inventory, "h", STAMP))
    live = HuntSource(m)
    with Journal(RunDir(tmp_path).journal) as journal:
        journal.append(EventRecord(run_id="h", event="run_started", at=STAMP))
        for k in (0, 3, 0):
            step = live.next()
            assert step is not None
            record = trial(m, step.trial.index, m.hunt.config_of(dict(step.trial.cell.levels)), k)  # type: ignore[union-attr, arg-type]
            journal.append(record)
            live.record(record)
    assert [r.levels == dict(m.hunt.levels(FULL)) for r in api._journaled(tmp_path).records()] == [True, True, False]  # type: ignore[union-attr]
    assert load_report(tmp_path).completed == 3
    assert hunt_report(tmp_path) is not None


def test_the_report_says_the_trial_variation_was_estimated_from_the_trials_and_its_value() -> None:
    """The failing configuration's trials, 0, 16, 0, 16, 0, 16 of 20, vary far beyond the stated ICC
    0.03 (dispersion 384 / 24 = 16.0 on 5 df; its 99% lower bound 16.0 x 5 / 15.09 = 5.30 is ICC
    (5.30 - 1) / 19 = 0.226): the evidence was tempered by it, and the summary and the page say so."""
    m = matrix()
    records = [trial(m, i, FULL, k) for i, k in enumerate((0, 16, 0, 16, 0, 16))]
    records += [trial(m, 6 + i, 0, 0) for i in range(3)]
    report = build_report(m, records)
    said = (
        "evidence per trial tempered by trial-to-trial variation: ICC 0.226 estimated from the trials "
        "(dispersion 16.00 over 6 trials in 1 configuration run more than once with some but not all sessions failed, "
        "5.0 df; stated 0.03)"
    )
    assert said in summary_lines(report)
    assert "Evidence per trial tempered by trial-to-trial variation: ICC 0.226 estimated" in render(report)


def test_the_report_says_the_stated_trial_variation_was_assumed_when_no_trials_repeat() -> None:
    m = matrix()
    records = [trial(m, 0, FULL, 4), trial(m, 1, 0, 0), trial(m, 2, FULL ^ 1, 5)]
    said = "ICC 0.03 as stated (too few repeated trials to estimate it: 0.0 df)"
    assert f"evidence per trial tempered by trial-to-trial variation: {said}" in summary_lines(build_report(m, records))


def test_the_trial_variation_line_counts_only_the_configurations_that_informed_it() -> None:
    """The audited DSV4 hunt said "dispersion 0.53 over 13 trials in 4 configurations run more than
    once" where 8 had run more than once: only those whose sessions both failed and passed inform the
    dispersion. Here 3 run more than once (the failing one 0, 16, 0, 16, 0, 16 of 20; the clean one
    and one drop never failing), and only the failing one informs it."""
    m = matrix()
    records = [trial(m, i, FULL, k) for i, k in enumerate((0, 16, 0, 16, 0, 16))]
    records += [trial(m, 6 + i, 0, 0) for i in range(3)] + [trial(m, 9 + i, FULL ^ 1, 0) for i in range(2)]
    line = summary_lines(build_report(m, records))[-2]
    assert "over 6 trials in 1 configuration run more than once with some but not all sessions failed" in line
    assert "in 1 configuration run more than once," not in line


def test_the_model_probability_of_a_configuration_is_escaped_in_the_page() -> None:
    """A configuration the model holds unaffected reads "< 0.001": written raw, the page's table cell
    was "<td>< 0.001</td>", a bare "<" in HTML (the DSV4 hunt's clean configuration and drops)."""
    page = render(hunted(matrix(), 0b111))
    assert "<td>< 0.001</td>" not in page
    assert "<td>&lt; 0.001</td>" in page


def test_an_and_answer_says_what_its_changes_nothing_rests_on_measured() -> None:
    """ "X changes nothing unless Y and Z are on" is the model's inference; the hunt audit found no
    pair of configurations differing only in X with Y or Z off, and 2/320 sessions failing over the
    configurations without the set: a bound (95% upper limit near 9-13%), not nothing. The line
    after the inferences gives that bound, from the configurations' own k/n."""
    m = matrix()
    assert m.hunt is not None
    mask = sum(1 << m.hunt.flags.index(f) for f in AND3)
    report = hunted(m, mask)
    assert report.result.state == "found", report.result.reason
    without = [c for c in report.result.configs if c.config & mask != mask and c.n]
    k, n = sum(c.k for c in without), sum(c.n for c in without)
    lines = [line.strip() for line in summary_lines(report)]
    [said] = [line for line in lines if line.startswith("without all of bf16_index_k, cuda_graph and overlap on")]
    assert said.startswith(f"without all of bf16_index_k, cuda_graph and overlap on: {k}/{n} sessions failed"), said
    assert f"over {len(without)} configurations: the measured bound on what any of them changes there" in said
    assert said in _said_on_page(report)


def _said_on_page(report: HuntReport) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", render(report)).split())


def test_the_hunt_page_links_back_to_the_runs_index_and_to_its_runs_report() -> None:
    """hunt.html is where the runs index sends a hunt's run: it had no link at all, so a reader
    could not get back to the runs, nor on to the run's trials, their evidence and provenance
    (index.html beside it)."""
    page = render(hunted(matrix(), 0b111))
    hrefs = re.findall(r"<a href='([^']*)'>", page)
    assert hrefs[:2] == ["../index.html", "index.html"], hrefs


def test_a_one_flag_answer_has_no_line_about_the_configurations_without_its_set() -> None:
    """The "without all of ... on" bound is what an AND's inferences rest on; one flag infers
    nothing about others."""
    m = matrix()
    assert m.hunt is not None
    report = hunted(m, 1 << m.hunt.flags.index("overlap"))
    assert report.result.state == "found" and report.result.best.sets == (("overlap",),), report.result.reason
    assert hunt_module.dependencies(report) and not [
        line for line in hunt_module.dependencies(report) if line.startswith("without all of")
    ]


def test_an_and_answer_no_configuration_ran_without_says_it_was_not_measured() -> None:
    m = matrix()
    assert m.hunt is not None
    mask = sum(1 << m.hunt.flags.index(f) for f in AND3)
    report = hunted(m, mask)
    only_with = [c for c in report.result.configs if c.config & mask == mask]
    narrowed = dataclasses.replace(report, result=dataclasses.replace(report.result, configs=tuple(only_with)))
    assert "without all of bf16_index_k, cuda_graph and overlap on: not measured (no configuration ran so)" in (
        hunt_module.dependencies(narrowed)
    )


def test_a_hunt_with_no_answer_states_no_dependency() -> None:
    m = matrix()
    records = [trial(m, 0, 0, 0)] + [trial(m, 1 + i, FULL ^ (1 << i), 0) for i in range(16)]
    records += [trial(m, 17 + i, FULL, 0) for i in range(20)]  # the failing configuration never failed
    assert hunt_module.dependencies(build_report(m, records)) == []


def test_a_result_without_its_trial_variation_says_it_was_not_recorded() -> None:
    report = build_report(matrix(), five_trials(matrix()))
    unrecorded = dataclasses.replace(report, result=dataclasses.replace(report.result, icc=None))
    assert hunt_module.variation_line(unrecorded) == "trial-to-trial variation: not recorded"


@pytest.mark.parametrize(
    ("names", "flags", "lead"),
    [
        ((), ("a", "b"), "Every flag clean (the likeliest answer: the flags do not explain the failure)"),
        (("a",), ("a", "b"), "Only a at the failing level, every other flag clean"),
        (("a", "b"), ("a", "b"), "Only a and b at the failing level"),
    ],
)
def test_the_reproducers_lead_names_its_flags_and_says_the_rest_only_when_there_is_a_rest(
    names: tuple[str, ...], flags: tuple[str, ...], lead: str
) -> None:
    assert hunt_module._only(names, flags) == lead
