"""`orch compare` compares the server settings each cell was served with, cell by cell.

run.json's host facts hold the server info of the cell a run ran FIRST (core.hostfacts.BY_CELL):
compare set those side by side, so two runs whose first cells set other flags read as "served
otherwise" though every cell was served alike, and a tp_size that differed in every cell but the
first was said nowhere. Now the trials' own server info (their provenance digests) is compared per
cell and role, and the first cell's is left out of the host lines. End to end on the fakes
(helpers.parallel_fakes: each server answers /get_server_info from its env file), then the
`orch compare` command, so what the journal really keeps is what compare reads. Unit tier."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from helpers.manifests import planned
from helpers.parallel_fakes import fake_matrix, fleet, write_files

from orchestrator.cli.main import main
from orchestrator.core.records import TrialProvenance
from orchestrator.core.redact import REDACTED
from orchestrator.report.servedsettings import CellServers, run_setting_lines
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

ORDER = "order: sequential\n"


def sweep(folder: Path, run_id: str, levels: str = '["1", "2"]') -> Path:
    """`orch run` of factor d (D on decode) on testbed x through the API, cells in `levels` order."""
    folder.mkdir()
    text = fake_matrix("pair", 2, extra=ORDER).replace('["1", "2"]', levels)
    matrix, inventory = write_files(folder, text, ["x"])
    req = api.SweepRequest(
        matrix, inventory, testbeds=("x",), reports_dir=folder / "reports", run_id=run_id, skip_preflight=True
    )
    outcome = api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert outcome.status == "completed" and outcome.completed == 4
    return outcome.run_dir


def compare(tmp_path: Path, a: Path, b: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """The terminal's lines (unwrapped) and the page's text of `orch compare A B`."""
    capsys.readouterr()
    out = tmp_path / "cmp.html"
    assert main(["compare", str(a), str(b), "-o", str(out)]) == 0
    return " ".join(capsys.readouterr().err.split()), html.unescape(out.read_text())


def test_first_cells_that_set_other_flags_are_no_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The decode server reports disable_cuda_graph from D; A runs cell d=1 first, B d=2 first:
    every cell was served alike in both runs, so no line says the server info or a setting differed."""
    f = fleet(monkeypatch, x=("H100", "550"))
    f.info_of = lambda testbed, role: {"tp_size": 2, "disable_cuda_graph": b"D=2" in f.file(testbed, role)}
    a = sweep(tmp_path / "a", "ra")
    b = sweep(tmp_path / "b", "rb", '["2", "1"]')
    hosts_a, hosts_b = (api.load_manifest(r).hosts["decode"]["server_info"] for r in (a, b))
    assert hosts_a != hosts_b  # run.json's host facts: each run's first cell
    terminal, page = compare(tmp_path, a, b, capsys)
    for said in (terminal, page):
        assert "server info differed" not in said
        assert "server setting" not in said


def test_a_setting_that_differed_past_the_first_cell_is_said_per_cell_and_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """B's decode server ran cell d=2 with tp_size 4 (A: 2 everywhere), its first cell d=1 alike:
    one line names the role, the setting, both values and the cell; prefill (alike) is not named."""
    f = fleet(monkeypatch, x=("H100", "550"))
    tp = {"n": 2}
    f.info_of = lambda testbed, role: {"tp_size": tp["n"] if b"D=2" in f.file(testbed, role) else 2}
    a = sweep(tmp_path / "a", "ra")
    tp["n"] = 4
    b = sweep(tmp_path / "b", "rb")
    line = "the decode role's server setting tp_size was '2' in A, '4' in B (server info, in cell d=2)"
    terminal, page = compare(tmp_path, a, b, capsys)
    assert line in terminal, terminal
    assert line in page
    assert "prefill role's server setting" not in terminal


def test_settings_lines_are_bounded_masked_and_leave_out_what_varies_within_a_run() -> None:
    """Pure (report.servedsettings): 12 settings differ in one cell, so 10 lines and a count; a
    secret-named setting is masked whole in both values; a setting that varies among one run's own
    trials of the cell (a per-start value) and one only A's server reports are not differences."""
    base = planned()[1]

    def served(digest: str, info: dict[str, object]) -> dict[str, TrialProvenance]:
        return {"decode": TrialProvenance(server_info_sha=digest, server_info=json.dumps(info))}

    sa, sb = CellServers(), CellServers()
    sa.add("c", served("a1", {"api_key": "k1"} | {f"s{i:02}": 1 for i in range(12)} | {"drawn": 1, "new": 1}))
    sa.add("c", served("a2", {"api_key": "k1"} | {f"s{i:02}": 1 for i in range(12)} | {"drawn": 2, "new": 1}))
    sb.add("c", served("b1", {"api_key": "k2"} | {f"s{i:02}": 2 for i in range(12)} | {"drawn": 3}))
    lines = run_setting_lines(base, sa, base, sb)
    masked = f"'{REDACTED}' in A, '{REDACTED}' in B"
    assert lines[0] == f"the decode role's server setting api_key was {masked} (server info, in cell c)"
    assert lines[1:10] == [
        f"the decode role's server setting s{i:02} was '1' in A, '2' in B (server info, in cell c)" for i in range(9)
    ]
    assert lines[10:] == ["3 more server settings differed (not listed)"]
    assert not any("drawn" in line or "new" in line for line in lines)
    sb.add("d", served("d1", {"s00": 3}))  # a cell only B ran: nothing to compare it with
    assert run_setting_lines(base, sa, base, sb) == lines
