"""What a trial's record says when its warm-up or its log collection fails, pinned where mutation
testing found no test (bench/README.md, "Fifth round"): a warm-up that exited non-zero and one that
timed out are told apart in the failure's words (the trial is void either way), a unit log that
cannot be read after the repro voids the trial, a failed trial's record still says what served it,
and a value the process never got is blamed on `export` lines. On the fakes (tests/fakes.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeServiceManager, FakeUnit, Reply, Role, flag, make_bed, make_plan, remote_repro, runner_for

from orchestrator.edges.provenance import TrialDescriber
from orchestrator.errors import ServiceError, TransportError


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Reply(exit_code=3, stderr="model not loaded\n"), "repro.warmup exited with code 3 (the trial is void)"),
        (Reply(timeout=True), "repro.warmup timed out (the trial is void)"),
    ],
    ids=["exit-code", "timeout"],
)
def test_a_failed_warmup_says_how_it_failed(tmp_path: Path, reply: Reply, said: str) -> None:
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    bed.transports["decode"].script(re.compile(r"^fake-warmup\b"), reply)
    repro = {**remote_repro("decode"), "warmup": "fake-warmup"}
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1, repro=repro)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.error == "WarmupFailed"
        assert record.failure.message == said


def test_a_unit_log_that_cannot_be_read_after_the_repro_voids_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's logs feed its collectors (a metric counted over a role's logs): one that could not
    be read fails the trial (infrastructure, never data) instead of leaving a metric counted on part
    of them (only a trial that failed already has its logs collected quietly)."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})

    def unreadable(self: FakeServiceManager, unit: str, since: float, max_bytes: int = 0) -> str:
        raise ServiceError(self.host, unit, "journalctl: no answer")

    monkeypatch.setattr(FakeServiceManager, "logs_since", unreadable)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.kind == "infrastructure"
        assert record.failure.message.endswith("unit decode-server: journalctl: no answer"), record.failure.message


def test_a_trial_whose_repro_host_stopped_answering_still_records_what_served_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of a failed trial says what served it: its provenance, asked beside the repro
    (slow here: 0.3 s), is waited for before the record is written, not left to a thread."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plain = TrialDescriber.describe

    def slow(self: TrialDescriber, restarted: set[str], env: Any) -> Any:
        time.sleep(0.3)
        return plain(self, restarted, env)

    def gone(text: str, argv: object) -> Reply:
        raise TransportError("decode.fake:22", "connection lost")

    monkeypatch.setattr(TrialDescriber, "describe", slow)
    bed.transports["decode"].script(re.compile(r"^fake-repro\b"), gone)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and "connection lost" in record.failure.message
        assert record.provenance and "decode" in record.provenance, record.provenance


def test_a_value_the_process_never_got_is_blamed_on_export_lines(tmp_path: Path) -> None:
    """A shell-dialect file read by systemd (which skips `export NAME=value` lines): the process
    lacks DECODE_FLAG altogether, and the void trial says why and what to write instead."""
    unit = FakeUnit("decode-server", active=True, reads_as="systemd")
    bed = make_bed({"decode": Role("export DECODE_FLAG=0\n", [unit], dialect="shell")})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    failures = [r.failure for r in result.records]
    assert result.completed == 0 and failures, failures
    for f in failures:
        assert f is not None and f.error == "VerificationError"
        said = r"DECODE_FLAG is unset in the live process, expected '[01]' \(systemd ignores `export"
        assert re.search(said, f.message), f.message


def test_a_repro_that_timed_out_says_where_its_timeout_is_set(tmp_path: Path) -> None:
    """The failure names the setting to raise, where it said only 'repro timed out after 30 s and
    was killed' (the fifth new-user walk: which timeout?)."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    bed.transports["decode"].script(re.compile(r"^fake-repro\b"), Reply(timeout=True))
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1, repro=remote_repro("decode"))
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.kind == "workload", record.failure
        assert re.fullmatch(
            r"repro timed out after \d+ s \(the matrix's repro\.timeout\) and was killed", record.failure.message
        ), record.failure.message
