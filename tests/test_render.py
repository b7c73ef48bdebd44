"""Tests of orchestrator.report.render, charts and site: a safe, self-contained page on disk."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from helpers.report_synth import ALL_OFF, LONG_NAMES, renamed_factors, synthetic_run, write_run

from orchestrator.core.redact import REDACTED
from orchestrator.errors import ConfigError, UsageError
from orchestrator.report import charts, svgchart
from orchestrator.report.build import build_report
from orchestrator.report.render import fresh_summary, render_report, write_report
from orchestrator.report.site import write_index
from orchestrator.report.summary import RunSummary

HOSTILE = "<script>alert(1)</script> {{ 7*7 }} {% raw %} <img src=x onerror=alert(2)>"


class _Refs(HTMLParser):
    """Every tag, every URL-bearing attribute, and the text of <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[tuple[str, str, str]] = []
        self.ids: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_script = tag == "script"
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                self.urls.append((tag, name, value or ""))
            if name == "id":
                self.ids.append(value or "")
            assert not name.startswith("on"), f"event handler attribute {name} on <{tag}>"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


@pytest.fixture(scope="module")
def hostile_page() -> str:
    manifest, records = synthetic_run(replicates=2, baseline=ALL_OFF, stdout=HOSTILE)
    manifest = manifest.model_copy(update={"description": HOSTILE})
    bad_link = records[0].model_copy(
        update={"logs": {"decode:x": "javascript:alert(3)", "decode:y": "../../etc/passwd"}}
    )
    return render_report(build_report(manifest, [bad_link, *records[1:]]))


def _parse(page: str) -> _Refs:
    parser = _Refs()
    parser.feed(page)
    return parser


def test_hostile_text_renders_inert(hostile_page: str) -> None:
    parser = _parse(hostile_page)
    assert parser.tags.count("script") == 1  # only ours
    assert "alert" not in "".join(parser.scripts)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; {{ 7*7 }} {% raw %}" in hostile_page
    assert "<img src=x" not in hostile_page and "img" not in parser.tags


def test_page_references_nothing_outside_itself(hostile_page: str) -> None:
    parser = _parse(hostile_page)
    for tag, attr, url in parser.urls:
        if url == "../index.html":  # the link up to the reports index, by design
            continue
        ok = url.startswith("#") or url == "data:," or re.fullmatch(r"[\w.-]+(/[\w.-]+)*", url)
        assert ok and ".." not in url.split("/"), (tag, attr, url)
    assert "javascript:" not in "".join(u for _, _, u in parser.urls)
    assert not re.search(r"url\((?!#)", hostile_page)
    assert "@import" not in hostile_page and '<link rel="stylesheet"' not in hostile_page
    assert len(parser.ids) == len(set(parser.ids)), "duplicate element ids"


def test_csp_allows_exactly_our_script(hostile_page: str) -> None:
    parser = _parse(hostile_page)
    digest = base64.b64encode(hashlib.sha256(parser.scripts[0].encode()).digest()).decode()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', hostile_page)
    assert policy is not None
    content = html.unescape(policy.group(1))
    assert f"script-src 'sha256-{digest}'" in content
    assert "default-src 'none'" in content


def test_key_elements_and_charts_are_present(hostile_page: str) -> None:
    for marker in ('id="headline"', 'id="cell-table"', 'id="failures"', 'id="trials"', 'id="provenance"'):
        assert marker in hostile_page
    svgs = re.findall(r"<svg\b[^>]*>", hostile_page)
    assert len(svgs) >= 4  # rate, effects, and one per numeric metric
    assert all('class="chart"' in s for s in svgs)
    assert "<?xml" not in hostile_page and "<!DOCTYPE svg" not in hostile_page
    # two trials per cell: the comparison is quasi-binomial (trial = unit), named in the page, and the
    # 10/80 cell's interval is widened for trial-to-trial variation estimated on few df
    assert "quasi-binomial, dispersion 0.10 estimated from 4 trials in 2 cells (1.2 df;" in hostile_page
    assert (
        "No significant difference in corruption between any cell and the baseline, which is at 0.0% [0.0-8.2] (0/80)"
        in hostile_page
    )
    assert "12.5% [5.6-25.6] (10/80)" in hostile_page


def test_secret_env_values_are_redacted_in_the_page(hostile_page: str) -> None:
    assert "hf_supersecret123" not in hostile_page
    assert REDACTED in hostile_page and "HF_TOKEN" in hostile_page


def test_chart_svg_is_clean_and_escapes_labels() -> None:
    levels = {"bf16_index_k": ["<b>&on", "off"], "cuda_graph": ["on", "off"], "overlap": ["on", "off"]}
    manifest, records = synthetic_run(replicates=1)
    renamed = [
        r.model_copy(update={"levels": {**r.levels, "bf16_index_k": "<b>&on"}})
        if r.levels["bf16_index_k"] == "on"
        else r
        for r in records
    ]
    manifest = manifest.model_copy(
        update={
            "factors": levels,
            "plan": [
                p.model_copy(update={"levels": {**p.levels, "bf16_index_k": "<b>&on"}})
                if p.levels["bf16_index_k"] == "on"
                else p
                for p in manifest.plan
            ],
        }
    )
    svg = charts.rate_chart(build_report(manifest, renamed), "corruption")
    assert "&lt;b&gt;&amp;on" in svg and "<b>" not in svg
    assert "http" not in svg and 'id="rate-corruption-' in svg


def test_write_report_writes_atomically(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run1", *synthetic_run(replicates=2))
    path = write_report(run_dir)
    assert path == run_dir / "index.html"
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert sorted(p.name for p in run_dir.iterdir()) == ["index.html", "journal.jsonl", "run.json", "summary.json"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_write_report_notes_a_torn_journal_tail(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run1", *synthetic_run(replicates=1))
    journal = run_dir / "journal.jsonl"
    journal.write_bytes(journal.read_bytes() + b'{"type": "trial", "run_id": "x", "tri')
    page = write_report(run_dir).read_text()
    assert "torn" in page


def test_write_report_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        write_report(tmp_path)
    (tmp_path / "run.json").write_text('{"run_id": 3}')
    with pytest.raises(ConfigError, match="invalid run manifest"):
        write_report(tmp_path)


def test_a_runs_file_or_the_reports_folder_is_told_which_folder_to_pass(tmp_path: Path) -> None:
    """`orch report reports/<run>/index.html` said "(no run.json)" beside the run.json; `orch report
    reports` got the generic example: each names the folder to pass."""
    run_dir = write_run(tmp_path / "reports" / "20260509-070000-x", *synthetic_run(replicates=1))
    for file in (run_dir / "run.json", run_dir / "journal.jsonl"):
        with pytest.raises(UsageError, match="a file of a run, not its folder") as told:
            write_report(file)
        assert told.value.hint == f"pass the run's folder: {run_dir}"
    with pytest.raises(UsageError, match="not a run directory") as told:
        write_report(tmp_path / "reports")
    assert told.value.hint == f"it holds runs: pass one of them, e.g. {run_dir}"


def test_a_path_that_does_not_exist_is_told_so(tmp_path: Path) -> None:
    """`orch report/export/compare reports/typo` said "not a run directory (no run.json)" of a path
    that is not there at all, as of a folder without run.json: a mistyped run id reads as a
    broken run (a new-user walk)."""
    typo = r"reports/2026-typo: not a run directory: no such file or folder \(pass"
    with pytest.raises(UsageError, match=typo) as told:
        write_report(tmp_path / "reports" / "2026-typo")
    assert told.value.hint == "pass the folder `orch run` printed, e.g. reports/<run-id>"


def test_orch_report_writes_the_index_again_without_a_run_deleted_since(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """README: `orch report RUN_DIR` re-renders the run's page and the runs index beside it, which
    is how a run folder deleted by hand leaves the index (its link led nowhere)."""
    from orchestrator.cli.main import main

    reports = tmp_path / "reports"
    one = write_run(reports / "20260509-070000-a", *synthetic_run(replicates=1, run_id="20260509-070000-a"))
    two = write_run(reports / "20260510-070000-b", *synthetic_run(replicates=1, run_id="20260510-070000-b"))
    assert main(["report", str(two)]) == 0
    assert "20260509-070000-a" in (reports / "index.html").read_text()
    shutil.rmtree(one)
    assert main(["report", str(two)]) == 0
    page = (reports / "index.html").read_text()
    assert "20260509-070000-a" not in page and '<a href="20260510-070000-b/index.html">' in page


def test_index_lists_every_run_and_uses_cached_summaries(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    # six replicates: enough trials for run one's DSV4 cell to differ with the trial as the unit
    one = write_run(reports / "20260509-070000-a", *synthetic_run(replicates=6, run_id="20260509-070000-a"))
    two = write_run(
        reports / "20260510-070000-b", *synthetic_run(replicates=2, run_id="20260510-070000-b", rate=lambda levels: 0.0)
    )
    write_report(one)
    (reports / "broken").mkdir()
    (reports / "broken" / "run.json").write_text("not json")
    (reports / "not-a-run").mkdir()
    page = write_index(reports, fresh_summary).read_text()
    assert page.index("20260510-070000-b") < page.index("20260509-070000-a")  # newest first
    assert '<a href="20260509-070000-a/index.html">' in page
    assert "(no report yet)" in page and "cannot read" in page and "not-a-run" not in page
    assert "Corruption is" in page  # run one's headline, from its report
    assert "No significant difference" in page  # run two: built, not rendered
    # the report writes its summary beside it (the index never reads the HTML back)...
    summary = json.loads((one / "summary.json").read_text())
    assert summary["headline"].startswith("Corruption is") and summary["planned"] == summary["completed"] > 0
    # ...which is used while it is newer than the journal...
    summary["headline"] = "CACHED " + summary["headline"]
    (one / "summary.json").write_text(json.dumps(summary))
    assert "CACHED" in write_index(reports, fresh_summary).read_text()
    # ...and ignored once the journal changed after it
    later = time.time() + 5
    os.utime(one / "journal.jsonl", (later, later))
    assert "CACHED" not in write_index(reports, fresh_summary).read_text()
    assert two.is_dir()


def test_a_damaged_sibling_run_is_listed_with_its_error_and_never_stops_the_index(tmp_path: Path) -> None:
    """One run whose journal was hand-edited (k > n), one whose summary fails in a way orch did not
    foresee: the index of every run is still written, each listed with a one-line reason; the
    good run is summarised as usual (`orch report` of it writes the index too)."""
    reports = tmp_path / "reports"
    good = write_run(reports / "20260509-070000-a", *synthetic_run(replicates=1, run_id="20260509-070000-a"))
    edited = write_run(reports / "20260510-070000-b", *synthetic_run(replicates=1, run_id="20260510-070000-b"))
    odd = write_run(reports / "20260511-070000-c", *synthetic_run(replicates=1, run_id="20260511-070000-c"))
    journal = edited / "journal.jsonl"
    journal.write_text(journal.read_text().replace('"k":', '"k":100', 1))  # line 2: k of 40 -> 100..

    def rebuild(run_dir: Path, manifest: object = None) -> RunSummary:
        if run_dir == odd:
            raise ValueError("stats: invalid count\nk=10, n=8")
        return fresh_summary(run_dir)

    write_report(good)
    page = write_index(reports, rebuild).read_text()
    flat = " ".join(html.unescape(page).split())
    assert f"{journal}:2: invalid record: trial.metrics.corruption" in flat
    assert "cannot summarise this run: ValueError: stats: invalid count k=10, n=8 (a bug in orch" in flat
    assert '<a href="20260509-070000-a/index.html">' in page


def test_render_is_deterministic() -> None:
    report = build_report(*synthetic_run(replicates=2))
    assert render_report(report) == render_report(report)


def test_unusual_runs_still_render() -> None:
    """Numbers only, no baseline cell, a three-level factor: the page renders and says so."""
    manifest, records = synthetic_run(replicates=2)
    numbers_only = manifest.model_copy(update={"metrics": {"wall": "number", "anomalies": "number"}})
    page = render_report(build_report(numbers_only, records))
    assert 'id="cell-table"' in page and "corruption rate" not in page
    no_baseline = manifest.model_copy(
        update={
            "baseline": {"bf16_index_k": "x", "cuda_graph": "x", "overlap": "x"},
            "plan": [p.model_copy(update={"is_baseline": False}) for p in manifest.plan],
        }
    )
    unmarked = [r.model_copy(update={"is_baseline": False}) for r in records]
    report = build_report(no_baseline, unmarked)
    assert report.baseline_cell is None and "Cells" in render_report(report)
    three = [
        r.model_copy(update={"levels": {**r.levels, "overlap": "auto"}, "cell": r.cell + "*"})
        for r in records
        if r.levels["overlap"] == "off"
    ]
    wide = manifest.model_copy(update={"factors": {**manifest.factors, "overlap": ["on", "off", "auto"]}})
    report = build_report(wide, [*records, *three])
    assert any(e.level == "auto" for e in report.effects)
    assert "overlap: on → auto" in render_report(report)


def test_adaptive_decisions_are_info_and_never_the_runs_headline(tmp_path: Path) -> None:
    """The stopping rule decides each cell at the adaptive alpha per comparison, with no
    correction across cells: told first, as info, while the run's one-line result (the index
    page, webhooks) stays the first sentence that survived the report's Holm policy."""
    from orchestrator.core.records import EventRecord
    from orchestrator.report.build import result_headline
    from orchestrator.report.render import load_report

    manifest, records = synthetic_run(replicates=2)
    run_dir = write_run(tmp_path / "run", manifest.model_copy(update={"adaptive": True}), records)
    message = "stopped after 2 rounds (80 sessions): cell 0/80 vs baseline 12/80 decided different (cell lower; e 25)"
    event = EventRecord(run_id=manifest.run_id, event="cell_decided", at=manifest.started, cell="overlap=off",
                        state="different", message=message)  # fmt: skip
    with (run_dir / "journal.jsonl").open("a") as journal:
        journal.write(event.model_dump_json() + "\n")
    report = load_report(run_dir)
    first = report.headline[0]
    assert first.text.startswith("Adaptive stopping in corruption: 1 of 7 cells decided lower") and first.kind == "info"
    assert "not corrected across cells" in first.text
    assert not result_headline(report).startswith("Adaptive stopping")
    assert result_headline(report) in [f.text for f in report.headline if f.kind in ("finding", "null")]


@pytest.mark.parametrize("adaptive", [True, False])
def test_the_index_counts_an_adaptive_runs_trials_of_at_most_its_plan(tmp_path: Path, adaptive: bool) -> None:
    """An adaptive run plans at most its trials (cells stop once decided): the index said "52/64",
    read as 12 missing, where `orch run` says "of at most 64" (the second export audit)."""
    manifest, records = synthetic_run(replicates=2)
    run_dir = write_run(tmp_path / "reports" / "run", manifest.model_copy(update={"adaptive": adaptive}), records)
    write_report(run_dir)
    page = write_index(run_dir.parent, fresh_summary).read_text()
    cells = [
        " ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split())
        for c in re.findall(r'<td class="num">(.*?)</td>', page)
    ]
    planned = manifest.planned_total  # every planned trial ran here (two failed attempts were retried)
    assert cells[0].startswith(f"{planned} of at most {planned}" if adaptive else f"{planned}/{planned}"), cells


def test_adaptive_decisions_reach_the_webhook_summary_json_and_the_index(tmp_path: Path) -> None:
    """An adaptive run whose stopping rule decided cells: its page opens with the decisions, but the
    webhook, summary.json and the runs index quoted only the result line ("No significant difference
    in corruption between any cell and the baseline"), never that 6 of 7 cells were decided lower and
    stopped early (auditexports2). Each now says the decisions beside the result, as info (the result
    line itself stays the report's first finding)."""
    from orchestrator.core.records import EventRecord
    from orchestrator.report.build import result_headline
    from orchestrator.report.render import load_report
    from orchestrator.team.notify import summarize_run

    manifest, records = synthetic_run(replicates=2)
    run_dir = write_run(tmp_path / "reports" / "run", manifest.model_copy(update={"adaptive": True}), records)
    message = "stopped after 2 rounds (80 sessions): cell 0/80 vs baseline 12/80 decided different (cell lower; e 25)"
    event = EventRecord(run_id=manifest.run_id, event="cell_decided", at=manifest.started, cell="overlap=off",
                        state="different", message=message)  # fmt: skip
    with (run_dir / "journal.jsonl").open("a") as journal:
        journal.write(event.model_dump_json() + "\n")
    said = "Adaptive stopping in corruption: 1 of 7 cells decided lower than the baseline: overlap=off"
    summary = summarize_run(run_dir)
    assert summary.headline == result_headline(load_report(run_dir))
    assert said in summary.adaptive, summary
    assert said in summary.json_body()["adaptive"] and said in summary.text()  # type: ignore[operator]
    write_report(run_dir)
    assert said in json.loads((run_dir / "summary.json").read_text())["adaptive"]
    index = " ".join(
        html.unescape(re.sub(r"<[^>]+>", " ", write_index(run_dir.parent, fresh_summary).read_text())).split()
    )
    assert said in index, index


def test_an_index_of_no_run_says_so_rather_than_count_zero_runs(tmp_path: Path) -> None:
    """An empty reports folder's index said "0 runs, newest first, running ones included" (the
    seventh new-user walk); it says there is none yet and how one gets there."""
    reports = tmp_path / "reports"
    reports.mkdir()
    text = " ".join(re.sub(r"<[^>]+>", " ", write_index(reports, fresh_summary).read_text()).split())
    assert "0 runs" not in text and "newest first" not in text, text
    assert "No run in this folder yet: each orch run writes its report here and adds it to this list." in text


@pytest.mark.parametrize("chart", [charts.rate_chart, charts.number_chart])
def test_chart_rows_with_long_cell_names_stay_apart_and_inside_the_chart(chart: Any) -> None:
    """A chart's row labels were the cell's "k=v, ..." cut at 70 characters: with long factor names
    the cut fell on the factors that told the rows apart (eight rows read as four pairs of the same
    label), and the baseline's " (baseline)" pushed its label past the chart's left edge."""
    manifest, records = renamed_factors(*synthetic_run(replicates=2), LONG_NAMES)
    svg = chart(build_report(manifest, records), "corruption" if chart is charts.rate_chart else "wall")
    labels = re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="end" fill="#24292f">([^<]*)</text>', svg)
    rows = [html.unescape(text) for _, text in labels if text.strip()]
    assert len(rows) >= 8 and len(set(rows)) == len(rows), rows
    for x, text in labels:
        assert float(x) - len(html.unescape(text)) * svgchart.CHAR_W >= 0, text
    assert sum("(baseline)" in r for r in rows) == 1
    # which factor each level belongs to is said once, in the chart
    assert " / ".join(LONG_NAMES.values()) in html.unescape(svg)


def test_a_chart_says_which_rows_are_significant_in_text_not_only_in_red() -> None:
    """The rate and effects charts told significant rows from the rest by colour alone (red vs
    grey), which a reader who cannot tell them apart, or a grey-scale print, loses: those rows'
    labels carry a mark, and the chart's note names it."""
    manifest, records = synthetic_run(replicates=12)
    report = build_report(manifest, records)
    for svg, significant in (
        (
            charts.rate_chart(report, "corruption"),
            [c for c in report.cells if c.proportions["corruption"].significant],
        ),
        (
            charts.effects_chart(report, "corruption"),
            [e for e in report.effects if e.metric == "corruption" and e.finding],
        ),
    ):
        labels = [html.unescape(t) for t in re.findall(r'text-anchor="end" fill="#24292f">([^<]*)</text>', svg)]
        marked = [label for label in labels if label.endswith(charts.SIGNIFICANT)]
        assert significant and len(marked) == len(significant), labels
    page = render_report(report)
    assert f"red, marked {charts.SIGNIFICANT.strip()}" in page


def test_the_report_defines_its_words_for_a_new_reader() -> None:
    """The page's statistics speak of Wilson and MOVER intervals, Holm, quasi-binomial dispersion,
    df, rate points, strata, Mann-Whitney, Hodges-Lehmann and whiskers of 1.5 IQR without saying
    what any of them is: a section defines each, reached from the page's links."""
    page = render_report(build_report(*synthetic_run(replicates=2)))
    assert '<a href="#terms">' in page
    terms = page[page.index('<section id="terms">') :]
    terms = terms[: terms.index("</section>")]
    defined = {html.unescape(t) for t in re.findall(r"<dt>([^<]*)</dt>", terms)}
    # each term, and the words of the page (above the section) it explains
    said = {
        "cell": "Cells",
        "baseline": "baseline",
        "trial": "trials",
        "round": "round",
        "session": "sessions",
        "pts (rate points)": "pts",
        "Wilson interval": "Wilson",
        "MOVER interval": "MOVER",
        "quasi-binomial, dispersion, df": "dispersion",
        "p, p (Holm)": "p (Holm)",
        "finding": "finding",
        "Mann-Whitney U": "Mann-Whitney",
        "Hodges-Lehmann shift, coverage": "Hodges-Lehmann",
        "box plot": "Box:",
        "strata": "strata",
    }
    above = page[: page.index('<section id="terms">')]
    for term, words in said.items():
        assert term in defined and words in above, term


def test_effect_rows_with_long_factor_names_stay_apart_and_inside_the_chart() -> None:
    """An effect's label, "factor ref→level | other=level", was cut at 70 characters: with long
    factor names the held factor's level fell off, so "| other=on" and "| other=off" read alike
    (15 rows, 9 distinct labels). A label too long for one line takes two."""
    manifest, records = renamed_factors(*synthetic_run(replicates=2), LONG_NAMES)
    svg = charts.effects_chart(build_report(manifest, records), "corruption")
    texts = re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="end" fill="#24292f">(.*?)</text>', svg)
    rows = []
    for x, inner in texts:
        lines = [html.unescape(t) for t in re.findall(r">([^<>]*)</tspan>", inner)] or [html.unescape(inner)]
        assert all(float(x) - len(line) * svgchart.CHAR_W >= 0 for line in lines), lines
        rows.append(" ".join(lines))
    rows = [r for r in rows if r.strip()]
    assert len(rows) == 15 and len(set(rows)) == 15, rows
    assert not any("…" in r for r in rows), rows
