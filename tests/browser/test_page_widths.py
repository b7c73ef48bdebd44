"""Every page orch writes fits the screen it is read on: at a laptop's 1366 px and a phone's 390 px
the page itself never scrolls sideways; a table wider than the screen scrolls inside its own box,
and long unbroken text (a hunt's 16-flag configuration) wraps.

Why a browser: only layout shows it. A walk through real runs found the hunt page 2,495 px wide on
a laptop (its minimal reproducer's configuration, one word of 300 characters), and on a phone the
report, the runs index and the hunt page wider than the screen (tables outside a scrolling box, the
report's section links on one unbreakable line, the hunt page without a viewport)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.chromium import DevTools, evaluate, open_page, page_problems
from helpers.hunt_runs import hunt_trial
from helpers.report_synth import LONG_NAMES, renamed_factors, synthetic_run, write_run

from orchestrator.core.config import read_matrix
from orchestrator.core.hunt import Hunt
from orchestrator.core.huntreplay import settings_of
from orchestrator.report.hunt import build_report as build_hunt
from orchestrator.report.hunt import render as render_hunt
from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import write_index

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-widths")]

REPO = Path(__file__).resolve().parents[2]
SCREENS = {"laptop": (1366, 900, False), "phone": (390, 844, True)}

WIDER = """(function () {
  var W = document.documentElement.clientWidth, out = [];
  document.querySelectorAll('body *').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1) { return; }
    for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      var x = getComputedStyle(p).overflowX;
      if ((x === 'auto' || x === 'scroll') && p.getBoundingClientRect().right <= W + 1) { return; }
    }
    out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' to ' + Math.round(r.right) + ' px');
  });
  return {page: document.documentElement.scrollWidth, screen: W, wider: out.slice(0, 5)};
})()"""


def _hunt_page() -> str:
    """dsv4_hunt's page after a hunt against a fixed answer (bf16_index_k AND cuda_graph AND overlap)."""
    m = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    assert m.hunt is not None
    hunt, records, truth = Hunt(settings_of(m.hunt)), [], 0b111
    while (x := hunt.propose()) is not None:
        k = 3 if x & truth == truth else int(len(records) % 7 == 0)
        hunt.observe(x, k, 20)
        records.append(hunt_trial(dict(m.hunt.levels(x)), len(records), k))
    return render_hunt(build_hunt(m, records))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    reports = tmp_path_factory.mktemp("widths") / "reports"
    manifest, records = synthetic_run(replicates=2)
    report = write_report(write_run(reports / manifest.run_id, manifest, records))
    write_index(reports, fresh_summary)
    manifest, records = renamed_factors(*synthetic_run(replicates=2, run_id="20260510-070000-long"), LONG_NAMES)
    long_names = write_report(write_run(reports / manifest.run_id, manifest, records))
    write_index(reports, fresh_summary)
    hunt = reports / "hunt.html"
    hunt.write_text(_hunt_page())
    index = (reports / "index.html").as_uri()
    return {"report": report.as_uri(), "long names": long_names.as_uri(), "index": index, "hunt": hunt.as_uri()}


@pytest.mark.parametrize("screen", sorted(SCREENS))
@pytest.mark.parametrize("page", ["report", "long names", "index", "hunt"])
def test_the_page_fits_the_screen(pages: dict[str, str], browser: DevTools, page: str, screen: str) -> None:
    width, height, mobile = SCREENS[screen]
    session = open_page(browser, pages[page])
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        session,
    )
    browser.call("Page.reload", {}, session)
    browser.drain(0.5)
    seen = evaluate(browser, session, WIDER)
    # clientWidth is the screen less a scrollbar; a page without a viewport is laid out 980 px wide on a phone
    assert seen["page"] <= seen["screen"] <= width and seen["wider"] == [], seen
    assert page_problems(browser, session) == []


HIDDEN = """JSON.stringify({page: document.documentElement.scrollWidth, cut: Array.prototype.map.call(
  document.querySelectorAll('.scroll'), function (d) { return [d.firstElementChild.id, d.clientWidth, d.scrollWidth]; }
).filter(function (x) { return x[2] > x[1] + 1; })})"""


@pytest.mark.parametrize("page", ["report", "long names", "index"])
def test_on_paper_no_column_is_cut_off(pages: dict[str, str], browser: DevTools, page: str) -> None:
    """Printed (A4's 718 px between margins), a table that scrolls on screen showed only the columns
    that fit: the report's PDF lost the cell table's p (Holm) and sig. columns. On paper every
    table shrinks to the page instead."""
    session = open_page(browser, pages[page])
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": 718, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
        session,
    )
    browser.call("Emulation.setEmulatedMedia", {"media": "print"}, session)
    browser.drain(0.3)
    seen = json.loads(evaluate(browser, session, HIDDEN))
    assert seen["cut"] == [] and seen["page"] <= 718, seen
