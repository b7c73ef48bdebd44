"""The report's headline labels each line for a reader: a null result ("No significant difference
...", "nothing to compare it with") read "NULL", which a new user took for a bug in the page (the
ninth new-user walk). It reads "no finding" now; the kind stays "null" in the model and the CSS."""

from __future__ import annotations

from helpers.report_synth import synthetic_run

from orchestrator.report.build import build_report
from orchestrator.report.render import render_report


def test_a_null_result_is_labelled_no_finding_never_null() -> None:
    manifest, records = synthetic_run(replicates=2)
    report = build_report(manifest, records)
    assert any(f.kind == "null" for f in report.headline)  # the case this test is about
    html = render_report(report)
    assert '<li class="null"><span class="kind">no finding</span>No significant difference' in html
    assert '<span class="kind">null</span>' not in html


def test_an_empty_headline_is_labelled_no_finding() -> None:
    manifest, records = synthetic_run(replicates=2)
    report = build_report(manifest, records).model_copy(update={"headline": []})
    html = render_report(report)
    assert '<span class="kind">no finding</span>Nothing to report.' in html
    assert '<span class="kind">null</span>' not in html


def test_the_null_result_names_the_cell_nearest_to_significance_as_such() -> None:
    """It said "Closest: 0.0% ... in cell X (p=0.945, Holm)": the cell with the smallest Holm p,
    which a reader (the report audit) could take for the rate closest to the baseline's."""
    manifest, records = synthetic_run(replicates=2)
    [null] = [f.text for f in build_report(manifest, records).headline if f.kind == "null"]
    assert "Nearest to significance: 0.0% [0.0-8.2] (0/80) in cell bf16_index_k=on, cuda_graph=off" in null, null
    assert "(p=0.651, Holm)" in null and "Closest" not in null
