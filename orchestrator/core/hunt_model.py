"""PURE: the culprit hunt's Bayesian model - which sets of suspect flags cause a failure.

A configuration is a bitmask over the suspect flags (bit i set: flag i at its failing level).
A hypothesis says which configurations are *affected*: an AND set S (affected when every flag
of S is on; S empty: every configuration is affected, i.e. the flags do not explain the
failure) or an OR of two disjoint AND sets (affected when either is all on).

Hypothesis space (stated, and what it costs for 16 flags): every AND set of up to `max_and`
flags (C(16,<=3) = 697) and, when `max_or` >= 2, every OR of two disjoint sets whose sizes add
up to at most `max_or` (1+1, 1+2, 1+3, 2+2 for max_or = 4: 14,540). A full OR of pairs of
triples (~240k) is left out: ORs of larger causes are rarer, and the posterior update stays a
few vector operations per trial.

Likelihood: affected configurations fail at an unknown rate p1, the others at an unknown
background p0, with Beta priors, both integrated out exactly (Beta-binomial marginals of the
pooled counts: two numbers per hypothesis, updated in O(hypotheses) per trial). Trial-to-trial
variation (sessions of one trial share a restart and a GPU state) is tolerated by tempering
each trial's evidence by its design effect 1 + (n - 1) * icc: a trial of n correlated sessions
counts as n / deff independent ones (Kish's effective sample size), so one unlucky trial cannot
make the posterior certain.

The icc is estimated from the hunt's own trials (core/huntspread.py): configurations run in several
trials show how far their trials scatter beyond the binomial (core.clustered's pooled
quasi-likelihood dispersion, as the reports use), never below the matrix's stated icc (the
user's prior) and at most ICC_CEILING. Why: assumed only, a deployment whose trials vary more
than stated had each trial's evidence over-weighted, and a wrong set reached the target
(bench_hunt, ICC 0.30 against the assumed 0.03). The posterior keeps its raw counts per trial
size, so a new estimate re-tempers every trial already seen, in a few vector operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np
from numpy.typing import NDArray
from scipy.special import betaln

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class ModelSettings:
    """The model's assumptions; defaults suit a rare failure (5-50%) over a small background."""

    max_and: int = 3  # largest AND set
    max_or: int = 4  # largest total size of an OR of two sets (0 or 1: no ORs)
    or_mass: float = 0.15  # prior probability that the cause is an OR of two sets
    none_mass: float = 0.02  # prior probability that the flags do not explain the failure
    flag_prior: float = 0.25  # prior chance that a given flag is part of the cause
    icc: float = 0.03  # least trial-to-trial variation (intra-class correlation): the estimate's floor
    fail_prior: tuple[float, float] = (1.0, 3.0)  # Beta prior of the affected rate p1
    background_prior: tuple[float, float] = (0.5, 30.0)  # Beta prior of the background p0


@dataclass(frozen=True)
class Hypotheses:
    """Every hypothesis as two masks: affected(x) = (x & a == a) or (b != 0 and x & b == b)."""

    a: IntArray
    b: IntArray
    log_prior: FloatArray

    def __len__(self) -> int:
        return len(self.a)

    def affected(self, config: int) -> BoolArray:
        x = np.int64(config)
        hit: BoolArray = (x & self.a) == self.a
        out: BoolArray = hit | ((self.b != 0) & ((x & self.b) == self.b))
        return out

    def affected_many(self, configs: list[int]) -> BoolArray:
        """configs x hypotheses."""
        x = np.asarray(configs, dtype=np.int64)[:, None]
        hit: BoolArray = (x & self.a[None, :]) == self.a[None, :]
        out: BoolArray = hit | ((self.b[None, :] != 0) & ((x & self.b[None, :]) == self.b[None, :]))
        return out


@lru_cache(maxsize=8)
def enumerate_hypotheses(flags: int, settings: ModelSettings) -> Hypotheses:
    """The hypothesis space over `flags` suspects, with its prior: `none_mass` on the empty set,
    `or_mass` on the ORs, the rest on the AND sets. Within each, a set of k flags weighs
    (q / (1 - q))^k, q = `flag_prior` (each flag a culprit independently): most flags are no-ops,
    and without that penalty the many supersets of a small culprit set would together outweigh
    it, so a lucky clean streak on one decoy's drop could crown a wrong superset."""
    ratio = settings.flag_prior / (1.0 - settings.flag_prior)
    groups: list[tuple[list[int], list[int]]] = [([0], [0])]
    masses = [settings.none_mass]
    ands = [(m, [0] * len(m), k) for k in range(1, min(settings.max_and, flags) + 1) for m in [_masks(flags, k)]]
    ors = _or_families(flags, settings) if settings.max_or >= 2 else []
    and_mass = 1.0 - settings.none_mass - (settings.or_mass if ors else 0.0)
    for family, mass in ((ands, and_mass), (ors, settings.or_mass)):
        weights = [len(a) * ratio**size for a, _, size in family]
        for (a, b, _), w in zip(family, weights, strict=True):
            groups.append((a, b))
            masses.append(mass * w / sum(weights))
    a_all = np.concatenate([np.asarray(g[0], dtype=np.int64) for g in groups])
    b_all = np.concatenate([np.asarray(g[1], dtype=np.int64) for g in groups])
    log_prior = np.concatenate([np.full(len(g[0]), np.log(m / len(g[0]))) for g, m in zip(groups, masses, strict=True)])
    return Hypotheses(a_all, b_all, log_prior)


def _masks(flags: int, k: int) -> list[int]:
    return [sum(1 << i for i in combo) for combo in combinations(range(flags), k)]


def _or_families(flags: int, settings: ModelSettings) -> list[tuple[list[int], list[int], int]]:
    """Each (size i, size j) family of disjoint unordered OR pairs, i <= j, i + j <= max_or."""
    families = []
    top = min(settings.max_and, settings.max_or - 1)
    for i in range(1, top + 1):
        for j in range(i, top + 1):
            if i + j > settings.max_or or i + j > flags:
                continue
            a_list, b_list = [], []
            for a in _masks(flags, i):
                for b in _masks(flags, j):
                    if a & b or (i == j and b <= a):
                        continue
                    a_list.append(a)
                    b_list.append(b)
            if a_list:
                families.append((a_list, b_list, i + j))
    return families


def design_effect(n: int, icc: float) -> float:
    return 1.0 + max(n - 1, 0) * icc


class Posterior:
    """Pooled effective counts of the affected configurations per hypothesis (the background's
    are the totals minus them): the posterior of every hypothesis in a few vector operations.

    Every hypothesis is kept for the whole hunt, however unlikely: the posterior is then a
    function of the trials alone, so a resumed hunt and the report, which replay the journal,
    reach the state the live hunt held. (Dropping those below 1e-10 whenever the posterior was
    read made it depend on when it was read: a journal whose evidence reversed gave the live
    hunt one answer and its replay another.) The gain is computed on the likeliest few only
    (core.hunt's _held), so keeping the rest costs a vector update per trial.

    The raw counts are kept per trial size (the design effect depends on it), so the effective
    counts are a function of the trials and the current icc alone: `set_icc` re-tempers every
    trial seen when the estimate moves. (A trial is added to the effective counts as it comes, so
    while the icc stays at the floor the sums are those the search always held, to the last bit.)"""

    def __init__(self, hyps: Hypotheses, settings: ModelSettings) -> None:
        self.hyps, self.settings = hyps, settings
        self.icc = settings.icc
        self._raw: dict[int, tuple[FloatArray, FloatArray, list[float]]] = {}  # n -> k1, n1, [k, n] totals
        self.k1 = np.zeros(len(hyps))
        self.n1 = np.zeros(len(hyps))
        self.k_total = 0.0
        self.n_total = 0.0
        self._log_post: FloatArray | None = None

    def add(self, config: int, k: int, n: int) -> None:
        """One trial of `config`: k of n sessions failed."""
        if n not in self._raw:
            self._raw[n] = (np.zeros(len(self.hyps)), np.zeros(len(self.hyps)), [0.0, 0.0])
        k1, n1, totals = self._raw[n]
        hit = self.hyps.affected(config)
        k1 += hit * k
        n1 += hit * n
        totals[0] += k
        totals[1] += n
        deff = design_effect(n, self.icc)
        ke, ne = k / deff, n / deff
        self.k1 += hit * ke
        self.n1 += hit * ne
        self.k_total += ke
        self.n_total += ne
        self._log_post = None

    def set_icc(self, icc: float) -> None:
        """Temper every trial by this icc from now on (the trials seen included)."""
        if icc != self.icc:
            self.icc = icc
            self._temper()

    def _temper(self) -> None:
        """The effective counts: each trial size's raw counts over its design effect."""
        self.k1, self.n1 = np.zeros(len(self.hyps)), np.zeros(len(self.hyps))
        self.k_total = self.n_total = 0.0
        for n, (k1, n1, (k, total)) in sorted(self._raw.items()):
            deff = design_effect(n, self.icc)
            self.k1 += k1 / deff
            self.n1 += n1 / deff
            self.k_total += k / deff
            self.n_total += total / deff
        self._log_post = None

    def log_posterior(self) -> FloatArray:
        if self._log_post is None:
            a1, b1 = self.settings.fail_prior
            a0, b0 = self.settings.background_prior
            # hypotheses that pool the same counts have the same likelihood: a few hundred
            # distinct (k1, n1) among ~15k hypotheses, so the Beta functions run on those only
            uniq, inverse = np.unique(self.k1 + 1j * self.n1, return_inverse=True)
            k1, n1 = uniq.real, uniq.imag
            k0, n0 = self.k_total - k1, self.n_total - n1
            ll = betaln(a1 + k1, b1 + n1 - k1) + betaln(a0 + k0, b0 + n0 - k0)
            lp = self.hyps.log_prior + ll[inverse]
            lp -= np.max(lp)
            lp -= np.log(np.sum(np.exp(lp)))
            self._log_post = lp
        assert self._log_post is not None
        return self._log_post

    def probabilities(self) -> FloatArray:
        return np.exp(self.log_posterior())

    def rates_each(self) -> tuple[FloatArray, FloatArray]:
        """Each hypothesis' own posterior mean affected rate and background (its pooled counts)."""
        a1, b1 = self.settings.fail_prior
        a0, b0 = self.settings.background_prior
        k0, n0 = self.k_total - self.k1, self.n_total - self.n1
        return (a1 + self.k1) / (a1 + b1 + self.n1), (a0 + k0) / (a0 + b0 + n0)

    def rates(self, probs: FloatArray) -> tuple[float, float]:
        """Posterior means of the affected rate and the background, averaged over hypotheses."""
        a1, b1 = self.settings.fail_prior
        a0, b0 = self.settings.background_prior
        p1 = float(np.dot(probs, (a1 + self.k1) / (a1 + b1 + self.n1)))
        k0, n0 = self.k_total - self.k1, self.n_total - self.n1
        p0 = float(np.dot(probs, (a0 + k0) / (a0 + b0 + n0)))
        return p1, p0


def prob_no_failure(p: FloatArray, n: int, icc: float) -> FloatArray:
    """P(a trial of n sessions shows no failure) at mean rates p (one per hypothesis) with
    trial-to-trial variation."""
    p = np.clip(p, 1e-9, 1.0 - 1e-9)
    if n <= 0:
        return np.ones_like(p)
    if icc <= 0.0:
        out: FloatArray = (1.0 - p) ** n
        return out
    scale = (1.0 - icc) / icc
    alpha, beta = p * scale, (1.0 - p) * scale
    result: FloatArray = np.exp(betaln(alpha, beta + n) - betaln(alpha, beta))
    return result
