"""`orch hunt` exits 0 only when it names a culprit set: a hunt whose failing configuration never
failed ("not_failing") or whose budget ran out first ends with exit 1, as README's table says of
a sweep that stopped early, and its resume, the resume's dry run and the overnight queue's note
say the same. Why: the third new-user walk's hunt found nothing and exited 0, so a script (or
`orch hunt M && publish`) could not tell "here are the culprits" from "no answer".

End to end on the fakes (helpers.parallel_fakes: the sweep API, locks, journal, restore and
report all run; the repro's answer is read from the decode env file the trial wrote). Unit tier."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import Fleet, install_with_preflight, inventory_text

from orchestrator.cli.main import main
from orchestrator.sweep.apitypes import SweepOutcome
from orchestrator.team.overnight import item_outcome

HUNT = """name: fake_hunt
factors:
  alpha: {env: {decode: HUNT_ALPHA}, levels: [on, off]}
  beta: {env: {decode: HUNT_BETA}, levels: [on, off]}
  gamma: {env: {decode: HUNT_GAMMA}, levels: [on, off]}
hunt:
  metric: corruption
  sessions_per_trial: 20
  max_sessions: MAX
seed: 3
repro:
  command: "fake-repro --trial {trial}"
  on: prefill
  timeout: 30
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def _hunt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, culprits: tuple[str, ...], max_sessions: int) -> Path:
    """A hunt matrix on a fleet whose repro fails 8 of 20 sessions when every flag of `culprits`
    is on in the decode env file (none: it never fails); the matrix's path."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "HUNT_ALPHA=off\nHUNT_BETA=off\nHUNT_GAMMA=off\n"})
    install_with_preflight(monkeypatch, fleet)

    def answer(testbed: str, command: str) -> Reply:
        env = fleet.file(testbed, "decode").decode()
        on = {m.group(1).lower() for m in re.finditer(r"^HUNT_(\w+)=[\"']?(?:1|true|on|yes)\b", env, re.M)}
        fails = bool(culprits) and set(culprits) <= on
        return Reply(0, f"CORRUPTION sessions: {8 if fails else 0}/20\n")

    fleet.repro_hook = answer
    (tmp_path / "inv.yaml").write_text(inventory_text(["tb"]))
    matrix = tmp_path / "hunt.yaml"
    matrix.write_text(HUNT.replace("MAX", str(max_sessions)))
    return matrix


def _orch_hunt(tmp_path: Path, matrix: Path) -> int:
    inv = str(tmp_path / "inv.yaml")
    return main(["hunt", str(matrix), "-i", inv, "-t", "tb", "--out", str(tmp_path / "r"), "--run-id", "h1"])


@pytest.mark.parametrize(
    ("culprits", "max_sessions", "state"),
    [((), 2000, "not_failing"), (("alpha", "beta"), 100, "budget")],
    ids=["never-failing", "budget"],
)
def test_a_hunt_that_names_no_culprit_set_exits_1_and_says_why(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    culprits: tuple[str, ...],
    max_sessions: int,
    state: str,
) -> None:
    matrix = _hunt(tmp_path, monkeypatch, culprits, max_sessions)
    code = _orch_hunt(tmp_path, matrix)
    said = capsys.readouterr()
    out = " ".join(said.out.split())
    assert code == 1, (out, said.err)
    assert f"the hunt named no culprit set ({state}: " in out and out.endswith("): exit code 1"), out
    run = tmp_path / "r" / "h1"
    # the resume of the ended hunt, and its dry run, exit as the hunt did
    assert main(["resume", str(run), "--dry-run"]) == 1
    dry = " ".join(capsys.readouterr().out.split())
    assert "the hunt named no culprit set: the resume exits 1, as this does" in dry, dry
    assert main(["resume", str(run)]) == 1


def test_a_hunt_that_names_its_culprits_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = _hunt(tmp_path, monkeypatch, ("alpha", "beta"), 2000)
    code = _orch_hunt(tmp_path, matrix)
    said = capsys.readouterr()
    out = " ".join(said.out.split())
    assert code == 0, (out, said.err)
    assert "no culprit set" not in out and "exit code" not in out, out
    assert main(["resume", str(tmp_path / "r" / "h1"), "--dry-run"]) == 0


def _outcome(ended: tuple[str, str] | None, **kw: object) -> SweepOutcome:
    fields: dict[str, object] = {"run_dir": Path("/r/h1"), "run_id": "h1", "status": "completed"}
    fields |= {"completed": 30, "failed": 0, "planned": None, "hunt_ended": ended} | kw
    return SweepOutcome(**fields)  # type: ignore[arg-type]


def test_the_queue_says_a_hunt_named_no_culprit_set_rather_than_see_the_log() -> None:
    note = item_outcome(_outcome(("not_failing", "the failing configuration did not show 2 failures")), None)
    assert (note.status, note.exit_code) == ("completed", 1)
    assert "the hunt named no culprit set (not_failing: the failing configuration did not show 2" in note.message
    assert "see the log" not in note.message
    found = item_outcome(_outcome(("found", "posterior 0.97")), None)
    assert (found.status, found.exit_code) == ("completed", 0)
    assert "no culprit" not in found.message


def test_an_interrupted_hunt_keeps_130_and_a_failed_trial_keeps_1() -> None:
    assert _outcome(None, interrupted=True, status="interrupted").exit_code == 130
    assert _outcome(("found", "x"), failed=1, status="failed").exit_code == 1
    assert _outcome(None).exit_code == 0  # not a hunt (or a hunt the report could not replay)


def test_orch_hunt_resume_of_an_ended_hunt_ends_with_the_runs_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch hunt M --resume RUN` prints what `orch resume RUN` prints at its end: the trials
    completed and failed (it ended silent but for the exit code under one mutant)."""
    matrix = _hunt(tmp_path, monkeypatch, ("alpha", "beta"), 2000)
    assert _orch_hunt(tmp_path, matrix) == 0
    said = capsys.readouterr()
    first = " ".join(said.out.split())
    # its progress: announced on the terminal, and status.json for `orch status` and `orch serve`
    assert f"run h1; hunt on tb -> {tmp_path / 'r' / 'h1'}" in said.err, said.err
    assert (tmp_path / "r" / "h1" / "status.json").is_file()
    counts = re.search(r"(\d+) trials completed, 0 failed", first)
    assert counts is not None, first
    inv, run = str(tmp_path / "inv.yaml"), str(tmp_path / "r" / "h1")
    assert main(["hunt", str(matrix), "-i", inv, "--resume", run]) == 0
    again = " ".join(capsys.readouterr().out.split())
    assert f"{counts.group(1)} trials completed, 0 failed" in again, again
