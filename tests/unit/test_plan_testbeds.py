"""`orch plan MATRIX -t tb1,tb2` and `orch validate` name the testbeds the run would use, and the plan
gives the time they take side by side: both said "on testbed tb1", and the plan the time of tb1
running every trial (16 s for a sweep the two ran in 9 s; the eighth new-user walk)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.sim_testbeds import write_inventory

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
MATRIX = str(REPO / "matrices" / "cuda_graph_flags.yaml")


def _seconds(text: str) -> int:
    """`1m05s` -> 65."""
    m = re.fullmatch(r"(?:(\d+)m)?(\d+)s", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def _duration_line(out: str) -> str:
    return " ".join(next(line for line in out.splitlines() if line.startswith("estimated duration:")).split())


def test_plan_across_two_testbeds_names_both_and_halves_the_time(tmp_path: Path, capsys) -> None:
    inventory, _ = write_inventory(tmp_path, ["tb1", "tb2"], {"prefill": "", "decode": "", "router": ""})
    assert main(["plan", MATRIX, "-i", str(inventory), "-t", "tb1"]) == 0
    alone = capsys.readouterr().out
    assert main(["plan", MATRIX, "-i", str(inventory), "-t", "tb1,tb2"]) == 0
    both = capsys.readouterr().out
    assert "on testbed tb1:" in " ".join(alone.splitlines()[0].split()), alone
    assert "across 2 testbeds (tb1, tb2):" in " ".join(both.splitlines()[0].split()), both
    one = _seconds(_duration_line(alone).split()[2])
    m = re.match(r"estimated duration: (\S+) across 2 testbeds \((\S+) on one testbed alone\)", _duration_line(both))
    assert m, both
    side_by_side, said_alone = _seconds(m.group(1)), _seconds(m.group(2))
    assert said_alone == one  # the one-testbed figure is still given
    assert one / 2 <= side_by_side < one  # the first trial on each, then half of the rest
    assert "if tb1 ran every trial" in " ".join(both.split()), both  # the restart count is one testbed's


def test_validate_across_two_testbeds_names_both(tmp_path: Path, capsys) -> None:
    inventory, _ = write_inventory(tmp_path, ["tb1", "tb2"], {"prefill": "", "decode": "", "router": ""})
    assert main(["validate", MATRIX, "-i", str(inventory), "-t", "tb1,tb2"]) == 0
    first = " ".join(capsys.readouterr().out.splitlines()[0].split())
    assert first.endswith("trials across 2 testbeds ('tb1', 'tb2')"), first
