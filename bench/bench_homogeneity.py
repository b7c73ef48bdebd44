"""Benchmark: the trials' homogeneity test (stats.trial_homogeneity), Besag & Clifford's sequential
Monte Carlo p against the fixed 5,000 tables it replaced; A/A, power and CPU per call.

Cells of T trials of s sessions at rate r, the trials' rates beta-binomial with intra-trial
correlation ICC (0 is pure binomial: the A/A rows). Rates where the Monte Carlo path is taken
(some expected count below 5). Four legs:

  (1) share of cells rejected at alpha 0.05, 0.05/8 (Holm's first threshold over 8 cells tested,
      the demo's shape) and 0.05/50, and the mean tables drawn: the fixed 5,000 (the old test) and
      the sequential p at h = 10, 20, 50 and 251 (the report's: ceil(0.05 x 5,001), the least h whose
      every p <= 0.05 is the fixed test's), all read from one stream of 5,000 null tables per cell
      (the report's sampler and seed), so the columns are paired. Cells the test cannot take (no
      event) count as not rejected; cells on the chi-square or Fisher path have the same p in
      every column.
  (2) CPU per call, on the same cells: the old code (tests/helpers/reference_stats.trial_homogeneity:
      numpy's "marginals" sampler, 5,000 tables, its per-design cache cleared before each call)
      beside stats.trial_homogeneity.
  (3) the normal law over many sparse trials (Haldane 1937, Zelterman 1987): the share of null
      tables beyond the normal's 0.05 / 0.00625 / 0.001 quantile, with the null's own mean and
      variance (the most the approximation could get right).
  (4) the report end to end: demo-like sweeps (the measurement behind the caution's Holm, commit
      eb08d58) flagged overdispersed with the old test and the new, on the same runs.

One standard error of a rejection rate near alpha over C cells is sqrt(alpha (1 - alpha) / C).

    .venv/bin/python bench/bench_homogeneity.py [--cells 1000] [--fixed-big 20] [--cpu-cells 3] [--normal-tables 20000]
        [--trials 3,8,40,500,12500] [--sweeps 150] [--seed 0] [--legs 1234]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the old definition, kept verbatim for the tests

from helpers import reference_stats as ref  # noqa: E402
from timing import load_line  # noqa: E402

from orchestrator.core import dist, stats  # noqa: E402

DRAWS = stats.TRIAL_DRAWS
HS = (10, 20, 50, stats._exceedances(DRAWS))  # Besag & Clifford's h; the last is the report's
ALPHAS = (0.05, 0.05 / 8, 0.05 / 50)
TRIALS = (3, 8, 40, 500, 12_500)
DESIGNS = ((5, 0.15), (40, 0.005), (40, 0.05), (80, 0.02))  # sessions per trial, rate
ICCS = {3: (0.0, 0.02, 0.05, 0.1), 8: (0.0, 0.02, 0.05, 0.1), 40: (0.0, 0.02, 0.05, 0.1)}
ICCS |= {500: (0.0, 0.002, 0.005, 0.02), 12_500: (0.0, 0.0005, 0.001, 0.02)}  # 0.02 and more: every test 100%


def cell(rng: np.random.Generator, trials: int, sessions: int, rate: float, icc: float) -> list[tuple[int, int]]:
    p = rng.beta(rate * (1 - icc) / icc, (1 - rate) * (1 - icc) / icc, size=trials) if icc else np.full(trials, rate)
    return [(int(k), sessions) for k in rng.binomial(sessions, p)]


def monte_carlo(counts: list[tuple[int, int]], fixed: bool) -> tuple[np.ndarray, float] | None:
    """The null stream in draw order (all DRAWS spreads when `fixed`, else as far as the largest h
    needs) and the observed spread, when trial_homogeneity takes its Monte Carlo path; else None."""
    k = np.array([c[0] for c in counts], dtype=np.int64)
    n = np.array([c[1] for c in counts], dtype=np.int64)
    events, total = int(k.sum()), int(n.sum())
    if len(counts) < 3 or events in (0, total):
        return None
    expected = n * events / total
    if min(expected.min(), (n - expected).min()) >= stats.MIN_EXPECTED:
        return None
    observed = float(stats._spread(k, n, events / total))
    blocks, extreme = [], 0
    for spreads in stats._null_spreads(n, events, DRAWS, stats._exceedances(DRAWS)):
        blocks.append(spreads)
        extreme += int((spreads >= observed * (1 - 1e-9)).sum())
        if extreme >= max(HS) and not fixed:
            break
    return np.concatenate(blocks), observed


def pvalues(counts: list[tuple[int, int]], fixed: bool) -> tuple[list[float], list[int]]:
    """[fixed, *one per h in HS] p (1.0 when untestable; the fixed one nan unless `fixed`) and the
    tables each drew."""
    drawn = monte_carlo(counts, fixed)
    if drawn is None:
        p = stats.trial_homogeneity(counts)
        return [1.0 if p is None else p] * (1 + len(HS)), [0] * (1 + len(HS))
    null, observed = drawn
    extreme = np.flatnonzero(null >= observed * (1 - 1e-9))
    ps, used = [(extreme.size + 1) / (DRAWS + 1) if fixed else math.nan], [DRAWS]
    for h in HS:
        ps.append(stats._sequential_p(iter([null]), observed, DRAWS, h))
        used.append(int(extreme[h - 1]) + 1 if extreme.size >= h else DRAWS)
    return ps, used


def sizes(trials: int, icc: float, cells: int, fixed_big: int) -> tuple[int, int]:
    """Cells of a row of (1), and how many of them (the first) every column takes: the fixed column
    draws every table, 5,000 x trials cells a cell. The rest give the sequential p's A/A alone."""
    if trials <= 40 or (trials <= 500 and icc == 0):
        return cells, cells
    if trials <= 500:
        return max(1, cells // 10), max(1, cells // 10)
    return (max(fixed_big, cells // 5) if icc == 0 else fixed_big), fixed_big


def rejection_leg(rng: np.random.Generator, trial_counts: list[int], cells: int, fixed_big: int) -> None:
    print(f"\n(1) share rejected (%), fixed {DRAWS:,} | h = {', '.join(map(str, HS))}, same cells; mean tables drawn")
    print(f"    cells a row: {cells:,} up to 40 trials and at 500 at ICC 0; {max(1, cells // 10):,} at 500 beyond;")
    print(f"    at 12,500 {fixed_big} (at ICC 0 also h = {HS[-1]} alone over {max(fixed_big, cells // 5):,}: the end)")
    heads = " | ".join(f"alpha {a:.5f}: fixed  " + "  ".join(f"h{h:<3}" for h in HS) for a in ALPHAS)
    print(f"{'T':>6} {'s':>3} {'rate':>6} {'ICC':>6} {'cells':>5} | {heads} | draws: " + " ".join(f"h{h}" for h in HS))
    for trials in trial_counts:
        for sessions, rate in DESIGNS:
            for icc in ICCS[trials]:
                count, fixed = sizes(trials, icc, cells, fixed_big)
                results = [pvalues(cell(rng, trials, sessions, rate, icc), i < fixed) for i in range(count)]
                ps = np.array([r[0] for r in results])
                used = np.array([r[1] for r in results], dtype=float)
                shares = " | ".join(
                    " ".join(f"{100 * (ps[:fixed, j] <= a).mean():5.1f}" for j in range(1 + len(HS))) + "        "
                    for a in ALPHAS
                )
                draws = " ".join(f"{used[:fixed, j].mean():4.0f}" for j in range(1, 1 + len(HS)))
                alone = ""
                if count > fixed:
                    ours = ps[:, len(HS)]
                    alone = f" | h{HS[-1]} over {count}: " + " ".join(f"{100 * (ours <= a).mean():.1f}" for a in ALPHAS)
                row = f"{trials:>6} {sessions:>3} {rate:>6} {icc:>6} {fixed:>5} | {shares} | {draws}{alone}"
                print(row, flush=True)


def cpu_leg(rng: np.random.Generator, trial_counts: list[int], cells: int) -> None:
    print("\n(2) CPU per call (ms): old (fixed 5,000, marginals, cache cleared) vs new, same cells")
    print(f"{'T':>6} {'s':>3} {'rate':>6} {'ICC':>5} {'cells':>5} {'old':>10} {'new':>9} {'old/new':>8}")
    for trials in trial_counts:
        count = cells if trials < 12_500 else 1
        for sessions, rate in DESIGNS:
            for icc in (0.0, 0.05):
                old = new = 0.0
                for _ in range(count):
                    counts = cell(rng, trials, sessions, rate, icc)
                    ref._homogeneity_null_blocks.cache_clear()
                    t0 = time.process_time()
                    ref.trial_homogeneity(counts)
                    t1 = time.process_time()
                    stats.trial_homogeneity(counts)
                    t2 = time.process_time()
                    old, new = old + t1 - t0, new + t2 - t1
                ratio = old / new if new else math.inf
                print(
                    f"{trials:>6} {sessions:>3} {rate:>6} {icc:>5} {count:>5} {1e3 * old / count:>10.1f} "
                    f"{1e3 * new / count:>9.2f} {ratio:>7.0f}x",
                    flush=True,
                )


def normal_leg(rng: np.random.Generator, trial_counts: list[int], tables: int) -> None:
    print(f"\n(3) the normal law over many sparse trials: % of {tables:,} null tables beyond its alpha quantile")
    print(f"{'T':>6} {'s':>3} {'rate':>6} " + " ".join(f"{a:>9.5f}" for a in ALPHAS) + "   skewness")
    for trials in [t for t in trial_counts if t >= 40]:
        for sessions, rate in DESIGNS[1:]:
            n = np.full(trials, sessions, dtype=np.int64)
            events = max(1, round(rate * n.sum()))
            null = np.concatenate([stats._spread(stats._null_tables(rng, n, events, 100), n, events / n.sum())
                                   for _ in range(tables // 100)])  # fmt: skip
            z = (null - null.mean()) / null.std()
            beyond = [100 * (z > dist.norm_isf(a)).mean() for a in ALPHAS]
            skew = float((z**3).mean())
            print(f"{trials:>6} {sessions:>3} {rate:>6} " + " ".join(f"{b:>9.3f}" for b in beyond) + f"   {skew:8.2f}")


def report_leg(rng: np.random.Generator, sweeps: int) -> None:
    """The caution the report prints (Holm over the cells tested), old test vs new on the same runs."""
    from helpers.cell_runs import cell_run

    from orchestrator.report.build import build_report, suspect_reasons

    cube = {f: ["off", "on"] for f in ("a", "b", "c")}
    levels = [dict(zip(cube, combo, strict=True)) for combo in itertools.product(*cube.values())]
    base = levels[0]
    print(f"\n(4) the report's caution on {sweeps} demo-like sweeps each (8 cells x 8 trials x 40 sessions;")
    print("    the baseline at 15%, seven cells at 0.5%): sweeps flagged overdispersed, report CPU-s")
    print(f"{'ICC':>5} {'old':>5} {'new':>5} {'old CPU-s':>10} {'new CPU-s':>10}")
    new_test = stats.trial_homogeneity
    for icc in (0.0, 0.02, 0.1, 0.3):
        runs = [[(lv, cell(rng, 8, 40, 0.15 if lv == base else 0.005, icc)) for lv in levels] for _ in range(sweeps)]
        counts, cpu = [], []
        for test in (ref.trial_homogeneity, new_test):
            stats.trial_homogeneity = test  # type: ignore[assignment]  # what build_report calls
            t0, flagged = time.process_time(), 0
            for cells in runs:
                report = build_report(*cell_run(cube, base, cells))
                flagged += any("overdispersed" in r for r in suspect_reasons(report))
            counts.append(flagged)
            cpu.append(time.process_time() - t0)
        stats.trial_homogeneity = new_test  # type: ignore[assignment]
        print(f"{icc:>5} {counts[0]:>5} {counts[1]:>5} {cpu[0]:>10.1f} {cpu[1]:>10.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000, help="cells per row of (1) up to 40 trials (fewer beyond)")
    parser.add_argument(
        "--fixed-big", type=int, default=20, help="cells of 12,500 trials the fixed column of (1) takes"
    )
    parser.add_argument("--cpu-cells", type=int, default=3, help="cells per row of (2) (one at 12,500 trials)")
    parser.add_argument("--normal-tables", type=int, default=20_000, help="null tables per row of (3)")
    parser.add_argument("--trials", default=",".join(map(str, TRIALS)), help=f"trials a cell, of {TRIALS}")
    parser.add_argument("--sweeps", type=int, default=150, help="demo-like sweeps per row of (4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--legs", default="1234", help="which legs to run, e.g. 13")
    args = parser.parse_args()
    print(load_line())
    rng = np.random.default_rng(args.seed)
    trial_counts = [int(t) for t in args.trials.split(",")]
    if "1" in args.legs:
        rejection_leg(rng, trial_counts, args.cells, args.fixed_big)
    if "2" in args.legs:
        cpu_leg(rng, trial_counts, args.cpu_cells)
    if "3" in args.legs:
        normal_leg(rng, trial_counts, args.normal_tables)
    if "4" in args.legs:
        report_leg(rng, args.sweeps)


if __name__ == "__main__":
    main()
