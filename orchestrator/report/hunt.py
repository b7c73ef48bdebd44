"""The hunt's report (hunt.html beside the run's index.html, and the lines `orch hunt` prints):
the posterior over culprit sets, the minimal reproducer, the dependencies in words, every
configuration tried with its k/n and interval, and what the hunt cost against a full factorial
and one flag at a time. Rebuilt from the journal (the search is replayed), so it is the same
after a resume or a re-render.

It never says more than the data: the culprit set, its dependencies and its reproducer are
findings only once the hunt stopped as "found" (posterior >= target, every check done); before
that they are the likeliest so far, said as conditions; a failure that never reproduced has
no culprit at all.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.clustered import Dispersion, dispersion, rate_interval
from orchestrator.core.config import MatrixShape, build_matrix, validate_shape
from orchestrator.core.hunt import ConfigResult, HuntResult, probability_text
from orchestrator.core.huntconfig import set_apart
from orchestrator.core.huntfit import misfit_words
from orchestrator.core.huntreplay import counts_of, settings_of, stopped
from orchestrator.core.matrix import hunt_cell
from orchestrator.core.model import Matrix
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.core.words import counted
from orchestrator.core.yamlsrc import parse_yaml
from orchestrator.errors import ConfigError
from orchestrator.report.huntrules import clean_line, drop_check_lines, joined, verdict_rules
from orchestrator.report.model import HuntView
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.manifest import load_manifest
from orchestrator.store.rundir import HUNT_HTML, RunDir
from orchestrator.store.runtrials import read_finished

OFAT_SESSIONS_PER_CONFIG = 80  # what one-flag-at-a-time spends per configuration (the DSV4 team's runs)
INFERRED = " (the model's inference from the answer, not tested in every configuration)"


@dataclass(frozen=True)
class HuntReport:
    matrix: Matrix
    result: HuntResult
    spread: Dispersion  # trial-to-trial variation pooled over the configurations: widens their intervals
    ended: str | None = None  # how the run ended, in words (None: it has not, or it is not known)

    @property
    def flags(self) -> tuple[str, ...]:
        assert self.matrix.hunt is not None
        return self.matrix.hunt.flags

    @property
    def found(self) -> bool:
        """Whether the answer is a finding: only a hunt that stopped as "found" checked it."""
        return self.result.state == "found"

    def tried(self, config: int) -> ConfigResult | None:
        """What `config` did on its own trials, if it ran."""
        return next((c for c in self.result.configs if c.config == config), None)


def hunt_report(run_dir: Path, manifest: RunManifest | None = None, *, lenient: bool = False) -> HuntReport | None:
    """The hunt of a run directory, or None when the run is not a hunt (`manifest`: its run.json,
    when already loaded). `lenient`: None too when run.json's matrix text cannot be read as a
    matrix (hand-made, or an older schema): the run's main report, which never needed it, must
    not fail on it; it then goes on without the hunt's answer."""
    manifest = manifest or load_manifest(run_dir)  # with its plan: store.runtrials checks the wave's cells
    try:
        data, source = parse_yaml(manifest.matrix_text, manifest.matrix_path)
        matrix = build_matrix(validate_shape(MatrixShape, data, source), source, manifest.matrix_text)
    except ConfigError:
        if lenient:
            return None
        raise
    if matrix.hunt is None:
        return None
    records, interruption = _journal(run_dir, manifest)
    return build_report(matrix, records, _ended(manifest.status, interruption))


_STOPS = ("run_started", "run_resumed", "run_interrupted")


def _journal(run_dir: Path, manifest: RunManifest) -> tuple[list[TrialRecord], str]:
    """The record standing for each finished trial (store.runtrials: what resume replays too; a
    damaged journal is refused at its line), and why the run last stopped early ("": it did not,
    since it last started): the message of its last run_interrupted event."""
    finished = read_finished(run_dir, manifest, _STOPS)
    why = ""
    for event in finished.events:
        why = (event.message or "the run was interrupted") if event.event == "run_interrupted" else ""
    return list(finished.records()), why


def _ended(status: str, interruption: str) -> str | None:
    """How the run ended, in words (None while it runs). Why: a search still "running" in a run
    that has ended (Ctrl-C, a deadline) stopped before an answer, and must read so."""
    if status == "running":
        return None
    return interruption or ("the run was interrupted" if status == "interrupted" else f"the run ended ({status})")


def build_report(matrix: Matrix, records: Sequence[TrialRecord], ended: str | None = None) -> HuntReport:
    """The hunt as its trials leave it: the search replayed, and the spread of its trials."""
    hunt = stopped(matrix, records)  # its stopping rule evaluated, as a resume's dry run does
    spread = dispersion(list(trial_counts(matrix, records).values()))
    return HuntReport(matrix, hunt.result(top_n=10), spread, ended)


def trial_counts(matrix: Matrix, records: Sequence[TrialRecord]) -> dict[int, list[tuple[int, int]]]:
    """configuration -> (k, n) of the hunt's metric per completed trial: the data of its interval,
    trial by trial, because the trial (one restart, one warm-up) is the unit of replication."""
    assert matrix.hunt is not None
    out: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        counts = counts_of(matrix.hunt, r)
        if counts is not None and counts[2] > 0:
            out.setdefault(counts[0], []).append(counts[1:])
    return out


def verdict(report: HuntReport) -> tuple[str, str]:
    """The hunt's state and why. Why: a search left "running" by a run that has ended stopped
    before an answer; "hunt running: running" said neither."""
    r = report.result
    if r.state != "running":
        return r.state, r.reason
    if report.ended is None:
        return "running", "no stopping rule met yet"
    return "stopped before an answer", f"{report.ended}; no stopping rule was met"


def posterior_note(report: HuntReport) -> str:
    """The top set's posterior, against the target when the hunt did not find it (then a
    posterior at the target still lacks a check)."""
    p = report.result.best.probability
    if report.found:
        return f"posterior {probability_text(p)}"
    assert report.matrix.hunt is not None
    target = report.matrix.hunt.posterior
    return f"posterior {probability_text(p)} " + (
        f"< target {target:g}" if p < target else f">= target {target:g}, checks not done"
    )


def dependencies(report: HuntReport) -> list[str]:
    """The answer in words: which flag matters only with which others. Facts only once the hunt
    found them; before, what the likeliest set so far would mean, said as a condition; nothing
    when the failure never reproduced or is not confirmed yet (there is no answer)."""
    r = report.result
    if no_answer_lines(report):
        return []
    if not r.best.sets:
        return _no_flag(report)
    return _set_lines(r.best.sets, report.found) + _without_line(report) + cause_rate_lines(report)


def _without_line(report: HuntReport) -> list[str]:
    """An AND answer: what its "X changes nothing unless Y and Z are on" rests on, measured: the
    configurations run without all of them on, k/n and interval. Why: the lines said "changes
    nothing", an inference, where no two configurations differing only in X (with Y or Z off) may
    have run; the rate of those without the set bounds how much X could change there (the hunt
    audit: 2/320, a 95% upper limit near 9-13%, not nothing)."""
    sets = report.result.best.sets
    if len(sets) != 1 or len(sets[0]) < 2:
        return []
    mask = _mask(report, sets[0])
    without = [c for c in report.result.configs if c.config & mask != mask and c.n]
    name = joined(list(sets[0]))
    if not without:
        return [f"without all of {name} on: not measured (no configuration ran so)"]
    return [
        f"without all of {name} on: {_pooled(report, without)}: the measured bound on what any of them changes there"
    ]


def _mask(report: HuntReport, group: Sequence[str]) -> int:
    """The configuration bits of `group`'s flags (a configuration has them all on when it holds them)."""
    return sum(1 << report.flags.index(f) for f in group)


def _pooled(report: HuntReport, configs: Sequence[ConfigResult]) -> str:
    """'k/n sessions failed, r% (95% interval lo%-hi%) over N configurations': their sessions pooled,
    the interval widened by the hunt's trial-to-trial spread."""
    k, n = sum(c.k for c in configs), sum(c.n for c in configs)
    lo, hi = rate_interval(k, n, report.spread, trials=sum(c.trials for c in configs))
    over = counted(len(configs), "configuration")
    return f"{k}/{n} sessions failed, {k / n:.1%} (95% interval {lo:.1%}-{hi:.1%}) over {over}"


def cause_rate_lines(report: HuntReport) -> list[str]:
    """An OR answer: each cause's own failure rate, as measured where only it is on (its flags all
    on, the other cause's not all on): k/n and interval. Why: the model fits one affected rate for
    both causes, and the page said none; the DSV4 team's two causes failed at 15% and 10%."""
    sets = report.result.best.sets
    if len(sets) < 2:
        return []
    masks = [_mask(report, group) for group in sets]
    lines = []
    for group, mask in zip(sets, masks, strict=True):
        others = [m for m in masks if m != mask]
        alone = [c for c in report.result.configs if c.config & mask == mask and all(c.config & m != m for m in others)]
        name = joined(list(group))
        if not alone:
            lines.append(f"{name}, the other cause off: not measured (no configuration ran so)")
            continue
        lines.append(f"{name}, the other cause off: {_pooled(report, alone)}: this cause's own rate as measured")
    return lines


def _set_lines(sets: tuple[tuple[str, ...], ...], found: bool) -> list[str]:
    """Each flag of each set, and what it needs: stated as the model's inference from the answer
    when found, else as what would hold if the likeliest set is the answer (a reader quotes one
    line, not the heading above it). Why "inferred": "bf16_index_k changes nothing unless
    cuda_graph and overlap are on" was stated as a fact, but no trial ran bf16_index_k with both
    others off; the configurations tested are in the drop checks and the table."""
    cond, change, cause, suffice, tail = ("", "changes", "causes", "suffices", INFERRED)
    if not found:
        cond, change, cause, suffice, tail = ("if so, ", "would change", "would cause", "would suffice", "")
    lines = []
    for group in sets:
        for flag in group:
            others = [f for f in group if f != flag]
            if others:
                verb = "is" if len(others) == 1 else "are"
                lines.append(f"{cond}{flag} {change} nothing unless {joined(others)} {verb} on{tail}")
            else:
                lines.append(f"{cond}{flag} alone {cause} the failure{tail}")
    if len(sets) > 1:
        lines.append(f"{cond}either cause {suffice}: " + " / ".join(joined(list(g)) for g in sets) + tail)
    return lines


def _no_flag(report: HuntReport) -> list[str]:
    """The answer "the flags do not explain it" rests on the clean configuration's own trials: a
    fact only when the hunt found it and those trials failed; otherwise a condition, and what
    they showed. The fact is that the failure needs none of the flags, not that they leave its
    rate alone: "does not depend on them" was said of an AND at 40% over a 30% background
    (6/10 failing, 15/50 clean)."""
    clean, full = report.tried(0), report.tried((1 << len(report.flags)) - 1)
    if report.found and clean is not None and clean.verdict == "fails":
        failing = f" (the failing configuration: {full.k}/{full.n})" if full else ""
        return [
            "the failure does not need the suspect flags: the all-clean configuration fails too "
            f"({clean.k}/{clean.n} sessions failed); whether they change its rate is a matrix's question, "
            f"not a hunt's{failing}"
        ]
    return ["if so, the failure would not need the suspect flags", _observed(clean, "the all-clean configuration")]


def _observed(c: ConfigResult | None, name: str) -> str:
    return f"{name}: " + (f"{c.k}/{c.n} sessions failed ({c.verdict})" if c else "not run")


def no_answer_lines(report: HuntReport) -> list[str]:
    """Why no culprit set is named, then what was observed; [] when one is. Why: with no data, or
    before the failing configuration confirmed the failure, the posterior over sets is the
    prior's, and "culprit: torch_compile (posterior 0.202 < target 0.95; likeliest so far)" was
    printed for a hunt that had completed no trial."""
    if report.result.state == "not_failing":
        return not_failing_lines(report)
    if not report.result.confirmed:
        return unknown_lines(report)
    if report.result.state == "budget" and report.result.contradicted:
        return unexplained_lines(report)
    return []


SHOWN_FAILING = 12  # failing configurations listed in the summary (hunt.html's table has them all)


def unexplained_lines(report: HuntReport) -> list[str]:
    """A hunt stopped at its budget where no culprit set of the hypothesis space fits the
    configurations' own trials (core.huntfit): that in words, which configurations failed (k/n),
    the flags every one of them had on, and what to do. Why: a 4-flag AND spent the whole budget
    and said only "session budget 3000 spent (top posterior 0.882)"."""
    r, flags = report.result, report.flags
    assert report.matrix.hunt is not None
    max_and = settings_of(report.matrix.hunt).model.max_and
    # the verdict just above already gives the reason (core.hunt's budget stop): said once
    words = misfit_words(r.contradicted, max_and)
    lines = ["no culprit set is named" + ("" if words in r.reason else f": {words}")]
    # judged by a likelihood ratio, not shown to share one rate: their own k/n and intervals follow
    lines.append(
        f"configurations that fail on their own trials (judged at the failing configuration's rate against the "
        f"background's) ({len(r.failing)}):"
    )
    for config, k, n in r.failing[:SHOWN_FAILING]:
        lo, hi = rate_interval(k, n, report.spread)
        on = _on_label(tuple(f for i, f in enumerate(flags) if config >> i & 1), flags)
        lines.append(f"  {on}: {k}/{n} sessions failed ({lo:.1%}-{hi:.1%})")
    if len(r.failing) > SHOWN_FAILING:
        lines.append(f"  and {len(r.failing) - SHOWN_FAILING} more (in hunt.html's table 'Every configuration tried')")
    return lines + _what_to_do(r.failing, flags)


def _what_to_do(failing: Sequence[tuple[int, int, int]], flags: tuple[str, ...]) -> list[str]:
    """The flags on in every failing configuration, and the next steps they suggest."""
    common = (1 << len(flags)) - 1
    for config, _, _ in failing:
        common &= config
    shared = [f for i, f in enumerate(flags) if common >> i & 1]
    matrix = "run the failing configurations above as a matrix (orch run) to measure each one's rate"
    if len(shared) == len(flags):
        return [
            "only the failing configuration failed (every suspect flag on)",
            f"what to do: narrow the suspect list and hunt again, or {matrix}",
        ]
    if not shared:
        return [
            "no flag was on in every failing configuration: the failure may have more than two causes (an OR the "
            "hunt cannot name)",
            f"what to do: narrow the suspect list and hunt again, or {matrix}",
        ]
    return [
        f"every failing configuration had {joined(shared)} on ({len(shared)} flags): the failure may need more of "
        "them together than the hunt can name",
        f"what to do: narrow the suspects to those {len(shared)} and run them as a full factorial "
        f"({2 ** len(shared):,} cells), or {matrix}",
    ]


def unknown_lines(report: HuntReport) -> list[str]:
    """A failure not confirmed yet (no data, or too little): no culprit, just what was observed."""
    assert report.matrix.hunt is not None
    full = (1 << len(report.flags)) - 1
    return [
        f"nothing is known yet: the failing configuration has not shown its {report.matrix.hunt.min_failures} "
        "failures, so there is no failure for the flags to explain and no culprit set is named",
        _observed(report.tried(full), "the failing configuration"),
    ]


def not_failing_lines(report: HuntReport) -> list[str]:
    """A failure that did not reproduce: no culprit, no dependencies, just what was observed."""
    full = (1 << len(report.flags)) - 1
    return [
        "no culprit: the failing configuration did not confirm the failure: the suspect flags have nothing to explain",
        _observed(report.tried(full), "the failing configuration"),
        _observed(report.tried(0), "the all-clean configuration"),
        _not_failing_check(report),
    ]


def _not_failing_check(report: HuntReport) -> str:
    """What to check when the failing configuration did not fail. Why: the stop reason said only
    what happened, and a misspelt failing level or a metric that counts nothing reads the same."""
    spec = report.matrix.hunt
    assert spec is not None
    return (
        "what to check: the failing levels (hunt.failing, else each factor's first level) are the failing "
        f"deployment's, and the repro's metric {spec.metric!r} counts its failures (run the repro by hand "
        f"against it); a hunt gives the failing configuration {settings_of(spec).endpoint_limit} sessions to "
        f"show {spec.min_failures} failures"
    )


def headline(report: HuntReport) -> str:
    """The run's result in one sentence: the first two lines `orch hunt` prints (its state and
    why; its answer, or that there is none), in those words."""
    state, answer = summary_lines(report)[:2]
    return f"{state}; {answer}"


def view(report: HuntReport) -> HuntView:
    """The hunt as the run's report (index.html) and every quote of its result show it."""
    return HuntView(verdict=headline(report), lines=summary_lines(report)[2:], found=report.found, page=HUNT_HTML)


def summary_lines(report: HuntReport) -> list[str]:
    """What `orch hunt` prints at the end: the page's claims, no more."""
    r = report.result
    label, why = verdict(report)
    lines = [f"hunt {label}: {why}"]
    if no_answer := no_answer_lines(report):
        head, *seen = no_answer
        lines += [head] + [f"  {line}" for line in seen]
    else:
        lines += _answer_lines(report)
    lines.append(variation_line(report))
    flags = len(report.flags)
    lines.append(
        f"sessions: {r.sessions} in {r.trials} trials over {len(r.configs)} configurations; one flag at a time: "
        f"{(flags + 1) * OFAT_SESSIONS_PER_CONFIG:,} sessions; full factorial: {2**flags:,} configurations"
    )
    return lines


def variation_line(report: HuntReport) -> str:
    """The trial-to-trial variation each trial's evidence was tempered by: the matrix's stated icc,
    or the estimate from the hunt's own trials where they show more (core.huntspread).
    Why said: how much one trial counts decides how soon a set reaches the target; a reader must
    see whether that rested on an assumption or on the trials."""
    icc = report.result.icc
    if icc is None:  # a result not built by core.hunt (never from a replay)
        return "trial-to-trial variation: not recorded"
    return f"evidence per trial tempered by trial-to-trial variation: {icc.describe()}"


def _answer_lines(report: HuntReport) -> list[str]:
    """The likeliest set with its dependencies, unchecked drops and reproducers: a finding only
    when the hunt found it."""
    r = report.result
    note = "" if report.found else "; likeliest so far, not established"
    lines = [f"culprit: {r.best.describe()} ({posterior_note(report)}{note})"]
    lines += [f"  {d}" for d in dependencies(report)]
    if r.unchecked:
        lines.append(f"  single-flag drops not checked yet: {', '.join(r.unchecked)}")
    return lines + [f"  {line}" for line in reproducer_lines(report)]


def reproducers(
    report: HuntReport, sets: Sequence[tuple[str, ...]]
) -> list[tuple[tuple[str, ...], int, ConfigResult | None]]:
    """Each of these sets alone, every other flag clean (the likeliest answer's: an OR has two):
    its flags, its configuration and what it did, if it ran. The hunt calls the answer found only
    once each of them failed on its own trials (core.hunt)."""
    tried = {c.config: c for c in report.result.configs}
    alone = [(names, sum(1 << report.flags.index(f) for f in names)) for names in sets]
    return [(names, config, tried.get(config)) for names, config in alone]


def reproducer_lines(report: HuntReport) -> list[str]:
    return [
        f"minimal reproducer, {joined(list(names))} alone: "
        + (f"{c.k}/{c.n} sessions failed ({c.verdict})" if c else "not run yet")
        for names, _, c in reproducers(report, report.result.best.sets)
    ]


def write_hunt_page(run_dir: Path) -> Path | None:
    report = hunt_report(run_dir)
    if report is None:
        return None
    path = RunDir(run_dir).hunt_html
    write_text_atomic(path, render(report))
    return path


def render(report: HuntReport, *, not_restored: Sequence[str] = (), restore_with: str = "") -> str:
    """hunt.html: the summary's claims, no more, with every configuration and the cost; first, the
    roles the run's restore had left changed when it was written (the run's report, Report.not_restored:
    the runs index links a hunt's runs to this page, not to index.html)."""
    m, e = report.matrix, html.escape
    label, why = verdict(report)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>hunt: {e(m.name)}</title>",
        # a configuration is one word of up to ~300 characters (f=v,f=v,...): let it and the env wrap,
        # and let a table wider than a phone scroll in its own box rather than widen the page
        "<style>body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;"
        "overflow-wrap:break-word}.scroll{overflow-x:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}"
        ".fails{color:#b00}.passes{color:#070}.undecided{color:#a60}"
        ".unrestored{color:#b00;font-weight:600;border-left:4px solid #b00;background:#ffebe9;padding:6px 12px}"
        "</style></head><body>",
        # the runs index links a hunt's run here: the way back, and on to the run's trials and evidence
        "<p><a href='../index.html'>all runs</a> · <a href='index.html'>this run's report</a> (every trial, its "
        "logs and the run's provenance)</p>",
        f"<h1>Culprit hunt: {e(m.name)}</h1>",
        _left_changed(not_restored, restore_with),
        f"<p>{e(m.description)}</p>",
        f"<h2>Verdict</h2><p><b>{e(label)}</b>: {e(why)}</p>",
    ]
    parts.append(_nothing_to_explain(report) if no_answer_lines(report) else _answer(report))
    parts.append(_configs(report))
    variation = variation_line(report)
    parts.append(f"<p>{html.escape(variation[:1].upper() + variation[1:])}.</p>")
    parts.append(_cost(report))
    parts.append("</body></html>")
    return "\n".join(parts)


def _left_changed(not_restored: Sequence[str], restore_with: str) -> str:
    """report.html.j2's #unrestored block, in the same words; "" when the restore left nothing."""
    if not not_restored:
        return ""
    e = html.escape
    return (
        "<div class='unrestored' id='unrestored'>When this page was written, this run had left its testbed "
        f"changed: NOT restored: {e(', '.join(not_restored))}; finish with: <code>{e(restore_with)}</code> "
        "(the runs index and <code>orch status</code> say whether it still is)</div>"
    )


def _nothing_to_explain(report: HuntReport) -> str:
    """The page of a failure that never reproduced or is not confirmed yet: no culprit set, no
    posterior over them."""
    head, *seen = no_answer_lines(report)
    return f"<p>{html.escape(head)}</p><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in seen) + "</ul>"


def _answer(report: HuntReport) -> str:
    """The likeliest set, its dependencies, reproducers and the posterior: stated as the answer
    only when the hunt found it."""
    r, e = report.result, html.escape
    lead = "Most probable culprit set" if report.found else "Likeliest culprit set so far"
    note = "" if report.found else "; not established"
    parts = [
        f"<p>{lead}: <b>{e(r.best.describe())}</b> ({e(posterior_note(report))}{note})</p>",
        "<h3>Dependencies</h3><ul>" + "".join(f"<li>{e(d)}</li>" for d in dependencies(report)) + "</ul>",
    ]
    if r.unchecked:
        parts.append(f"<p class='undecided'>Single-flag drops not checked yet: {e(', '.join(r.unchecked))}</p>")
    if r.best.sets:
        checks = drop_check_lines(r, report.flags)
        parts.append("<h3>Single-flag drops</h3><ul>" + "".join(f"<li>{e(c)}</li>" for c in checks) + "</ul>")
    parts.append(_reproducer(report))
    parts.append(
        "<h2>Posterior over culprit sets</h2><div class='scroll'><table>"
        "<tr><th>#</th><th>culprit set</th><th>posterior</th></tr>"
    )
    parts += [
        f"<tr><td>{i + 1}</td><td>{e(c.describe())}</td><td>{c.probability:.4f}</td></tr>" for i, c in enumerate(r.top)
    ]
    return "\n".join(parts) + "\n</table></div>"


def _reproducer(report: HuntReport) -> str:
    """Each set of the answer alone; the clean endpoint when the answer is that the flags do not
    explain the failure. Before the hunt found its answer, these are the likeliest set's."""
    m, e = report.matrix, html.escape
    parts = ["<h2>Minimal reproducer</h2>"]
    if not report.found:
        parts.append("<p class='undecided'>Of the likeliest culprit set so far (not established):</p>")
    for names, config, c in reproducers(report, report.result.best.sets or ((),)):
        cell = hunt_cell(m, config)
        env = "; ".join(f"{role}: " + " ".join(f"{k}={v}" for k, v in a.items()) for role, a in cell.env.items())
        seen = f"tested: {c.k}/{c.n} sessions failed ({c.verdict})" if c else "not tested as such"
        parts.append(
            f"<p>{e(_only(names, report.flags))} ({e(seen)}):</p><p><code>{e(cell.id)}</code></p>"
            f"<p>env: <code>{e(m.redactor.text(env))}</code></p>"
        )
    return "".join(parts)


def _only(names: tuple[str, ...], flags: tuple[str, ...]) -> str:
    """The reproducer's lead; 'every other flag clean' only where the hunt has another flag."""
    if not names:
        return "Every flag clean (the likeliest answer: the flags do not explain the failure)"
    rest = ", every other flag clean" if set(flags) - set(names) else ""
    return f"Only {joined(list(names))} at the failing level{rest}"


def _configs(report: HuntReport) -> str:
    e = html.escape
    rows = [
        "<h2>Every configuration tried</h2>",
        f"<p>Intervals: 95%, {e(_interval_method(report.spread))}.</p>",
        _verdict_rules(report),
        "<div class='scroll'><table><tr><th>flags on (failing level)</th><th>k/n</th>"
        "<th>rate (95% interval)</th><th>trials</th><th>P(fails) by the model</th><th>verdict (own trials)</th></tr>",
    ]
    for c in report.result.configs:
        lo, hi = rate_interval(c.k, c.n, report.spread, trials=c.trials)
        on = _on_label(c.on, report.flags)
        rows.append(
            f"<tr><td>{e(on)}</td><td>{c.k}/{c.n}</td><td>{c.k / c.n:.1%} ({lo:.1%}-{hi:.1%})</td>"
            f"<td>{c.trials}</td><td>{e(probability_text(c.p_fails))}</td><td class='{c.verdict}'>{c.verdict}</td></tr>"
        )
    return "\n".join(rows) + "</table></div>"


def _verdict_rules(report: HuntReport) -> str:
    """The rules of the table's last column, in words, and the clean configuration's number."""
    assert report.matrix.hunt is not None
    spec, e = report.matrix.hunt, html.escape
    rules = verdict_rules(report.result, spec)
    clean = clean_line(report.result, spec)
    shown = "".join(f"<li>{e(rule)}</li>" for rule in rules + ([clean] if clean else []))
    return f"<p>Verdicts (own trials), by these rules:</p><ul class='rules'>{shown}</ul>"


def _interval_method(spread: Dispersion) -> str:
    """How the configurations' intervals treat sessions, in words (the main report's wording)."""
    if spread.estimable:
        where = counted(spread.cells, "configuration")
        return (
            f"Wilson's widened for trial-to-trial variation (quasi-binomial, dispersion {spread.phi:.2f} from "
            f"{spread.trials} trials in {where}, {spread.df:.1f} df; trial = unit of "
            "replication, never narrower than the binomial)"
        )
    return (
        "Wilson's on sessions pooled over trials, assuming independent sessions (no configuration has trials that "
        "both saw and missed a failure, so trial-to-trial variation cannot be estimated)"
    )


def _on_label(on: tuple[str, ...], flags: tuple[str, ...]) -> str:
    kind, names = set_apart(on, flags)
    if kind == "all":
        return "all (the failing configuration)"
    if kind == "none":
        return "none (the clean configuration)"
    return ("all but " if kind == "all but" else "") + ", ".join(names)


def _cost(report: HuntReport) -> str:
    r, flags = report.result, len(report.flags)
    ofat = (flags + 1) * OFAT_SESSIONS_PER_CONFIG
    return (
        "<h2>Cost</h2><div class='scroll'><table><tr><th>design</th><th>sessions</th><th>configurations</th></tr>"
        f"<tr><td>this hunt</td><td>{r.sessions:,}</td><td>{len(r.configs)} ({r.trials} trials)</td></tr>"
        f"<tr><td>one flag at a time, {OFAT_SESSIONS_PER_CONFIG} sessions each</td><td>{ofat:,}</td>"
        f"<td>{flags + 1}{' (misses interactions)' if flags > 1 else ''}</td></tr>"
        f"<tr><td>full factorial</td><td>{2**flags:,} x sessions per configuration</td>"
        f"<td>{2**flags:,}</td></tr></table></div>"
    )
