"""Benchmark: a runs index view of `orch serve` (GET / and /api/runs) over N run folders, read whole
on every view (before: what write_index still does) beside report.site.EntryCache (after: a run
folder is read again only when a file it was read from changed, or its controller died).

The folders are copies of one small finished run (run.json, journal, summary.json newer than its
inputs: what tests/team/test_runs_index_bounds.py makes), aged past SETTLE_NS before the views, as
runs of past nights are. Each round times, before and after on the same folder: the first view
(an empty cache), a second view, a view after one run's summary.json is written again, after a
run folder is added, after one is removed, and a second /api/runs. Every cached page is checked
equal to the uncached one. Printed: the median of the rounds per step, and before/after; then the
memory a view leaves held (tracemalloc, per run folder): every entry with its series (before: what
the EntryCache held, ~35 KB a run) beside the EntryCache after a view (series only of the runs a
trend draws: report.site.SeriesWindow).

    python bench/bench_index.py [--runs 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from timing import load_line

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from helpers.report_synth import synthetic_run, write_run  # noqa: E402

from orchestrator.report.render import fresh_summary, write_report_and_summary  # noqa: E402
from orchestrator.report.site import SETTLE_NS, EntryCache, index_page, run_entries  # noqa: E402
from orchestrator.team.serve import runs_page  # noqa: E402

KEPT = ("run.json", "journal.jsonl", "summary.json")
STEPS = ("first view", "second view", "one summary.json changed", "one run added", "one run removed", "/api/runs again")


def make_runs(root: Path, n: int) -> tuple[Path, Path]:
    """(reports folder of n runs, the seed run they copy)."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    seed = write_run(root / "seed" / manifest.run_id, manifest, records)
    write_report_and_summary(seed)
    reports = root / "reports"
    for i in range(n):
        copy(seed, reports / f"20260509-{i:06d}-x")
    return reports, seed


def copy(seed: Path, run: Path) -> None:
    run.mkdir(parents=True)
    for name in KEPT:
        shutil.copy2(seed / name, run / name)


def timed(work: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = work()
    return time.perf_counter() - t0, out


def one_round(reports: Path, seed: Path, extra: str, after_first: bool) -> dict[str, tuple[float, float]]:
    """before and after seconds of each step, on the same folder, after each change (`after_first`:
    the cached view first; the rounds take turns, so what one view leaves to the other falls on both)."""
    cache = EntryCache()
    changes: dict[str, Callable[[], object]] = {
        "first view": lambda: None,
        "second view": lambda: None,
        "one summary.json changed": lambda: (reports / "20260509-000000-x" / "summary.json").write_bytes(
            (seed / "summary.json").read_bytes()
        ),
        "one run added": lambda: copy(seed, reports / extra),
        "one run removed": lambda: shutil.rmtree(reports / extra),
    }
    out = {}
    for step, change in changes.items():
        change()
        if after_first:
            after, cached = timed(lambda: index_page(reports, fresh_summary, cache))
        before, page = timed(lambda: index_page(reports, fresh_summary))
        if not after_first:
            after, cached = timed(lambda: index_page(reports, fresh_summary, cache))
        assert cached == page, step  # never a stale page
        out[step] = (before, after)
    before, _ = timed(lambda: runs_page(reports))
    after, _ = timed(lambda: runs_page(reports, cache=cache))
    out["/api/runs again"] = (before, after)
    return out


def held(make: Callable[[], object]) -> int:
    """Bytes what make() returns holds once made (tracemalloc, garbage collected)."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        kept = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - start if kept is not None else 0
    finally:
        tracemalloc.stop()


def memory(reports: Path, n: int) -> None:
    def viewed() -> EntryCache:
        cache = EntryCache()
        index_page(reports, fresh_summary, cache)
        return cache

    before = held(lambda: run_entries(reports, fresh_summary))
    after = held(viewed)
    kb = before / n / 1e3
    print(f"held after a view of {n} runs: all series {before / 1e6:.1f} MB ({kb:.1f} KB a run), ", end="")
    print(f"EntryCache {after / 1e6:.1f} MB ({after / n / 1e3:.1f} KB a run); before/after {before / after:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(load_line())
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        reports, seed = make_runs(Path(tmp), args.runs)
        index_page(seed.parent, fresh_summary)  # imports, templates: not the views' cost
        time.sleep(SETTLE_NS / 1e9 + 0.2)  # runs of past nights: settled
        rounds = [one_round(reports, seed, f"20260510-{r:06d}-added", r % 2 == 1) for r in range(args.rounds)]
        memory(reports, args.runs)
    print(f"{args.runs} run folders, median of {args.rounds} round(s); seconds per view")
    print(f"{'step':<28}{'before':>10}{'after':>10}{'before/after':>14}")
    for step in STEPS:
        before = statistics.median(r[step][0] for r in rounds)
        after = statistics.median(r[step][1] for r in rounds)
        print(f"{step:<28}{before:>10.3f}{after:>10.3f}{before / after:>13.1f}x")


if __name__ == "__main__":
    main()
