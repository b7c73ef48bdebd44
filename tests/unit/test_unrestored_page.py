"""A run's own report page (RUN/index.html) and its summary.json say when its restore left hosts
changed, as status.json says at the time they are written; a run that restored fine shows no such
block. Run folders written as orch writes them (run.json, plan.json, the journal, status.json by
team.livestatus). Unit tier: no process."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.hunt_runs import hunt_run, small_hunt, truth_answer
from helpers.page_text import parsed
from helpers.report_synth import synthetic_run, write_run

from orchestrator.report.render import ROLES_SHOWN, write_report_and_summary
from orchestrator.team.livestatus import LiveStatus


def run_left(tmp_path: Path, not_restored: tuple[str, ...], *, hunt: bool = False) -> Path:
    """A finished run (`hunt`: `orch hunt`'s) whose restore left `not_restored` changed (none:
    restored fine)."""
    if hunt:
        run_dir = tmp_path / "reports" / "hunt"
        matrix = small_hunt(tmp_path)
        hunt_run(run_dir, matrix, truth_answer(matrix), limit=24)
    else:
        manifest, records = synthetic_run(replicates=1, failures=False)
        run_dir = write_run(tmp_path / "reports" / manifest.run_id, manifest, records, plan_json=True)
    live = LiveStatus(run_dir)
    live.start(0, 0)
    live.stop()
    live.restore_ended(not_restored)
    return run_dir


def test_the_page_names_the_roles_left_changed_as_text_near_the_top(tmp_path: Path) -> None:
    roles = ("<script>alert(1)</script>", "de&code")
    run_dir = run_left(tmp_path, roles)
    page_path, summary = write_report_and_summary(run_dir)
    page = page_path.read_text()
    assert "<script>alert(1)</script>" not in page, "a role name is text, never markup"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "de&amp;code" in page
    block = parsed(page).unrestored
    command = f"orch restore {run_dir.absolute()}"
    assert block == (
        "When this page was written, this run had left its testbed changed: NOT restored: "
        f"<script>alert(1)</script>, de&code; finish with: {command} "
        "(the runs index and orch status say whether it still is)"
    )
    assert page.index('id="unrestored"') < page.index('<section id="findings">'), "above the findings"
    assert (summary.not_restored, summary.restore_with) == (roles, command)
    written = json.loads((run_dir / "summary.json").read_text())
    assert (written["not_restored"], written["restore_with"]) == (list(roles), command)


def test_a_run_that_restored_fine_has_no_block_and_summary_json_names_no_role(tmp_path: Path) -> None:
    run_dir = run_left(tmp_path, ())
    page_path, summary = write_report_and_summary(run_dir)
    page = page_path.read_text()
    assert parsed(page).unrestored is None and "NOT restored" not in page and 'id="unrestored"' not in page
    assert (summary.not_restored, summary.restore_with) == ((), "")


def test_a_damaged_status_file_naming_thousands_of_roles_is_cut_with_the_count_shown(tmp_path: Path) -> None:
    run_dir = run_left(tmp_path, tuple(f"role{i}" for i in range(5000)))
    _, summary = write_report_and_summary(run_dir)
    assert len(summary.not_restored) == ROLES_SHOWN + 1
    assert summary.not_restored[-1] == f"… and {5000 - ROLES_SHOWN:,} more"


def test_a_hunts_page_which_its_runs_link_to_says_it_in_the_same_words(tmp_path: Path) -> None:
    run_dir = run_left(tmp_path, ("de<i>code</i>",), hunt=True)
    write_report_and_summary(run_dir)
    hunt_page = (run_dir / "hunt.html").read_text()
    assert "de<i>code</i>" not in hunt_page and "de&lt;i&gt;code&lt;/i&gt;" in hunt_page
    block = parsed(hunt_page).unrestored
    assert block is not None and f"NOT restored: de<i>code</i>; finish with: orch restore {run_dir.absolute()}" in block
    assert block == parsed((run_dir / "index.html").read_text()).unrestored, "the run's two pages say the same"
    assert hunt_page.index("id='unrestored'") < hunt_page.index("<h2>Verdict</h2>")


def test_a_hunt_that_restored_fine_has_no_block(tmp_path: Path) -> None:
    run_dir = run_left(tmp_path, (), hunt=True)
    write_report_and_summary(run_dir)
    hunt_page = (run_dir / "hunt.html").read_text()
    assert parsed(hunt_page).unrestored is None and "NOT restored" not in hunt_page
