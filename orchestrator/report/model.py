"""The report model: the frozen values a run's report is made of, and nothing that computes them.

build.py decides every number and sentence and returns a `Report`; render.py, charts.py,
gates.py and the exports only read one. The values live here, apart from the code that fills
them (build, effects, servertable), so a module that reads a report imports only its shape:
drawing a chart or checking a gate does not pull in the statistics that built the cells.
"""

from __future__ import annotations

from typing import Literal

from orchestrator.core.gates import Gate
from orchestrator.core.records import Frozen, MetricKind, ServedGroup

FindingKind = Literal["finding", "null", "caution", "info"]


class RateView(Frozen):
    k: int
    n: int
    rate: float | None  # None: no sessions
    low: float
    high: float


class ProportionCell(Frozen):
    rate: RateView
    trials: int
    trial_rates: list[float]  # first few per-trial rates: shows noise between replicates
    diff: float | None = None  # vs baseline, rate points
    diff_low: float | None = None
    diff_high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    significant: bool = False
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)
    # an adaptive run's cell that ran fewer trials than planned (stopped on its data): `rate`'s interval is
    # anytime-valid (clustered.stopped_rate), and the page says the rate is from a data-chosen stop
    stopped: bool = False
    # trial-to-trial variation beyond the binomial: exact given the cell's events (stats.trial_homogeneity),
    # and Holm over the cells tested (what the caution and the suspect mark read); None: not testable
    overdispersion_p: float | None = None
    overdispersion_p_holm: float | None = None


class BoxStats(Frozen):
    whislo: float
    q1: float
    med: float
    q3: float
    whishi: float


class NumberCell(Frozen):
    n: int
    median: float | None
    low: float | None  # order-statistic interval of the median; None when n is too small for 95%
    high: float | None
    box: BoxStats | None
    coverage: float | None = None  # the interval's exact coverage (>= 95%)
    p: float | None = None
    p_holm: float | None = None
    significant: bool = False
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)


class CellView(Frozen):
    cell: str
    levels: dict[str, str]
    is_baseline: bool
    planned: int | None  # None in a hunt: its search, not a plan, decides each configuration's trials
    completed: int
    failed: int
    proportions: dict[str, ProportionCell]
    numbers: dict[str, NumberCell]
    # trials that finished (completed, or failed for good after their retries), and per metric how
    # many of them have no value (report.missing): a failed trial's loss may depend on its outcome
    ran: int = 0
    missing: dict[str, int] = {}


class Finding(Frozen):
    kind: FindingKind
    text: str

    @property
    def label(self) -> str:
        """What the page shows before the line: its kind, but "no finding" for a null result (the
        page showed "NULL", which a new user took for a bug in it)."""
        return "no finding" if self.kind == "null" else self.kind


class HuntView(Frozen):
    """A hunt run's answer as its own report (report.hunt) words it, for the run's index.html and
    everything that quotes a run's result (report.build.result_headline)."""

    verdict: str  # the hunt's state and answer in one sentence: the run's headline
    lines: list[str]  # what `orch hunt` prints at the end, under it
    found: bool  # the answer is a finding (the hunt stopped as "found")
    page: str  # the hunt's page beside index.html (hunt.html)


class Link(Frozen):
    label: str
    path: str
    href: str | None  # None: the path is not a safe relative link, shown as text only


class FailureView(Frozen):
    trial: int
    attempt: int
    cell: str
    kind: str
    error: str
    message: str
    detail: str
    links: list[Link]


class TrialView(Frozen):
    trial: int
    round: int
    attempt: int
    cell: str
    status: str
    testbed: str
    started: str
    duration_s: float
    env: dict[str, dict[str, str]]
    restarted: list[str]
    health_wait_s: dict[str, float]
    command: str
    exit_code: int | None
    repro_duration_s: float | None
    stdout_tail: str
    metrics: dict[str, str]
    links: list[Link]
    failure: str
    record_json: str


class RoundRate(Frozen):
    round: int
    k: int
    n: int
    rate: float


class DriftView(Frozen):
    metric: str
    cell: str
    rounds: list[RoundRate]
    p_homogeneity: float
    p_trend: float
    flagged: bool
    assumed: bool = False  # tested against the least design effect orch assumes (no spread estimable)


class Provenance(Frozen):
    orch_version: str
    run_id: str
    testbed: str
    seed: int
    order: str
    replicates: int
    started: str
    ended: str | None
    matrix_path: str
    matrix_text: str
    matrix_sha256: str
    matrix_sha_ok: bool
    inventory_path: str
    inventory_text: str
    inventory_sha256: str
    inventory_sha_ok: bool
    texts_redacted: bool = False
    hosts: dict[str, dict[str, str]]
    # a parallel run's every testbed's roles, (testbed, role, facts) in run.json's order, shown in
    # place of `hosts` (the first testbed's); cut at report.build.HOST_ROWS_SHOWN, the rest counted
    testbed_hosts: list[tuple[str, str, dict[str, str]]] = []
    testbed_hosts_more: int = 0
    trial_order: list[str]  # "trial round cell", plan order
    controller: dict[str, str] = {}  # report.provenance.controller_lines
    served: list[ServedGroup] = []  # what served each trial, per host (report.provenance.served)
    served_texts: dict[str, str] = {}  # digest -> server info / command line


# ----------------------------------------------------------------------------- effects (report.effects)


class EffectView(Frozen):
    """An effect of a factor on a proportion; p_holm stays 1.0 and finding False when its metric
    is untested (Report.untested): no family, no finding."""

    metric: str
    factor: str
    level: str
    reference: str
    given: dict[str, str]  # empty: main effect
    estimate: float
    low: float
    high: float
    clear: bool  # raw 95% interval excludes 0 (exploratory)
    strata: int
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False  # survives the report's multiplicity policy
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)


class InteractionView(Frozen):
    """A two- or three-way interaction, listed once: the k-th difference of rates over the
    corners where `factors` move from `references` to `levels`."""

    metric: str
    factors: list[str]
    levels: list[str]
    references: list[str]
    estimate: float
    low: float
    high: float
    clear: bool
    strata: int
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)

    @property
    def order(self) -> int:
        return len(self.factors)

    @property
    def label(self) -> str:
        return " × ".join(
            f"{f} ({r} → {lv})" for f, r, lv in zip(self.factors, self.references, self.levels, strict=True)
        )


class NumberEffectView(Frozen):
    """Main effect of a factor on a numeric metric: both medians, their ratio and the shift."""

    metric: str
    factor: str
    level: str
    reference: str
    median_level: float
    median_reference: float
    n_level: int
    n_reference: int
    shift: float  # Hodges-Lehmann, level - reference
    low: float | None  # exact Mann-Whitney interval; None when no order reaches 95%
    high: float | None
    coverage: float | None  # the interval's exact coverage
    strata: int
    stratified: bool = False  # van Elteren's stratified test (cells ran unequal numbers of trials)
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)

    @property
    def ratio(self) -> float | None:
        return self.median_level / self.median_reference if self.median_reference else None


class NeighbourView(Frozen):
    """The highest cell vs a cell one factor away: does the outcome need that factor's level?"""

    metric: str
    cell: str
    factor: str
    level: str  # the neighbour's level of `factor`
    k: int
    n: int
    p: float
    method: str = "Fisher's exact test"  # the test behind p (build.method_name): the table's label
    p_holm: float = 1.0
    finding: bool = False
    caution: str = ""  # a finding whose compared cells lost unalike shares of trials (report.missing.mark)


# ----------------------------------------------------------------------------- server metrics (report.servertable)


class ServerRow(Frozen):
    metric: str  # e.g. server.decode.sglang:time_to_first_token_seconds.p90
    unit: str
    median: dict[str, float]  # cell -> median over its completed trials (cells without a value left out)
    trials: dict[str, int]  # cell -> trials with a value


class ServerTable(Frozen):
    rows: list[ServerRow]
    missing: dict[str, int]  # cell -> completed trials with a failed scrape or GPU reading


# ----------------------------------------------------------------------------- the whole report


class Report(Frozen):
    run_id: str
    name: str
    description: str
    status: str
    started: str
    ended: str | None
    confidence: float
    alpha: float
    metrics: dict[str, MetricKind]
    units: dict[str, str] = {}  # metric -> its declared unit (RunManifest.metric_units), only those with one
    primary_metric: str | None
    factors: dict[str, list[str]]
    baseline: dict[str, str]
    baseline_cell: str | None
    planned: int | None  # None for a hunt (RunManifest.planned_total)
    completed: int
    failed: int
    cells: list[CellView]
    effects: list[EffectView]
    interactions: list[InteractionView]  # two- and three-way, each set of factors once
    number_effects: list[NumberEffectView] = []
    neighbours: list[NeighbourView] = []  # the highest cell vs each cell one factor away
    policy: str = ""  # the multiplicity policy, in one sentence
    tests: dict[str, int] = {}  # per metric: the size of the family the policy corrects over
    unreachable: dict[str, int] = {}  # per metric: tests left out of the family, never significant by design
    headline: list[Finding]
    # an adaptive run's sequential decisions in one sentence (report.build.adaptive_brief), told beside
    # the result line wherever that is quoted (summary.json, the runs index, the webhook); "" if none
    adaptive: str = ""
    drift: list[DriftView]
    failures: list[FailureView]
    failures_total: int
    trials: list[TrialView]
    trials_total: int
    torn_tail: bool
    provenance: Provenance
    server: ServerTable | None = None  # server metrics per cell (descriptive, never tested)
    gates: list[Gate] = []  # the matrix's gates; report.gates checks them against the cells
    # per proportion metric: how cells were compared with the baseline, one sentence (trial = unit)
    comparison: dict[str, str] = {}
    dispersion: dict[str, float] = {}  # per proportion metric: phi, when the quasi-binomial test compared cells
    # per proportion metric whose trial-to-trial variation cannot be estimated (no residual df, e.g. one
    # trial per cell): why none of its comparisons is tested, so none is a finding (its numbers are descriptive)
    untested: dict[str, str] = {}
    hunt: HuntView | None = None  # a hunt run: its verdict is the run's result (not the cells' comparisons)
    # roles the run's restore had left changed when the report was built (its status.json, the one
    # source every view reads) and the command that finishes the job; empty once they are back
    not_restored: tuple[str, ...] = ()
    restore_with: str = ""
