"""Do all of orch's outputs about one run say the same thing? Each case is a run folder written the
way orch writes it (run.json and plan.json, a journal appended record by record, status.json kept
by team.livestatus as the runner feeds it, the run ended by sweep.api's own finish, which writes
run.json's status, the report, summary.json and the runs index). Then every output is read back as
a reader sees it (the page and the runs index as HTML, summary.json, /api/runs and `orch status
--json` as JSON, `orch export` as CSV, the CI export, `orch compare` (its cells' model of the run
with itself; its page against the earlier run), the webhook summary and the terminal lines of `orch
run`) and checked against the report's model: the same trials counted per cell and in all, the
same k/n, the same intervals where the same interval is claimed, the same status word, and no
finding the report does not name. Unit tier: no process, no server."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from helpers.cell_runs import cell_run
from helpers.hunt_runs import hunt_run, small_hunt, truth_answer
from helpers.page_text import parsed
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli import output
from orchestrator.core.records import EventRecord, Failure, RunManifest, TrialRecord
from orchestrator.core.servermetrics import missing
from orchestrator.report.build import fmt_rate
from orchestrator.report.ciexport import bencher_json, cell_label
from orchestrator.report.compare import Comparison, compare_cells, write_comparison_page
from orchestrator.report.compare import _read_run as read_compared
from orchestrator.report.export import export_run, tidy
from orchestrator.report.model import Report
from orchestrator.report.page import code_spans
from orchestrator.report.render import fresh_summary, load_report
from orchestrator.report.series import MAX_TRIALS
from orchestrator.report.site import index_page
from orchestrator.report.summary import RunSummary
from orchestrator.store.journal import Journal
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.api import _finish
from orchestrator.sweep.runner import RunResult
from orchestrator.team.livestatus import LiveStatus
from orchestrator.team.notify import summarize_run
from orchestrator.team.serve import runs_json, snapshot, status_json

SECRET = "hf_supersecret123"  # report_synth's HF_TOKEN value, in every completed trial's env
Entry = TrialRecord | EventRecord


# ----------------------------------------------------------------------------- writing a run as orch does


@dataclass
class Session:
    """One process of the controller: what it journals, in order, and how it ends."""

    entries: list[Entry]
    interrupted: bool = False
    not_restored: tuple[str, ...] = ()


def write_case(run_dir: Path, manifest: RunManifest, sessions: Sequence[Session]) -> str:
    """The run folder as orch leaves it after these sessions; returns the terminal lines of the
    last session's end (cli.output.show_outcome)."""
    run_dir.mkdir(parents=True)
    save_manifest(run_dir, manifest.model_copy(update={"status": "running", "ended": None}))
    finished: set[int] = set()
    text = ""
    for i, session in enumerate(sessions):
        journal = Journal(RunDir(run_dir).journal)
        live = LiveStatus(run_dir)
        live.start(0 if manifest.hunt else len(manifest.plan), len(finished))
        event = "run_started" if i == 0 else "run_resumed"
        journal.append(EventRecord(run_id=manifest.run_id, event=event, at=manifest.started))
        for entry in session.entries:
            journal.append(entry)
            if isinstance(entry, TrialRecord) and not entry.retried and entry.status != "interrupted":
                finished.add(entry.trial)
                live.trial_done(entry)  # the runner's progress tick: a trial's end, never a retried attempt
        if session.interrupted:
            journal.append(EventRecord(run_id=manifest.run_id, event="run_interrupted", at=manifest.started))
        journal.close()
        live.stop()
        live.restore_ended(session.not_restored)
        result = RunResult(run_dir, interrupted=session.interrupted, not_restored=list(session.not_restored))
        outcome = _finish(run_dir, load_manifest(run_dir), result)
        text = _terminal(outcome)
    return text


def _terminal(outcome: object) -> str:
    with output.out.capture() as got_out, output.err.capture() as got_err:
        output.show_outcome(outcome)  # type: ignore[arg-type]
    return got_out.get() + got_err.get()


# ----------------------------------------------------------------------------- the cases


def _retried(record: TrialRecord) -> TrialRecord:
    return record.model_copy(update={"retried": True})


def _failure(base: TrialRecord, error: str, message: str, *, attempt: int, kind: str = "infrastructure") -> TrialRecord:
    """The planned trial `base`'s failed attempt, as TrialPhases records an OrchError."""
    return base.model_copy(
        update={
            "status": "failed",
            "attempt": attempt,
            "metrics": {},
            "failure": Failure(kind=kind, error=error, message=message),  # type: ignore[arg-type]
            "repro": None if base.repro is None else base.repro.model_copy(update={"exit_code": None}),
        }
    )


def _synthetic(run_id: str, started: str, **kw: object) -> tuple[RunManifest, list[TrialRecord]]:
    manifest, records = synthetic_run(run_id=run_id, **kw)  # type: ignore[arg-type]
    records = [_retried(r) if r.status == "failed" else r for r in records]  # as orch journals a retry now
    return manifest.model_copy(update={"started": started}), records


def mixed(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """Retried-then-completed trials (3, 9), a void trial (5: its output broke a repro.valid rule,
    twice), a stranger served one (6: ReproNotServed), a repro that timed out (7), and secrets in
    env values."""
    manifest, records = _synthetic(run_id, started)
    done = {r.trial: r for r in records if r.status == "completed"}
    entries: list[Entry] = []
    for r in records:
        if r.trial == 5 and r.status == "completed":
            void = "repro output broke repro.valid: absent 'Traceback'"
            entries += [
                _retried(_failure(r, "InvalidOutput", void, attempt=1)),
                _failure(r, "InvalidOutput", void, attempt=2),
            ]
        elif r.trial == 6 and r.status == "completed":
            entries.append(_failure(r, "ReproNotServed", "the repro was served by pid 4242 (not orch's)", attempt=1))
        elif r.trial == 7 and r.status == "completed":
            timed = "repro timed out after 300 s (the matrix's repro.timeout) and was killed"
            entries.append(_failure(done[7], "WorkloadError", timed, attempt=1, kind="workload"))
        else:
            entries.append(r)
    return manifest, [Session(entries)]


def interrupted(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """Ctrl-C after 8 of 16 trials."""
    manifest, records = _synthetic(run_id, started, failures=False)
    return manifest, [Session(list(records[:8]), interrupted=True)]


def resumed(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """Interrupted during trial 6's retry, with trial 2 failed for good; `orch resume` runs trial 6
    again (attempt 2) and the rest."""
    manifest, records = _synthetic(run_id, started, failures=False)
    health = _failure(records[2], "HealthTimeout", "decode not ready after 900 s", attempt=1)
    first: list[Entry] = [*records[:2], health]
    first += [*records[3:6], _retried(_failure(records[6], "WorkloadError", "repro exited with code 1", attempt=1))]
    second: list[Entry] = [records[6].model_copy(update={"attempt": 2}), *records[7:]]
    return manifest, [Session(first, interrupted=True), Session(second)]


def unrestored(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """A run whose restore left the decode host changed."""
    manifest, records = _synthetic(run_id, started)
    return manifest, [Session(list(records), not_restored=("decode",))]


def parallel(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """Two testbeds taking the plan's trials in turn."""
    manifest, records = _synthetic(run_id, started)
    manifest = manifest.model_copy(update={"testbed": "a,b", "testbeds": ["a", "b"]})
    records = [r.model_copy(update={"testbed": "ab"[r.trial % 2]}) for r in records]
    return manifest, [Session(list(records))]


def adaptive(run_id: str, started: str, tmp: Path) -> tuple[RunManifest, list[Session]]:
    """An adaptive run whose overlap=off cells a rule stopped at 0/30 (test_adaptive's run), its
    decisions journaled as the runner journals them."""
    from helpers.adaptive_runs import REPO, plan_of, record

    from orchestrator.core.config import read_inventory
    from orchestrator.core.sequential import Decision
    from orchestrator.store.planrecord import make_manifest
    from orchestrator.sweep.adaptive import AdaptiveSource

    matrix, plan = plan_of(tmp)
    entries: list[Entry] = []

    def decided(cell: str, decision: Decision) -> None:
        event = EventRecord(run_id=run_id, event="cell_decided", at=started, message=decision.reason, cell=cell)
        entries.append(event.model_copy(update={"state": decision.state}))

    source = AdaptiveSource(plan.steps, set(), matrix, on_decision=decided)
    while (step := source.next()) is not None:
        trial = record(step, 0 if "overlap=off" in step.trial.cell.id else 2).model_copy(update={"run_id": run_id})
        entries.append(trial)
        source.record(trial)
    manifest = make_manifest(plan, read_inventory(REPO / "inventory/local.yaml"), run_id, started)
    return manifest, [Session(entries)]


def hunt(run_id: str, started: str, tmp: Path) -> tuple[RunManifest, list[Session]]:
    """`orch hunt`'s small hunt of the DSV4 AND, two of its trials crashed."""
    matrix = small_hunt(tmp)
    scratch = tmp / f"scratch-{run_id}"
    records = hunt_run(scratch, matrix, truth_answer(matrix, fail=lambda step, i: step.trial.index in (1, 9)))
    manifest = load_manifest(scratch).model_copy(update={"run_id": run_id, "started": started})
    return manifest, [Session([r.model_copy(update={"run_id": run_id}) for r in records])]


def long(run_id: str, started: str) -> tuple[RunManifest, list[Session]]:
    """Two cells of 70 trials each (more than summary.json's series keeps of a cell), the
    baseline's events all in its first 10 trials. The other cell never fails, so the report names
    a finding: a null one would quote the simulated power of a 70-trial design (~8 CPU-s a build)."""
    base = [(5, 20)] * 10 + [(0, 20)] * 60
    manifest, records = cell_run(
        {"a": ["on", "off"]}, {"a": "on"}, [({"a": "on"}, base), ({"a": "off"}, [(0, 20)] * 70)]
    )
    manifest = manifest.model_copy(update={"run_id": run_id, "started": started})
    return manifest, [Session([r.model_copy(update={"run_id": run_id}) for r in records])]


CASES: dict[str, Callable[..., tuple[RunManifest, list[Session]]]] = {
    "mixed": mixed,
    "interrupted": interrupted,
    "resumed": resumed,
    "unrestored": unrestored,
    "parallel": parallel,
    "adaptive": adaptive,
    "hunt": hunt,
    "long": long,
}
NEEDS_TMP = {"adaptive", "hunt"}


@dataclass
class Written:
    run_dir: Path
    terminal: str


def build(name: str, tmp: Path) -> Written:
    """Two runs of the case in one reports folder (the runs index trends a matrix over two or more
    runs): the newer one is the run under test."""
    reports = tmp / "reports"
    written = None
    for day in (1, 2):
        run_id, started = f"2026060{day}-070000-{name}", f"2026-06-0{day}T07:00:00Z"
        args = (run_id, started, tmp) if name in NEEDS_TMP else (run_id, started)
        manifest, sessions = CASES[name](*args)
        run_dir = reports / run_id
        written = Written(run_dir, write_case(run_dir, manifest, sessions))
    assert written is not None
    return written


# ----------------------------------------------------------------------------- reading every output back


@dataclass
class Outputs:
    report: Report  # the reference: the report's model
    page: str
    summary: RunSummary
    index: str
    api_runs: dict[str, object]
    api_status: dict[str, object] | None
    export: list[dict[str, str]]
    bencher: dict[str, dict[str, dict[str, float]]]
    compared: Comparison
    compare_page: str
    webhook: dict[str, object]
    webhook_text: str
    terminal: str
    texts: dict[str, str] = field(default_factory=dict)  # every output as text, for the secrets check


def read_all(written: Written) -> Outputs:
    run_dir = written.run_dir
    reports = run_dir.parent
    run = RunDir(run_dir)
    report = load_report(run_dir)
    index = index_page(reports, fresh_summary)
    api_runs = next(r for r in runs_json(reports) if r["directory"] == run_dir.name)
    status = status_json(snapshot(reports))
    api_status = next((r for r in status["runs"] if r["directory"] == run_dir.name), None)  # type: ignore[union-attr]
    export_path = export_run(run_dir, "csv")
    export = list(csv.DictReader(io.StringIO(export_path.read_text())))
    compared = read_compared(run_dir)
    model = compare_cells(
        compared.manifest, compared.cells, compared.manifest, compared.cells,
        suspect_a=compared.suspect, suspect_b=compared.suspect,
        incomplete_a=compared.incomplete, incomplete_b=compared.incomplete,
        stopped_cells_a=compared.stopped, stopped_cells_b=compared.stopped,
    )  # fmt: skip
    earlier = next(p for p in sorted(reports.iterdir()) if p.is_dir() and p != run_dir)  # build()'s day 1
    compare_page = write_comparison_page(earlier, run_dir, reports / f"compare-{run_dir.name}.html").path.read_text()
    summary = summarize_run(run_dir)
    from dataclasses import asdict

    outputs = Outputs(
        report=report,
        page=run.index_html.read_text(),
        summary=RunSummary.model_validate_json(run.summary_json.read_text()),
        index=index,
        api_runs=api_runs,
        api_status=api_status,
        export=export,
        bencher=json.loads(bencher_json(report)),
        compared=model,
        compare_page=compare_page,
        webhook=asdict(summary),
        webhook_text=summary.text(),
        terminal=written.terminal,
    )
    outputs.texts = {
        "page": outputs.page,
        "summary.json": run.summary_json.read_text(),
        "runs index": index,
        "/api/runs": json.dumps(api_runs),
        "/api/status": json.dumps(api_status),
        "export": export_path.read_text(),
        "bencher": bencher_json(report).decode(),
        "compare": compare_page,
        "webhook": json.dumps(outputs.webhook) + summary.chat_text(),
        "terminal": written.terminal,
    }
    return outputs


# ----------------------------------------------------------------------------- what must agree


def _trials_cell(text: str) -> tuple[int, int | None, int]:
    """The runs index's trials column: completed[/planned, or " of at most " planned for an adaptive
    run][ (N failed attempt[s])], "1 failed attempt" and "2 failed attempts"."""
    got = re.fullmatch(r"(\d+)(?:(?:/| of at most )(\d+))?(?: \((\d+) failed attempt(s?)\))?", text)
    assert got is not None, f"the runs index's trials column reads {text!r}"
    assert got[3] is None or (got[3] != "1") == (got[4] == "s"), text
    return int(got[1]), None if got[2] is None else int(got[2]), int(got[3] or 0)


def _finished(export: list[dict[str, str]]) -> dict[int, str]:
    """trial -> its status, from the export's rows (one standing record per finished trial)."""
    return {int(row["trial"]): row["status"] for row in export}


def check_status(o: Outputs) -> None:
    r = o.report
    index = parsed(o.index).tables["runs"][1:]
    assert parsed(o.page).badge == r.status
    assert o.summary.status == r.status == o.api_runs["status"] == o.webhook["status"]
    assert [row[3].split("NOT restored")[0] for row in index if o.api_runs["run_id"] in row[0]] == [r.status]
    assert o.api_status is not None and o.api_status["run_status"] == r.status and o.api_status["state"] == "finished"
    assert ("(interrupted)" in o.terminal) == (r.status == "interrupted")


def check_counts(o: Outputs) -> None:
    """The same trials counted: completed (data), finished (completed or failed for good), failed
    for good, and the report's failed attempts (retried ones too), wherever each is shown."""
    r = o.report
    header = re.search(
        r"· (\d+)(?: of (\d+) planned)? trial(?P<t>s?) completed.*?(?:, (\d+) failed attempt(s?))?</p>", o.page
    )
    assert header is not None
    assert (int(header[2] or header[1]) != 1) == (header["t"] == "s"), header[0]  # "1 trial", "8 of 8 planned trials"
    assert header[4] is None or (header[4] != "1") == (header[5] == "s"), header[0]
    assert (int(header[1]), None if header[2] is None else int(header[2]), int(header[4] or 0)) == (
        r.completed, r.planned, r.failed
    )  # fmt: skip
    assert (o.summary.completed, o.summary.planned, o.summary.failed) == (r.completed, r.planned, r.failed)
    assert (o.api_runs["completed"], o.api_runs["planned"], o.api_runs["failed"]) == (r.completed, r.planned, r.failed)
    row = next(row for row in parsed(o.index).tables["runs"][1:] if o.api_runs["run_id"] in row[0])
    assert _trials_cell(row[4]) == (r.completed, r.planned, r.failed)
    ended = _finished(o.export)
    failed = sum(status == "failed" for status in ended.values())
    assert sum(status == "completed" for status in ended.values()) == r.completed
    assert (o.webhook["trials"], o.webhook["failed"], o.webhook["planned"]) == (len(ended), failed, r.planned)
    assert o.api_status is not None and (o.api_status["done"], o.api_status["failed"]) == (len(ended), failed)
    assert f"{r.completed} trial{'s' if r.completed != 1 else ''} completed, {failed} failed" in o.terminal


def check_cells(o: Outputs) -> None:
    """Per cell: trials, k/n and the interval, in the page, summary.json's series, the runs
    index's trend, the export, the CI export and `orch compare`."""
    r = o.report
    m = r.primary_metric
    assert m is not None and r.metrics[m] == "proportion"
    rows = parsed(o.page).tables["cell-table"][1:]
    series = {p.cell: p for p in o.summary.series if p.metric == m}
    trends = {row[0].replace(", ", ","): row[3] for row in parsed(o.index).tables.get("trend-table", [])[1:]}
    compared = {row.cell: row for row in o.compared.rows if row.metric == m}
    exported: dict[str, list[tuple[int, int]]] = {}
    for e in o.export:
        if e["status"] == "completed" and e["metric"] == m and e["n"] not in ("", "0"):
            exported.setdefault(e["cell"], []).append((int(e["k"]), int(e["n"])))
    assert len(rows) == len(r.cells)
    for row, c in zip(rows, r.cells, strict=True):
        p = c.proportions[m]
        trials = f"{c.completed}" if c.planned is None else f"{c.completed}/{c.planned}"
        assert row[len(r.factors)].split(" (")[0] == trials
        assert row[len(r.factors) + 1].startswith(fmt_rate(p.rate))
        assert (sum(k for k, _ in exported.get(c.cell, [])), sum(n for _, n in exported.get(c.cell, []))) == (
            p.rate.k, p.rate.n
        )  # fmt: skip
        assert len(exported.get(c.cell, [])) == p.trials
        if not p.rate.n:
            continue
        point = series[c.cell]  # the newest MAX_TRIALS trials of each cell (report.series)
        assert (len(point.trials), point.stopped) == (min(p.trials, MAX_TRIALS), p.stopped)
        assert point.rate == (p.rate.k, p.rate.n) or p.trials > MAX_TRIALS
        side = compared[c.cell].a
        assert (side.k, side.n, side.trials, side.stopped) == (p.rate.k, p.rate.n, p.trials, p.stopped)
        bench = o.bencher[cell_label(c.levels)][m]
        assert (bench["value"], bench["lower_value"], bench["upper_value"]) == (p.rate.rate, p.rate.low, p.rate.high)
        if r.status in ("completed", "failed"):  # a finished run is a trend's newest point
            said = f"{p.rate.rate:.1%} [{p.rate.low:.1%}, {p.rate.high:.1%}]"
            assert trends[c.cell] == said + (" (stopped early: anytime-valid interval)" if p.stopped else "")


def on_page(text: str) -> str:
    """A headline's words as a page shows them: each backtick pair set as code (the terminal's and
    the webhook's `orch resume` is <code>orch resume</code> there: report.page.code_spans)."""
    return html.unescape(re.sub(r"</?code>", "", str(code_spans(text))))


def check_findings(o: Outputs) -> None:
    """One result sentence everywhere, each of its findings one the page names; one list of
    reasons to doubt the data; the hosts left changed named wherever the run is listed."""
    from orchestrator.report.build import result_headline, status_sentence

    r = o.report
    page = [(kind, text) for kind, text in parsed(o.page).items]
    assert page == [(f.kind, f.label + on_page(f.text)) for f in r.headline]  # each item opens with its kind's label
    result = result_headline(r)
    row = next(row for row in parsed(o.index).tables["runs"][1:] if o.api_runs["run_id"] in row[0])
    assert o.summary.headline == o.api_runs["headline"] == o.webhook["headline"] == result
    assert row[5].startswith(" ".join(on_page(result).split()))
    said = result.removeprefix(status_sentence(r) + " So far: ") if r.status not in ("completed", "failed") else result
    assert any(text == f.label + on_page(said) for f in r.headline for _, text in page), (
        "a result the page does not name"
    )
    suspect = list(o.summary.suspect)
    assert list(o.api_runs["suspect"]) == o.webhook["suspect"] == suspect  # type: ignore[call-overload]
    assert all(any("; ".join(suspect) in w for w in o.compared.warnings) for _ in suspect[:1])
    left = list(o.api_status["not_restored"]) if o.api_status else []  # type: ignore[call-overload]
    assert list(o.api_runs["not_restored"]) == o.webhook["not_restored"] == left  # type: ignore[call-overload]
    assert (f"NOT restored: {', '.join(left)}" in o.terminal) == bool(left)
    assert (f"NOT restored: {', '.join(left)}" in o.index) == bool(left)
    # the run's own page and summary.json: written after the restore, from the same status.json
    assert list(o.summary.not_restored) == left
    assert o.summary.restore_with == (o.api_status["restore_with"] if left else "")  # type: ignore[index]
    block = parsed(o.page).unrestored
    assert (block is not None) == bool(left), "the page's block is there exactly when hosts were left changed"
    if left:
        assert f"NOT restored: {', '.join(left)}; finish with: {o.summary.restore_with}" in str(block)
        assert block is not None and block.startswith("When this page was written")


@pytest.mark.parametrize("name", list(CASES))
def test_every_output_of_a_run_says_what_its_report_says(name: str, tmp_path: Path) -> None:
    o = read_all(build(name, tmp_path))
    check_status(o)
    check_counts(o)
    check_cells(o)
    check_findings(o)
    for what, text in o.texts.items():
        assert SECRET not in text, f"{name}: the secret is in {what}"


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_a_lost_scrape_is_exported_with_its_reason_as_a_failure_not_as_a_unit(tmp_path: Path, fmt: str) -> None:
    """A completed trial's lost server scrape is journaled as `server.<endpoint>.missing` with no
    value and why in its unit field; the export put that reason in the `unit` column (a CI job
    grouping by unit met "GET http://...: connection refused"), unmasked where failures are masked."""
    manifest, records = synthetic_run(replicates=2, failures=False)
    why = "GET http://orch:hunter2@127.0.0.1:30002/metrics: connection refused"
    lost = records[0].model_copy(update={"metrics": {**records[0].metrics, **missing("decode", why)}})
    rows = tidy(manifest, [lost, *records[1:]])
    row = rows[rows["metric"] == "server.decode.missing"].iloc[0]
    assert row["status"] == "completed" and row["value"] is pd.NA
    assert pd.isna(row["unit"])
    assert "connection refused" in row["failure"] and "hunter2" not in row["failure"]
    assert set(rows[rows["metric"] == "wall"]["unit"]) == {lost.metrics["wall"].unit}
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, [lost, *records[1:]])
    out = export_run(run_dir, fmt, tmp_path / f"x.{fmt}")
    table = pd.read_parquet(out) if fmt == "parquet" else pd.read_csv(out) if fmt == "csv" else pd.read_json(out)
    exported = table[table["metric"] == "server.decode.missing"].iloc[0]
    assert pd.isna(exported["unit"]) and "connection refused" in exported["failure"]
