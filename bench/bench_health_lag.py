"""Benchmark: health detection lag - a simulated server turns ready -> orch's wait_ready sees it.

    /root/venv-orch/bin/python bench/bench_health_lag.py [--restarts 30] [--warmup 0.5:1.5]

Restarts one simulated decode server N times through orch's own LocalServiceManager, exactly as
the runner does: restart, then health.wait_ready on /health with the runner's check_alive
between polls. The server logs "ready" (with its own microsecond timestamp) at the moment its
/health turns 200; the lag is the time wait_ready returned minus that timestamp. The server's
/get_server_info carries no ready time (it answers before warm-up ends), so the log line is the
ground truth. Each restart draws its warm-up at random from --warmup, so the moment the server
turns ready falls anywhere in orch's poll schedule rather than always at the same phase.

Two schedules, alternating restart by restart in one run: "first restart" (no earlier waits:
20 ms backing off to 100 ms) and "learned" (what the runner passes from the 2nd restart of a
unit on: the quickest and slowest of its last 5 waits, polled every 20 ms in between). With
random warm-ups the learned window is wide; a real unit that restarts in about the same time
each trial gets a narrow one (try --warmup 1:1.1).

Goal (printed, never asserted): median lag <= 0.1 s.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from orchestrator.edges.health import HealthCheck, wait_ready
from orchestrator.edges.services.local import LocalServiceManager, LocalUnit

READY = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[\w+\] ready\s*$", re.M)
UNIT = "lag-decode"


class BenchError(RuntimeError):
    """The benchmark could not measure what it ran."""


@dataclass(frozen=True)
class Lag:
    warmup_s: float
    waited_s: float  # what wait_ready returned
    lag_s: float  # wait_ready returned - the server's "ready" timestamp
    learned: bool  # polled with the runner's window from earlier waits


def ready_times(log: str) -> list[float]:
    """Epoch seconds of every "ready" line of a simulator log, in order."""
    return [datetime.fromisoformat(m.group(1) + "+00:00").timestamp() for m in READY.finditer(log)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q) - 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_text(mgr: LocalServiceManager) -> str:
    path = mgr.log_path(UNIT)
    return path.read_text(errors="replace") if path.exists() else ""


def measure_one(
    mgr: LocalServiceManager,
    env_file: Path,
    url: str,
    client: httpx.Client,
    warmup_s: float,
    expected: tuple[float, float] | None,
) -> Lag:
    env_file.write_text(f"SIM_WARMUP_S={warmup_s:.3f}\nSIM_SEED=7\n")
    before = len(ready_times(_log_text(mgr)))
    since = time.time()
    mgr.restart(UNIT)
    waited = wait_ready(
        HealthCheck("decode", url, 60.0, expected), client=client, check_alive=lambda: mgr.check_alive(UNIT, since)
    )
    seen = time.time()
    ready = _new_ready_line(mgr, before)
    return Lag(warmup_s, waited, seen - ready, expected is not None)


def _new_ready_line(mgr: LocalServiceManager, before: int) -> float:
    """The "ready" line of this start. /health can turn 200 a hair before the timer thread has
    written the line, so allow it a moment to appear."""
    deadline = time.monotonic() + 2.0
    while True:
        times = ready_times(_log_text(mgr))
        if len(times) > before:
            return times[before]
        if time.monotonic() > deadline:
            raise BenchError(f"{mgr.log_path(UNIT)}: no new 'ready' line after the server answered 200")
        time.sleep(0.01)


def run(restarts: int, warmup: tuple[float, float], seed: int, workdir: Path) -> list[Lag]:
    port = free_port()
    env_file = workdir / "decode.env"
    env_file.write_text("SIM_WARMUP_S=0.1\n")
    unit = LocalUnit(
        UNIT, (sys.executable, "-m", "orchestrator.sim.server", "--role", "decode", "--port", str(port)), env_file
    )
    mgr = LocalServiceManager({UNIT: unit}, workdir / "state")
    rng = random.Random(seed)
    url = f"http://127.0.0.1:{port}/health"
    lags: list[Lag] = []
    waits: deque[float] = deque(maxlen=5)  # as Runner.ready_waits
    try:
        with httpx.Client(timeout=2.0, trust_env=False) as client:  # as the runner's client
            for i in range(restarts):
                expected = (min(waits), max(waits)) if waits and i % 2 else None
                lags.append(measure_one(mgr, env_file, url, client, rng.uniform(*warmup), expected))
                waits.append(lags[-1].waited_s)
    finally:
        mgr.stop_all()
    return lags


def parse_warmup(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    lo, hi = float(low), float(high or low)
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX seconds with 0 <= MIN <= MAX, got {text!r}")
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--restarts", type=int, default=30)
    p.add_argument("--warmup", type=parse_warmup, default=(0.5, 1.5), help="MIN:MAX seconds (default 0.5:1.5)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.restarts < 1:
        p.error("--restarts must be >= 1")
    workdir = Path(tempfile.mkdtemp(prefix="orch-bench-lag-"))
    t0 = time.monotonic()
    try:
        lags = run(args.restarts, args.warmup, args.seed, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{len(lags)} restarts of a simulated decode server (warm-up {args.warmup[0]:g}-{args.warmup[1]:g} s) "
        f"in {time.monotonic() - t0:.1f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    medians = {}
    for learned, label in ((False, "first restart"), (True, "learned window")):
        values = [lag.lag_s for lag in lags if lag.learned == learned]
        if not values:
            continue
        medians[learned] = statistics.median(values)
        print(
            f"health detection lag, {label} ({len(values)}): median {medians[learned]:.3f} s, "
            f"p90 {percentile(values, 90):.3f} s, min {min(values):.3f} s, max {max(values):.3f} s "
            "(goal: median <= 0.1 s)"
        )
    if len(medians) == 2 and medians[False] > 0:
        print(f"learned / first-restart median lag: {medians[True] / medians[False]:.2f}")
    print(f"wait_ready returned after median {statistics.median(lag.waited_s for lag in lags):.3f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench_health_lag: {exc}", file=sys.stderr)
        sys.exit(1)
