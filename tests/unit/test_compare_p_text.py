"""The compare page writes Holm's p as the run's report does (1.000, 0.012, 4e-5) and says "no"
in its sig. column for a tested row that is not significant: it showed '%.2g' ("1", "0.012")
beside a blank, where the report of either run says p=1.000 (the browser walk)."""

from __future__ import annotations

from pathlib import Path

from helpers.page_text import parsed
from helpers.report_synth import synthetic_run, write_run

from orchestrator.report.compare import write_comparison_page


def test_p_is_written_as_the_report_writes_it_and_a_tested_row_says_no(tmp_path: Path) -> None:
    a, ta = synthetic_run(replicates=4, seed=1, run_id="ra")
    b, tb = synthetic_run(replicates=4, seed=1, run_id="rb")  # the same data: nothing differs
    page = write_comparison_page(write_run(tmp_path / "ra", a, ta), write_run(tmp_path / "rb", b, tb))
    tables = parsed(page.path.read_text()).tables
    (rows,) = [t for t in tables.values() if t and t[0][-2:] == ["p (Holm)", "sig."]]
    tested = [r for r in rows[1:] if r[-2] not in ("–", "not tested")]
    assert tested, rows
    assert all(r[-2] == "1.000" and r[-1] == "no" for r in tested), tested
