"""PURE: the trial-to-trial variation a culprit hunt's own trials show, as the icc its evidence is
tempered by (core/hunt_model.py's design effect 1 + (n - 1) icc).

Why estimated: assumed only (the matrix's `icc`, 0.03 by default), a deployment whose trials vary
more than stated had each trial's evidence over-weighted, and a clean streak that the variation
explains made a wrong set certain. The estimate is core.clustered's pooled quasi-likelihood
dispersion (the sums of core/spreadsums.py), never below the matrix's `icc`: that is the user's
prior, and the trials can only show that they vary more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.core import dist
from orchestrator.core.spreadsums import cell_spread, pooled_dispersion
from orchestrator.core.words import counted

ICC_CEILING = 0.5  # the estimate's upper bound: a trial of n sessions still counts as 2n / (n + 1)
SPREAD_MIN_DF = 2.0  # below this many degrees of freedom the estimate is not used (the floor is)
SPREAD_LEVEL = 0.99  # the icc used is the estimate's lower bound at this one-sided confidence


@dataclass(frozen=True)
class IccUsed:
    """The trial-to-trial variation a hunt tempers its evidence by, and what it rests on."""

    icc: float  # the value used
    floor: float  # the matrix's stated icc (the user's prior: never less)
    phi: float = 1.0  # the pooled dispersion estimated (1.0: none)
    df: float = 0.0  # its degrees of freedom (0: not estimable)
    trials: int = 0  # trials in the configurations that inform it
    cells: int = 0  # those configurations

    @property
    def estimated(self) -> bool:
        """The estimate, not the floor, is what is used."""
        return self.icc > self.floor

    def describe(self) -> str:
        """In words, for the report."""
        if self.df < SPREAD_MIN_DF:
            return f"ICC {self.floor:g} as stated (too few repeated trials to estimate it: {self.df:.1f} df)"
        # only these inform it (core.spreadsums): "4 configurations run more than once" was said
        # where 8 had, 4 of them with no failure (or only failures) in their sessions
        where = f"{counted(self.cells, 'configuration')} run more than once with some but not all sessions failed"
        seen = f"dispersion {self.phi:.2f} over {self.trials} trials in {where}, {self.df:.1f} df"
        if self.estimated:
            capped = " (the ceiling)" if self.icc >= ICC_CEILING else ""
            return f"ICC {self.icc:.3f}{capped} estimated from the trials ({seen}; stated {self.floor:g})"
        return f"ICC {self.floor:g} as stated (the trials' estimate is not above it: {seen})"


class TrialSpread:
    """The trial-to-trial variation the hunt's trials show: core.clustered's pooled dispersion phi
    over the configurations run in several trials (each trial's k around its configuration's own
    rate, the spread over what the binomial expects), as an icc: phi = 1 + (n - 1) icc for trials
    of n sessions (the beta-binomial's variance), n the informing trials' mean size. Clamped to
    [floor, ICC_CEILING], and the floor while it rests on under SPREAD_MIN_DF df. A configuration's
    spread is recomputed when it gets a trial, so an estimate costs a sum over configurations.

    What is used is phi's lower confidence bound at SPREAD_LEVEL (phi df / chi2(SPREAD_LEVEL, df)):
    the variation the trials insist on, not the point estimate, which scatters widely on a few dozen
    trials of 5 sessions (one clustered 4-of-5 trial carries it) and is read after every trial, in
    configurations the search chose to repeat for their surprises. Measured (bench_hunt, seeds
    0-299, trials of 5): with the stated ICC 0.03 true, the 90% bound rose above it at some point
    in 125 of 300 hunts (peak ICC ~0.09; median 395 -> 410 sessions), the 99% bound in 16 (median
    395 unchanged); at a true ICC 0.30 either took the wrong sets reported found from 2 to 0, at a
    median of 615 (90%) or 543 (99%) sessions instead of 468. The bound nears the point estimate
    as trials accumulate.
    """

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self.counts: dict[int, list[tuple[int, int]]] = {}
        self.cells: dict[int, tuple[float, float, float]] = {}  # config -> (A, B, df) of core.clustered

    def add(self, config: int, k: int, n: int) -> IccUsed:
        """One trial more; the estimate after it."""
        trials = self.counts.setdefault(config, [])
        trials.append((k, n))
        kn = np.asarray(trials, dtype=float).T
        a, b, df = cell_spread(kn[0], kn[1])
        self.cells[config] = (float(a), float(b), float(df))
        return self.estimate()

    def estimate(self) -> IccUsed:
        """The icc the trials so far give (see the class docstring), with what it rests on."""
        spread = np.asarray(list(self.cells.values()), dtype=float).reshape(-1, 3)
        phi, df = (float(v) for v in pooled_dispersion(spread[:, 0], spread[:, 1], spread[:, 2]))
        informing = [c for c, cell in self.cells.items() if cell[2] > 0]
        trials = [n for c in informing for _, n in self.counts[c]]
        if df < SPREAD_MIN_DF or not trials or sum(trials) <= len(trials):
            return IccUsed(self.floor, self.floor, 1.0 if df <= 0 else phi, df, len(trials), len(informing))
        low = phi * df / float(dist.chi2_ppf(SPREAD_LEVEL, df))
        icc = (low - 1.0) / (sum(trials) / len(trials) - 1.0)
        used = min(max(icc, self.floor), max(ICC_CEILING, self.floor))
        return IccUsed(used, self.floor, phi, df, len(trials), len(informing))
