"""What a local repro's reaper (edges.reaper) adds to each trial: run_command of a repro that prints
its metric line and exits, timed end to end (spawn, wait, leftover check, reaper gone), an older
checkout (before: no reaper) beside this tree (after), side by side in one run.

    python bench/bench_reaper.py [--trials 50] [--rounds 5] [--before main | --before DIR]

Each tree runs in a fresh process of its own (its `orchestrator` first on sys.path), the trials in
--rounds alternating blocks (before, after, before, ...) so that a change in the machine's load
falls on both. Printed per tree: the median and p90 wall time of run_command per trial, and the
median duration the trial records (the repro's own: the reaper's start must not be in it); then
the median added per trial, beside a bare ``python -I -S -c pass`` (spawn to exit) timed in the
same blocks (what one interpreter start costs on this machine now). --before REV is exported
from this repository's history (`git archive REV orchestrator`); a DIR is used as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checkout import before_tree

REPO = Path(__file__).resolve().parent.parent
COMMAND = "echo 'score=0.5 events=3/10'"

# run in a fresh process per block: `trials` run_command calls, their wall times and durations as JSON
TRIALS = """
import json, sys, time
from pathlib import Path
tree, folder, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, tree)
import orchestrator
from orchestrator.edges.workload import run_command
assert orchestrator.__file__.startswith(tree), orchestrator.__file__
walls, durations = [], []
for i in range(n):
    t0 = time.perf_counter()
    out = run_command(sys.argv[4], timeout_s=30, cwd=folder, env=None,
                      stdout_path=folder / f"{i}.out", stderr_path=folder / f"{i}.err")
    walls.append(time.perf_counter() - t0)
    durations.append(out.duration_s)
    assert out.exit_code == 0 and out.left_behind == [] and out.stdout_tail.startswith("score="), out
print(json.dumps({"walls": walls, "durations": durations}))
"""


def block(tree: Path, folder: Path, trials: int) -> dict[str, list[float]]:
    folder.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(
        [sys.executable, "-c", TRIALS, str(tree), str(folder), str(trials), COMMAND],
        check=True,
        capture_output=True,
        text=True,
        cwd=folder,
    )
    return json.loads(got.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def bare_starts(n: int) -> list[float]:
    """Spawn-to-exit times of `n` bare interpreters with the reaper's flags."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return times


def ms(values: list[float], q: float = 0.5) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=50, help="trials per tree (default 50)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks the trials are split in")
    parser.add_argument("--before", default="main", help="a revision of this repository, or a checkout folder")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-reaper-") as scratch:
        trees = {"before": before_tree(args.before, Path(scratch)), "after": REPO}
        got: dict[str, dict[str, list[float]]] = {name: {"walls": [], "durations": []} for name in trees}
        per_round = max(1, args.trials // args.rounds)
        bare: list[float] = []
        for r in range(args.rounds):
            for name, tree in trees.items():
                figures = block(tree, Path(scratch) / f"{name}-{r}", per_round)
                for key, values in figures.items():
                    got[name][key].extend(values)
            bare += bare_starts(per_round)
        n = len(got["after"]["walls"])
        print(f"{n} trials per tree, repro: {COMMAND}; before = {args.before}, after = this tree")
        print(f"{'tree':<8} {'wall median ms':>15} {'wall p90 ms':>12} {'duration median ms':>19}")
        for name in trees:
            walls, durations = got[name]["walls"], got[name]["durations"]
            print(f"{name:<8} {ms(walls):>15} {ms(walls, 0.9):>12} {ms(durations):>19}")
        added = statistics.median(got["after"]["walls"]) - statistics.median(got["before"]["walls"])
        print(f"added per trial (median after - median before): {1000 * added:.1f} ms")
        print(f"python -I -S -c pass, spawn to exit: median {ms(bare)} ms, p90 {ms(bare, 0.9)} ms")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
