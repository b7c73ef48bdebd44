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
