"""Repro workloads that misbehave: one that hangs (with a background child), one that prints
garbage. Both are workload failures of their own trial only: not retried, not counted as data,
nothing of them left running, the other trials complete and the hosts are restored.
"""

from __future__ import annotations

import html as htmllib

import pytest

from orchestrator.core.records import TrialRecord
from orchestrator.report.build import build_report
from orchestrator.store.journal import load_trials
from orchestrator.store.manifest import load_manifest

from .helpers import SimBed, assert_clean, assert_no_traceback, by_trial, matrix_yaml, pid_running, run_cli, section

pytestmark = pytest.mark.sim

# The repro misbehaves only in cells with overlap=off; elsewhere it is the real sim repro.
# Arguments come as placeholders (shell-quoted by orch), never pasted into the script.
SCRIPT = (
    'case "$1" in *overlap=off*) {bad};; '
    '*) exec "$3" -m orchestrator.sim.repro --router "$4" --sessions 6 --rounds 1 --max-tokens 200 --seed "$5";; esac'
)
ARGS = " repro {cell} {trial_dir} {python} {router_url} {trial_seed}"

HANG = 'echo $$ > "$2/sh.pid"; sleep 1000 & echo $! > "$2/bg.pid"; sleep 1000'
GARBAGE = (
    "head -c 3000 /dev/urandom; "
    'echo; echo "<script>alert(1)</script> {{{{ 7*7 }}}} CORRUPTION sessions: lots/40 wall=fast"'
)


def repro_command(bad: str) -> str:
    script = SCRIPT.format(bad=bad)
    return "sh -c '" + script.replace("'", "'\\''") + "'" + ARGS


def bad_and_good(run_dir) -> tuple[list[TrialRecord], list[TrialRecord]]:  # type: ignore[no-untyped-def]
    trials = list(by_trial(run_dir).values())
    return ([t for t in trials if t.levels["overlap"] == "off"], [t for t in trials if t.levels["overlap"] == "on"])


def test_hanging_repro_is_killed_at_its_timeout_with_all_its_children(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1, command=repro_command(HANG), timeout=2))
    done = run_cli(bed.run_args("hang"), capsys)
    assert_no_traceback(done.output)
    assert done.code == 1, done.output
    run_dir = bed.run_dir("hang")
    bad, good = bad_and_good(run_dir)
    assert len(bad) == 2 and len(good) == 2
    for t in bad:
        assert t.status == "failed" and t.failure is not None
        assert (t.failure.kind, t.failure.error) == ("workload", "WorkloadError")
        assert t.failure.message == "repro timed out after 2 s (the matrix's repro.timeout) and was killed"
        assert t.attempt == 1  # a workload failure is not retried
        assert t.repro is not None and t.repro.exit_code is None
        assert t.duration_s < 15
        trial_dir = run_dir / "trials" / f"{t.trial:04d}"
        pids = [int((trial_dir / name).read_text()) for name in ("sh.pid", "bg.pid")]
        assert not [p for p in pids if pid_running(p)], f"repro processes left: {pids}"
    assert all(t.status == "completed" for t in good)
    assert_clean(bed)


def test_repro_printing_garbage_is_a_workload_failure_not_counted_as_data(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=2, command=repro_command(GARBAGE)))
    done = run_cli(bed.run_args("garbage"), capsys)
    assert_no_traceback(done.output)
    assert done.code == 1, done.output
    run_dir = bed.run_dir("garbage")
    bad, good = bad_and_good(run_dir)
    assert len(bad) == 4 and len(good) == 4
    for t in bad:
        assert t.status == "failed" and t.failure is not None
        assert (t.failure.kind, t.failure.error) == ("workload", "WorkloadError")
        assert "metrics missing or unparseable" in t.failure.message
        assert "corruption" in t.failure.message and "wall" in t.failure.message
        assert t.metrics == {} and t.attempt == 1
    assert all(t.status == "completed" and t.metrics["corruption"].n == 6 for t in good)

    # the statistics hold only completed trials: cells of failed trials have no data at all
    manifest = load_manifest(run_dir)
    trials, _ = load_trials(run_dir)
    report = build_report(manifest, trials)
    for cell in report.cells:
        rate = cell.proportions["corruption"].rate if "corruption" in cell.proportions else None
        if cell.levels["overlap"] == "off":
            assert cell.completed == 0 and cell.failed == 2
            assert rate is None or rate.n == 0
        else:
            assert cell.completed == 2 and rate is not None and rate.n == 12
    assert report.failed == 4 and report.completed == 4

    # the hostile output is shown inert in the report
    page = (run_dir / "index.html").read_text()
    failures = section(page, "failures")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in failures  # shown, as text
    assert "{{ 7*7 }}" in htmllib.unescape(failures)  # shown, not evaluated
    assert "metrics missing" in htmllib.unescape(failures)
    assert_clean(bed)
