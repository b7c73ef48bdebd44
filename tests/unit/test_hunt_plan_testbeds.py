"""`orch plan HUNT -t all` and `orch hunt HUNT -t all --dry-run` show the same expected cost, on
the testbeds -t names: the plan printed "on 1 testbed(s), ~1m14s" while the dry run printed
"2 testbed(s), ~37s" for the same hunt (the plan ignored -t)."""

from __future__ import annotations

from pathlib import Path

from helpers.sim_testbeds import write_inventory

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_plan_and_dry_run_of_a_hunt_agree_on_its_testbeds_and_time(tmp_path: Path, capsys) -> None:
    inventory, _ = write_inventory(tmp_path, ["tb1", "tb2"], {"prefill": "", "decode": "", "router": ""})
    matrix = str(REPO / "matrices" / "dsv4_hunt.yaml")
    assert main(["plan", matrix, "-i", str(inventory), "-t", "all"]) == 0
    planned = capsys.readouterr().out
    assert main(["hunt", matrix, "-i", str(inventory), "-t", "all", "--dry-run", "--out", str(tmp_path / "r")]) == 0
    dry = capsys.readouterr().out

    def expected(out: str) -> str:
        return " ".join(next(line for line in out.splitlines() if line.startswith("expected:")).split())

    assert expected(planned) == expected(dry) and " on 2 testbeds " in expected(planned), (planned, dry)
    assert "across 2 testbeds (tb1, tb2)" in " ".join(planned.split()), planned
