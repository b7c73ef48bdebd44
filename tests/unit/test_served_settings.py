"""A parallel run whose testbeds served a cell with other server settings says so, one line each.

Each trial records, per host, the digest of what its server says about itself (/get_server_info,
edges.provenance.TrialDescriber), but only run.json's host facts were compared between testbeds,
and those leave the server info out (the first cell's: core.hostfacts.BY_CELL): testbed y serving
with tp_size 4 where x served with 2 was said nowhere. Unit tier: `orch run` on the fakes, each
testbed's servers answering their own settings, and trial records in memory for the bounds."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from helpers.manifests import planned
from helpers.parallel_fakes import fake_matrix, fleet, run, write_files

from orchestrator.core.records import TrialProvenance, TrialRecord
from orchestrator.report.render import load_report
from orchestrator.report.servedsettings import SETTINGS_SAID, served_setting_findings
from orchestrator.store.journal import read_journal

MATRIX = fake_matrix("settings", 6)  # each cell on both testbeds


def said(run_dir: Path) -> list[str]:
    return [f.text for f in load_report(run_dir).headline if "server settings" in f.text]


def test_testbeds_serving_other_settings_are_one_line_per_role_and_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """y's servers say tp_size 4 where x's say 2: one line per role, both cells named; their ports
    (where each runs) and the setting they share are not said; the page shows the lines."""
    f = fleet(monkeypatch)
    f.info = {
        "A": {"tp_size": 2, "port": 30000, "disable_cuda_graph": False},
        "B": {"tp_size": 4, "port": 31000, "disable_cuda_graph": False},
    }
    m, i = write_files(tmp_path, MATRIX, ["A", "B"])
    outcome = run(tmp_path, m, i, ["A", "B"])
    assert outcome.status == "completed"
    ran = [
        (t.cell, t.testbed)
        for t in read_journal(outcome.run_dir / "journal.jsonl").records
        if isinstance(t, TrialRecord)
    ]
    both = sorted(c for c in {c for c, _ in ran} if (c, "A") in ran and (c, "B") in ran)
    assert both, ran  # 6 trials of each cell: the testbeds take them as they come
    cells = f"cell{'s' if len(both) > 1 else ''} {', '.join(both)}"
    tail = f"(server info, in {cells}); a cell's trials pooled over them mix both."
    assert said(outcome.run_dir) == [
        f"Testbeds served other server settings: the prefill role's tp_size was '2' on A; '4' on B {tail}",
        f"Testbeds served other server settings: the decode role's tp_size was '2' on A; '4' on B {tail}",
    ]
    page = html.unescape((outcome.run_dir / "index.html").read_text())
    assert all(line in page for line in said(outcome.run_dir))


def test_testbeds_serving_alike_say_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = fleet(monkeypatch)
    f.info = {"A": {"tp_size": 2, "port": 30000}, "B": {"tp_size": 2, "port": 31000}}
    m, i = write_files(tmp_path, MATRIX, ["A", "B"])
    assert said(run(tmp_path, m, i, ["A", "B"]).run_dir) == []


def trial(n: int, cell: str, testbed: str, info: dict[str, object]) -> TrialRecord:
    text = json.dumps(info, sort_keys=True)
    served = TrialProvenance(server_info_sha=f"{hash(text) & 0xFFFFFFFF:08x}", server_info=text)
    return TrialRecord(
        run_id="r1",
        trial=n,
        round=0,
        cell=cell,
        levels={},
        testbed=testbed,
        status="completed",
        started="T",
        ended="T",
        duration_s=1.0,
        provenance={"decode": served},
    )


def test_many_differing_settings_and_cells_are_bounded() -> None:
    """14 settings differ in 5 cells: SETTINGS_SAID lines, then one counting the rest; each line
    names 3 cells and counts the others."""
    x = {f"s{k:02d}": 1 for k in range(14)}
    y = {f"s{k:02d}": 2 for k in range(14)}
    trials = [trial(n, f"c{n}", "x", x) for n in range(5)] + [trial(5 + n, f"c{n}", "y", y) for n in range(5)]
    lines = [f.text for f in served_setting_findings(planned()[1], trials)]
    assert len(lines) == SETTINGS_SAID + 1
    assert lines[0] == (
        "Testbeds served other server settings: the decode role's s00 was '1' on x; '2' on y "
        "(server info, in cells c0, c1, c2 and 2 more); a cell's trials pooled over them mix both."
    )
    assert lines[-1] == "Testbeds served 4 more server settings otherwise (not listed)."


def test_what_a_server_draws_at_each_start_is_no_testbed_difference() -> None:
    """SGLang draws `random_seed` at each start when none is given (ServerArgs.__post_init__), so
    every restart of every testbed serves with another: said as a testbed difference, it was a
    caution on every real parallel run. A setting whose value differs among one testbed's own
    trials of the cell is the server's per-start value too; tp_size, alike within each testbed and
    unlike between them, is still said."""
    trials = [
        trial(0, "c0", "x", {"random_seed": 11, "tp_size": 2, "warmups": "a"}),
        trial(1, "c0", "x", {"random_seed": 12, "tp_size": 2, "warmups": "b"}),
        trial(2, "c0", "y", {"random_seed": 13, "tp_size": 4, "warmups": "c"}),
        trial(3, "c0", "y", {"random_seed": 14, "tp_size": 4, "warmups": "d"}),
    ]
    lines = [f.text for f in served_setting_findings(planned()[1], trials)]
    assert lines == [
        "Testbeds served other server settings: the decode role's tp_size was '2' on x; '4' on y "
        "(server info, in cell c0); a cell's trials pooled over them mix both."
    ]
    once = [trial(0, "c0", "x", {"random_seed": 11}), trial(1, "c0", "y", {"random_seed": 13})]
    assert served_setting_findings(planned()[1], once) == []  # one trial each: the seed, by name
