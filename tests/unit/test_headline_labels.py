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
