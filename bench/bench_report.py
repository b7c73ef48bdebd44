"""Benchmark: build and render the report of a synthetic 100,000-trial run; print time and peak RSS.

Targets (printed, not asserted): render <= 5 s and peak RSS <= 1 GB on 2 cores. Two figures:
in memory (build_report + render_report) and end to end from disk (write_report: parse the
100,000-line journal with orchestrator.journal, build, render, write atomically).

    /root/venv-orch/bin/python bench/bench_report.py [--trials 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from report_synth import ALL_OFF, synthetic_run, write_run  # noqa: E402

from orchestrator.render import render_report, write_report  # noqa: E402
from orchestrator.report import build_report  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the run directory here and keep it")
    args = parser.parse_args()

    replicates = max(1, args.trials // 8)
    start = time.perf_counter()
    manifest, records = synthetic_run(replicates=replicates, baseline=ALL_OFF)
    made = time.perf_counter()
    print(f"synthetic run: {len(records):,} trial records ({replicates:,} rounds x 8 cells) "
          f"in {made - start:.1f} s; peak RSS {peak_rss_mb():.0f} MB")

    t0 = time.perf_counter()
    report = build_report(manifest, records)
    t1 = time.perf_counter()
    html = render_report(report)
    t2 = time.perf_counter()
    print(f"in memory: build_report {t1 - t0:.2f} s + render_report {t2 - t1:.2f} s = "
          f"{t2 - t0:.2f} s; page {len(html) / 1e6:.1f} MB, {len(report.trials):,} trials in the "
          f"drill-down; peak RSS {peak_rss_mb():.0f} MB")
    print("headline:", report.headline[0].text if report.headline else "(none)")
    del html, report

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = write_run((args.keep or Path(scratch)) / manifest.run_id, manifest, records)
        del records
        t3 = time.perf_counter()
        path = write_report(run_dir)
        t4 = time.perf_counter()
        size = (run_dir / "journal.jsonl").stat().st_size
        print(f"from disk: write_report {t4 - t3:.2f} s (journal {size / 1e6:.0f} MB) -> {path}; "
              f"peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
