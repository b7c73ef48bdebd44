"""What a hunt's verdicts and checks rest on, in words, for hunt.html: the rule that calls a
configuration "fails", "passes" or "undecided" on its own trials (with the rates it weighed), and
what each single-flag drop of the answer showed.

Why: the page called every drop "checked" beside a configuration of the check marked
"undecided" (1/40), and the clean configuration "passes" with 1/60 sessions failed, without
saying by which rule. The rules are core.hunt's (Hunt.own_verdict, Hunt._drop_check); this
module only says them, with the numbers of the run (the drop check's measured costs are in its
docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.hunt import REST_TRIALS, ConfigResult, HuntResult
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.words import counted


def verdict_rules(result: HuntResult, spec: HuntSpec) -> list[str]:
    """How each verdict of the configurations table is reached, with this run's rates."""
    p1, p0, low = result.rates
    weighed = (
        f"its failures weighed at the affected rate (~{_pct(p1)}) against the background's (~{_pct(p0)}), at even "
        "odds, each trial's sessions discounted for the variation between trials"
    )
    return [
        f"fails: on its own trials ({weighed}), the chance that it is affected is at least {spec.confidence:g}; "
        f"the failing configuration fails once it showed {spec.min_failures} failures",
        f"passes: that chance is at most {1 - spec.confidence:.2g} even at a low affected rate (~{_pct(low)}, the "
        "affected rate's lower 10% quantile), so a clean streak passes only when it is long enough for an "
        "overestimated rate too",
        f"the clean configuration (every flag clean) passes once that chance at the affected rate is at most "
        f"{1 - spec.posterior:.2g} (1 - the posterior target): it is a premise of the hunt, not evidence for one "
        "culprit set over another (every set leaves it unaffected), so it is held to the target; a failure as rare as "
        "the background's need not keep it from passing",
        "undecided: neither yet",
    ]


def clean_line(result: HuntResult, spec: HuntSpec) -> str | None:
    """The clean configuration's verdict with the number its rule compares (None: not run)."""
    clean = next((c for c in result.configs if c.config == 0), None)
    if clean is None:
        return None
    limit = 1 - spec.posterior
    side = "<=" if clean.p_own <= limit else ">"
    return (
        f"the clean configuration: {clean.k}/{clean.n} sessions failed; the chance that it is affected at "
        f"~{_pct(result.rates[0])} is {clean.p_own:.2g} {side} {limit:.2g}: {clean.verdict}"
    )


def drop_check_lines(result: HuntResult, flags: tuple[str, ...]) -> list[str]:
    """What each single-flag drop of the likeliest answer showed, flag by flag, and whether the
    search counts it checked; then what "checked" means: the rest's trials only where a set of the
    answer has a rest (two flags or more), as core.hunt checks a one-flag set's drop without them."""
    tried = {c.config: c for c in result.configs}
    full = (1 << len(flags)) - 1
    lines = []
    for group in result.best.sets:
        for flag in group:
            rest = [f for f in group if f != flag]
            drop = full & ~(1 << flags.index(flag))
            line = f"{flag}: the failing configuration without it: {_seen(tried, drop)}"
            if rest:
                alone = sum(1 << flags.index(f) for f in rest)
                line += f"; {joined(rest)} alone, every other flag clean: {_seen(tried, alone)}"
            state = "not checked yet" if flag in result.unchecked else "checked"
            lines.append(f"{line} - {state}")
    first = "a drop is checked when the failing configuration without the flag showed the verdict the answer predicts"
    told = "a tested configuration that tells the answer from the answer without the flag showed it too"
    if all(len(group) < 2 for group in result.best.sets):  # a one-flag set has no rest (core.hunt._drop_check)
        return lines + [f"{first} and {told}"]
    return lines + [
        f"{first}, {told}, and the rest "
        f"of the flag's set alone, every other flag clean, ran {REST_TRIALS} trials without a failure or, once it "
        "showed one, passed on its own trials: 'undecided' after clean trials is enough (the posterior weighs them "
        "too), 'undecided' with a failure is not (a failure is what the rest shows if the dropped flag is a decoy)"
        + ("" if all(len(group) > 1 for group in result.best.sets) else " (a one-flag set has no rest)")
    ]


def _seen(tried: Mapping[int, ConfigResult], config: int) -> str:
    c = tried.get(config)
    if c is None:
        return "not run"
    return f"{c.k}/{c.n} sessions failed in {counted(c.trials, 'trial')} ({c.verdict})"


def joined(names: list[str]) -> str:
    """Names in a sentence: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _pct(rate: float) -> str:
    return f"{100 * rate:.2g}%"
