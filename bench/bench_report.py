"""Benchmark: build and render the report of a synthetic 100,000-trial run; print time and peak RSS.

Targets (printed, not asserted): render <= 5 s and peak RSS <= 1 GB on 2 cores. Two figures:
in memory (build_report + render_report) and end to end from disk (write_report: stream the
100,000-line journal into compact rows, build, read back the drill-down's full records, render,
write atomically). The from-disk figure runs in a fresh process, so its peak RSS is its own;
--compare also times the way write_report worked before (load_trials: every line validated
into a TrialRecord and held, then build_report).

    /root/venv-orch/bin/python bench/bench_report.py [--trials 100000] [--keep DIR] [--compare]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from helpers.report_synth import ALL_OFF, synthetic_run, write_run  # noqa: E402

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


def from_disk(mode: str, run_dir: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(run_dir)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the run directory here and keep it")
    parser.add_argument("--compare", action="store_true", help="also time the old from-disk path")
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
    manifest, records = synthetic_run(replicates=replicates, baseline=ALL_OFF)
    made = time.perf_counter()
    print(
        f"synthetic run: {len(records):,} trial records ({replicates:,} rounds x 8 cells) "
        f"in {made - start:.1f} s; peak RSS {peak_rss_mb():.0f} MB"
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
        for mode in ["write_report"] + (["old: load_trials+build_report"] if args.compare else []):
            result = from_disk(mode.split(":")[0], run_dir)
            print(
                f"from disk, {mode}: {result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU "
                f"(journal {size / 1e6:.0f} MB, fresh process); peak RSS {result['rss_mb']:.0f} MB"
            )
        if args.keep:
            print(f"report: {run_dir / 'index.html'}")


if __name__ == "__main__":
    main()
