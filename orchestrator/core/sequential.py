"""Adaptive stopping: after each replicate round, is a cell's comparison with the baseline decided?

Why: GPU hours are the cost, and a fixed design keeps running a cell long after its answer is
plain (0/40 against 7/40 does not need 40 more sessions). This module is the pure decision; the
runner stops running a cell once `decide` says anything but "continue", and the report prints
the Decision's reason. Nothing here does I/O.

Design and assumptions. A sweep runs rounds; in every round each open cell and the baseline run
once (a trial of n sessions giving k events, e.g. corrupted sessions), so cell and baseline
trials are paired by round. Assumed: within a round every session of the cell is an independent
Bernoulli(p_c,i) draw and every session of the baseline an independent Bernoulli(p_b,i) draw,
given the past. The rates may drift from round to round (a shared drift cannot fake a
difference). A trial-level shock that corrupts many sessions at once breaks the assumption.

Both tests are anytime-valid: each is a nonnegative (super)martingale with mean <= 1 under its
null, so by Ville's inequality it ever reaches 1/a with probability <= a, however many rounds
are looked at and whenever the runner stops (early, at a deadline, or at max_rounds).

"different" (type I error <= alpha) - a mixture likelihood ratio on the conditional law (Fisher's
conditioning). Given a round's total t = k_c + k_b, the cell's count follows Fisher's noncentral
hypergeometric law with the odds ratio psi = odds(p_c) / odds(p_b); under H0 (psi = 1 in every
round) it is the central hypergeometric whatever the round's common rate, so the product over
rounds of f(k_c | t; psi) / f(k_c | t; 1) has mean 1 under H0 with no nuisance left, and so
does any mixture over psi fixed in advance. Unequal n per round is exact (it is in the law). The
mixture covers every odds ratio a rate difference of at least `effect` can produce: psi outside
((1-e)/(1+e))^2 .. its inverse (the nearest to 1 is reached at rates near 50%; nearer 0% the same
difference is a larger odds ratio). Half the weight is on "cell lower", half on "cell higher";
within a side half sits on the extreme psi = 0 (resp. infinity) - a fix that removes a bug (the
DSV4 overlap-off cells) gives exactly 0 events, and that alternative then stops after the
fewest events - and half on GRID_POINTS odds ratios spread evenly in psi/(1+psi). No nominal or
pooled base rate enters the alternative. e >= 1/alpha stops the cell as "different".

"no_difference" (wrong with probability <= 1 - power when |p_c - p_b| >= effect) - two one-sided
tests (TOST) by betting: H+ "p_c - p_b >= effect" and H- "p_c - p_b <= -effect". Sessions of a
round are paired at random (a uniformly random injection of the smaller arm into the larger,
independent of the outcomes; only the counts are known, so the wealth is averaged over all
pairings, which keeps its mean <= 1), and for each pair d = c - b the wealth is multiplied by
1 + lambda (effect - d) (resp. 1 + lambda (effect + d)), whose mean is <= 1 under H+ (H-). lambda
is set before each round from the earlier rounds (approximately growth-optimal plug-in, as in
Waudby-Smith & Ramdas' aGRAPA), capped to keep the wealth positive. When both wealths reach
1/(1 - power), a difference of `effect` or more is ruled out either way: equivalently, an
anytime-valid interval for p_c - p_b lies inside (-effect, +effect). So `power` acts as Wald's
beta: the error of declaring "no difference" when a difference of `effect` exists.

"max_rounds" - the matrix's replicates are used up; the report's fixed analysis has the last
word. min_rounds delays every stop (e.g. to see a drift check first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.special import gammaln

from orchestrator.core.words import counted

State = Literal["continue", "different", "no_difference", "max_rounds"]
Direction = Literal["both", "lower", "higher"]
Counts = Sequence[tuple[int, int]]

# Mixture over odds ratios: the extreme (0 / infinity) takes EXTREME_WEIGHT of a side, the rest
# is spread over GRID_POINTS odds ratios. Chosen by simulation (the DSV4 rates, see
# bench/bench_adaptive.py); the expected sessions vary by < 10% over weights 0.25-0.9.
GRID_POINTS = 8
EXTREME_WEIGHT = 0.5
# The equivalence bets never stake more than this fraction of the largest safe bet, so one
# unlucky pair costs at most 80% of the wealth rather than all of it.
BET_CAP = 0.8


@dataclass(frozen=True, kw_only=True)
class SequentialPolicy:
    """When to stop a cell; `max_rounds` is the matrix's replicates (every cell stops there)."""

    alpha: float = 0.05  # type I error of "different" (two-sided), anytime-valid
    power: float = 0.8  # 1 - error of "no_difference" when the true difference is >= effect
    effect: float = 0.10  # smallest rate difference worth detecting (absolute, 0..1)
    min_rounds: int = 1
    max_rounds: int
    # "lower": the question is only whether the cell LOWERS the rate (a bug hunt whose baseline
    # has the bug: which flag removes it?); "higher" the converse; "both" a two-sided test.
    direction: Direction = "both"

    def __post_init__(self) -> None:
        checks = [
            (0.0 < self.alpha < 1.0, f"alpha {self.alpha} not in (0, 1)"),
            (0.0 < self.power < 1.0, f"power {self.power} not in (0, 1)"),
            (0.0 < self.effect < 1.0, f"effect {self.effect} not in (0, 1)"),
            (self.min_rounds >= 1, f"min_rounds {self.min_rounds} < 1"),
            (self.max_rounds >= self.min_rounds, f"max_rounds {self.max_rounds} < min_rounds {self.min_rounds}"),
            (
                self.direction in ("both", "lower", "higher"),
                f"direction {self.direction!r} not one of both, lower, higher",
            ),
        ]
        for ok, what in checks:
            if not ok:
                raise ValueError(f"sequential policy: {what} (fix the adaptive settings)")


@dataclass(frozen=True)
class Decision:
    """What to do with a cell after `rounds` rounds, and why in plain words with the numbers."""

    state: State
    rounds: int
    reason: str


def decide(policy: SequentialPolicy, cell: Counts, baseline: Counts, *, dispersion: float = 1.0) -> Decision:
    """Decide a cell against the baseline; cell[i], baseline[i] = (k, n) of round i (paired).

    dispersion (>= 1): how much more the trials vary than independent sessions would (the
    report's variance inflation, orchestrator.core.clustered). Every log e-value is divided by
    it before the thresholds: the evidence of n sessions counts as that of n / dispersion
    (effective sample size), which keeps the mixture a test martingale when trial-level shocks
    make k vary dispersion times more than the binomial (exact for the normal approximation;
    a larger dispersion than the true one only makes the test more careful).
    """
    _check(cell, baseline)
    if not dispersion >= 1.0:
        raise ValueError(f"sequential: dispersion {dispersion} < 1 (pass the variance inflation, at least 1)")
    rounds = len(cell)
    lower, higher = side_e_values(policy.effect, cell, baseline, dispersion)
    up, down = equivalence_e_values(policy.effect, cell, baseline, dispersion)
    evidence, side = _difference_evidence(policy.direction, lower, higher)
    ruled_out = {"both": (up, down), "lower": (down,), "higher": (up,)}[policy.direction]
    different, same = 1.0 / policy.alpha, 1.0 / (1.0 - policy.power)
    text = _text(policy, cell, baseline, dispersion)
    wealth = " and ".join(_num(e) for e in ruled_out)
    state = stop_state(policy, rounds, evidence, min(ruled_out))
    if state == "different":
        return Decision(
            "different",
            rounds,
            f"stopped {text.lead}: {text.counts} decided "
            f"different ({side}; e-value {_num(evidence)} >= {_num(different)}{text.tempered})",
        )
    if state == "no_difference":
        return Decision(
            "no_difference",
            rounds,
            f"stopped {text.lead}: {text.counts} decided "
            f"{text.verdict} ({text.gap}; {text.band} ruled out: e-value"
            f"{'s' if len(ruled_out) > 1 else ''} {wealth} >= {_num(same)}{text.tempered})",
        )
    undecided = (
        f"{text.counts} undecided ({text.gap}; e-value {_num(evidence)} < "
        f"{_num(different)} for different; {text.band} not ruled out, e-value"
        f"{'s' if len(ruled_out) > 1 else ''} {wealth} need{'' if len(ruled_out) > 1 else 's'}"
        f" >= {_num(same)}{text.tempered})"
    )
    if state == "max_rounds":
        return Decision("max_rounds", rounds, f"stopped at max rounds {text.lead}: {undecided}")
    return Decision("continue", rounds, f"continue {text.lead}: {undecided}")


def stop_state(policy: SequentialPolicy, rounds: int, evidence: float, ruled_out: float) -> State:
    """The state from the e-values: "different" first, then "no_difference", then the round cap.

    evidence: the e-value for "different" (of the policy's direction); ruled_out: the smallest
    equivalence wealth the direction needs. Shared by decide() and the vectorised simulations.
    """
    if rounds >= policy.min_rounds and evidence >= 1.0 / policy.alpha:
        return "different"
    if rounds >= policy.min_rounds and ruled_out >= 1.0 / (1.0 - policy.power):
        return "no_difference"
    return "max_rounds" if rounds >= policy.max_rounds else "continue"


def _difference_evidence(direction: Direction, lower: float, higher: float) -> tuple[float, str]:
    """The e-value for "different" and its side. Two-sided: the whole mixture (each side holds
    half its weight). One-sided: that side's half alone, renormalised to weight 1 - still a test
    martingale under equal rates, and twice the evidence, because no weight is spent on the
    direction the question does not ask about."""
    if direction == "lower":
        return 2.0 * lower, "cell lower"
    if direction == "higher":
        return 2.0 * higher, "cell higher"
    return lower + higher, "cell lower" if lower >= higher else "cell higher"


def simulate(
    policy: SequentialPolicy,
    p_cell: float,
    p_base: float,
    sessions_per_round: int,
    rng: np.random.Generator,
) -> tuple[Decision, int]:
    """Run one cell against its baseline until decided; returns the decision and cell sessions."""
    cell: list[tuple[int, int]] = []
    baseline: list[tuple[int, int]] = []
    n = sessions_per_round
    while True:
        cell.append((int(rng.binomial(n, p_cell)), n))
        baseline.append((int(rng.binomial(n, p_base)), n))
        decision = decide(policy, cell, baseline)
        if decision.state != "continue":
            return decision, len(cell) * n


# ----------------------------------------------------------------------------- "different"


def e_value(effect: float, cell: Counts, baseline: Counts, dispersion: float = 1.0) -> float:
    """The two-sided mixture likelihood ratio: a test martingale (mean 1) under equal rates."""
    lower, higher = side_e_values(effect, cell, baseline, dispersion)
    return lower + higher


def side_e_values(effect: float, cell: Counts, baseline: Counts, dispersion: float = 1.0) -> tuple[float, float]:
    """The two halves of e_value: evidence that the cell is lower, and that it is higher."""
    log_psi, _ = _mixture(effect)
    total = np.zeros_like(log_psi)
    for (kc, nc), (kb, nb) in zip(cell, baseline, strict=True):
        if kc + kb > 0:
            total += _round_ratio(kc, nc, kb, nb, effect)
    lower, higher = mixture_e_values(effect, total, dispersion)
    return float(lower), float(higher)


def round_log_ratios(effect: float, kc: int, nc: int, kb: int, nb: int) -> np.ndarray:
    """One round's log likelihood ratio of every mixture component (zeros when no event)."""
    if kc + kb == 0:
        return np.zeros_like(_mixture(effect)[0])
    return _round_ratio(kc, nc, kb, nb, effect)


def mixture_size(effect: float) -> int:
    """How many odds ratios the mixture holds (the last axis of round_log_ratios)."""
    return int(_mixture(effect)[0].size)


def mixture_e_values(
    effect: float, log_ratio: np.ndarray, dispersion: float | np.ndarray = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, higher) e-values from summed per-component log ratios (..., components).

    Each component's log ratio is divided by the dispersion before mixing (a tempered test
    martingale per component, so the mixture stays one). Vectorised over leading axes.
    """
    _, log_weight = _mixture(effect)
    half = log_weight.size // 2
    terms = np.asarray(log_ratio) / np.asarray(dispersion, dtype=float)[..., None] + log_weight
    with np.errstate(over="ignore"):
        lower = np.exp(np.minimum(_logsumexp(terms[..., :half], axis=-1), 700.0))
        higher = np.exp(np.minimum(_logsumexp(terms[..., half:], axis=-1), 700.0))
    return lower, higher


@lru_cache(maxsize=64)
def _mixture(effect: float) -> tuple[np.ndarray, np.ndarray]:
    """Log odds ratios and log weights of the mixture ("cell lower" half first; sum 1)."""
    psi_edge = ((1.0 - effect) / (1.0 + effect)) ** 2
    theta = np.linspace(0.0, psi_edge / (1.0 + psi_edge), GRID_POINTS + 1)[1:]
    lower = np.concatenate([[-np.inf], np.log(theta / (1.0 - theta))])
    weight = np.concatenate([[EXTREME_WEIGHT], np.full(GRID_POINTS, (1.0 - EXTREME_WEIGHT) / GRID_POINTS)]) / 2.0
    log_psi = np.concatenate([lower, -lower])
    log_weight = np.log(np.concatenate([weight, weight]))
    for array in (log_psi, log_weight):
        array.setflags(write=False)  # cached: shared by every caller
    return log_psi, log_weight


@lru_cache(maxsize=4096)
def _round_ratio(kc: int, nc: int, kb: int, nb: int, effect: float) -> np.ndarray:
    """log f(kc | t; psi) - log f(kc | t; 1) of one round, Fisher's noncentral hypergeometric.

    Cached: sweeps repeat the same few (k, n) pairs, and decide() replays every round each time.
    """
    log_psi, _ = _mixture(effect)
    t = kc + kb
    support = np.arange(max(0, t - nb), min(t, nc) + 1)
    base = _log_comb(nc, support) + _log_comb(nb, t - support)
    observed = kc - int(support[0])
    out = np.empty_like(log_psi)
    finite = np.isfinite(log_psi)
    tilt = support[:, None] * log_psi[finite][None, :]
    out[finite] = base[observed] + kc * log_psi[finite] - _logsumexp(base[:, None] + tilt, axis=0)
    # psi = 0 / infinity put all the mass on the lowest / highest count the margins allow
    out[np.isneginf(log_psi)] = 0.0 if observed == 0 else -np.inf
    out[np.isposinf(log_psi)] = 0.0 if kc == int(support[-1]) else -np.inf
    out -= base[observed] - _logsumexp(base)
    out.setflags(write=False)
    return out


# ----------------------------------------------------------------------------- "no_difference"


def equivalence_e_values(effect: float, cell: Counts, baseline: Counts, dispersion: float = 1.0) -> tuple[float, float]:
    """Betting wealth against "cell higher by >= effect" and against "cell lower by >= effect".

    The log wealth is divided by the dispersion: the bets of a round count as n / dispersion
    sessions' worth (wealth^(1/d) of a test supermartingale is one again, by Jensen)."""
    log_up = log_down = 0.0
    before = (0, 0, 0, 0)
    for (kc, nc), (kb, nb) in zip(cell, baseline, strict=True):
        up, down = equivalence_round(effect, before, (kc, nc, kb, nb))
        log_up, log_down = log_up + up, log_down + down
        before = (before[0] + kc, before[1] + nc, before[2] + kb, before[3] + nb)
    return _exp(log_up / dispersion), _exp(log_down / dispersion)


def equivalence_round(
    effect: float, before: tuple[int, int, int, int], now: tuple[int, int, int, int]
) -> tuple[float, float]:
    """log wealth factors (H+, H-) of one round given the totals of the rounds before it."""
    return _equivalence_round(effect, before, now)


@lru_cache(maxsize=16384)
def _equivalence_round(
    effect: float, before: tuple[int, int, int, int], now: tuple[int, int, int, int]
) -> tuple[float, float]:
    """log wealth factors (H+, H-) of one round, staked from the counts of the rounds before it.

    Stakes come from earlier rounds only (predictable, as validity needs): Kelly's approximation
    lambda = E[X] / E[X^2] for the payoff X = effect -/+ d, with add-half rate estimates; 0 when
    the estimate favours the null. A pair d = c - b multiplies the wealth by 1 + lambda X.
    Cached: decide() replays every round each time, and simulations repeat the same histories.
    """
    pc, pb = (before[0] + 0.5) / (before[1] + 1), (before[2] + 0.5) / (before[3] + 1)
    spread = pc * (1 - pc) + pb * (1 - pb)
    top = BET_CAP / (1.0 - effect)  # the wealth stays positive for lambda < 1 / (1 - effect)
    lam_up, lam_down = (
        min(top, max(0.0, gain / (spread + gain * gain))) for gain in (effect - (pc - pb), effect + (pc - pb))
    )
    # wealth factors for d = -1, 0, +1
    up = (1 + lam_up * (effect + 1), 1 + lam_up * effect, 1 + lam_up * (effect - 1))
    down = (1 + lam_down * (effect - 1), 1 + lam_down * effect, 1 + lam_down * (effect + 1))
    return _round_wealth(*now, up), _round_wealth(*now, down)


def equivalence_rounds(
    effect: float, before: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], now: tuple[int, int, int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """equivalence_round for many histories `before` (arrays) that share one round `now`."""
    size = np.asarray(before[0]).shape
    nows = tuple(np.full(size, x, dtype=np.int64) for x in now)
    return equivalence_rounds_batch(effect, before, nows)  # type: ignore[arg-type]


def equivalence_rounds_batch(
    effect: float,
    before: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    now: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """equivalence_round over arrays of (history, round) pairs: the same arithmetic, vectorised.

    The simulations meet thousands of (history, round) pairs per look and the scalar version
    costs 50 us a call (tests check they agree). Each distinct round's pairing law comes from
    _pairings once; the laws are padded to one width (log-probability -inf adds nothing)."""
    bk_c, bn_c, bk_b, bn_b = (np.asarray(x, dtype=float) for x in before)
    rounds = np.stack([np.asarray(x, dtype=np.int64) for x in now], axis=-1)
    distinct, which = np.unique(rounds.reshape(-1, 4), axis=0, return_inverse=True)
    laws = [_pairings(*(int(x) for x in row)) if min(row[1], row[3]) > 0 else None for row in distinct]
    width = max([len(law[0]) for law in laws if law is not None], default=1)
    table = np.zeros((len(distinct), 4, width))
    table[:, 0, :] = -np.inf
    for i, law in enumerate(laws):
        if law is not None:
            for j, column in enumerate(law):
                table[i, j, : len(column)] = column
    rows = table[which.ravel()]  # (pairs, 4, width)
    empty = np.array([law is None for law in laws])[which.ravel()]
    pc, pb = ((bk_c + 0.5) / (bn_c + 1)).ravel(), ((bk_b + 0.5) / (bn_b + 1)).ravel()
    spread = pc * (1 - pc) + pb * (1 - pb)
    top = BET_CAP / (1.0 - effect)
    out = []
    for sign in (1.0, -1.0):  # H+ then H-: payoff effect - d, resp. effect + d
        gain = effect - sign * (pc - pb)
        lam = np.clip(gain / (spread + gain * gain), 0.0, top)[:, None]
        with np.errstate(invalid="ignore"):  # 0 * -inf where a law is padded: masked below
            terms = (
                rows[:, 0]
                + rows[:, 1] * np.log(1 + lam * (effect + sign))
                + rows[:, 2] * np.log(1 + lam * effect)
                + rows[:, 3] * np.log(1 + lam * (effect - sign))
            )
        terms = np.where(np.isfinite(rows[:, 0]), terms, -np.inf)
        high = terms.max(axis=1, keepdims=True)
        high = np.where(np.isfinite(high), high, 0.0)
        with np.errstate(divide="ignore"):  # a round without sessions has no law: masked below
            value = (high + np.log(np.exp(terms - high).sum(axis=1, keepdims=True)))[:, 0]
        out.append(np.where(empty, 0.0, value).reshape(bk_c.shape))
    return out[0], out[1]


def stop_states(policy: SequentialPolicy, rounds: int, evidence: np.ndarray, ruled_out: np.ndarray) -> np.ndarray:
    """stop_state elementwise over arrays of e-values (for the vectorised simulations)."""
    ready = rounds >= policy.min_rounds
    last = "max_rounds" if rounds >= policy.max_rounds else "continue"
    return np.select(
        [ready & (evidence >= 1.0 / policy.alpha), ready & (ruled_out >= 1.0 / (1.0 - policy.power))],
        ["different", "no_difference"],
        default=last,
    )


def _round_wealth(kc: int, nc: int, kb: int, nb: int, factor: tuple[float, float, float]) -> float:
    """log of the wealth factor of one round, averaged over random pairings of its sessions."""
    if min(nc, nb) == 0:
        return 0.0
    log_p, minus, zero, plus = _pairings(kc, nc, kb, nb)
    terms = log_p + minus * math.log(factor[0]) + zero * math.log(factor[1]) + plus * math.log(factor[2])
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


@lru_cache(maxsize=4096)
def _pairings(kc: int, nc: int, kb: int, nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Law of the pair counts (d = -1, 0, +1) of one round under a random pairing: (log p, minus,
    zero, plus) per outcome. Cached apart from the stakes: a simulation meets each (k, n) of a
    round in thousands of histories, and only the stakes depend on the history.

    The smaller arm (m sessions, ks events) is injected at random into the larger (nl, kl):
    j of its events meet events (hypergeometric), then u of its non-events meet the remaining
    events (hypergeometric again); pairs with d = +1 / -1 follow from which arm is smaller.
    """
    m = min(nc, nb)
    cell_small = nc <= nb
    ks, kl, nl = (kc, kb, nb) if cell_small else (kb, kc, nc)
    rows = []
    for j in range(max(0, ks + kl - nl), min(ks, kl) + 1):
        first = _lcomb(kl, j) + _lcomb(nl - kl, ks - j) - _lcomb(nl, ks)
        pool, events, draws = nl - ks, kl - j, m - ks
        for u in range(max(0, draws - (pool - events)), min(events, draws) + 1):
            second = _lcomb(events, u) + _lcomb(pool - events, draws - u) - _lcomb(pool, draws)
            plus, minus = (ks - j, u) if cell_small else (u, ks - j)
            rows.append((first + second, minus, m - plus - minus, plus))
    table = np.array(rows, dtype=float)
    columns = tuple(np.ascontiguousarray(table[:, i]) for i in range(4))
    for column in columns:
        column.setflags(write=False)  # cached: shared by every caller
    return columns  # type: ignore[return-value]


# ----------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Text:
    """The phrases a reason is built from (counts, round and session numbers, the band)."""

    counts: str
    lead: str
    gap: str
    band: str
    verdict: str  # what "no_difference" means for the policy's direction
    tempered: str  # "" or how the dispersion weighed the sessions


def _text(policy: SequentialPolicy, cell: Counts, baseline: Counts, dispersion: float = 1.0) -> _Text:
    kc, nc = sum(k for k, _ in cell), sum(n for _, n in cell)
    kb, nb = sum(k for k, _ in baseline), sum(n for _, n in baseline)
    rounds = len(cell)
    return _Text(
        counts=f"cell {kc}/{nc} vs baseline {kb}/{nb}",
        lead=f"after {counted(rounds, 'round')} ({nc} sessions)",
        gap=f"difference {_pct(kc / nc - kb / nb if nc and nb else math.nan)}",
        band={
            "both": f"a difference of {_pct(policy.effect, sign=False)} or more either way",
            "lower": f"a drop of {_pct(policy.effect, sign=False)} or more",
            "higher": f"a rise of {_pct(policy.effect, sign=False)} or more",
        }[policy.direction],
        verdict={"both": "no difference", "lower": "no drop", "higher": "no rise"}[policy.direction],
        tempered="" if dispersion == 1.0 else f"; sessions weighed 1/{dispersion:.2f} for trial-to-trial variation",
    )


def _check(cell: Counts, baseline: Counts) -> None:
    if len(cell) != len(baseline):
        raise ValueError(
            f"sequential: {len(cell)} cell rounds vs {len(baseline)} baseline rounds (pass the same rounds, paired)"
        )
    for k, n in (*cell, *baseline):
        if not 0 <= k <= n:
            raise ValueError(f"sequential: bad count {k}/{n} (need 0 <= k <= n)")


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    out: np.ndarray = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)  # scipy is untyped: say what it returns
    return out


def _lcomb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _logsumexp(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """log(sum(exp(x))) without overflow; scipy's version costs 100 us a call in array checks."""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
    result: np.ndarray = out.squeeze() if axis is None else np.squeeze(out, axis=axis)
    return result


def _exp(log_value: float | np.ndarray) -> float:
    # capped: past e^700 the decision is long made, and exp would overflow to a warning
    return math.exp(min(float(log_value), 700.0))


def _pct(x: float, sign: bool = True) -> str:
    if math.isnan(x):
        return "n/a"
    text = f"{x * 100:+.0f}%" if sign else f"{x * 100:.0f}%"
    return "0%" if text in ("+0%", "-0%") else text


def _num(x: float) -> str:
    return f"{x:.3g}"
