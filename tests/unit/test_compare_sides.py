"""`orch compare`'s leftovers of the eighth mutation round: a running run named first (A) has its
unrecorded host facts said once, as B's are; the comparison page written to its default place
replaces orch's own file by name (a link planted there is not followed out of the reports folder)."""

from __future__ import annotations

import os
from pathlib import Path

from helpers.manifests import planned
from helpers.report_synth import synthetic_run, write_run

from orchestrator.core.records import RunManifest
from orchestrator.report.compare import write_comparison_page
from orchestrator.report.unlike import unlike
from orchestrator.store.rundir import ReportsDir


def _with_facts(m: RunManifest, status: str, **facts: str) -> RunManifest:
    hosts = {role: {**h, **facts} for role, h in m.hosts.items()}
    return m.model_copy(update={"hosts": hosts, "status": status})


def test_a_running_run_named_first_has_its_unrecorded_facts_said_once() -> None:
    """`orch compare RUNNING ENDED`: each fact only the ended run recorded read 'not recorded in
    A' when the running run is A, as it did for B before the one line for a running run."""
    base = planned()[1]
    a = _with_facts(base, "running", address="10.0.0.2")
    b = _with_facts(base, "completed", server_version="0.5.4", exec_start="/usr/bin/server", address="10.0.0.1")
    context = unlike(a, b).context
    assert not [line for line in context if "not recorded in A" in line], context
    assert sum(line.startswith("A is still running (or its controller died)") for line in context) == 1, context
    assert any("address differed: '10.0.0.2' in A, '10.0.0.1' in B" in line for line in context), context


def test_the_page_in_its_default_place_replaces_a_planted_link_not_its_target(tmp_path: Path) -> None:
    """Without -o the page is orch's own file in A's reports folder: written by name, as every
    file orch keeps there; a link found at that name is replaced, the file it points to untouched."""
    a_manifest, a_records = synthetic_run(failures=False, replicates=4)
    b_manifest, b_records = synthetic_run(failures=False, replicates=4, run_id="20260509-090000-other")
    run_a = write_run(tmp_path / "reports" / a_manifest.run_id, a_manifest, a_records)
    run_b = write_run(tmp_path / "reports" / b_manifest.run_id, b_manifest, b_records)
    outside = tmp_path / "outside.txt"
    outside.write_text("not orch's\n")
    page_path = ReportsDir(run_a.parent).compare_page(a_manifest.run_id, b_manifest.run_id)
    os.symlink(outside, page_path)
    page = write_comparison_page(run_a, run_b)
    assert page.path == page_path and not page_path.is_symlink(), page.path
    assert outside.read_text() == "not orch's\n"
    assert "<html" in page_path.read_text().lower()


def test_the_page_heading_names_both_matrices_when_they_differ(tmp_path: Path) -> None:
    """Runs of two matrices (a renamed copy): the heading says both names; one matrix: its name once."""
    a_manifest, a_records = synthetic_run(failures=False, replicates=4)
    b_manifest, b_records = synthetic_run(failures=False, replicates=4, run_id="20260509-090000-other")
    run_a = write_run(tmp_path / "reports" / a_manifest.run_id, a_manifest, a_records)
    renamed = b_manifest.model_copy(update={"name": "overlap_renamed"})
    run_b = write_run(tmp_path / "reports" / b_manifest.run_id, renamed, b_records)
    page = write_comparison_page(run_a, run_b, tmp_path / "c.html").path.read_text()
    heading = page.split("<h1>", 1)[1].split("</h1>", 1)[0]
    assert heading.startswith(f"{a_manifest.name} vs overlap_renamed: "), heading
    same = synthetic_run(failures=False, replicates=4, run_id="20260509-100000-same")
    run_c = write_run(tmp_path / "reports" / same[0].run_id, *same)
    heading = write_comparison_page(run_a, run_c, tmp_path / "d.html").path.read_text().split("<h1>", 1)[1]
    assert heading.startswith(f"{a_manifest.name}: {a_manifest.run_id} vs "), heading
