"""Units that fail: one that crash-loops (exits at start-up) and one whose health endpoint never
becomes ready. Each is recorded as an infrastructure failure within seconds, retried per
--retries, the sweep goes on (or stops at once with --fail-fast), the report lists it, and the
hosts are restored.
"""

from __future__ import annotations

import html as htmllib

import pytest

from orchestrator.core.records import TrialRecord

from .helpers import SimBed, assert_clean, assert_no_traceback, by_trial, manifest, matrix_yaml, run_cli, section

pytestmark = pytest.mark.sim

CRASH = """\
  start:
    levels:
      fine: {decode: {SIM_FAIL_START: null}}
      crash: {decode: {SIM_FAIL_START: "1"}}
"""
NEVER_READY = """\
  ready:
    levels:
      fine: {decode: {SIM_NEVER_READY: null}}
      never: {decode: {SIM_NEVER_READY: "1"}}
"""
# The "never" level waits this long; the "fine" cells' decode must be ready within it too. With
# 1 s a fine trial failed on a loaded 2-core CI machine (the simulator's start-up is ~0.15 CPU-s).
HEALTH_TIMEOUT = "health_timeouts: {decode: 5}\n"


def only_one_bad_cell(factor: str, level: str) -> str:
    """Exclude the bad level everywhere but in the baseline-like cell: one bad trial a round."""
    return f"exclude:\n  - {{{factor}: {level}, cuda_graph: off}}\n  - {{{factor}: {level}, overlap: off}}\n"


def bad_trials(run_dir, factor: str, level: str) -> list[TrialRecord]:  # type: ignore[no-untyped-def]
    return [r for r in by_trial(run_dir).values() if r.levels[factor] == level]


def test_crash_looping_unit_fails_its_trial_fast_and_the_sweep_goes_on(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1, extra_factor=CRASH, extra=only_one_bad_cell("start", "crash")))
    done = run_cli(bed.run_args("crash"), capsys)
    assert_no_traceback(done.output)
    assert done.code == 1, done.output
    run_dir = bed.run_dir("crash")
    trials = by_trial(run_dir)
    assert len(trials) == 5
    [bad] = bad_trials(run_dir, "start", "crash")
    assert bad.status == "failed" and bad.failure is not None
    assert (bad.failure.kind, bad.failure.error) == ("infrastructure", "ServiceError")
    assert "f-decode" in bad.failure.message and "exited with code 1" in bad.failure.message
    assert "SIM_FAIL_START is set" in bad.failure.detail  # the unit's log tail
    assert bad.attempt == 2  # --retries 1 (the default): one more attempt
    assert bad.duration_s < 10, "found by the unit's death, not by the 30 s health timeout"
    assert bad.metrics == {}
    assert all(t.status == "completed" for t in trials.values() if t.trial != bad.trial)
    # one line per failed attempt in the output, no traceback
    assert (
        f"trial {bad.trial} ({bad.cell}) attempt 1 failed: decode (local): unit f-decode: exited with code 1; retrying"
        in done.output.splitlines()
    )
    assert f"{bad.cell}: FAILED (ServiceError)" in done.output

    failures = htmllib.unescape(section((run_dir / "index.html").read_text(), "failures"))
    assert "ServiceError" in failures and bad.cell in failures and "exited with code 1" in failures
    assert manifest(run_dir).status == "failed"
    assert_clean(bed)


def test_never_ready_health_times_out_is_retried_and_the_sweep_goes_on(bed: SimBed, capsys) -> None:
    bed.write_matrix(
        matrix_yaml(
            replicates=1,
            extra_factor=NEVER_READY,
            extra=only_one_bad_cell("ready", "never") + HEALTH_TIMEOUT,
        )
    )
    done = run_cli(bed.run_args("never", "--retries", "2"), capsys)
    assert_no_traceback(done.output)
    assert done.code == 1, done.output
    run_dir = bed.run_dir("never")
    trials = by_trial(run_dir)
    [bad] = bad_trials(run_dir, "ready", "never")
    assert bad.status == "failed" and bad.failure is not None
    assert (bad.failure.kind, bad.failure.error) == ("infrastructure", "HealthTimeout")
    assert "not ready after 5.0 s" in bad.failure.message and "503" in bad.failure.message
    assert bad.attempt == 3  # --retries 2
    assert manifest(run_dir).retries == 2  # kept in run.json: a resume retries the same way
    assert done.output.count(f"({bad.cell}) attempt") == 2
    assert len(trials) == 5 and all(t.status == "completed" for t in trials.values() if t.trial != bad.trial)
    assert_clean(bed)


def test_fail_fast_stops_at_the_first_failed_trial(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=2, extra_factor=NEVER_READY, order="sequential", extra=HEALTH_TIMEOUT))
    done = run_cli(bed.run_args("ff", "--fail-fast", "--retries", "0"), capsys)
    assert_no_traceback(done.output)
    assert done.code == 1, done.output
    assert "stopping at the first failed trial (--fail-fast)" in done.output
    run_dir = bed.run_dir("ff")
    trials = sorted(by_trial(run_dir).values(), key=lambda t: t.trial)
    assert trials[-1].status == "failed" and trials[-1].levels["ready"] == "never", trials[-1].failure
    assert all(t.status == "completed" for t in trials[:-1])
    assert trials[-1].attempt == 1
    assert len(trials) < len(manifest(run_dir).plan)  # nothing ran after it
    assert_clean(bed)
