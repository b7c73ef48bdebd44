"""The end lines of `orch run` and `orch restore` (cli.output) where the thirteenth mutation round
found none held: the report's path, an env file set aside (said again at the end, where a script's
log keeps it), the restore's "not restored" line with a folder whose name holds brackets, and the
host lines of a restore that set a file aside even though every host had been restored before."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import output
from orchestrator.sweep import apitypes
from orchestrator.sweep.apitypes import RestoreOutcome, SweepOutcome

KEPT = (("decode", "/etc/sim/decode.env.orch-kept-r1"),)


def test_the_run_ends_with_its_report_and_every_file_set_aside(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = SweepOutcome(
        Path("reports/r1"), "r1", "completed", 8, 0, 8, kept=KEPT, report=Path("reports/r1/index.html")
    )
    output.show_outcome(outcome)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "8 trials completed, 0 failed"
    assert lines[1].startswith("kept aside: decode (/etc/sim/decode.env.orch-kept-r1): what its env file held")
    assert lines[-1] == "report: reports/r1/index.html"


def test_a_restore_left_incomplete_names_its_command_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """A folder named with brackets (`reports/[red]x`) lost them to rich markup in the one line
    that says how to finish the restore."""
    tb = apitypes.TestbedRestore("A", ("prefill", "decode"), True, not_restored=("decode",))
    output.show_restore(RestoreOutcome(Path("reports/[red]x/r1"), "r1", (tb,)))
    assert capsys.readouterr().err == ("not restored: decode; run `orch restore reports/[red]x/r1` again to finish\n")


def test_hosts_restored_before_are_listed_when_the_restore_set_a_file_aside(capsys: pytest.CaptureFixture[str]) -> None:
    """Every host restored before says so in one summary line; with a file set aside its host lines
    come first, as when one is left unrestored (the line per host says which was set aside where)."""
    hosts = ("prefill", "decode")
    lines = ("prefill: restored already; nothing to do", "decode: restored already; nothing to do")
    plain = apitypes.TestbedRestore("A", hosts, True, already=hosts, host_lines=lines)
    output.show_restore(RestoreOutcome(Path("reports/r1"), "r1", (plain,)))
    assert not any(line in capsys.readouterr().out for line in lines)
    kept = apitypes.TestbedRestore("A", hosts, True, already=hosts, host_lines=lines, kept=KEPT)
    output.show_restore(RestoreOutcome(Path("reports/r1"), "r1", (kept,)))
    said = capsys.readouterr().out.splitlines()
    assert said[:2] == list(lines) and said[-1].startswith("kept aside: decode (")
