"""Issue 12 on the fakes: a trial whose output breaks a `repro.valid` rule is void (an
infrastructure failure: retried, never data), and consecutive trials that fail the same way stop
the sweep after `stop_after_repeated_failures` with the reason, hosts restored."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeBed, FakeUnit, Role, flag, make_bed, make_plan, remote_repro, runner_for

from orchestrator.core.records import Failure, TrialRecord
from orchestrator.core.steps import Plan
from orchestrator.sweep.progress import failure_signature, summarize
from orchestrator.sweep.runner import RepeatedFailure, RepeatedFailures

VALID = [
    {"regex": r"error=(?P<value>\d+)", "max": 0},
    {"metric": "events", "min_n": 10},
    {"absent": r"HTTP 5\d\d"},
]


def one_role() -> FakeBed:
    return make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})


def plan_with(bed: FakeBed, replicates: int = 1, valid: list[dict[str, Any]] | None = None, **extra: Any) -> Plan:
    repro = {**remote_repro("decode"), "valid": VALID if valid is None else valid}
    return make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=replicates, repro=repro, **extra)


def script_repro(bed: FakeBed, stdout: str, times: int | None = None) -> None:
    bed.transports["decode"].script(re.compile(r"^fake-repro\b"), stdout=stdout, times=times)


def test_valid_output_is_data(tmp_path: Path) -> None:
    bed = one_role()
    script_repro(bed, "score=0.5 events=3/10 error=0\n")
    result = runner_for(bed, plan_with(bed), tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0)
    assert all(r.metrics["events"].n == 10 for r in result.records)


@pytest.mark.parametrize(
    ("stdout", "rule", "seen"),
    [
        ("score=0.5 events=3/10 error=2\n", "repro.valid[0]", "saw 2"),
        ("score=0.5 events=3/8 error=0\n", "repro.valid[1]", "saw n=8"),
        ("score=0.5 events=3/10 error=0\nHTTP 503 from router\n", "repro.valid[2]", "HTTP 503"),
        ("score=0.5 events=3/10\n", "repro.valid[0]", "no match"),
    ],
)
def test_a_trial_breaking_a_rule_is_void_retried_and_never_data(
    tmp_path: Path, stdout: str, rule: str, seen: str
) -> None:
    bed = one_role()
    script_repro(bed, stdout)
    plan = plan_with(bed, stop_after_repeated_failures=0)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=3).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert (record.status, record.attempt) == ("failed", 3)  # retried: an infrastructure failure
        assert record.failure is not None and record.failure.kind == "infrastructure"
        assert record.failure.error == "InvalidOutput"
        assert rule in record.failure.message and seen in record.failure.message
        assert record.metrics == {}  # never data


def test_a_void_trial_whose_retry_is_valid_counts_once(tmp_path: Path) -> None:
    bed = one_role()
    script_repro(bed, "score=0.5 events=3/10 error=0\n")
    script_repro(bed, "score=0.5 events=0/7 error=3\n", times=1)  # the first attempt only
    result = runner_for(bed, plan_with(bed), tmp_path / "run", infra_attempts=2).execute()
    first = result.records[0]
    assert (first.status, first.attempt, first.metrics["events"].n) == ("completed", 2, 10)


def test_output_rules_void_a_trial_even_when_its_metrics_are_missing(tmp_path: Path) -> None:
    bed = one_role()
    script_repro(bed, "session 0: error: HTTP 503\nerror=40\n")
    result = runner_for(bed, plan_with(bed, stop_after_repeated_failures=0), tmp_path / "run").execute()
    assert {r.failure.error for r in result.records if r.failure} == {"InvalidOutput"}


def failed(message: str, error: str = "WorkloadError") -> TrialRecord:
    """A failed trial record as the runner journals it (only status and failure matter here)."""
    return TrialRecord.model_construct(
        status="failed", cell="d=1", failure=Failure(kind="workload", error=error, message=message, detail="")
    )


def test_same_reason_ignores_numbers_pids_and_durations() -> None:
    a = failed("decode-server (pid 4242) exited after 12.5 s with code 3")
    b = failed("decode-server (pid 99) exited after 0.7 s with code 3")
    assert failure_signature(a) == failure_signature(b)
    assert failure_signature(a) != failure_signature(failed("decode-server exited", error="ServiceError"))
    assert failure_signature(TrialRecord.model_construct(status="completed", failure=None)) is None


def test_the_counter_stops_at_the_limit_and_resets_on_a_different_reason() -> None:
    repeats = RepeatedFailures(3, "orch resume reports/x")
    repeats.observe(failed("metric score: no match (took 1 s)"))
    repeats.observe(failed("something else"))
    repeats.observe(failed("metric score: no match (took 2 s)"))
    repeats.observe(failed("metric score: no match (took 3 s)"))
    with pytest.raises(RepeatedFailure, match=r"3 consecutive trials .*no match .*orch resume reports/x"):
        repeats.observe(failed("metric score: no match (took 4 s)"))
    never = RepeatedFailures(0)
    for _ in range(10):
        never.observe(failed("same"))


def test_repeated_identical_failures_stop_the_sweep_with_the_reason(tmp_path: Path) -> None:
    bed = one_role()
    before = bed.states()
    script_repro(bed, "nothing useful\n")  # the metric regexes never match
    plan = plan_with(bed, replicates=5, valid=[])
    runner = runner_for(bed, plan, tmp_path / "run", infra_attempts=1)
    with pytest.raises(RepeatedFailure, match=r"3 consecutive trials failed the same way: WorkloadError: .*no match"):
        runner.execute()
    lines = (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
    trials = [line for line in lines if '"type":"trial"' in line.replace(" ", "")]
    assert len(trials) == 3  # of 10 planned: stopped, the rest stays for `orch resume`
    assert bed.file("decode") == bed.originals["decode"] and bed.states() == before  # restored


def test_the_cli_limit_overrides_the_matrix(tmp_path: Path) -> None:
    bed = one_role()
    script_repro(bed, "nothing useful\n")
    plan = plan_with(bed, replicates=2, valid=[], stop_after_repeated_failures=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 4)


def test_different_reasons_do_not_stop(tmp_path: Path) -> None:
    bed = one_role()
    for trial, text in enumerate(["nothing", "score=x events=1/2", "score=0.5", "events=9/3 score=1"]):
        bed.transports["decode"].script(f"fake-repro --trial {trial}", stdout=text + "\n")
    plan = plan_with(bed, replicates=2, valid=[], stop_after_repeated_failures=2)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    assert (result.completed, result.failed) == (0, 4)
    assert len({failure_signature(r) for r in result.records}) == 4


def test_the_progress_line_of_a_failed_trial_shows_the_reason() -> None:
    record = TrialRecord.model_construct(
        status="failed",
        cell="d=1",
        failure=Failure(kind="workload", error="WorkloadError", message="metric score: no match\n(see tail)"),
    )
    assert summarize(record) == "d=1: FAILED (WorkloadError): metric score: no match (see tail)"
    long = record.model_copy(update={"failure": record.failure.model_copy(update={"message": "x" * 1000})})  # type: ignore[union-attr]
    assert len(summarize(long)) < 400 and summarize(long).endswith("...")


def test_the_end_of_a_sweep_lists_failure_reasons_grouped(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from orchestrator.sweep.progress import RichProgress

    buffer = StringIO()
    progress = RichProgress(Console(file=buffer, width=300, force_terminal=False))
    progress.start(4, 0)
    for pid in (11, 12, 13):
        progress.trial_done(failed(f"decode-server (pid {pid}) exited with code 3", error="ServiceError"))
    progress.trial_done(failed("metric score: no match"))
    progress.stop()
    progress.stop()  # printed once
    tail = buffer.getvalue().splitlines()[-2:]
    assert tail == [
        "3 failed: ServiceError: decode-server (pid 11) exited with code 3",
        "1 failed: WorkloadError: metric score: no match",
    ]
    assert buffer.getvalue().count("3 failed:") == 1


def test_a_run_stopped_on_repeated_failures_resumes_once_the_cause_is_fixed(tmp_path: Path) -> None:
    from orchestrator.store.journal import trial_statuses

    bed = one_role()
    before = bed.states()
    script_repro(bed, "nothing useful\n")
    plan = plan_with(bed, replicates=3, valid=[])
    with pytest.raises(RepeatedFailure):
        runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    done = set(trial_statuses(tmp_path / "run" / "journal.jsonl").finished)
    assert done == {0, 1, 2}
    script_repro(bed, "score=0.5 events=3/10\n")  # the cause fixed
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute(done, resume=True)
    assert (result.completed, result.failed) == (3, 0)
    assert bed.file("decode") == bed.originals["decode"] and bed.states() == before
