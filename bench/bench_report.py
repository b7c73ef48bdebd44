"""Benchmark: build and render the report of a synthetic 100,000-trial run; print time and peak RSS.

Targets (printed, not asserted): render <= 5 s and peak RSS <= 1 GB on 2 cores. Two figures:
in memory (build_report + render_report) and end to end from disk (write_report: stream the
100,000-line journal into compact rows, build, read back the drill-down's full records, render,
write atomically). The from-disk figure runs in a fresh process, so its peak RSS is its own;
--compare also times the way write_report worked before (load_trials: every line validated
into a TrialRecord and held, then build_report); --before DIR times write_report of another
checkout (its orchestrator first on PYTHONPATH) on the same run, taking turns with this one.
--icc makes the trials of each cell vary (beta-binomial): every cell with events overdispersed,
the homogeneity test's costliest case (each p at its floor, every table drawn).

    /root/venv-orch/bin/python bench/bench_report.py [--trials 100000] [--keep DIR] [--compare]
        [--before DIR] [--repeat 1] [--icc 0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

import numpy as np  # noqa: E402
from helpers.report_synth import ALL_OFF, corruption_rate, synthetic_run, write_run  # noqa: E402

from orchestrator.report.build import build_report  # noqa: E402
from orchestrator.report.render import render_report, write_report  # noqa: E402
from orchestrator.store.atomic import write_text_atomic  # noqa: E402
from orchestrator.store.journal import load_trials  # noqa: E402
from orchestrator.store.manifest import load_manifest  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def own_peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). A child's ru_maxrss starts from its parent's at
    fork on Linux, so it would report the parent's peak (the synthetic run in memory)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(mode: str, run_dir: Path) -> None:
    """One end-to-end render in this fresh process; prints a JSON line."""
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "write_report":
        write_report(run_dir)
    else:  # the old way: every record validated and held, then build + render
        trials, torn = load_trials(run_dir)
        html = render_report(build_report(load_manifest(run_dir), trials, torn_tail=torn))
        write_text_atomic(run_dir / "index-old.html", html)
    print(
        json.dumps({"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu, "rss_mb": own_peak_rss_mb()})
    )


def from_disk(mode: str, run_dir: Path, before: Path | None = None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(before)} if before else None
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(run_dir)], check=True, capture_output=True, text=True, env=env
    ).stdout
    return json.loads(out.splitlines()[-1])


def varying(icc: float, seed: int = 7) -> Callable[[dict[str, str]], float]:
    """corruption_rate with each trial's rate drawn from a beta of that mean and intra-trial correlation icc."""
    rng = np.random.default_rng(seed)

    def rate(levels: dict[str, str]) -> float:
        mean = corruption_rate(levels)
        return float(rng.beta(mean * (1 - icc) / icc, (1 - mean) * (1 - icc) / icc)) if 0 < mean < 1 else mean

    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the run directory here and keep it")
    parser.add_argument("--compare", action="store_true", help="also time the old from-disk path")
    parser.add_argument("--before", type=Path, help="another checkout: also time its write_report, taking turns")
    parser.add_argument("--repeat", type=int, default=1, help="from-disk renders of each tree, taking turns")
    parser.add_argument("--icc", type=float, default=0.0, help="trial-to-trial variation (beta-binomial ICC)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "RUN_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    print(
        "load average: {:.2f} {:.2f} {:.2f} on {} cores (a busy machine inflates every figure)".format(
            *os.getloadavg(), os.cpu_count()
        )
    )

    replicates = max(1, args.trials // 8)
    start = time.perf_counter()
    rate = varying(args.icc) if args.icc else corruption_rate
    manifest, records = synthetic_run(replicates=replicates, baseline=ALL_OFF, rate=rate)
    made = time.perf_counter()
    varied = f", trials varying (ICC {args.icc})" if args.icc else ""
    print(
        f"synthetic run: {len(records):,} trial records ({replicates:,} rounds x 8 cells) "
        f"in {made - start:.1f} s{varied}; peak RSS {peak_rss_mb():.0f} MB"
    )

    t0 = time.perf_counter()
    report = build_report(manifest, records)
    t1 = time.perf_counter()
    html = render_report(report)
    t2 = time.perf_counter()
    print(
        f"in memory: build_report {t1 - t0:.2f} s + render_report {t2 - t1:.2f} s = "
        f"{t2 - t0:.2f} s; page {len(html) / 1e6:.1f} MB, {len(report.trials):,} trials in the "
        f"drill-down; peak RSS {peak_rss_mb():.0f} MB"
    )
    print("headline:", report.headline[0].text if report.headline else "(none)")
    del html, report

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = write_run((args.keep or Path(scratch)) / manifest.run_id, manifest, records)
        del records
        size = (run_dir / "journal.jsonl").stat().st_size
        legs = [("write_report", "write_report", None)]
        legs += [("old: load_trials+build_report", "old", None)] if args.compare else []
        legs += [(f"write_report of {args.before}", "write_report", args.before)] if args.before else []
        for _ in range(args.repeat):
            for label, mode, tree in legs:
                result = from_disk(mode, run_dir, tree)
                print(
                    f"from disk, {label}: {result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU "
                    f"(journal {size / 1e6:.0f} MB, fresh process); peak RSS {result['rss_mb']:.0f} MB",
                    flush=True,
                )
        if args.keep:
            print(f"report: {run_dir / 'index.html'}")


if __name__ == "__main__":
    main()
