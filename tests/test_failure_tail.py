"""A failed trial's terminal lines point at its output: the message said "check the regexes
against the output tail below" and nothing followed on the terminal (the tail was only in the
HTML report). Now the trial's line names its repro.out and the end-of-sweep summary quotes the
last lines of each reason's first output, bounded, escaped and without control characters."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

from fakes import FakeBed, FakeUnit, Role, flag, make_bed, make_plan, remote_repro, runner_for
from rich.console import Console

from orchestrator.core.records import Failure, MetricValue, ReproOutcome, TrialRecord
from orchestrator.sweep.progress import TAIL_LINE_CHARS, TAIL_LINES, RichProgress, output_file, summarize


def one_role() -> FakeBed:
    return make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})


def failed_sweep(tmp_path: Path, stdout: str) -> list[TrialRecord]:
    bed = one_role()
    bed.transports["decode"].script(re.compile(r"^fake-repro\b"), stdout=stdout)
    repro = {**remote_repro("decode"), "valid": []}
    plan = make_plan(
        bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1, repro=repro, stop_after_repeated_failures=0
    )
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    assert result.failed == 2
    return list(result.records)


def shown(records: list[TrialRecord]) -> str:
    buffer = StringIO()
    progress = RichProgress(Console(file=buffer, width=400, force_terminal=False))
    progress.start(len(records), 0)
    for record in records:
        progress.trial_done(record)
    progress.stop()
    return buffer.getvalue()


def test_a_metric_that_matches_nothing_names_the_file_and_shows_the_tail(tmp_path: Path) -> None:
    output = "".join(f"session {i}: ok\n" for i in range(30)) + "CORRUPT sessions: 3 of 40 [bold]x[/bold]\n"
    records = failed_sweep(tmp_path, output)
    first = records[0]
    assert first.failure is not None and first.failure.error == "WorkloadError"
    assert "below" not in first.failure.message  # nothing follows a one-line message on a terminal
    assert first.repro is not None and (tmp_path / "run" / first.repro.stdout_path).is_file()
    assert summarize(first).endswith(f"[output: {first.repro.stdout_path} in the run folder]")
    text = shown(records)
    lines = text.splitlines()
    reason = next(i for i, line in enumerate(lines) if line.startswith("2 failed: WorkloadError"))
    assert (
        lines[reason + 1] == f"  last {TAIL_LINES} lines of the output ({first.repro.stdout_path} in the run folder):"
    )
    quoted = lines[reason + 2 : reason + 2 + TAIL_LINES]
    assert quoted[-1] == "  | CORRUPT sessions: 3 of 40 [bold]x[/bold]"  # markup printed as text
    assert quoted[0] == "  | session 21: ok" and all(q.startswith("  | ") for q in quoted)
    assert len(lines) == reason + 2 + TAIL_LINES  # once per reason, not per trial
    assert text.count("last 10 lines") == 1


def test_the_tail_is_bounded_and_stripped_of_control_characters() -> None:
    detail = "\x1b[2J\x1b[31mred\x1b[0m\n" + "y" * 5000 + "\n\n\n"
    record = TrialRecord.model_construct(
        status="failed",
        cell="d=1",
        failure=Failure(kind="workload", error="WorkloadError", message="no match", detail=detail),
        repro=ReproOutcome(command="r", exit_code=0, duration_s=1.0, stdout_path="trials/0000/repro.out"),
    )
    lines = shown([record]).splitlines()
    tail = lines[lines.index("1 failed: WorkloadError: no match") + 1 :]
    assert tail[0] == "  last 2 lines of the output (trials/0000/repro.out in the run folder):"
    assert tail[1] == "  | ?[2J?[31mred?[0m"
    assert tail[2].startswith("  | yyy") and tail[2].endswith("...") and len(tail[2]) < 220
    assert len(tail) == 3


def test_a_failure_without_output_has_no_file_and_a_plain_head() -> None:
    record = TrialRecord.model_construct(
        status="failed",
        cell="d=1",
        failure=Failure(kind="infrastructure", error="ServiceError", message="unit died", detail="log line\n"),
    )
    assert summarize(record) == "d=1: FAILED (ServiceError): unit died"
    lines = shown([record]).splitlines()
    assert lines[-2:] == ["  last 1 line of its log or output:", "  | log line"]


def test_a_metric_recorded_as_missing_is_left_out_of_the_progress_line() -> None:
    """A lost scrape's mark (value None) among a trial's first metrics ended `orch run` with a
    TypeError traceback mid-sweep ('unsupported format string passed to NoneType.__format__'; the
    seventh new-user walk)."""
    lost = MetricValue(kind="number", value=None, unit="the answer had none of the metrics its names: list")
    record = TrialRecord.model_construct(
        status="completed",
        cell="d=1",
        metrics={
            "events": MetricValue(kind="proportion", k=1, n=8),
            "server.decode.missing": lost,
            "nomatch": MetricValue(kind="number", value=0.0),
        },
    )
    assert summarize(record) == "d=1: events 1/8 (12%), nomatch 0"


def test_a_long_line_is_cut_to_exactly_its_width_and_a_workload_failure_without_a_repro_names_no_file() -> None:
    """The sixteenth mutation round: a cut one character short, and a workload failure whose repro
    never ran (no ReproOutcome) pointed at no file only by luck of the tests' records."""
    record = TrialRecord.model_construct(
        status="failed",
        cell="d=1",
        failure=Failure(kind="workload", error="WorkloadError", message="no match", detail="z" * 500 + "\n"),
        repro=None,
    )
    assert output_file(record) == ""
    lines = shown([record]).splitlines()
    tail = lines[lines.index("1 failed: WorkloadError: no match") + 1 :]
    assert tail[0] == "  last 1 line of its log or output:"
    assert tail[1] == "  | " + "z" * (TAIL_LINE_CHARS - 3) + "..." and len(tail[1]) == len("  | ") + TAIL_LINE_CHARS
    exact = TrialRecord.model_construct(
        status="failed",
        cell="d=1",
        failure=Failure(kind="workload", error="WorkloadError", message="no match", detail="w" * TAIL_LINE_CHARS),
        repro=None,
    )
    assert shown([exact]).splitlines()[-1] == "  | " + "w" * TAIL_LINE_CHARS  # at the width: whole


def test_an_interrupted_trial_is_no_failed_reason_when_the_sweep_ends() -> None:
    """Its record carries a Failure (kind interrupted) but it did not fail: the end-of-sweep lines
    group failed trials only."""
    interrupted = TrialRecord.model_construct(
        status="interrupted",
        cell="d=1",
        failure=Failure(kind="interrupted", error="Interrupted", message="Ctrl-C", detail="log line\n"),
    )
    failed = TrialRecord.model_construct(
        status="failed",
        cell="d=2",
        failure=Failure(kind="infrastructure", error="ServiceError", message="unit died", detail=""),
    )
    text = shown([interrupted, failed])
    assert "Interrupted" not in text.split("\n", 2)[-1]  # past the two trial lines
    assert text.splitlines()[-1] == "1 failed: ServiceError: unit died"
