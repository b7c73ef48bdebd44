"""Benchmark: the controller signalled at random moments of a real sweep on the simulator; does
every promise hold after every kill? (tests/helpers/killpoints.py)

Each iteration: a fresh private simulated testbed (free loopback ports, its own env files), `orch
run` of 2 factors x 2 levels x 2 replicates (8 trials, a 6-session repro), signalled from inside
(helpers/killtrace.py) a seeded random delay after a seeded start of one phase: the target phases
take turns (start-up, backup, env writes, restarts, health waits, repro, log collection,
journaling, the final restore, the report, a status.json write), the signal is SIGKILL (3 in 5),
SIGTERM or SIGINT twice (--signals: one for all); then `orch status` and `orch restore RUN_DIR`
or `orch resume RUN_DIR` (seeded), and the checks of killpoints.py. Prints one line per
iteration and, per phase the first signal landed in, the kills and the promises held or broken.
A broken one keeps its testbed folder under --keep (seed, delay and run folder: `--only SEED`
replays it).

    nice python bench/bench_kill_points.py [--n 40] [--seed 0] [--signals TERM] [--keep /tmp/killpoints-broken]

--kill-way-back resume|restore signals the way back instead: the run (4 trials) is SIGKILLed in a
trial's repro, then `orch resume RUN_DIR` or `orch restore RUN_DIR` is signalled at a seeded moment
of one of its phases, `orch status` must name the way back while anything is left, and the same
command run again must keep every promise. --command hunt signals `orch hunt` (4 suspects, ~18
trials) at a moment drawn from an unsignalled reference hunt's marks, then `orch resume` must end
it with the reference's trials (tests/helpers/killmore.py). --command queue signals `orch queue
run` of 2 small sweeps (4 trials each, the queue in the bed's reports folder) at a moment drawn
from an unsignalled reference queue's marks (a claim, an item's start, trials, final restore and
report, between a sweep's end and the queue's record of it, between items), checks what `orch
queue list` and `orch status` say, then runs the queue again: every item completed exactly once
with the reference's trials, hosts restored (tests/helpers/killqueue.py).

    nice python bench/bench_kill_points.py --command queue --n 30 --seed 600
    nice python bench/bench_kill_points.py --command queue --at locked:1:0:KILL   # one named point

Measured: see bench/README.md ("bench_kill_points.py").
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the simulated testbed and the checks shared with the tests

from helpers.killmore import draw_hunt, draw_way_back, reference_hunt, run_hunt_once, run_way_back_once  # noqa: E402
from helpers.killpoints import PHASES, KillPoint, Outcome, run_once  # noqa: E402
from helpers.killqueue import reference_queue, run_queue_once  # noqa: E402
from timing import load_line  # noqa: E402


def points(n: int, seed: int, only: int | None, signals: str | None = None) -> list[KillPoint]:
    """n kill points, the target phase taking turns so each phase is aimed at n/len(PHASES) times;
    `signals` (e.g. "TERM") sends that at every point instead of the drawn one."""
    if only is not None:
        return [KillPoint.draw(only, list(PHASES)[only % len(PHASES)], signals)]
    return [KillPoint.draw(seed + i, list(PHASES)[(seed + i) % len(PHASES)], signals) for i in range(n)]


def line(i: int, out: Outcome, seconds: float) -> str:
    p = out.point
    verdict = "held" if not out.violations else "BROKEN: " + " | ".join(out.violations)
    where = f"{p.target}#{p.nth}+{p.delay:.4f}s"
    return (
        f"{i:3d} seed {p.seed:4d} {where:24s} {p.signals:16s} -> {out.landed:13s} "
        f"exit {out.exit_code!s:4s} {p.way_back:7s} {seconds:5.1f}s {verdict}"
        + (f" (kept {out.kept})" if out.kept else "")
    )


def table(outcomes: list[Outcome]) -> str:
    kills, held = Counter[str](), Counter[str]()
    for out in outcomes:
        kills[out.landed] += 1
        held[out.landed] += not out.violations
    rows = [f"{'landed in':14s} {'kills':>5s} {'held':>5s} {'broken':>6s}"]
    for phase in sorted(kills):
        rows.append(f"{phase:14s} {kills[phase]:5d} {held[phase]:5d} {kills[phase] - held[phase]:6d}")
    total = sum(kills.values())
    rows.append(f"{'all':14s} {total:5d} {sum(held.values()):5d} {total - sum(held.values()):6d}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="iterations (kill points)")
    ap.add_argument("--seed", type=int, default=0, help="the first iteration's seed (the next ones count up)")
    ap.add_argument("--only", type=int, help="replay the one iteration of this seed")
    ap.add_argument("--signals", help="send this at every point (TERM, KILL, INT+INT@0.3), not the drawn one")
    ap.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "killpoints-broken")
    ap.add_argument(
        "--kill-way-back",
        choices=("resume", "restore"),
        help="signal this way back instead (the run SIGKILLed in a trial first), then run it again",
    )
    ap.add_argument(
        "--command", choices=("run", "hunt", "queue"), default="run", help="signal `orch run`, `hunt` or `queue run`"
    )
    ap.add_argument(
        "--at",
        help="with --command queue: this one point, TARGET:NTH:DELAY:SIGNALS (e.g. locked:1:0:KILL; "
        "targets are the trace's marks), not a drawn one",
    )
    args = ap.parse_args(argv)
    if args.at and args.command != "queue":
        ap.error("--at is for --command queue")
    if args.kill_way_back and args.command != "run":
        ap.error(f"--kill-way-back signals the way back of `orch run`: not with --command {args.command}")
    print(load_line(), flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="killpoints-") as root:
        for i, once in enumerate(iterations(args, Path(root))):
            t0 = time.monotonic()
            out = once()
            outcomes.append(out)
            print(line(i, out, time.monotonic() - t0), flush=True)
    print(table(outcomes))
    print(load_line())
    return 0


def iterations(args: argparse.Namespace, root: Path) -> Iterator[Callable[[], Outcome]]:
    """Each seed's kill point, ready to run: `orch run` signalled, its way back signalled, or a hunt."""
    seeds = [args.only] if args.only is not None else range(args.seed, args.seed + args.n)
    if args.kill_way_back:
        for seed in seeds:
            first, point = draw_way_back(seed, args.kill_way_back, args.signals)
            yield functools.partial(run_way_back_once, root, first, point, args.keep)
    elif args.command == "hunt":
        ref = reference_hunt(root)
        print(f"reference hunt: {len(ref.trials)} trials", flush=True)
        for seed in seeds:
            point = draw_hunt(seed, ref, args.signals)
            yield functools.partial(run_hunt_once, root, point, ref, args.keep)
    elif args.command == "queue":
        queue_ref = reference_queue(root)
        print(f"reference queue: {sum(map(len, queue_ref.trials.values()))} trials, exit {queue_ref.exit_code}")
        drawn = [queue_ref.draw(seed, args.signals) for seed in seeds] if not args.at else [at_point(args.at)]
        for point in drawn:
            yield functools.partial(run_queue_once, root, point, queue_ref, args.keep)
    else:
        for point in points(args.n, args.seed, args.only, args.signals):
            yield functools.partial(run_once, root, point, keep=args.keep)


def at_point(text: str) -> KillPoint:
    """`--at TARGET:NTH:DELAY:SIGNALS`: a point named, not drawn (a moment no drawn target reaches,
    such as `locked`, the testbed locked before the run folder is made)."""
    try:
        target, nth, delay, signals = text.split(":", 3)
        return KillPoint(0, target, int(nth), float(delay), signals, "queue")
    except ValueError:
        raise SystemExit(f"--at {text!r}: not TARGET:NTH:DELAY:SIGNALS (e.g. locked:1:0:KILL)") from None


if __name__ == "__main__":
    sys.exit(main())
