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


def test_a_command_in_a_headline_is_set_as_code_not_shown_with_backticks() -> None:
    """The headline's words are shared with the terminal and webhooks, where backticks set a
    command apart; the page showed them literally ("`orch resume` continues it": the browser
    walk). On the page they are <code>, the rest escaped as before; an unpaired backtick stays."""
    manifest, records = synthetic_run(replicates=2)
    report = build_report(manifest, records)
    line = report.headline[0].model_copy(update={"text": "Stopped: `orch resume` continues it; <b>2 `x"})
    html = render_report(report.model_copy(update={"headline": [line]}))
    assert "Stopped: <code>orch resume</code> continues it; &lt;b&gt;2 `x</" in html
    assert "`orch resume`" not in html
