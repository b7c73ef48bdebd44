"""Random sweeps with random faults on the fakes, checked against a model: thousands of seeds.

Each seed draws a matrix (1-4 factors over prefill, decode and router: values with spaces,
quotes, # and =, levels that remove a variable, flags inside an args variable), the hosts'
original env files (keys there or not, duplicates, comments, no final newline) and up to two
faults (a unit that fails to start, a command that fails, a dropped connection, an interrupt in
a random trial phase, a failing workload); 1-3 testbeds in parallel, CRLF files, a BOM, a
symlinked env file, exclude/include, CRLF on a shell host no factor edits (--drawing shell-crlf
runs only those seeds); the sweep runs through sweep.api on the fakes and
tests/helpers/modelsweep.py checks every workload's files and live envs against its model, and
the end (after orch resume / restore): files byte-identical, trials journaled once, restarts
where the files changed. No process, no socket. Prints the seeds that broke a promise (each
with its first problems), the faults that fired, trials checked, seconds.

    python bench/bench_model_sweep.py --first 0 --count 2000
    python bench/bench_model_sweep.py --first 0 --count 4000 --drawing shell-crlf
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the model and the fakes, shared with the unit test

import pytest  # noqa: E402
from helpers import modelsweep  # noqa: E402
from timing import load_line  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--count", type=int, default=200, help="seeds to run")
    parser.add_argument(
        "--drawing", default="", help="run only the seeds whose scenario draws this feature (e.g. shell-crlf)"
    )
    args = parser.parse_args()
    fired: collections.Counter[str] = collections.Counter()
    drew: collections.Counter[str] = collections.Counter()  # the later draws, among the seeds that kept every promise
    broken: list[tuple[int, str]] = []
    trials = 0
    planned, needless = 0, 0  # restarts the plans of fault-free seeds show, and those on an unchanged file
    t0 = time.perf_counter()
    seeds = list(range(args.first, args.first + args.count))
    if args.drawing:  # drawing a scenario takes microseconds; running it, a second
        seeds = [s for s in seeds if args.drawing in modelsweep.features(modelsweep.scenario(s))]
    for done, seed in enumerate(seeds, 1):
        with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
            try:
                watch = modelsweep.check(seed, Path(tmp), mp)
            except Exception as exc:  # noqa: BLE001 - a broken promise, or a crash: both are findings
                broken.append((seed, f"{type(exc).__name__}: {str(exc)[:600]}"))
                print(f"  seed {seed} broke: {broken[-1][1][:300]}", flush=True)
                continue
        trials += len(watch.seen)
        drew.update(modelsweep.features(watch.sc))
        planned, needless = planned + watch.restarts[0], needless + watch.restarts[1]
        if done % 100 == 0:
            took = time.perf_counter() - t0
            print(
                f"  {done} seeds, {len(broken)} broke, {trials} workloads, {took:.0f} s; fired {dict(fired)}",
                flush=True,
            )
        fired.update(f.split(":")[0] for f in watch.fired or ["none"])
        fired.update(f for f in watch.fired if ":" in f)
    wall = time.perf_counter() - t0
    print(load_line())
    only = f" drawing {args.drawing}" if args.drawing else ""
    print(f"seeds {args.first}..{args.first + args.count - 1}{only}: {len(seeds)} run, {len(broken)} broke a promise")
    print(f"workloads checked: {trials}; wall {wall:.1f} s ({wall / max(len(seeds), 1):.2f} s a seed)")
    print(f"fault-free seeds: the plans restart {planned} units, {needless} of them on a file the cell left as it was")
    print("faults fired: " + ", ".join(f"{k} {v}" for k, v in sorted(fired.items())))
    print("drew (seeds that held): " + ", ".join(f"{k} {v}" for k, v in sorted(drew.items())))
    for seed, why in broken:
        print(f"  seed {seed}: {why}")


if __name__ == "__main__":
    main()
