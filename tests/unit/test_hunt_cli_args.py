"""`orch hunt` refuses in a dry run what the hunt would refuse, and a negative --retries, as
`orch run` does (it took --retries -1 as 0, and a dry run said "nothing was changed" of a
run id the hunt then refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
HUNT = str(REPO / "matrices/dsv4_hunt.yaml")
INVENTORY = str(REPO / "inventory/local.yaml")


@pytest.mark.parametrize("retries", ["-1", "99999"])
def test_hunt_refuses_retries_out_of_range(retries: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["hunt", HUNT, "-i", INVENTORY, "--dry-run", "--retries", retries])
    assert info.value.code == 2
    assert "--retries" in capsys.readouterr().err


def test_hunt_dry_run_refuses_a_bad_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", HUNT, "-i", INVENTORY, "--dry-run", "--out", str(tmp_path), "--run-id", "../../etc"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "invalid run id" in captured.err and "nothing was changed" not in captured.out


def test_hunt_dry_run_refuses_a_taken_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    code = main(["hunt", HUNT, "-i", INVENTORY, "--dry-run", "--out", str(tmp_path), "--run-id", "taken"])
    captured = capsys.readouterr()
    assert code == 2 and "already exists" in captured.err, captured


def test_hunt_dry_run_with_good_arguments_still_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", HUNT, "-i", INVENTORY, "--dry-run", "--out", str(tmp_path), "--retries", "2"])
    assert code == 0 and "dry run: nothing was changed" in capsys.readouterr().out


def test_hunt_resume_dry_run_previews_and_resumes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orch hunt M --resume RUN --dry-run` is `orch resume RUN --dry-run`: it ignored --dry-run and
    resumed the hunt for real (the testbed's lock taken, env files edited: found by
    bench_fuzz_inputs.py, whose refused process starts it recorded)."""
    from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

    from orchestrator.sweep import api

    matrix = small_hunt(tmp_path)
    run_dir = tmp_path / "reports" / "20261205-000000-small_hunt"
    hunt_run(run_dir, matrix, truth_answer(matrix), limit=10, status="interrupted")
    before = sorted(p.name for p in run_dir.iterdir())

    def resumed(*args: object, **kwargs: object) -> object:
        raise AssertionError("a dry run resumed the hunt")

    monkeypatch.setattr(api, "resume", resumed)
    code = main(["hunt", str(matrix.path), "-i", INVENTORY, "--resume", str(run_dir), "--dry-run"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    assert "resume 20261205-000000-small_hunt" in out and "dry run: nothing was changed" in out, out
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no lock, no page


def test_hunt_resume_dry_run_still_refuses_another_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

    matrix = small_hunt(tmp_path)
    run_dir = tmp_path / "reports" / "20261205-000000-small_hunt"
    hunt_run(run_dir, matrix, truth_answer(matrix), limit=10, status="interrupted")
    code = main(["hunt", HUNT, "-i", INVENTORY, "--resume", str(run_dir), "--dry-run"])
    assert code == 2 and "differs from the matrix of run" in capsys.readouterr().err


def test_hunt_takes_seed_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 is a seed (as for `orch run --seed 0`), not a missing one."""
    code = main(["hunt", HUNT, "-i", INVENTORY, "--dry-run", "--out", str(tmp_path), "--seed", "0"])
    assert code == 0 and "dry run: nothing was changed" in capsys.readouterr().out
