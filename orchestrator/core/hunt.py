"""PURE: the culprit hunt's search - which configuration to run next, and when to stop.

Why: a failing configuration with 10-20 non-default flags and a noisy 15% failure rate. A full
factorial of 16 flags is 65,536 configurations; one flag at a time with 80 sessions each costs
1,360 sessions and misses interactions (the DSV4 bug needed three flags on together). This
module spends sessions where they tell the most (model: core/hunt_model.py):

1. endpoints: the all-failing configuration runs until it shows `min_failures` failures (a few
   failures decide "fails"); the all-clean one runs once here, and later until its clean
   streak confirms it at the `target` level (`Hunt.own_verdict`: under every hypothesis but
   "the flags do not explain it" it is unaffected, so it is a premise, not evidence);
2. leave-one-out from the failing configuration, one trial each, handed to every free testbed
   in one wave;
3. then, one configuration per free testbed, the one whose next trial has the largest expected
   information gain about the culprit set, given the trials still running (their outcomes
   are not known yet, so a batch is chosen jointly: greedy on the mutual information of the
   batch's outcomes). Sessions per configuration are therefore allocated sequentially: an
   undecided configuration keeps winning trials until its outcome is plain.
4. stop when the most probable culprit set has posterior >= `target`, every single-flag drop
   from it has been checked (a tested configuration tells the set from the set without that
   flag, and the set without the flag ran alone without failing) and its minimal reproducer
   (the set alone) failed; or when the failing configuration does not show `min_failures`
   failures in the sessions it may take (`endpoint_allowance`); or at the session budget, which
   binds the first wave too; or once as many trials as the budget pays for gave no data.

Deterministic: the same observations give the same proposals (ties go to the earlier candidate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import betaincinv

from orchestrator.core.hunt_model import (
    FloatArray,
    Hypotheses,
    IntArray,
    ModelSettings,
    Posterior,
    design_effect,
    enumerate_hypotheses,
    prob_no_failure,
)
from orchestrator.core.huntfit import (
    FitRates,
    contradictions,
    fit_rates,
    fit_verdict,
    misfit_words,
)
from orchestrator.core.huntfit import (
    p_affected as _p_affected,
)
from orchestrator.core.huntspread import IccUsed, TrialSpread

State = Literal["running", "found", "not_failing", "budget"]
Verdict = Literal["fails", "passes", "undecided"]
MAX_FLAGS = 20
EIG_FLOOR = 1e-6  # the gain is computed on the likeliest hypotheses holding all but this mass
EIG_MAX = 2000  # and at most this many
MAX_SPREAD = 8  # testbeds one check may take in a round
MAX_JOINT = 5  # running trials considered jointly with a new one (2^6 outcome patterns)
PAIR_GATE = 0.05  # pairs of uncertain flags are dropped together only while ORs hold this much posterior
REPRO_TRIALS = 2  # trials of a minimal reproducer that must have failed (_unconfirmed_reproducers)
REST_TRIALS = 2  # trials of a set without one of its flags, every other flag clean, that a drop's check needs
LOW_QUANTILE = 0.1  # "passes" is judged against the affected rate's lower 10% quantile
ENDPOINT_SESSIONS = 400  # sessions the failing configuration may take to show its failures, at least
ENDPOINT_LOW_RATE = 0.05  # ... and enough to show `min_failures` of them at this rate
NOTE_CHARS = 300  # a no-data trial's note (its failure message) in the stop reason, at most


@dataclass(frozen=True)
class HuntSettings:
    flags: tuple[str, ...]
    target: float = 0.95  # posterior of the top culprit set to stop
    confidence: float = 0.99  # a configuration "fails"/"passes" at this probability (own trials)
    min_failures: int = 2  # failures that confirm the failing configuration
    endpoint_sessions: int | None = None  # the failing configuration's give-up (None: endpoint_allowance)
    max_sessions: int = 5000  # budget of the whole hunt
    sessions_per_trial: int = 10  # for choosing configurations before a trial's n is known
    top_k: int = 12  # hypotheses that propose candidate configurations
    model: ModelSettings = field(default_factory=ModelSettings)

    def __post_init__(self) -> None:
        if not 1 <= len(self.flags) <= MAX_FLAGS:
            raise ValueError(f"hunt: {len(self.flags)} suspect flags (1..{MAX_FLAGS})")
        if not (0.5 < self.target < 1.0 and 0.5 < self.confidence < 1.0):
            raise ValueError("hunt: target and confidence must be in (0.5, 1)")
        if self.sessions_per_trial < 1 or self.max_sessions < 1:
            raise ValueError("hunt: sessions_per_trial and max_sessions must be at least 1")

    @property
    def full(self) -> int:
        return (1 << len(self.flags)) - 1

    @property
    def endpoint_limit(self) -> int:
        """Sessions after which the failing configuration, short of `min_failures` failures, is
        called not failing."""
        if self.endpoint_sessions is not None:
            return self.endpoint_sessions
        return endpoint_allowance(self.min_failures, self.max_sessions)

    @property
    def trials_paid(self) -> int:
        """Trials the budget pays for: the hunt stops once this many gave no data."""
        return max(1, self.max_sessions // self.sessions_per_trial)


def probability_text(p: float) -> str:
    """A posterior (or any share) to three places, said as a bound where it rounds to 1 or 0.
    Why: 0.9996 printed as "1.000" reads as certainty the model does not have (a float at 1.0
    means the alternatives underflowed, not that they were ruled out)."""
    if p >= 0.9995:
        return "> 0.999"
    if p < 0.0005:
        return "< 0.001"
    return f"{p:.3f}"


def endpoint_allowance(min_failures: int, max_sessions: int) -> int:
    """Sessions the failing configuration may take to show `min_failures` failures: enough to
    show them at ENDPOINT_LOW_RATE, at least ENDPOINT_SESSIONS, at most the budget. Why scaled:
    a fixed 400 asked a configuration failing at 15% for 100 failures (min_failures accepts up
    to 100); it showed ~60 and the hunt called it "did not fail"."""
    return min(max(ENDPOINT_SESSIONS, math.ceil(min_failures / ENDPOINT_LOW_RATE)), max_sessions)


@dataclass
class ConfigStats:
    k: int = 0
    n: int = 0
    trials: int = 0
    failed: int = 0  # trials with at least one failure


@dataclass(frozen=True)
class Culprit:
    """A hypothesis in words: AND sets joined by OR; () is "the flags do not explain it"."""

    sets: tuple[tuple[str, ...], ...]
    probability: float

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(f for s in self.sets for f in s)

    def describe(self) -> str:
        if not self.sets:
            return "none of the flags (the failure does not need them)"
        return " OR ".join(
            "(" + " AND ".join(s) + ")" if len(self.sets) > 1 and len(s) > 1 else " AND ".join(s) for s in self.sets
        )


@dataclass(frozen=True)
class ConfigResult:
    config: int
    on: tuple[str, ...]  # flags at their failing level
    k: int
    n: int
    trials: int
    p_fails: float  # posterior probability that this configuration is affected
    verdict: Literal["fails", "passes", "undecided"]
    # on its own trials, at even odds (Hunt.own_verdict): P(affected) at the affected rate, and at
    # the affected rate's low quantile (what a "passes" is judged against, but for the clean endpoint)
    p_own: float = 0.0
    p_own_low: float = 0.0


@dataclass(frozen=True)
class HuntResult:
    state: State
    reason: str
    top: tuple[Culprit, ...]
    configs: tuple[ConfigResult, ...]
    trials: int
    sessions: int
    unchecked: tuple[str, ...]  # flags of the top set whose single drop is not checked yet
    # the failing configuration showed its min_failures failures: before, the posterior over
    # culprit sets is the prior's (no failure to explain yet), and no set is worth naming
    confirmed: bool = True
    # what Hunt.own_verdict weighs: the affected rate, the background, the affected rate's low quantile
    rates: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # core.huntfit: the configurations that fail at the failing configuration's rate (config, k, n),
    # and the fewest configurations that contradict a hypothesis (0: some hypothesis fits every verdict)
    failing: tuple[tuple[int, int, int], ...] = ()
    contradicted: int = 0
    icc: IccUsed | None = None  # the trial-to-trial variation the evidence was tempered by (core.huntspread)

    @property
    def best(self) -> Culprit:
        return self.top[0]


class Hunt:
    """The search's state: observations in, the next configuration out."""

    def __init__(self, settings: HuntSettings) -> None:
        self.settings = settings
        self.post = Posterior(enumerate_hypotheses(len(settings.flags), settings.model), settings.model)
        self.spread = TrialSpread(settings.model.icc)
        self.icc = IccUsed(settings.model.icc, settings.model.icc)
        self.stats: dict[int, ConfigStats] = {}
        self.trials = self.sessions = 0
        self.empty = self.empty_run = 0  # trials that gave no data: in all, and the latest in a row
        self.empty_note = ""  # what the last of them was
        self.state: State = "running"
        self.reason = "running"
        self._cache: tuple[FloatArray, int] | None = None
        self._rates: tuple[float, float, float] | None = None
        self._misfit: int | None = None

    @property
    def hyps(self) -> Hypotheses:
        """The hypotheses still held (the posterior drops those that became negligible)."""
        return self.post.hyps

    # ------------------------------------------------------------------ observations
    def observe(self, config: int, k: int, n: int) -> None:
        """One finished trial of `config`: k of n sessions failed."""
        if n <= 0:
            self.observe_nothing(f"a trial of {self.describe(config)} counted 0 sessions")
            return
        s = self.stats.setdefault(config, ConfigStats())
        s.k, s.n, s.trials, s.failed = s.k + k, s.n + n, s.trials + 1, s.failed + (k > 0)
        self.trials += 1
        self.empty_run = 0
        self.sessions += n
        self.icc = self.spread.add(config, k, n)  # re-estimated as trials come (core.huntspread)
        self.post.set_icc(self.icc.icc)
        self.post.add(config, k, n)
        self._cache = self._rates = self._misfit = None

    def observe_nothing(self, note: str) -> None:
        """A finished trial that gave no data (failed, void, no count): never evidence, but it
        counts towards the trials the budget pays for. Why: such trials add no sessions, so
        neither the budget nor the failing configuration's give-up was ever reached, and a hunt
        whose every trial failed asked for the failing configuration forever."""
        self.empty += 1
        self.empty_run += 1
        self.empty_note = note[:NOTE_CHARS]

    # ------------------------------------------------------------------ proposals
    def propose(self, pending: Sequence[int] = ()) -> int | None:
        """The configuration the next free testbed should run (`pending`: those running now),
        or None when the hunt is over (see `state` and `reason`)."""
        if self.state != "running":
            return None
        if self.empty >= self.settings.trials_paid:
            return self._stop("budget", self._no_data_reason())
        if self._in_first_wave(pending):
            return self._first_wave(pending)
        return self._search(pending)

    def _wave(self) -> list[int]:
        """The first wave after the failing configuration: the clean one, then each flag's drop."""
        full = self.settings.full
        return [0, *(full ^ (1 << i) for i in range(len(self.settings.flags)))]

    def _confirmed(self) -> bool:
        return self.stats.get(self.settings.full, ConfigStats()).k >= self.settings.min_failures

    def _in_first_wave(self, pending: Sequence[int]) -> bool:
        """The failing configuration is not confirmed yet, or a configuration of the first wave
        has not been handed out."""
        return not self._confirmed() or any(x not in self.stats and x not in pending for x in self._wave())

    def _first_wave(self, pending: Sequence[int]) -> int | None:
        """The failing configuration until it shows `min_failures` failures (or gives up), the
        rest of the wave once each, all within the budget. Why the budget first: the wave of 16
        flags at 20 sessions a trial is 360 sessions, and a budget of 100 was spent 3.6 times over
        before it was ever looked at."""
        st, full = self.settings, self.settings.full
        f = self.stats.get(full, ConfigStats())
        if self._committed(pending) >= st.max_sessions:
            return self._stop("budget", self._wave_budget_reason(f, pending))
        if not self._confirmed():
            if f.n >= st.endpoint_limit:
                return self._stop(
                    "not_failing",
                    f"the failing configuration did not show {st.min_failures} failures in {f.n} sessions "
                    f"({f.k}/{f.n})",
                )
            if full not in pending:
                return full
        return next((x for x in self._wave() if x not in self.stats and x not in pending), full)

    def _committed(self, pending: Sequence[int]) -> int:
        """Sessions spent and those the running trials will spend: what the budget is held to, so
        that N testbeds stop within one trial of it too."""
        return self.sessions + len(pending) * self._trial_size()

    def _wave_budget_reason(self, f: ConfigStats, pending: Sequence[int]) -> str:
        st, wave = self.settings, [self.settings.full, *self._wave()]
        ran = sum(x in self.stats for x in wave)
        running = len({x for x in pending if x in wave and x not in self.stats})
        need = len(wave) * st.sessions_per_trial
        state = "confirmed" if self._confirmed() else f"short of its {st.min_failures} failures"
        return (
            f"session budget {st.max_sessions} spent before the first wave finished: {ran} of its {len(wave)} "
            f"configurations ran{f' ({running} more running)' if running else ''}, the failing one {state} "
            f"({f.k}/{f.n}); nothing was searched (the first wave needs at least {need} sessions: raise max_sessions)"
        )

    def _no_data_reason(self) -> str:
        st = self.settings
        return (
            f"stopped: {self.empty} trials gave no data (failed or void; the last {self.empty_run} in a row), "
            f"as many as max_sessions {st.max_sessions} pays for at {st.sessions_per_trial} sessions a trial; "
            f"last: {self.empty_note or '?'}"
        )

    def _search(self, pending: Sequence[int]) -> int | None:
        probs, best = self._posterior()
        top = float(probs[best])
        checks = self._drop_checks(best)
        repro = self._unconfirmed_reproducers(best)
        # the clean endpoint passes (a clean streak long enough for `target`), unless the
        # likeliest answer is that the flags do not matter (then it must fail too)
        clean_ok = self.own_verdict(0) == _verdict(self.hyps.a[best] == 0)
        if top >= self.settings.target and not checks and not repro and clean_ok:
            rests_on = (  # the flags do not explain it: no reproducer, no drop, only the clean endpoint
                "the clean endpoint fails too"
                if self.hyps.a[best] == 0
                else "the clean endpoint and the minimal reproducer confirmed, every single-flag drop checked"
            )
            return self._stop("found", f"posterior {probability_text(top)} >= {self.settings.target}, {rests_on}")
        if self._committed(pending) >= self.settings.max_sessions:
            return self._stop("budget", self._budget_reason(top))
        if top >= self.settings.target:
            a, b = int(self.hyps.a[best]), int(self.hyps.b[best])
            forced = ([] if clean_ok else [(0, 0)]) + list(checks.values()) + [(x, 0) for x in repro]
            for x, owed in forced:  # a rest check: the trials it owes; else one testbed where it must fail,
                # as many as its clean streak still needs where it must pass
                spread = owed or (1 if _affected(x, a, b) else self._clean_trials_to_pass(x))
                if list(pending).count(x) < spread:
                    return x
        return self._most_informative(probs, pending)

    # ------------------------------------------------------------------ does any hypothesis fit?
    def fit_rates(self) -> FitRates:
        """The failing rate and the background core.huntfit's verdicts weigh: the failing
        configuration's own trials pooled with those of every configuration that fails beside
        them (under every hypothesis they fail at one rate). Why pooled: a hunt runs the failing
        configuration only until its first failures (2 of 40 sessions gave a low rate of 2.4%,
        against which no clean streak could pass)."""
        full, prior, p0 = self.settings.full, self.settings.model.fail_prior, self._verdict_rates()[1]
        ke, ne = self._effective(full)
        rates = fit_rates(ke, ne, prior, p0)
        fails = [
            x
            for x in self.stats
            if x != full and fit_verdict(*self._effective(x), rates, self.settings.confidence) == "fails"
        ]
        for x in fails:
            k, n = self._effective(x)
            ke, ne = ke + k, ne + n
        return fit_rates(ke, ne, prior, p0)

    def fit_verdicts(self) -> dict[int, str]:
        """Every tried configuration's verdict at the failing rate (core.huntfit)."""
        rates, conf, full = self.fit_rates(), self.settings.confidence, self.settings.full
        out = {x: fit_verdict(*self._effective(x), rates, conf) for x in self.stats}
        if full in out and self._confirmed():
            out[full] = "fails"  # the endpoint rule, as own_verdict's
        return out

    def misfit(self) -> int:
        """The fewest configurations that contradict a hypothesis (core.huntfit): 0 while some
        hypothesis fits every firm verdict. The likeliest one is counted first: while it fits
        (nearly every hunt whose truth is in the space), no other needs counting. Read at the
        budget's stop and in the result only: it decides nothing (see core.huntfit on why the
        hunt does not stop on it)."""
        if not self._confirmed():
            return 0
        if self._misfit is None:
            firm = {x: v for x, v in self.fit_verdicts().items() if v != "undecided"}
            configs, fails = list(firm), [v == "fails" for v in firm.values()]
            best = self._posterior()[1]
            top = Hypotheses(self.hyps.a[best : best + 1], self.hyps.b[best : best + 1], self.hyps.log_prior[:1])
            low = int(contradictions(top, configs, fails)[0])
            if low:
                low = int(contradictions(self.hyps, configs, fails).min())
            self._misfit = low
        return self._misfit

    def failing_configs(self) -> list[tuple[int, int, int]]:
        """(config, k, n) of every configuration that fails at the failing configuration's rate,
        the most sessions first."""
        fails = [x for x, v in self.fit_verdicts().items() if v == "fails"]
        return sorted(((x, self.stats[x].k, self.stats[x].n) for x in fails), key=lambda t: (-t[2], t[0]))

    def _budget_reason(self, top: float) -> str:
        """The budget's stop, and what it leaves: an answer not reached, or no culprit set that fits
        what was seen (core.huntfit; the report lists the failing configurations)."""
        spent = f"session budget {self.settings.max_sessions} spent"
        if self.misfit():  # no set fits: the likeliest one's posterior would read as a near answer
            return f"{spent}; {misfit_words(self.misfit(), self.settings.model.max_and)}"
        return f"{spent} (top posterior {probability_text(top)})"

    def _clean_trials_to_pass(self, config: int) -> int:
        """Clean trials (of the current size) after which `config` would pass on its own
        trials, at most MAX_SPREAD: how many free testbeds its check can use in one round.
        Why: one trial per round left a check that needs several clean trials to the rounds
        after it, while the other testbeds ran configurations whose verdict no longer mattered."""
        s, n = self.stats.get(config, ConfigStats()), self._trial_size()
        p1, p0, p1_low = self._verdict_rates()
        rate, limit = (p1, 1.0 - self.settings.target) if config == 0 else (p1_low, 1.0 - self.settings.confidence)
        for t in range(1, MAX_SPREAD + 1):
            if _p_affected(*self._tempered(ConfigStats(s.k, s.n + t * n, s.trials + t)), rate, p0) <= limit:
                return t
        return MAX_SPREAD

    def _stop(self, state: State, reason: str) -> int | None:
        """End the hunt (no configuration to propose)."""
        self.state, self.reason = state, reason
        return None

    def _posterior(self) -> tuple[FloatArray, int]:
        if self._cache is None:
            probs = self.post.probabilities()
            self._cache = (probs, int(np.argmax(probs)))
        return self._cache

    # ------------------------------------------------------------------ single-flag drops
    def _dropped(self, h: int, flag: int) -> tuple[int, int]:
        """Hypothesis h without `flag`: a set emptied by it makes every configuration affected."""
        a, b = int(self.hyps.a[h]), int(self.hyps.b[h])
        bit = 1 << flag
        if a & bit:
            a &= ~bit
            return (0, 0) if a == 0 else (a, b)
        b &= ~bit
        return (0, 0) if b == 0 else (a, b)

    def _drop_checks(self, h: int) -> dict[int, tuple[int, int]]:
        """Flags of hypothesis h whose drop is not checked yet -> `_drop_check`'s answer."""
        checks = {flag: self._drop_check(h, flag) for flag in _bits(int(self.hyps.a[h]) | int(self.hyps.b[h]))}
        return {flag: check for flag, check in checks.items() if check[0] >= 0}

    def _drop_check(self, h: int, flag: int) -> tuple[int, int]:
        """The configuration still to test for the drop of `flag` from h ((-1, 0): checked),
        and the rest trials it still owes (0: not a rest check). Checked when, on their own trials:

        1. the failing configuration without the flag showed the verdict h predicts (a clean
           streak long enough for `confidence` where h says "passes", failures where it says
           "fails");
        2. some tested configuration that tells h from h without the flag showed h's verdict
           (for an AND, step 1's; for an OR, the rest of the flag's set alone);
        3. the rest of the flag's set alone, every other flag clean, ran REST_TRIALS trials
           without a failure, or, once it showed one, passed on its own trials. Why: the
           posterior and steps 1-2 can be carried by one lucky clean streak of a decoy's drop
           (truth f1, f2's drop clean by chance: "f1 AND f2" explains every trial); f1 alone
           then fails, where the decoy's set says it passes. Why not "not shown to fail", as
           before: a rest with a failure in its two trials (1/40, "undecided") counted as
           checked though a failure is what f1 alone shows; now it runs on until it passes
           or fails (bench, 100 hunts, trials of 5: one flag wrong 2% -> 1%, and 0.7% -> 0.3%
           over 300; 3-flag AND median sessions 378 -> 385, with 1% background 468 -> 495).
           Holding every rest to "passes" instead cost +144 sessions (378 -> 522) for the same
           answers: after two clean trials a rest is "undecided", and that is enough."""
        a, b = int(self.hyps.a[h]), int(self.hyps.b[h])
        loo = self.settings.full & ~(1 << flag)
        if not self._shows(loo, _affected(loo, a, b)):
            return loo, 0
        da, db = self._dropped(h, flag)
        rest = (a if a >> flag & 1 else b) & ~(1 << flag)
        told = (x for x in self.stats if _affected(x, a, b) != _affected(x, da, db))
        if not any(self._shows(x, _affected(x, a, b)) for x in told):
            return rest, 0
        if not rest:
            return -1, 0
        ran, verdict = self.stats.get(rest, ConfigStats()), self.own_verdict(rest)
        if ran.trials < REST_TRIALS or verdict == "fails" or (ran.k > 0 and verdict != "passes"):
            return rest, max(REST_TRIALS - ran.trials, 1)
        return -1, 0

    def _unconfirmed_reproducers(self, h: int) -> list[int]:
        """h's minimal reproducers (each of its sets alone, every other flag clean) that have not
        failed on their own trials yet. Why: the drops check that each flag of h is needed, not
        that h holds every culprit; a true culprit's drop that picked up a decoy's or the
        background's failures makes the set without it the answer ("f7 AND f11" for f2 AND f7
        AND f11), and so does a lucky clean streak on a no-op's drop put a no-op in a culprit's
        place. Either set alone passes under the truth. The report calls this configuration the
        minimal reproducer, so it must have failed, in at least REPRO_TRIALS of its trials. Why
        trials: the trial is the unit of replication; a burst in one trial (3 of 5 sessions at a
        0.5% background, when trials vary) made a wrong set's reproducer "fail" (bench_hunt.py:
        5 of the 6 wrong answers of 300 hunts at ICC 0.30 had all their failures in one trial)."""
        sets = [m for m in (int(self.hyps.a[h]), int(self.hyps.b[h])) if m]
        return [m for m in sets if self.own_verdict(m) != "fails" or self.stats[m].failed < REPRO_TRIALS]

    def _shows(self, config: int, affected: bool) -> bool:
        return config in self.stats and self.own_verdict(config) == _verdict(affected)

    def own_verdict(self, config: int) -> Verdict:
        """A configuration judged on its own trials: does it fail at the rate the affected
        configurations show, or pass at the background's? (Likelihood ratio at the posterior
        mean rates, even odds, evidence tempered per trial like the model's.)

        The endpoints are confirmed as premises of the hunt, not as evidence about a culprit
        set: the failing one by `min_failures` failures, the clean one once its clean streak
        makes "affected at the pooled rate" no likelier than 1 - `target`. Why not
        `confidence` against the low rate, as a drop: under every culprit set the clean
        endpoint is unaffected, so its trials tell no set from another; held to a drop's
        standard it cost ~50 sessions a hunt (bench, 3-flag AND: 10 trials of 5), now ~25,
        with the same accuracy. A clean endpoint that fails is still caught: its failures
        keep it from passing, and "the flags do not explain it" wants it to fail."""
        if config == self.settings.full and self.stats.get(config, ConfigStats()).k >= self.settings.min_failures:
            return "fails"  # confirmed by its failures (the endpoint rule)
        ke, ne = self._effective(config)
        p1, p0, p1_low = self._verdict_rates()
        conf = self.settings.confidence
        if config == 0 and _p_affected(ke, ne, p1, p0) <= 1.0 - self.settings.target:
            return "passes"  # the clean endpoint's rule (see the docstring)
        if _p_affected(ke, ne, p1, p0) >= conf:
            return "fails"
        # "passes" against a low affected rate: a clean streak long enough even if the pooled
        # rate is overestimated (it was, in hunts where a no-op's drop stayed clean by chance)
        return "passes" if _p_affected(ke, ne, p1_low, p0) <= 1.0 - conf else "undecided"

    def _verdict_rates(self) -> tuple[float, float, float]:
        """(affected rate, background, low affected rate) an own verdict weighs: the posterior
        means and the likeliest hypothesis' low affected rate (`_low_rate`), except that the
        background is never above the clean endpoint's own rate. Why: a wrong hypothesis that
        calls failing configurations "background" inflates the pooled background, and a drop
        failing at 10% would then "pass" against it (an OR of causes with different rates did)."""
        if self._rates is None:
            p1, p0 = self.post.rates(self._posterior()[0])
            clean = self.stats.get(0)
            if clean is not None and clean.n:
                a0, b0 = self.settings.model.background_prior
                k0, n0 = self._effective(0)
                p0 = min(p0, (a0 + k0) / (a0 + b0 + n0))
            p1, p0 = min(max(p1, 1e-6), 1 - 1e-6), min(max(p0, 1e-6), 1 - 1e-6)
            self._rates = p1, p0, max(min(self._low_rate(), p1), p0)
        return self._rates

    def _low_rate(self) -> float:
        """The likeliest hypothesis' affected rate at its lower LOW_QUANTILE (Beta posterior of
        its pooled effective counts). 10%, not 20%: since the gain weighs each hypothesis' own
        rates, the search tests suspects' drops more directly, so more of them get the chance of
        a lucky clean streak (one culprit flag, 200 hunts: a wrong superset reported certain in
        2.5% at 20%, 1.5% at 10%)."""
        best = self._posterior()[1]
        a1, b1 = self.settings.model.fail_prior
        k1, n1 = float(self.post.k1[best]), float(self.post.n1[best])
        return float(betaincinv(a1 + k1, b1 + n1 - k1, LOW_QUANTILE))

    def _effective(self, config: int) -> tuple[float, float]:
        s = self.stats.get(config)
        return (0.0, 0.0) if s is None or s.n == 0 else self._tempered(s)

    def _tempered(self, s: ConfigStats) -> tuple[float, float]:
        """Effective failures and sessions of these trials: each trial's evidence tempered by the
        design effect of its sessions' shared variation (as the model's)."""
        deff = design_effect(round(s.n / s.trials), self.post.icc)
        return s.k / deff, s.n / deff

    # ------------------------------------------------------------------ expected information gain
    def _candidates(self, probs: FloatArray, hyps: Hypotheses) -> list[int]:
        """Configurations worth scoring: those tried, and the reproducers, single drops and
        pair drops the likeliest hypotheses and the most uncertain flags suggest.

        Pairs of uncertain flags dropped together tell an OR of two causes from an AND (under
        an OR, leave-one-out sees nothing). Once the ORs hold under PAIR_GATE of the posterior
        they are not offered: under an AND a pair drop that holds a culprit stays clean whatever
        the other flag is, and its sessions count toward no drop's check (bench with the pooled-rate
        gain, 3-flag AND at 0.5%, 100 hunts: median 350 -> 315, same accuracy)."""
        st, full = self.settings, self.settings.full
        out: dict[int, None] = dict.fromkeys(self.stats)
        for h in range(min(st.top_k, len(probs))):  # probs are sorted, likeliest first
            a, b = int(hyps.a[h]), int(hyps.b[h])
            for base in {a | b, a, b} - {0}:
                out[base] = None
                for flag in _bits(base):
                    out[base & ~(1 << flag)] = None
                    out[full & ~(1 << flag)] = None
            if b:
                for fa in _bits(a):
                    for fb in _bits(b):
                        out[full & ~(1 << fa) & ~(1 << fb)] = None
        if float(probs[hyps.b != 0].sum()) < PAIR_GATE:
            return list(out)  # ORs are all but ruled out: pair drops would test a question already answered
        marginal = _marginals(probs, hyps, len(st.flags))
        unsure = [i for i in np.argsort(np.abs(marginal - 0.5), kind="stable") if 0.02 < marginal[i] < 0.98][:8]
        for i, fi in enumerate(unsure):
            for fj in unsure[i + 1 :]:
                out[full & ~(1 << int(fi)) & ~(1 << int(fj))] = None
        if len(unsure) >= 3:
            half = sum(1 << int(f) for f in unsure[: len(unsure) // 2])
            out[full & ~half] = None
        return list(out)

    def _held(self, probs: FloatArray) -> tuple[IntArray, FloatArray, Hypotheses]:
        """The likeliest hypotheses holding all but EIG_FLOOR of the mass (at most EIG_MAX),
        likeliest first: their positions, renormalised posterior and masks (what the gain is
        computed on)."""
        order = np.argsort(-probs, kind="stable")
        held = int(np.searchsorted(np.cumsum(probs[order]), 1.0 - EIG_FLOOR)) + 1
        keep = order[: min(held, EIG_MAX)]
        w: FloatArray = probs[keep] / probs[keep].sum()
        return keep, w, Hypotheses(self.hyps.a[keep], self.hyps.b[keep], self.hyps.log_prior[keep])

    def _most_informative(self, probs: FloatArray, pending: Sequence[int]) -> int:
        """The candidate whose next trial (outcome: some failure or none), together with the
        trials still running, tells the most about the hypothesis. Each hypothesis predicts a
        trial with its own rates (posterior means of its pooled counts), not the rates pooled
        over hypotheses. Why: a hypothesis that calls a long clean streak "affected" has a low
        affected rate of its own, and only trials at the affected rate (reproducers, the failing
        configuration) can refute it; with the pooled rates the streak's configuration looked
        decisive forever (a 7-flag hunt spent 2,335 sessions on one drop, stuck at 0.88)."""
        keep, w, hyps = self._held(probs)
        n, icc = self._trial_size(), self.post.icc
        p1, p0 = self.post.rates_each()
        q1, q0 = prob_no_failure(p1[keep], n, icc), prob_no_failure(p0[keep], n, icc)
        running = np.ones((len(w), 1))  # P(outcome pattern of the running trials | hypothesis)
        for x in list(pending)[-MAX_JOINT:]:
            qx = np.where(hyps.affected(x), q1, q0)[:, None]
            running = np.concatenate([running * qx, running * (1.0 - qx)], axis=1)
        cands = self._candidates(w, hyps)
        qc = np.where(hyps.affected_many(cands), q1[None, :], q0[None, :])  # P(no failure): candidates x hyps
        outcomes = np.concatenate([(w * qc) @ running, (w * (1.0 - qc)) @ running], axis=1)
        # I = H(outcomes) - E_h H(outcomes | h); H(running | h) is the same for every candidate
        gain = _entropy(outcomes) - _entropy(np.stack([qc, 1.0 - qc], axis=2)) @ w
        return cands[int(np.argmax(gain))]

    def _trial_size(self) -> int:
        if self.trials:
            return max(1, round(self.sessions / self.trials))
        return self.settings.sessions_per_trial

    # ------------------------------------------------------------------ result
    def result(self, top_n: int = 5) -> HuntResult:
        probs, best = self._posterior()
        order = np.argsort(-probs, kind="stable")[:top_n]
        top = tuple(self._culprit(int(h), float(probs[h])) for h in order)
        p1, p0, p1_low = rates = self._verdict_rates()
        configs = []
        for x, s in self.stats.items():
            p = float(np.dot(probs, self.hyps.affected(x)))
            ke, ne = self._effective(x)
            own = _p_affected(ke, ne, p1, p0), _p_affected(ke, ne, p1_low, p0)
            configs.append(ConfigResult(x, self.flags_of(x), s.k, s.n, s.trials, p, self.own_verdict(x), *own))
        unchecked = tuple(self.settings.flags[f] for f in self._drop_checks(best))
        return HuntResult(
            self.state,
            self.reason,
            top,
            tuple(configs),
            self.trials,
            self.sessions,
            unchecked,
            confirmed=self._confirmed(),
            rates=rates,
            failing=tuple(self.failing_configs()),
            contradicted=self.misfit(),
            icc=self.icc,
        )

    def _culprit(self, h: int, p: float) -> Culprit:
        sets = tuple(self.flags_of(m) for m in (int(self.hyps.a[h]), int(self.hyps.b[h])) if m)
        return Culprit(sets, p)

    def flags_of(self, config: int) -> tuple[str, ...]:
        return tuple(self.settings.flags[i] for i in _bits(config))

    def describe(self, config: int) -> str:
        """A configuration in words, for messages."""
        if config == self.settings.full:
            return "the failing configuration"
        if config == 0:
            return "the clean configuration"
        return "flags " + (",".join(self.flags_of(config)) or "none") + " at their failing level"

    def config_of(self, on: Sequence[str]) -> int:
        return sum(1 << self.settings.flags.index(f) for f in on)


def _marginals(probs: FloatArray, hyps: Hypotheses, flags: int) -> FloatArray:
    """P(flag i is part of the cause), per flag."""
    masks = hyps.a | hyps.b
    bits = (masks[:, None] >> np.arange(flags)[None, :]) & 1
    marginal: FloatArray = probs @ bits
    return marginal


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _verdict(affected: bool) -> Verdict:
    return "fails" if affected else "passes"


def _affected(x: int, a: int, b: int) -> bool:
    return (x & a) == a or (b != 0 and (x & b) == b)


def _entropy(p: FloatArray) -> FloatArray:
    """Entropy (nats) of distributions along the last axis."""
    out: FloatArray = -np.sum(np.where(p > 0, p * np.log(np.maximum(p, 1e-300)), 0.0), axis=-1)
    return out


def effective_sessions(n: int, icc: float) -> float:
    """n sessions of one trial as independent sessions (the model's tempering)."""
    return n / design_effect(n, icc)


def drive(hunt: Hunt, run_trial: Callable[[int], tuple[int, int]], testbeds: int = 1) -> int:
    """Run a hunt to its end against an oracle, in rounds of up to `testbeds` configurations
    proposed together (as parallel testbeds would run them); run_trial(config) -> (k, n).
    Returns the number of rounds. For benchmarks and tests: no processes, no hosts."""
    rounds = 0
    while True:
        batch: list[int] = []
        for _ in range(testbeds):
            x = hunt.propose(batch)
            if x is None:
                break
            batch.append(x)
        if not batch:
            return rounds
        rounds += 1
        for x in batch:
            hunt.observe(x, *run_trial(x))
