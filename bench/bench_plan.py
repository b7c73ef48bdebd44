"""Benchmark: `orch plan` of a 4,096-cell matrix, old vs new side by side in one run.

The case is tests/test_bad_input.py's AT_THE_LIMITS "4,096 cells (plan)" (`_wide(bed, 10)`, 12
binary factors, `--replicates 4`), where `orch plan` took 13.7 s: power.quasi_detectable 5.3 s,
findings.contrast_count 3.1 s, clustered.cell_spread 2.4 s, importing scipy.stats 2.0 s. Printed,
each as the best of --repeat, old / new and their ratio:

- contrast_count: the row-wise _Grid.terms (tests/helpers/reference_stats.py keeps it verbatim)
  vs findings._Grid.full_strata;
- quasi_detectable at the four baseline rates `orch plan` prints: every step spreading every
  simulated cell (reference_stats.quasi_detectable) vs the fixed cells' spreads computed once;
- family.unreachable of a number metric (`wall`) at 2 values a cell (2 replicates: the exact floor
  1/3 cannot reach 0.05, so the tied-values test is asked too; at 4 the floor answers alone): a
  Mann-Whitney test on tied values run for every cell (ranks.mann_whitney_can_reach uncached, as
  before 2026-12-06) vs cached by (m, n) (its cache cleared before each repeat: the first cell
  computes, the others look up);
- the restart counts of the other orders (`orch plan`'s "per order" line): core.plan.restart_count
  expanding the matrix again for each of the three orders vs given the plan's cells;
- importing the statistics modules in a fresh interpreter: scipy.stats + statsmodels (what they
  loaded before, on top of scipy.special) vs core.findings/power/clustered/ranks/stats now;
- `orch plan` end to end in a fresh process (this tree; with --baseline-checkout DIR also an
  older checkout, e.g. `git archive f5c3cae orchestrator | tar -x -C DIR`, interleaved).

    python bench/bench_plan.py [--factors 10] [--repeat 3] [--baseline-checkout DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the replaced definitions, shared with the tests

from helpers import reference_stats as ref  # noqa: E402
from timing import best_of, load_line  # noqa: E402

from orchestrator.core import family, findings, power, ranks  # noqa: E402
from orchestrator.core.config import read_inventory, read_matrix  # noqa: E402
from orchestrator.core.plan import make_plan, restart_count  # noqa: E402

MATRIX = """\
name: bench_plan
factors:
{more}  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [on, off]
  cuda_graph:
    levels:
      on: {{decode: {{SGLANG_EXTRA_ARGS: ""}}}}
      off: {{decode: {{SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}}
replicates: 1
seed: 1
health_timeouts: {{decode: 60}}
repro:
  command: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 2 --seed {{trial_seed}}"
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\\\d+)/(?P<n>\\\\d+)'}}
collect:
  anomalies: {{role: decode, pattern: ANOMALY}}
"""
RATES = (0.0, 0.02, 0.05, 0.15)  # the baselines `orch plan` prints the quasi test's power at
SESSIONS, REPLICATES = 2, 4
IMPORT_NEW = "import orchestrator.core.findings, orchestrator.core.power, orchestrator.core.clustered"
IMPORT_OLD = "import scipy.special, scipy.stats, statsmodels.stats.proportion"


def fresh_import(code: str, repeat: int) -> float:
    """Best CPU seconds of `code` in a fresh interpreter (CPU: less moved by the machine's load)."""
    timed = f"import time; c = time.process_time(); {code}; print(time.process_time() - c)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        float(subprocess.run([sys.executable, "-c", timed], capture_output=True, text=True, check=True, env=env).stdout)
        for _ in range(repeat)
    ]
    return min(runs)


def orch_plan(checkout: Path, workdir: Path, matrix: Path) -> float:
    """Wall seconds of `orch plan --replicates 4` in a fresh process, orchestrator from `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "NO_COLOR": "1", "COLUMNS": "400", "TERM": "dumb"}
    argv = [sys.executable, "-m", "orchestrator.cli.main", "plan", str(matrix)]
    argv += ["-i", str(REPO / "inventory" / "local.yaml"), "--replicates", str(REPLICATES)]
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, text=True, check=True, env=env, cwd=workdir)
    return time.perf_counter() - t0


def row(name: str, old: float, new: float) -> None:
    print(f"{name:<44} {old:>9.3f} {new:>9.3f} {old / new:>7.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, default=10, help="binary factors besides the 2 of the matrix")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    parser.add_argument("--baseline-checkout", type=Path, help="an older checkout's root (holds orchestrator/)")
    args = parser.parse_args()
    print(load_line())
    names = [f"f{i}" for i in range(args.factors)] + ["overlap", "cuda_graph"]
    factors = {f: (["on", "off"] if f in ("overlap", "cuda_graph") else ["a", "b"]) for f in names}
    cells = [dict(zip(factors, combo, strict=True)) for combo in itertools.product(*factors.values())]
    baseline = {f: levels[0] for f, levels in factors.items()}
    print(f"{len(cells):,} cells x {REPLICATES} trials of {SESSIONS} sessions")
    print(f"{'seconds':<44} {'old':>9} {'new':>9} {'old/new':>8}")

    counts = (ref.contrast_count(cells, factors, baseline), findings.contrast_count(cells, factors, baseline))
    assert counts[0] == counts[1], counts
    old = best_of(args.repeat, lambda: ref.contrast_count(cells, factors, baseline))
    new = best_of(args.repeat, lambda: findings.contrast_count(cells, factors, baseline))
    row(f"contrast_count ({counts[1]} contrasts)", old, new)

    others = tuple([0.0] * max(0, len(cells) - 2))
    designs = [power.Design(SESSIONS, REPLICATES, tuple(r for _ in others)) for r in RATES]
    fast = power.quasi_detectable.__wrapped__  # uncached: each repeat computes
    for d, r in zip(designs, RATES, strict=True):
        assert ref.quasi_detectable(d, r) == fast(d, r), r
    old = best_of(args.repeat, lambda: [ref.quasi_detectable(d, r) for d, r in zip(designs, RATES, strict=True)])
    new = best_of(args.repeat, lambda: [fast(d, r) for d, r in zip(designs, RATES, strict=True)])
    row("quasi_detectable (4 baselines)", old, new)

    ids = {",".join(f"{f}={v}" for f, v in c.items()): c for c in cells}
    wall = family.MetricDesign("number", ids, trials=dict.fromkeys(ids, 2))
    design = family.Design(factors, baseline, next(iter(ids)), {"wall": wall})
    smallest = ranks.mann_whitney_smallest_p.__wrapped__  # type: ignore[attr-defined]

    def unreachable_uncached() -> list[str]:
        base = 2
        return [
            c
            for c in ids
            if c != design.baseline and not (ranks.mann_whitney_min_p(2, base) < 0.05 or smallest(2, base) < 0.05)
        ]

    def unreachable_cached() -> list[str]:
        ranks.mann_whitney_can_reach.cache_clear()  # type: ignore[attr-defined]
        ranks.mann_whitney_smallest_p.cache_clear()  # type: ignore[attr-defined]
        return [str(k[2]) for k in family.unreachable(design)]

    assert unreachable_uncached() == unreachable_cached()
    old, new = best_of(args.repeat, unreachable_uncached), best_of(args.repeat, unreachable_cached)
    row(f"family.unreachable (wall, {len(ids) - 1:,} cells x 2)", old, new)

    old, new = fresh_import(IMPORT_OLD, args.repeat), fresh_import(IMPORT_NEW, args.repeat)
    row("import, fresh interpreter (CPU s)", old, new)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        more = "".join(f"  f{i}:\n    env: {{decode: F{i}}}\n    levels: [a, b]\n" for i in range(args.factors))
        matrix = work / "m.yaml"
        matrix.write_text(MATRIX.format(more=more))
        m, tb = read_matrix(matrix), read_inventory(REPO / "inventory" / "local.yaml").testbed(None)
        plan = make_plan(m, tb, 1, REPLICATES)
        orders = ("randomized", "sequential", "min-restarts")
        again = [restart_count(m, tb, 1, REPLICATES, o) for o in orders]
        assert again == [restart_count(m, tb, 1, REPLICATES, o, plan.cells) for o in orders]
        old = best_of(args.repeat, lambda: [restart_count(m, tb, 1, REPLICATES, o) for o in orders])
        new = best_of(args.repeat, lambda: [restart_count(m, tb, 1, REPLICATES, o, plan.cells) for o in orders])
        row("restart_count of the 3 orders", old, new)
        new_runs, old_runs = [], []
        for _ in range(args.repeat):  # interleaved: the load moves both alike
            if args.baseline_checkout:
                old_runs.append(orch_plan(args.baseline_checkout, work, matrix))
            new_runs.append(orch_plan(REPO, work, matrix))
        if old_runs:
            row("orch plan, end to end (wall s)", min(old_runs), min(new_runs))
        else:
            print(f"{'orch plan, end to end (wall s)':<44} {'-':>9} {min(new_runs):>9.3f}   (old: --baseline-checkout)")


if __name__ == "__main__":
    main()
