"""A shell-dialect host whose env file has CRLF line ends, swept with preflight skipped
(`orch run --skip-preflight`): every trial fails, and its failure says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parallel_fakes as pf

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal


def test_a_crlf_shell_file_without_a_final_line_end_fails_naming_crlf_not_a_backslash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`X=1<CR><LF>Y=2`: appending D must first end the last line, and with a CRLF bash would read
    Y as '2\\r'. The trials said "the file ends with a backslash", a file that has none."""
    fleet = pf.Fleet({"prefill": "P=1\n", "decode": "X=1\r\nY=2"})
    pf.install(monkeypatch, fleet)
    matrix, inventory = pf.write_files(tmp_path, pf.fake_matrix("crlf", 1), ["A"])
    inventory.write_text(inventory.read_text().replace("dialect: systemd", "dialect: shell"))
    pf.run(tmp_path, matrix, inventory, ["A"], retries=0)
    trials = [r for r in read_journal(tmp_path / "reports/r1/journal.jsonl").records if isinstance(r, TrialRecord)]
    assert trials and all(r.status == "failed" and r.failure is not None for r in trials)
    for r in trials:
        assert r.failure is not None
        assert "line 2: CRLF line endings: bash keeps the \\r in values" in r.failure.message, r.failure.message
        assert "backslash" not in r.failure.message
    assert fleet.file("A", "decode") == b"X=1\r\nY=2"  # put back as it was
