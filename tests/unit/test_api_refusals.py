"""What the sweep API itself refuses before a host is touched, whoever calls it: the CLI checks a
taken --run-id before a dry run too, but the overnight queue calls api.run directly, so the API
must not rely on its caller. On the fakes (helpers.parallel_fakes), in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, install_with_preflight, interrupted_sweep, write_files
from helpers.parallel_fakes import run as run_r1

from orchestrator.core.bounds import MAX_REPLICATES
from orchestrator.edges.lock import LockInfo, TestbedLock
from orchestrator.errors import ConfigError, LockError, PreflightError, UsageError
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}


def test_a_run_id_whose_folder_exists_is_refused_before_any_host_is_contacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet(dict(ENV))
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("taken", 1), ["A"])
    earlier = tmp_path / "reports" / "r1"
    earlier.mkdir(parents=True)
    (earlier / "notes.txt").write_text("someone's run\n")
    with pytest.raises(UsageError, match="r1 already exists") as refused:
        run_r1(tmp_path, m, i, ["A"])
    assert refused.value.exit_code == 2
    assert fleet.transports == {}  # no host was connected to
    assert [p.name for p in earlier.iterdir()] == ["notes.txt"]


def test_a_testbed_another_run_holds_is_said_so_before_preflight_judges_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its decode env file is gone (preflight would refuse that), and another controller holds its
    lock: the lock is what the user is told (the testbed is that run's business meanwhile), and no
    lock of this run is written (the queue's on_locking hook is not called)."""
    fleet = Fleet(dict(ENV))
    install_with_preflight(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("held", 1), ["A"])
    testbed = api.load(m, i)[1].testbeds["A"]
    deployment = fleet.connect(testbed)
    TestbedLock(deployment, LockInfo("other-run", "ann", 4242, "far-away", "2026-12-07T01:00:00", "A")).acquire()
    del fleet.transports[("A", "decode")].files["/etc/orch/decode.env"]
    locking: list[Path] = []
    req = api.SweepRequest(
        m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", on_locking=locking.append
    )
    with pytest.raises(LockError, match="other-run") as refused:
        api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert not isinstance(refused.value, PreflightError) and "far-away" in str(refused.value)
    assert locking == []
    assert fleet.file("A", "prefill") == b"P=0\n" and fleet.extra_files("A", "prefill") == [
        "/etc/orch/prefill.env.orch-lock"
    ]  # the other run's lock, nothing of this one


@pytest.mark.parametrize("replicates", [0, MAX_REPLICATES + 1, 10**9])
def test_a_run_json_whose_replicates_are_out_of_bounds_is_refused_before_it_is_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicates: int
) -> None:
    """run.json is the resume's input: 10^9 replicates planned again would hold a billion trial
    positions. Refused at run.json, for the dry run and the resume alike."""
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "bounds")
    run_json = outcome.run_dir / "run.json"
    run_json.write_text(run_json.read_text().replace('"replicates": 3', f'"replicates": {replicates}'))
    for attempt in (
        lambda: api.preview_resume(outcome.run_dir),
        lambda: api.resume(
            api.ResumeRequest(outcome.run_dir), lambda started: QuietProgress(), warn=lambda message: None
        ),
    ):
        with pytest.raises(ConfigError, match=rf"run.json: replicates: {replicates} is not in 1-100,000") as refused:
            attempt()
        assert refused.value.exit_code == 2


def sweep(folder: Path, matrix: str) -> api.SweepOutcome:
    """A one-testbed sweep of `matrix` on the installed fleet, its files and reports in `folder`."""
    folder.mkdir(exist_ok=True)
    return run_r1(folder, *write_files(folder, matrix, ["A"]), ["A"])


def unwritable(run_dir: Path) -> object:
    """render.write_report_and_summary on a full disk."""
    raise ConfigError("reports/r1/index.html: No space left on device")


def test_gates_a_run_could_not_check_fail_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report checks the gates; a report that could not be written checked none, and a CI job
    must not read that as passed (exit 3, saying why). Without gates the run's exit stays 0."""
    from orchestrator.report import render

    install(monkeypatch, Fleet(dict(ENV)))
    monkeypatch.setattr(render, "write_report_and_summary", unwritable)
    gated = sweep(tmp_path / "a", fake_matrix("gated", 1, extra="gates:\n  - {metric: events, upper: 0.5}\n"))
    assert gated.report is None and gated.report_error is not None and "No space left" in gated.report_error
    assert gated.gates_failed == (f"gates not checked: {gated.report_error}",) and gated.exit_code == 3
    ungated = sweep(tmp_path / "b", fake_matrix("ungated", 1))
    assert ungated.report_error is not None and ungated.gates_failed == () and ungated.exit_code == 0


def test_the_dry_run_of_an_ended_run_exits_as_its_resume_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = Fleet(dict(ENV))
    install(monkeypatch, fleet)
    fleet.repro_hook = lambda testbed, command: Reply(3, "", "crashed\n") if "--trial 1" in command else None
    outcome = sweep(tmp_path, fake_matrix("ended", 2))
    assert (outcome.completed, outcome.failed) == (3, 1)
    preview = api.preview_resume(outcome.run_dir)
    assert preview.nothing_left and preview.failed == 1 and preview.exit_code == 1


@pytest.mark.parametrize("testbeds", [("A",), ("A", "B")])
def test_the_dry_run_of_a_stopped_run_says_its_first_trial_restarts_every_edited_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, testbeds: tuple[str, ...]
) -> None:
    """The stopped run's backup is taken up (one testbed's in backup/, each parallel one's in
    backup/<testbed>/), so what its units run is not known: the resume restarts them all first."""
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "unknown", testbeds)
    assert api.preview_resume(outcome.run_dir).restarts_unknown


def test_a_resume_interrupted_once_its_trials_began_does_not_say_it_edited_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the runner has the hosts, what it did is its own to say (it restores them); the
    'stopped before its first trial: it edited no env file' note is only for a resume stopped before."""
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "began")

    def interrupted_in_its_trials(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "execute", interrupted_in_its_trials)
    with pytest.raises(KeyboardInterrupt) as stopped:
        api.resume(api.ResumeRequest(outcome.run_dir), lambda started: QuietProgress(), warn=lambda message: None)
    assert not any("edited no env file" in note for note in getattr(stopped.value, "__notes__", []))


def test_a_restore_whose_report_cannot_be_written_again_says_so_and_still_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.report import render

    fleet, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "rewrite")
    monkeypatch.setattr(render, "write_report_and_summary", unwritable)
    said: list[str] = []
    api.restore(api.RestoreRequest(outcome.run_dir), QuietProgress(), warn=said.append)
    assert said == [
        f"{outcome.run_dir / 'index.html'}: not written again after the restore: reports/r1/index.html: No space "
        f"left on device (run `orch report {outcome.run_dir}` again)"
    ]
    assert fleet.file("A", "decode") == b"D=0\n"
