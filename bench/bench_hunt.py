"""Benchmark: `orch hunt`'s search on a simulated oracle (no processes), against one flag at a
time and the full factorial.

Each hunt runs orchestrator.core.hunt.Hunt against a truth from orchestrator.sim.culprits (the
model the bundled simulator uses): 16 suspect flags, trials of --sessions sessions, every
trial's rate drawn from a Beta around the configuration's rate with the setting's ICC
(trial-to-trial variation), k ~ Binomial(n, that rate). With T testbeds every round hands one
configuration to each free testbed (chosen jointly), then all T finish; with 1 testbed a round
is one trial. Settings (each --hunts hunts, seeds --first-seed (0) onwards):

  and3-bg0.5   culprit = a 3-flag AND at 15%, background 0.5%, ICC 0.03
  and3-bg1     culprit = a 3-flag AND at 15%, background 1%,   ICC 0.05, 2 decoys +0.5% each
  and3-bg0     culprit = a 3-flag AND at 15%, background 0%,   ICC 0.02
  or           (3-flag AND at 15%) OR (1 other flag at 10%), background 0.5%, ICC 0.03
  one-flag     culprit = 1 flag at 15%, background 0.5%, ICC 0.03
  and3-bg3     culprit = a 3-flag AND at 15%, background 3%,   ICC 0.03
  and3-icc30   culprit = a 3-flag AND at 15%, background 0.5%, ICC 0.30
  and4         culprit = a 4-flag AND at 15%, background 0.5%, ICC 0.03: outside the hypothesis space
               (ANDs of up to 3 flags, ORs of two); "exact" here is the hunt ending without a set and
               saying that none fits (core/huntfit.py), "wrong" any set reported found

Figures per setting: exact culprit set reported (goal >= 95%), wrong set reported as certain
(goal <= 1%), sessions median / p90 (goals <= 250 / <= 500) beside one-flag-at-a-time (17
configurations x 80 sessions = 1,360) and the full factorial (65,536 configurations), trials,
and for the --parallel settings (default the 3-flag AND at 0.5%) the wall-clock rounds on --testbeds 4
against the same hunts on one testbed (goal <= 1/3).

    nice .venv/bin/python bench/bench_hunt.py [--hunts 1000] [--sessions 5] [--testbeds 4] [--parallel all]
        [--settings and3-bg0.5,or] [--jobs 2] [--budget 5000] [--wrong] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import dataclass
from multiprocessing import Pool
from multiprocessing.pool import Pool as PoolType

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # small vectors: threads only contend
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from orchestrator.core.hunt import Hunt, HuntSettings, drive  # noqa: E402
from orchestrator.sim.culprits import Cause, CulpritModel  # noqa: E402

FLAGS = tuple(f"flag{i:02d}" for i in range(16))
OFAT_SESSIONS = (len(FLAGS) + 1) * 80
FACTORIAL = 2 ** len(FLAGS)


@dataclass(frozen=True)
class Setting:
    name: str
    model: CulpritModel
    truth: frozenset[frozenset[str]]


def _and(flags: tuple[int, ...], rate: float) -> Cause:
    return Cause(frozenset(FLAGS[i] for i in flags), rate)


SETTINGS = {
    s.name: s
    for s in (
        Setting("and3-bg0.5", CulpritModel((_and((2, 7, 11), 0.15),), (), 0.005, 0.03), frozenset()),
        Setting(
            "and3-bg1",
            CulpritModel((_and((2, 7, 11), 0.15),), ((FLAGS[4], 0.005), (FLAGS[9], 0.005)), 0.01, 0.05),
            frozenset(),
        ),
        Setting("and3-bg0", CulpritModel((_and((2, 7, 11), 0.15),), (), 0.0, 0.02), frozenset()),
        Setting("or", CulpritModel((_and((2, 7, 11), 0.15), _and((5,), 0.10)), (), 0.005, 0.03), frozenset()),
        Setting("one-flag", CulpritModel((_and((13,), 0.15),), (), 0.005, 0.03), frozenset()),
        Setting("and3-bg3", CulpritModel((_and((2, 7, 11), 0.15),), (), 0.03, 0.03), frozenset()),
        Setting("and3-icc30", CulpritModel((_and((2, 7, 11), 0.15),), (), 0.005, 0.30), frozenset()),
        Setting("and4", CulpritModel((_and((2, 7, 11, 13), 0.15),), (), 0.005, 0.03), frozenset()),
    )
}
DEFAULT = ("and3-bg0.5", "and3-bg1", "and3-bg0", "or", "one-flag")
OUTSIDE = {"and4"}  # truths the hypotheses cannot express: the right answer is "no set explains it"


def truth_of(setting: Setting) -> frozenset[frozenset[str]]:
    return frozenset(c.flags for c in setting.model.causes)


@dataclass(frozen=True)
class Outcome:
    exact: bool
    wrong_certain: bool
    sessions: int
    trials: int
    rounds: int
    answer: str = ""  # what the hunt said when it was wrong (for --wrong)


def hunt_once(setting: Setting, seed: int, sessions: int, testbeds: int, budget: int = 5000) -> Outcome:
    rng = random.Random(seed)
    hunt = Hunt(HuntSettings(FLAGS, sessions_per_trial=sessions, max_sessions=budget))

    def run_trial(x: int) -> tuple[int, int]:
        p = setting.model.trial_rate(frozenset(FLAGS[i] for i in range(len(FLAGS)) if x >> i & 1), rng)
        return sum(rng.random() < p for _ in range(sessions)), sessions

    rounds = drive(hunt, run_trial, testbeds)
    result = hunt.result(top_n=1)
    found = frozenset(frozenset(s) for s in result.best.sets)
    if setting.name in OUTSIDE:  # no set is right: the right answer is that none fits (core.huntfit)
        exact, wrong = result.state != "found" and result.contradicted >= 1, result.state == "found"
    else:
        exact = result.state == "found" and found == truth_of(setting)
        wrong = result.state == "found" and found != truth_of(setting)
    answer = f"seed {seed}: {result.best.describe()} ({result.reason})" if wrong else ""
    return Outcome(exact, wrong, result.sessions, result.trials, rounds, answer)


def _one(job: tuple[str, int, int, int, int]) -> Outcome:
    name, seed, sessions, testbeds, budget = job
    return hunt_once(SETTINGS[name], seed, sessions, testbeds, budget)


def run_setting(
    setting: Setting, args: argparse.Namespace, testbeds: int, pool: PoolType
) -> tuple[dict[str, float], list[str]]:
    started = time.perf_counter()
    seeds, sessions, budget = range(args.first_seed, args.first_seed + args.hunts), args.sessions, args.budget
    seq = pool.map(_one, [(setting.name, seed, sessions, 1, budget) for seed in seeds], chunksize=8)
    row: dict[str, float] = {
        "exact": float(np.mean([o.exact for o in seq])),
        "wrong": float(np.mean([o.wrong_certain for o in seq])),
        "median": float(np.median([o.sessions for o in seq])),
        "p90": float(np.percentile([o.sessions for o in seq], 90)),
        "trials": float(np.median([o.trials for o in seq])),
    }
    if testbeds > 1:
        par = pool.map(_one, [(setting.name, seed, sessions, testbeds, budget) for seed in seeds], chunksize=8)
        row |= {
            "par_exact": float(np.mean([o.exact for o in par])),
            "par_wrong": float(np.mean([o.wrong_certain for o in par])),
            "par_median": float(np.median([o.sessions for o in par])),
            "rounds": float(np.median([o.rounds for o in par])),
            "ratio": float(np.median([o.rounds / max(s.trials, 1) for o, s in zip(par, seq, strict=True)])),
        }
    row["seconds"] = time.perf_counter() - started
    return row, [o.answer for o in seq if o.answer]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hunts", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=5, help="sessions per trial")
    parser.add_argument("--testbeds", type=int, default=4)
    parser.add_argument(
        "--parallel", default="and3-bg0.5", help="settings also run on --testbeds testbeds (all: every one)"
    )
    parser.add_argument("--settings", default=",".join(DEFAULT), help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--budget", type=int, default=5000, help="max_sessions of each hunt")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + hunts - 1")
    parser.add_argument("--wrong", action="store_true", help="list each wrong answer (seed, set, stop reason)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared: times are inflated)")
    print(
        f"{len(FLAGS)} flags, trials of {args.sessions} sessions, {args.hunts} hunts per setting; baselines: "
        f"one-flag-at-a-time {OFAT_SESSIONS:,} sessions (17 configs x 80), full factorial {FACTORIAL:,} configs"
    )
    head = f"{'setting':<11} {'exact':>6} {'wrong':>6} {'median':>7} {'p90':>5} {'trials':>6}"
    head += f" {'vs OFAT':>8} {'vs 2^16':>8}"
    if args.testbeds > 1:
        head += f" | {args.testbeds} testbeds: {'exact':>6} {'wrong':>6} {'median':>6} {'rounds':>6} {'rounds/seq':>10}"
    print(head + "   time")
    begun = time.perf_counter()
    parallel = set(args.parallel.split(","))
    with Pool(args.jobs) as pool:
        for name in args.settings.split(","):
            testbeds = args.testbeds if name in parallel or args.parallel == "all" else 1
            row, wrong = run_setting(SETTINGS[name], args, testbeds, pool)
            show(name, row, args)
            for line in wrong if args.wrong else []:
                print(f"  wrong: {line}")
    print(f"total {time.perf_counter() - begun:.0f} s with {args.jobs} worker processes")
    print("goals: exact >= 95%, wrong <= 1%, median <= 250, p90 <= 500 sessions, rounds/seq <= 0.33")
    print("vs OFAT: median sessions / 1,360; vs 2^16: median trials / 65,536 configurations (one trial each)")


def show(name: str, r: dict[str, float], args: argparse.Namespace) -> None:
    line = (
        f"{name:<11} {r['exact']:>6.1%} {r['wrong']:>6.1%} {r['median']:>7.0f} {r['p90']:>5.0f} {r['trials']:>6.0f}"
        f" {r['median'] / OFAT_SESSIONS:>8.1%} {r['median'] / args.sessions / FACTORIAL:>8.2%}"
    )
    if "ratio" in r:
        line += (
            f" | {'':>{len(str(args.testbeds)) + 10}}{r['par_exact']:>6.1%} {r['par_wrong']:>6.1%}"
            f" {r['par_median']:>6.0f} {r['rounds']:>6.0f} {r['ratio']:>10.2f}"
        )
    print(line + f"   {r['seconds']:.0f}s", flush=True)


if __name__ == "__main__":
    main()
