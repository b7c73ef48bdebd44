"""The headline's verdicts (report.build) on designs their earlier tests did not build.

Found by mutation testing (bench/mutants.py, seed 20261206; bench/README.md): each test fails on a
one-line change to the verdict code that every earlier test passed. Runs built in memory
(helpers.cell_runs), no process."""

from __future__ import annotations

from helpers.cell_runs import cell_run, failed_record

from orchestrator.report.build import build_report

FACTORS = {"a": ["on", "off"], "b": ["on", "off"]}
BASE = {"a": "on", "b": "on"}


def test_a_design_without_single_flag_cells_still_gets_its_verdict() -> None:
    """Only the baseline and the cell that changes both flags ran: there is no one-flag opener, and
    the difference is told with its numbers (48/160 vs 4/160, Holm) as the run's one finding;
    23.4-37.5 is the Wilson interval of 48/160 by hand ((48 + 1.92) / 163.84 -/+
    1.96 sqrt(0.3 * 0.7 / 160 + 3.84 / 102400) / 1.024)."""
    cells = [(BASE, [(1, 40)] * 4), ({"a": "off", "b": "off"}, [(12, 40)] * 4)]
    headline = build_report(*cell_run(FACTORS, BASE, cells)).headline
    assert not any("One flag at a time" in f.text for f in headline)
    found = [f.text for f in headline if f.kind == "finding"]
    assert len(found) == 1, headline
    assert found[0].startswith("Corruption is 30.0% [23.4-37.5] (48/160) in cell a=off, b=off vs 2.5%"), found
    assert "1 of 1 cells differ significantly from the baseline" in found[0]


def test_a_baseline_without_data_is_said_and_nothing_is_compared() -> None:
    """Every baseline trial failed while the other cells measured: no cell can be compared with it,
    the headline says so as a caution, and it calls nothing a finding (12/40 against nothing)."""
    cells = [(BASE, [(1, 40)] * 3), ({"a": "off", "b": "on"}, [(12, 40)] * 3), ({"a": "on", "b": "off"}, [(2, 40)] * 3)]
    manifest, records = cell_run(FACTORS, BASE, cells)
    records = [failed_record(p) if p.is_baseline else r for p, r in zip(manifest.plan, records, strict=True)]
    headline = build_report(manifest, records).headline
    cautions = [f.text for f in headline if f.kind == "caution"]
    assert "The baseline cell has no completed corruption data, so no cell can be compared with it." in cautions
    assert not [f for f in headline if f.kind == "finding"], headline


def test_together_is_judged_on_the_corners_at_the_high_cells_other_levels() -> None:
    """a and b needed at the high cell (a=b=c=on, 32%); its corner a=b=off (with c=on, as the high
    cell) is high too (25%, a parity), while the corner with c=off is low. "Needs a and b together"
    would be an over-claim: the corner that decides is the one that differs from the high cell only
    in a and b, so the headline says together is not shown, however strong their interaction."""
    rates = {("on", "on", "on"): 64, ("off", "off", "on"): 50, ("on", "on", "off"): 60}
    factors = {"a": ["off", "on"], "b": ["off", "on"], "c": ["off", "on"]}
    cells = []
    for levels in ((a, b, c) for a in ("off", "on") for b in ("off", "on") for c in ("off", "on")):
        k = rates.get(levels, 4)
        cells.append((dict(zip("abc", levels, strict=True)), [(k + i % 2, 200) for i in range(4)]))
    baseline = {"a": "off", "b": "off", "c": "off"}
    texts = [f.text for f in build_report(*cell_run(factors, baseline, cells)).headline if f.kind == "finding"]
    cause = [t for t in texts if t.startswith("Turning off any one of a=on and b=on lowers it")]
    assert len(cause) == 1, texts
    assert (
        "that it needs them together is not shown (cells with two or more of them changed are not all as low"
        in cause[0]
    )
    assert not any("together:" in t for t in texts), texts


def test_an_interaction_of_factors_with_their_own_level_names_is_told() -> None:
    """mode (low/high) and b (off/on): the rate rises only at mode=high with b=on. The two-way
    sentence reads mode's effect at each level of b, looked up by b's level names (not mode's), so
    it is told with both conditional effects: +28.0 points with b=on, not shown with b=off."""
    factors = {"mode": ["low", "high"], "b": ["off", "on"]}
    cells = [
        ({"mode": m, "b": b}, [((60 if (m, b) == ("high", "on") else 4) + i % 2, 200) for i in range(4)])
        for m in ("low", "high")
        for b in ("off", "on")
    ]
    texts = [f.text for f in build_report(*cell_run(factors, {"mode": "low", "b": "off"}, cells)).headline]
    told = [t for t in texts if t.startswith("mode matters when b=on: switching mode from low to high")]
    assert len(told) == 1, texts
    assert "changes corruption by +28.0 pts [" in told[0]  # 242/800 - 18/800 = 28.0 points
    assert "with b=off its effect was not shown (+0.0 pts" in told[0]
