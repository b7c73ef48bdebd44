"""Print a plan for people: cells, env changes per host per cell, restarts, estimated time.

What `orch plan`, `orch run --dry-run` and `orch resume --dry-run` show. Reads the pure plan;
touches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.core import clustered, family, gates, power, ranks
from orchestrator.core.argsvar import ArgsEdit
from orchestrator.core.matrix import baseline_cell
from orchestrator.core.model import Adaptive
from orchestrator.core.plan import restart_count
from orchestrator.core.stats import ALPHA, CONFIDENCE
from orchestrator.core.steps import Plan, Step
from orchestrator.core.words import counted, on_testbeds
from orchestrator.sweep.apitypes import ResumePreview

RATES = (0.0, 0.02, 0.05, 0.15)  # the baseline rates the power lines are said at


def human_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def print_plan(plan: Plan, console: Console, *, testbeds: Sequence[str] = (), list_trials: bool = False) -> None:
    """The plan of `plan.testbed`, run on `testbeds` (the ones -t names; none: that one alone). Why
    the names: `orch plan -t tb1,tb2` said "on testbed tb1" and the time of tb1 running every trial
    (16 s for a sweep the two ran in 9 s), as the hunt's plan did before it took them."""
    m = plan.matrix
    cells, replicates = counted(len(plan.cells), "cell"), counted(plan.replicates, "replicate")
    most = " at most" if m.adaptive else ""
    console.print(
        f"[bold]{escape(m.name)}[/bold] {_where(plan, testbeds)}: "
        f"{cells} x {replicates} = {counted(len(plan.steps), 'trial')}{most}, "
        f"order {m.order} (seed {plan.seed})"
    )
    if m.adaptive:
        console.print(escape(adaptive_line(m.adaptive)))
    _print_rows(console, *_cells_table(plan))
    if list_trials:
        _print_rows(console, *_trials_table(plan.steps))
    alone = f" if {plan.testbed.name} ran every trial" if len(testbeds) > 1 else ""
    console.print(
        f"restarts: {plan.restart_count} unit restarts in this order{escape(alone)} "
        f"(units whose env does not change stay up); {_other_orders(plan)}"
    )
    console.print(
        f"estimated duration:{most} {_duration(plan, len(testbeds))} "
        f"(startup estimates from the inventory + {m.repro.expected_duration_s:g} s per repro)"
    )
    _print_power(plan, console)
    for line in replicate_warnings(plan) + gate_warnings(plan):  # said before the sweep, not after it
        console.print(f"[yellow]warning:[/yellow] {escape(line)}")


def _where(plan: Plan, testbeds: Sequence[str]) -> str:
    """`on testbed A`, or `across 2 testbeds (A, B)`, the names in bold (rich markup, escaped)."""
    return on_testbeds(testbeds if len(testbeds) > 1 else [plan.testbed.name], lambda n: f"[bold]{escape(n)}[/bold]")


def _duration(plan: Plan, beds: int) -> str:
    """The plan's time on one testbed; across several, also about how long they take side by side:
    each starts its units for its first trial, then the rest split evenly (the handout spreads them)."""
    total = plan.estimated_duration_s
    if beds < 2 or not plan.steps:
        return human_duration(total)
    first = plan.steps[0].estimate_s
    together = first + (total - first) / beds
    return f"{human_duration(together)} across {beds} testbeds ({human_duration(total)} on one testbed alone)"


def adaptive_line(a: Adaptive) -> str:
    """The matrix's adaptive: section as the plan reads it, defaults filled in. Why: the plan said
    "64 trials" and a fixed duration for an adaptive matrix and not a word of the section, so a
    typo'd default (alpha, power) or a question asked the wrong way round showed only in the report."""
    question = {"both": "differ from", "lower": "lower", "higher": "raise"}[a.direction]
    return (
        f"adaptive stopping ({a.metric}): each cell stops once its comparison with the baseline is decided "
        f"(direction {a.direction}: does it {question} the rate? the smallest change worth finding: {a.effect:g}); "
        f"alpha {a.alpha:g} per comparison, power {a.power:g}, at least {counted(a.min_rounds, 'round')}, "
        f"{counted(a.baseline_runs, 'baseline trial')} a round; replicates is the most rounds a cell runs"
    )


def print_resume_dry_run(preview: ResumePreview, console: Console) -> int:
    """`orch resume RUN --dry-run` and `orch hunt M --resume RUN --dry-run`: the preview, nothing
    touched (one way: the hunt's ignored --dry-run and resumed for real). Exit code: the resume's
    when it would run no trial (1 on failed trials), else 0."""
    print_resume_preview(preview, console)
    if preview.exit_code:
        failed = f"{counted(preview.failed, 'trial')} of the run failed"
        why = failed if preview.failed else "the hunt named no culprit set"
        console.print(f"{why}: the resume exits {preview.exit_code}, as this does")
    console.print("dry run: nothing was changed (the hosts are checked when the resume runs)")
    return preview.exit_code


def print_resume_preview(preview: ResumePreview, console: Console) -> None:
    """What a resume would run: the trials its journal has not finished, in run order (a hunt's
    search decides its next trials when it runs, so only its count so far is known)."""
    plan, done = preview.plan, len(preview.done)
    where = on_testbeds(preview.testbeds, str)  # a run across several: as `orch plan` says it
    if preview.ended is not None:  # the search stopped: the resume checks and restores the hosts, runs nothing
        state, reason = preview.ended
        console.print(
            escape(
                f"resume {preview.run_id} {where}: nothing left to run: the hunt has ended after "
                f"{counted(done, 'trial')} ({state}: {reason}); a resume runs no trial"
            )
        )
        return
    if plan.matrix.hunt is not None:
        console.print(
            escape(
                f"resume {preview.run_id} {where}: a hunt with {counted(done, 'trial')} done; the search "
                "picks up from its journal and decides the next trials as it goes"
            )
        )
        return
    left = preview.left
    upto = " at most (adaptive: a cell stops once decided)" if plan.matrix.adaptive else ""
    console.print(
        escape(f"resume {preview.run_id} {where}: {done} of {len(plan.steps)} trials done, {len(left)} left{upto}")
    )
    if left and preview.restarts_unknown:
        first = "each testbed's first trial" if len(preview.testbeds) > 1 else "the first trial"
        console.print(
            f"{first} restarts every unit of the hosts the matrix edits: what they run since the run "
            "stopped is not known (any unit found down restarts too)"
        )
    if left:
        _print_rows(console, *_trials_table(left, "trials left, in run order"))


def replicate_warnings(plan: Plan) -> list[str]:
    """With one trial per cell the report tests no proportion (report.build._untested): say so before
    the sweep, so nobody runs it hoping for findings."""
    props = [s.name for s in plan.matrix.repro.metrics if s.kind == "proportion"]
    if not props or not _unreplicated(plan):
        return []
    return [
        f"one trial per cell: the report will show differences in {', '.join(props)} but call none a finding "
        f"({clustered.ONE_TRIAL}); use --replicates 2 or more (replicates: in the matrix) to test them"
    ]


def _unreplicated(plan: Plan) -> bool:
    """No cell gets two trials (an adaptive baseline may get more: then the report can estimate the spread)."""
    trials: dict[str, int] = {}
    for step in plan.steps:
        trials[step.trial.cell.id] = trials.get(step.trial.cell.id, 0) + 1
    return max(trials.values(), default=0) < 2


def gate_warnings(plan: Plan) -> list[str]:
    """gates.unreachable() for the matrix's gates under this plan: the trials each cell gets (counted in
    the plan: adaptive baselines get more) and the repro's --sessions (as the power lines read it)."""
    if not plan.matrix.gates:
        return []
    trials: dict[str, int] = {}
    for step in plan.steps:
        trials[step.trial.cell.id] = trials.get(step.trial.cell.id, 0) + 1
    cells = [gates.PlannedCell(dict(c.levels), trials.get(c.id, 0)) for c in plan.cells]
    proportions = {s.name for s in plan.matrix.repro.metrics if s.kind == "proportion"}
    sessions = power.sessions_from_command(plan.matrix.repro.command)
    out = []
    for i, gate in enumerate(plan.matrix.gates):  # one at a time: each warning names its gate's line
        line = plan.matrix.source.line_of(("gates", i))
        where = f"{plan.matrix.path}:{line}" if line is not None else plan.matrix.path
        out += [f"{where}: {w}" for w in gates.unreachable([gate], cells, proportions, sessions, REPORT_INTERVALS)]
    return out


def _rate(k: int, n: int, inflation: float) -> tuple[float, float]:
    low, high = clustered.wilson_inflated(k, n, inflation)
    return float(low), float(high)


def _median_covered(values: int) -> bool:
    return values >= 1 and ranks.median_coverage(values, 1) >= CONFIDENCE  # what ranks.median_interval asks


# the code behind the report's intervals (clustered.widened_rate, ranks.median_interval)
REPORT_INTERVALS = gates.Intervals(_rate, clustered.prior_inflation, _median_covered)


def _other_orders(plan: Plan) -> str:
    """Restart counts the other orders would need, so `order: min-restarts` can be weighed."""
    counts = []
    for order in ("randomized", "sequential", "min-restarts"):
        count = restart_count(plan.matrix, plan.testbed, plan.seed, plan.replicates, order, plan.cells)
        counts.append(f"{order} {count}")
    return "per order: " + ", ".join(counts)


RICH_ROWS = 500  # rows a terminal's table is laid out for; beyond, plain lines (rich measures every cell first)

Rows = list[list[str]]
FOLDED = "env vs baseline"  # the one column whose long values wrap


def _print_rows(console: Console, title: str, columns: list[str], rows: Rows) -> None:
    """A table for a few hundred rows on a terminal; beyond, or into a pipe or file, one plain line
    per row (tab-separated, so it greps and cuts): laying out 800,000 rows took minutes, and a
    table at a pipe's 80 columns folded `...OVERLAP=0` mid-word and cut cell names to `bf16_i...`."""
    if len(rows) <= RICH_ROWS and console.is_terminal:
        table = Table(title=title)
        for col in columns:
            table.add_column(
                col, justify="right" if col == "#" else "left", overflow="fold" if col == FOLDED else "ellipsis"
            )
        for row in rows:
            table.add_row(*(escape(value) for value in row))
        console.print(table)
        return
    console.print(f"{escape(title)}: {len(rows):,} rows, one per line")
    file = console.file
    file.write("\t".join(columns) + "\n")
    for row in rows:
        file.write("\t".join(value.replace("\n", "; ") for value in row) + "\n")


def _cells_table(plan: Plan) -> tuple[str, list[str], Rows]:
    baseline = baseline_cell(plan.matrix)  # once: every cell is compared with it
    base_env, redact = baseline.env, plan.matrix.redactor.value
    columns = ["#", *(f.name for f in plan.matrix.factors), FOLDED]
    rows: Rows = []
    for i, cell in enumerate(plan.cells):
        env = cell.env
        diffs = []
        for role in env:
            changed = [
                f"{var}={_show(redact(var, str(_masked(value, plan))) if value is not None else None)}"
                for var, value in env[role].items()
                if base_env.get(role, {}).get(var) != value
            ]
            if changed:
                diffs.append(f"{role}: " + " ".join(changed))
        label = "(baseline)" if cell == baseline else "\n".join(diffs)
        rows.append([str(i), *(lv for _, lv in cell.levels), label])
    return "cells (env changes vs the baseline, per host)", columns, rows


def _trials_table(steps: Sequence[Step], title: str = "trials in run order") -> tuple[str, list[str], Rows]:
    rows = [
        [
            str(s.trial.index),
            str(s.trial.round),
            s.trial.cell.id,
            ", ".join(f"{r}:{u}" for r, u in s.restart_units) or "-",
            ", ".join(s.wait_roles),
        ]
        for s in steps
    ]
    return title, ["trial", "round", "cell", "restarts", "waits on"], rows


def _masked(value: str | ArgsEdit, plan: Plan) -> str | ArgsEdit:
    """A flag edit with its secret flags' values masked before it is described (ArgsEdit.masked)."""
    return value.masked(plan.matrix.redactor.is_secret_name) if isinstance(value, ArgsEdit) else value


def _show(value: str | None) -> str:
    return "<unset>" if value is None else (repr(value) if value == "" or " " in value else value)


def _print_power(plan: Plan, console: Console) -> None:
    """Power of the design as it will run, said before the sweep (see power_lines)."""
    for line in power_lines(plan):
        console.print(escape(line))


def power_lines(plan: Plan) -> list[str]:
    """What this design can detect, in the report's own tests and correction.

    Proportions: exact power of Fisher's test (core.power), rise and fall, per comparison and at
    Holm's first step over the metric's family, and the quasi-binomial test's with replicates; none
    with one trial per cell (replicate_warnings). Numbers: one value per trial, so the floor of the
    Mann-Whitney p decides whether a cell (or a factor, pooling its cells) can ever differ."""
    m = plan.matrix
    cells = [dict(c.levels) for c in plan.cells]
    factors = {f.name: list(f.level_names) for f in m.factors}
    numbers = _number_metrics(plan)
    tests = planned_family(plan)
    lines = _proportion_lines(plan, tests)
    if m.adaptive is not None and len(lines) > 1:  # figures follow the header: say whose they are
        lines.insert(1, _adaptive_power_note(m.adaptive))
    if numbers:
        left_out = sum(tests.unreachable.values())
        lines += _number_lines(numbers, plan.replicates, cells, factors, m.baseline, tests.total, left_out)
    return lines


def _adaptive_power_note(a: Adaptive) -> str:
    """Whose figures follow, for an adaptive matrix. Why: a `direction: lower` hunt (only a fall
    matters) read lines about rises and "no fall at all", two-sided figures of the report's fixed
    analysis with every round run; core.power has none for the stopping test, so the plan says so
    rather than compute one."""
    asked = {
        "both": "'does it differ from the baseline?' with its own anytime-valid test",
        "lower": "'does it lower the rate?' (only a fall counts), one-sided, with its own anytime-valid test",
        "higher": "'does it raise the rate?' (only a rise counts), one-sided, with its own anytime-valid test",
    }[a.direction]
    return (
        f"  adaptive stopping asks {asked}: the figures below are the report's fixed analysis, two-sided "
        "(a rise or a fall), with every round run, not the stopping test's (orch does not compute its power)"
    )


def _number_metrics(plan: Plan) -> list[str]:
    """The metrics of one value per trial: the repro's numbers, then the collected counters."""
    m = plan.matrix
    return [s.name for s in m.repro.metrics if s.kind == "number"] + [c.name for c in m.collect]


def planned_family(plan: Plan) -> family.Planned:
    """The report's one Holm family for this plan, every trial completed (core.family, the function the
    report corrects by): every metric in it; with one trial per cell no proportion is tested."""
    m = plan.matrix
    cells = {c.id: c.as_dict() for c in plan.cells}
    tested = not _unreplicated(plan)
    metrics = {s.name: family.MetricDesign(s.kind, cells, tested=tested) for s in m.repro.metrics}
    numbers = _number_metrics(plan)
    trials = dict.fromkeys(cells, plan.replicates)  # one value per trial, every trial completed
    metrics |= {name: family.MetricDesign("number", cells, trials=trials) for name in numbers}
    factors = {f.name: list(f.level_names) for f in m.factors}
    return family.planned(family.Design(factors, m.baseline, baseline_cell(m).id, metrics))


def _family_text(tests: family.Planned) -> str:
    """The family's size as the plan states it: the highest cell's neighbours are in it only when
    that cell is not the baseline, which the sweep decides."""
    if tests.total == tests.total_without_neighbours:
        return f"the report's {tests.total} tests"
    return (
        f"the report's {'' if tests.exact else 'up to '}{tests.total} tests ({tests.total_without_neighbours} if the "
        "baseline has the highest rate, as then the highest cell's one-factor comparisons are the baseline's own)"
    )


def _no_sessions(command: str) -> str:
    """Why the sessions per trial are not known: no --sessions, or one a placeholder fills in. Why:
    `--sessions {concurrency}` (a client factor) was said to be no --sessions at all."""
    written = re.search(r"--sessions[ =](\S+)", command)
    if written is None:
        return "the repro command has no --sessions N"
    return f"the repro command's --sessions is {written.group(1)}, filled in per trial"


def _proportion_lines(plan: Plan, family_tests: family.Planned) -> list[str]:
    """The proportions' power: with replicates, the report's own test first (and in its hard shape),
    then Fisher's on pooled sessions for reference only. Why this order and one block each: the plan
    led with Fisher's lines and appended the hard shape to each of the test's lines (lines of 400
    characters), and a new user read the figures of a test the report does not run as the promise."""
    props = [s.name for s in plan.matrix.repro.metrics if s.kind == "proportion"]
    if not props:
        return []
    if _unreplicated(plan):
        return [f"power ({', '.join(props)}): none with one trial per cell (the warning below says why)"]
    sessions = power.sessions_from_command(plan.matrix.repro.command)
    if sessions is None:
        why = _no_sessions(plan.matrix.repro.command)
        return [f"power ({', '.join(props)}): {why}, so orch cannot say before the sweep"]
    n, tests = sessions * plan.replicates, max(1, family_tests.total)
    lines = [
        f"power ({', '.join(props)}): {n} sessions per cell ({sessions} x {plan.replicates} trials); the smallest "
        "change from the baseline a comparison detects with 80% power, and in brackets what a finding needs "
        f"'after Holm', the first step of the correction over {_family_text(family_tests)}, every metric in one family:"
    ]
    if plan.replicates > 1:
        lines += _quasi_lines(plan, sessions, tests)
    lines.append(
        "  for reference, Fisher's exact test on the pooled sessions as if independent (exact; not the report's "
        "test with replicates):"
    )
    for rate in RATES:
        d = power.detectable(n, n, rate)
        strict = power.detectable(n, n, rate, alpha=ALPHA / tests)
        lines.append(f"    baseline at {rate:.0%}: {_dirs(d, strict)}")
    return lines


def _quasi_lines(plan: Plan, sessions: int, tests: int) -> list[str]:
    """The power of the test the report runs with replicates, per comparison and at Holm's first
    step over the family, as the report's own power sentence states it (report.build.quasi_power_sentence),
    with every other cell at the baseline's rate and, where that differs, with no events in them. Why
    Holm: a finding must pass it, and with few trials the quasi test's heavy tails make its step far
    dearer than Fisher's. Why the second shape: the other cells inform the test only through the pooled
    spread, and cells without events add nothing to it, so the DSV4 AND (events in one cell) is the
    test's hard case. The plan printed the per-comparison figure of the easy shape only: at 3
    replicates of 40 sessions 'a rise from 0% to 6.9%' (Fisher at Holm: 10.3%), at 5 'a fall from 15%
    to 6.2%', while the report found the DSV4 AND's 15% vs 0% in 11-12% and 30-41% of sweeps
    (bench/bench_truth.py (4))."""
    others = max(0, len(plan.cells) - 2)
    lines = [
        "  the report's test: quasi-binomial over the trials (the trial is the unit of replication; a likelihood "
        "ratio where the spread has too few degrees of freedom), simulated with "
        f"{'every other cell at the baseline rate and ' if others else ''}no extra trial-to-trial variation:"
    ]
    lines += [
        f"    baseline at {rate:.0%}: {_quasi_dirs(sessions, plan.replicates, (rate,) * others, rate, tests)}"
        for rate in RATES
    ]
    if others:  # two cells: no other cell, no second shape
        lines.append(
            "  the same test with events in the compared cells only (every other cell at 0%, as with the DSV4 AND: "
            "the spread rests on the two compared cells alone):"
        )
        lines += [
            f"    baseline at {rate:.0%}: {_quasi_dirs(sessions, plan.replicates, (0.0,) * others, rate, tests)}"
            for rate in RATES
            if rate > 0  # at 0% the two shapes are one
        ]
    return lines


def _quasi_dirs(sessions: int, trials: int, others: tuple[float, ...], rate: float, tests: int) -> str:
    design = power.Design(sessions=sessions, trials=trials, other_rates=others)
    strict = power.quasi_detectable(design, rate, alpha=ALPHA / tests)
    return _dirs(power.quasi_detectable(design, rate), strict)


def _dirs(d: power.Detectable, strict: power.Detectable) -> str:
    """What a comparison detects with 80% power, each direction in words, before and after Holm's
    first step: 'detects a rise to 5.6% (7.7% after Holm) or a fall to 0.1% (none passes Holm,
    not even to 0%)'. It read 'a rise to 5.6% or a fall to 0.1% (Holm: a rise to 7.7% or no
    fall)', where a reader could not tell 'no fall' was 'no fall can be detected'."""
    up = _direction("rise", d.baseline, d.rise, strict.rise)
    down = _direction("fall", d.baseline, _neg(d.fall), _neg(strict.fall))
    if d.baseline >= 1:
        return f"detects {down or _none('fall')}; a rate of 100% cannot rise"
    if d.baseline <= 0:
        return f"detects {up or _none('rise')}; a rate of 0% cannot fall"
    if up and down:
        return f"detects {up} or {down}"
    if up or down:
        return f"detects {up or down}, but {_none('fall' if up else 'rise')}"
    return "detects no rise or fall at all (not even to 100% or 0%, before or after Holm)"


def _neg(change: float | None) -> float | None:
    return -change if change is not None else None


def _none(word: str) -> str:
    return f"no {word} at all (not even to {'100%' if word == 'rise' else '0%'}, before or after Holm)"


def _direction(word: str, base: float, change: float | None, strict: float | None) -> str:
    """One direction's part of _dirs: the rate a change must reach, and after Holm ("": no change
    in this direction reaches 80% power, not even to 100% or 0%)."""
    if change is None:
        return ""
    end = "100%" if word == "rise" else "0%"
    after = f"{base + strict:.1%} after Holm" if strict is not None else f"none passes Holm, not even to {end}"
    return f"a {word} to {base + change:.1%} ({after})"


def _number_lines(
    names: list[str],
    reps: int,
    cells: list[dict[str, str]],
    factors: dict[str, list[str]],
    baseline: dict[str, str],
    family: int,
    left_out: int = 0,
) -> list[str]:
    """The numbers' power line; the `left_out` cell comparisons core.family leaves out of the family
    (they could never be significant, ties included) are said to be, next to the cells' floor."""
    floor = ranks.mann_whitney_floor(reps, reps)
    need = next(r for r in range(1, 60) if ranks.mann_whitney_floor(r, r) < ALPHA)
    if floor >= ALPHA:
        tied = ranks.mann_whitney_smallest_p(reps, reps)  # values tied within each side: the normal approximation
        ever = (
            "no cell can ever differ significantly from the baseline"
            if tied >= ALPHA
            else "no cell can differ significantly from the baseline unless values tie within each side"
        )
        cell_text = (
            f"with {counted(reps, 'trial')} per cell, {ever} "
            f"(smallest possible Mann-Whitney p = {floor:.2g} >= {ALPHA:g}; {tied:.2g} with tied values); "
            f"{need} or more replicates lift that floor"
        )
    else:
        cell_text = f"a cell vs the baseline can reach p = {floor:.2g} at best"
    if left_out:
        cell_text += f"; so these {counted(left_out, 'comparison')} are not counted in the report's Holm family"
    pooled = [_factor_floor(f, levels, baseline, cells, reps) for f, levels in factors.items()]
    best = min(pooled, default=1.0)
    pooling = (
        "factor effects pool trials across cells"
        if len(factors) > 1
        else "with one factor, its effect compares the same trials as the cells"
    )
    best_p = "best p < 1e-300" if best < 1e-300 else f"best p = {best:.2g}"  # 4,096 trials a side underflow to 0
    factor_text = f"{pooling} ({best_p}; Holm's first step needs < {ALPHA / max(1, family):.2g})"
    return [f"power ({', '.join(names)}; one value per trial): {cell_text}; {factor_text}"]


def _factor_floor(
    factor: str, levels: list[str], baseline: dict[str, str], cells: list[dict[str, str]], reps: int
) -> float:
    ref = baseline.get(factor, levels[0])
    n_ref = sum(c.get(factor) == ref for c in cells) * reps
    others = [sum(c.get(factor) == lv for c in cells) * reps for lv in levels if lv != ref]
    return min((ranks.mann_whitney_floor(n, n_ref) for n in others), default=1.0)
