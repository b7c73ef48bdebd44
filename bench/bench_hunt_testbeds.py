"""Benchmark: can one testbed with a higher background failure rate make `orch hunt` name a wrong
culprit set? The search (orchestrator.core.hunt.Hunt) picks one configuration per free testbed
without knowing which testbed asked, and models one background rate for every trial; a testbed
that fails more on its own lends its extra failures to whichever configurations it happens to run.

Each hunt drives the real search against bench_hunt's oracle (orchestrator.sim.culprits, 16 flags,
a setting of bench_hunt.SETTINGS), as sweep.hunt.HuntSource hands out: a testbed that is free asks
for the next configuration with the running ones pending, and a trial is observed when it ends.
Testbeds run at one pace (a trial takes 1 +- 5%, each starts within the first trial). Testbed tb1
adds --extra to the background of every configuration it runs (failure chances combine: 1 -
(1 - p)(1 - extra)); the other testbeds are as the setting says. Figures per scenario: exact culprit
set reported, a wrong set reported as found, 'not_failing' / 'budget' stops, sessions median.

    nice .venv/bin/python bench/bench_hunt_testbeds.py [--hunts 200] [--testbeds 2] [--extra 0,0.02,0.05]
        [--setting and3-bg0.5] [--sessions 5] [--jobs 1]
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import sys
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # small vectors: threads only contend
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from bench_hunt import FLAGS, SETTINGS, truth_of  # noqa: E402

from orchestrator.core.hunt import Hunt, HuntSettings  # noqa: E402


def hunt_once(job: tuple[str, int, int, int, float]) -> tuple[str, int, tuple[str, ...]]:
    """One hunt on `testbeds` testbeds, tb1 failing `extra` more on its own: (outcome, sessions,
    the named sets)."""
    name, seed, sessions, testbeds, extra = job
    setting = SETTINGS[name]
    rng = random.Random(seed)
    hunt = Hunt(HuntSettings(FLAGS, sessions_per_trial=sessions))
    free = [(rng.random(), i) for i in range(testbeds)]  # (when free, testbed)
    running: list[tuple[float, int, int, int]] = []  # (ends, testbed, config, k)
    pending: list[int] = []
    while free or running:
        while free:
            now, tb = heapq.heappop(free)
            x = hunt.propose(pending)
            if x is None:
                continue  # this testbed's runner ends
            p = setting.model.trial_rate(frozenset(FLAGS[i] for i in range(len(FLAGS)) if x >> i & 1), rng)
            if tb == 1:
                p = 1.0 - (1.0 - p) * (1.0 - extra)
            k = sum(rng.random() < p for _ in range(sessions))
            pending.append(x)
            heapq.heappush(running, (now + rng.lognormvariate(0.0, 0.05), tb, x, k))
        if running:
            end, tb, x, k = heapq.heappop(running)
            pending.remove(x)
            hunt.observe(x, k, sessions)
            heapq.heappush(free, (end, tb))
    result = hunt.result(top_n=1)
    named = frozenset(frozenset(s) for s in result.best.sets)
    if result.state != "found":
        outcome = result.state
    else:
        outcome = "exact" if named == truth_of(setting) else "wrong"
    return outcome, result.sessions, tuple(sorted("+".join(sorted(s)) for s in named))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hunts", type=int, default=200)
    parser.add_argument("--testbeds", type=int, default=2)
    parser.add_argument("--extra", default="0,0.02,0.05", help="tb1's added background, per scenario")
    parser.add_argument("--setting", default="and3-bg0.5", choices=sorted(SETTINGS))
    parser.add_argument("--sessions", type=int, default=5, help="sessions per trial")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    truth = sorted("+".join(sorted(s)) for s in truth_of(SETTINGS[args.setting]))
    print(
        f"bench_hunt_testbeds: {args.setting} (truth {truth}), {args.testbeds} testbeds, trials of {args.sessions} "
        f"sessions, {args.hunts} hunts per scenario; load average {os.getloadavg()[0]:.1f}"
    )
    with Pool(args.jobs) as pool:
        for extra in (float(e) for e in args.extra.split(",")):
            started = time.perf_counter()
            jobs = [(args.setting, seed, args.sessions, args.testbeds, extra) for seed in range(args.hunts)]
            outcomes = pool.map(hunt_once, jobs, chunksize=4)
            counts = Counter(o for o, _, _ in outcomes)
            wrong = Counter(named for o, _, named in outcomes if o == "wrong")
            print(
                f"  tb1 background +{extra:.1%}: exact {counts['exact'] / args.hunts:6.1%}, wrong set found "
                f"{counts['wrong']}/{args.hunts} ({counts['wrong'] / args.hunts:.1%}), not_failing "
                f"{counts['not_failing']}, budget {counts['budget']}, sessions median "
                f"{np.median([s for _, s, _ in outcomes]):.0f}  ({time.perf_counter() - started:.0f} s)"
            )
            for named, n in wrong.most_common(3):
                print(f"      wrong: {list(named)} x{n}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
