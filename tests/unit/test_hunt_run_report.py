"""A hunt run's result, wherever it is quoted: index.html, summary.json, the runs index, the
webhook and the queue's note say the hunt's verdict in its own report's words, never the cells'
comparisons ("no significant difference between any cell and the baseline" was said of a hunt
that found its three culprits) and never "N of M planned" with M its first wave; whoever writes
the report (`orch hunt`, `orch report`, the queue) writes hunt.html, and index.html links it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

from orchestrator.cli.main import main
from orchestrator.report.hunt import hunt_report, summary_lines
from orchestrator.report.render import fresh_summary
from orchestrator.report.site import run_entries
from orchestrator.report.summary import RunSummary
from orchestrator.store.manifest import load_manifest
from orchestrator.sweep import api
from orchestrator.sweep.runner import RunResult
from orchestrator.team.notify import Webhook, summarize_run
from orchestrator.team.overnight import item_outcome


def _found_hunt(tmp_path: Path) -> tuple[Path, str, int]:
    """A hunt run folder that found the DSV4 AND: (its folder, its verdict, trials completed)."""
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "hunt"
    records = hunt_run(run, m, truth_answer(m))
    report = hunt_report(run)
    assert report is not None and report.found, report and report.result.reason
    state, answer = summary_lines(report)[:2]  # what `orch hunt` prints first, in its words
    verdict = f"{state}; {answer}"
    assert verdict.startswith("hunt found: ") and "culprit: bf16_index_k AND cuda_graph AND overlap" in verdict
    return run, verdict, len(records)


def test_the_report_summary_and_runs_index_of_a_hunt_say_its_verdict(tmp_path: Path, capsys) -> None:
    run, verdict, trials = _found_hunt(tmp_path)
    assert main(["report", str(run)]) == 0  # also writes hunt.html: `orch report` wrote none
    capsys.readouterr()
    page = (run / "index.html").read_text()
    findings = page[page.index('id="findings"') : page.index('id="cells"')]
    assert html.escape(verdict) in findings and 'href="hunt.html"' in findings
    assert "No significant difference" not in page and "planned trials completed" not in page
    assert f"{trials} trials completed (a hunt decides its trials as it goes)" in page
    assert (run / "hunt.html").is_file()

    summary = RunSummary.model_validate_json((run / "summary.json").read_text())
    assert (summary.headline, summary.planned, summary.completed) == (verdict, None, trials)
    (run / "summary.json").unlink()  # the index rebuilds it from the journal: the same words
    entry = run_entries(run.parent, fresh_summary)[0]
    assert (entry.headline, entry.planned, entry.page) == (verdict, None, "hunt.html")
    index = (run.parent / "index.html").read_text()
    assert html.escape(verdict) in index and re.search(rf'<td class="num">{trials}</td>', index), index


def test_the_webhook_of_a_hunt_says_its_verdict_and_no_planned_total(tmp_path: Path) -> None:
    run, verdict, trials = _found_hunt(tmp_path)
    summary = summarize_run(run, base_url="http://orch.lab")
    assert (summary.headline, summary.trials, summary.planned) == (verdict, trials, None)
    assert Webhook("https://x.example/h").body(summary)["planned"] is None
    assert f" - {trials} trials, 0 failed - {verdict} - " in summary.text()
    slack = verdict.replace(">", "&gt;")  # Slack's text escapes & < > (the `>=` of the posterior's test)
    assert f" - {trials} trials, 0 failed - {slack} - " in Webhook("https://x", slack=True).body(summary)["text"]


def test_a_hunt_ended_by_the_queues_deadline_gets_its_pages_and_a_note_without_a_planned_total(
    tmp_path: Path,
) -> None:
    """How every run and resume ends (sweep.api._finish, what `orch queue run` records): the
    report is written with hunt.html beside it (the queue's hunts had none), and the queue's note
    counts the trials done ("after 8/18 trials" counted against the first wave)."""
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "hunt"
    hunt_run(run, m, truth_answer(m), limit=8, status="running")
    outcome = api._finish(run, load_manifest(run, plan=False), RunResult(run, interrupted=True, deadline_reached=True))
    assert outcome.report == run / "index.html" and (run / "hunt.html").is_file(), outcome.report_error
    assert outcome.planned is None
    assert (
        item_outcome(outcome, 0.0, clock=lambda: 1.0).message == "deadline reached after 8 trials, 0 failed; resumable"
    )
    assert "The run is interrupted: 8 trials completed (a hunt decides" in (run / "index.html").read_text()


def test_a_hunts_report_does_not_say_its_verdict_survived_holm(tmp_path: Path) -> None:
    """The page's policy sentence said "Every finding survives Holm's correction ..." under a
    headline whose finding is the hunt's verdict, which rests on its posterior and its checks (the
    hunt's page), not on Holm: the policy must name the verdict's own rule."""
    from orchestrator.report.render import load_report, render_report

    run, verdict, _ = _found_hunt(tmp_path)
    report = load_report(run)
    assert report.headline[0].kind == "finding" and report.headline[0].text == verdict
    assert not report.policy.startswith("Every finding survives"), report.policy
    assert "The hunt's verdict rests on its posterior and checks" in report.policy, report.policy
    page = html.unescape(render_report(report))
    assert "every other finding survives Holm's correction" in page and "any false finding among them" in page
