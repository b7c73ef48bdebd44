"""`orch hunt`'s own lines, where the thirteenth mutation round found none held: the dry run's
suspects with their failing and clean levels, where it runs, the expected time and the two
baselines it is weighed against; how a matrix passed with --resume differs when only whitespace
does, or when one is longer; the end of a hunt whose report cannot be written, and of one that
exits 1 for a failed trial while naming its culprits."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.hunt import _first_difference, after, print_hunt_plan
from orchestrator.cli.planview import human_duration
from orchestrator.core.huntplan import expected_sessions
from orchestrator.sweep import api
from orchestrator.sweep.apitypes import SweepOutcome

REPO = Path(__file__).resolve().parents[2]


def _dry_run(testbeds: tuple[str, ...]) -> tuple[str, api.Prepared]:
    prepared = api.prepare(api.SweepRequest(REPO / "matrices/dsv4_hunt.yaml", REPO / "inventory/local.yaml"))
    console = Console(width=1000, record=True)
    print_hunt_plan(prepared.plan, console, testbeds)
    return console.export_text(), prepared


def test_the_dry_run_lists_each_suspect_and_where_it_runs() -> None:
    text, prepared = _dry_run(("local-sim",))
    spec = prepared.plan.matrix.hunt
    assert spec is not None and len(spec.flags) == 16
    assert " on local-sim\n" in text.splitlines(keepends=True)[0]
    for flag in spec.flags:
        assert f"  {flag}: fails at {spec.failing[flag]}, clean at {spec.clean[flag]}\n" in text


@pytest.mark.parametrize("beds", [("local-sim",), ("a", "b", "c", "d")])
def test_the_dry_runs_expected_cost_is_sessions_over_a_trials_sessions_times_its_time(beds: tuple[str, ...]) -> None:
    text, prepared = _dry_run(beds)
    spec, per_trial = prepared.plan.matrix.hunt, prepared.plan.steps[0].estimate_s
    assert spec is not None
    median, p90 = expected_sessions(spec)
    took = [human_duration(s / spec.sessions_per_trial * per_trial / len(beds)) for s in (median, p90)]
    line = " ".join(next(x for x in text.splitlines() if x.startswith("expected:")).split())
    assert line.startswith(
        f"expected: ~{median} sessions (p90 {p90}) = ~{median // spec.sessions_per_trial} trials of "
        f"{spec.sessions_per_trial} sessions, ~{took[0]} (p90 {took[1]}) on "
    ), line
    # the baselines for 16 flags: one flag at a time with 80 sessions each, every configuration
    assert line.endswith("one flag at a time: 1,360 sessions; full factorial: 65,536 configurations"), line


def test_a_matrix_differing_only_in_whitespace_or_length_is_said_so() -> None:
    assert _first_difference("a: 1\nb: 2\n", "a: 1\nb: 2") == (
        None,
        "in a secret's value or in whitespace (its lines read the same)",
    )
    assert _first_difference("a: 1\nb: 2\nc: 3\n", "a: 1\nb: 2\n") == (
        3,
        "'c: 3' here, '(the end of the file)' in the run",
    )
    assert _first_difference("a: 1\n", "a: 1\nb: 2\n") == (2, "'(the end of the file)' here, 'b: 2' in the run")


def _outcome(run_dir: Path, **kw: object) -> SweepOutcome:
    fields: dict[str, object] = {"run_dir": run_dir, "run_id": "h1", "status": "completed"}
    fields |= {"completed": 29, "failed": 1, "planned": None, "hunt_ended": ("found", "posterior 0.97")} | kw
    return SweepOutcome(**fields)  # type: ignore[arg-type]


def test_a_hunt_that_named_its_culprits_and_failed_a_trial_says_no_unanswered_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = _outcome(tmp_path / "gone")
    assert outcome.exit_code == 1 and outcome.unanswered is None
    after(outcome)
    assert "exit code 1" not in capsys.readouterr().out


def test_a_hunt_whose_report_cannot_be_written_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "h1"
    run.mkdir()
    (run / "run.json").write_text("{torn")
    after(_outcome(run))
    assert "hunt report not written:" in capsys.readouterr().err
