"""Benchmark: peak memory of `orch report`, `orch export` (CSV, parquet) and `orch compare` on
synthetic 100,000-trial runs, an older checkout beside this one in the same run.

Two runs of tests/helpers/report_synth.py's matrix (8 cells, seeds 1 and 2, laid out as orch
writes them: run.json, plan.json, journal.jsonl) side by side in one reports folder, as tonight's
and last night's are (so `orch compare`'s nightly check of B reads A too). Each command runs in a
fresh process under each checkout, before then after, each on its own copy of the folder (hard
links: one leg's report or summary never serves the other); the process prints its own peak RSS
(VmHWM) as it exits. The outputs of both legs are compared: CSV and the comparison page byte for
byte, parquet read back with pandas and pyarrow, the report page byte for byte.

    python bench/bench_memory.py [--trials 100000] [--before 51da1f7 | --before DIR]
        [--commands report,csv,parquet,compare] [--keep DIR]

--before REV is exported from this repository's history (`git archive REV orchestrator`); a DIR
is a checkout whose `orchestrator` package is imported instead of this one.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checkout import before_tree
from timing import load_line

REPO = Path(__file__).resolve().parent.parent
# main just before the memory fixes merged: the README's figures were measured against d0e5505
# (--before d0e5505), but compare's output changed on purpose between the two (the report's
# interval, incomplete runs named), so "same output" holds only against this one (compare's page
# with its stylesheet aside since 6ed046a added the "NOT restored" box's style to every page)
BASE = "51da1f7"
A_ID, B_ID = "20260509-070000-overlap_ablation", "20260510-070000-overlap_ablation"
COMMANDS = {
    "report": ["report", f"reports/{A_ID}"],
    "csv": ["export", f"reports/{A_ID}", "--format", "csv", "-o", "out.csv"],
    "parquet": ["export", f"reports/{A_ID}", "--format", "parquet", "-o", "out.parquet"],
    "compare": ["compare", f"reports/{A_ID}", f"reports/{B_ID}", "-o", "compare.html"],
}
LABELS = {
    "report": "orch report A",
    "csv": "orch export A --format csv",
    "parquet": "orch export A --format parquet",
    "compare": "orch compare A B",
}
ROW = "{:<32} {:>9} {:>9} {:>12} {:>9} {:>8}  {}"
OUTPUT = {"report": f"reports/{A_ID}/index.html", "csv": "out.csv", "parquet": "out.parquet", "compare": "compare.html"}
# run in each leg's process: orch's own main, then this process's peak RSS on stderr
WRAPPER = """import sys
from orchestrator.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    sys.stderr.write("\\nBENCH_PEAK_KB " + hwm[0] + "\\n")
sys.exit(code)
"""


def make_runs(reports: Path, trials: int) -> None:
    """The two runs (in a child process: 100,000 records in memory take ~1.5 GB)."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    from helpers.report_synth import ALL_OFF, synthetic_run, write_run

    for seed, run_id, started in ((1, A_ID, None), (2, B_ID, "2026-05-10T07:00:00Z")):
        manifest, records = synthetic_run(replicates=max(1, trials // 8), baseline=ALL_OFF, seed=seed, run_id=run_id)
        if started:
            manifest = manifest.model_copy(update={"started": started})
        write_run(reports / run_id, manifest, records, plan_json=True)


def linked_copy(source: Path, target: Path) -> None:
    """The folder's files hard-linked into `target` (the runs are only read; outputs are new files)."""
    for path in source.rglob("*"):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, dest)


def run_leg(tree: Path, argv: list[str], cwd: Path) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one orch command in a fresh process importing `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("BENCH_PEAK_KB ")]
    if done.returncode != 0 or not peak:
        raise SystemExit(f"orch {' '.join(argv)} failed ({tree}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return int(peak[0]) / 1024, wall


def _unstyled(page: bytes) -> bytes:
    """The page without its <style> blocks."""
    return re.sub(rb"<style>.*?</style>", b"", page, flags=re.S)


def _numbers(page: bytes) -> list[bytes]:
    """Every number of the page's visible text, in order (styles, scripts and tags left out, and the
    nightly section's note on how many earlier runs it used: it said the lookback's "up to 7" before
    it said the count, a change of words on purpose, not of what compare read or computed)."""
    text = re.sub(rb"<(style|script)\b.*?</\1>", b"", page, flags=re.S)
    text = re.sub(rb'<p class="note">B checked against .*?</p>', b"", text, flags=re.S)
    text = re.sub(rb"<[^>]*>", b" ", text)
    return re.findall(rb"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", text)


def _same_numbers(old: list[bytes], new: list[bytes]) -> bool:
    """The same numbers, in order, each as the coarser of its two spellings writes it: a p-value
    the page wrote '%.2g' (1, 0.0034) and now writes as the report does (1.000, 0.003) is the same
    number. Exponents (4.5e-05 vs 4e-5) agree to one significant digit."""
    return len(old) == len(new) and all(_same_number(a.decode(), b.decode()) for a, b in zip(old, new, strict=True))


def _same_number(a: str, b: str) -> bool:
    x, y = float(a.replace(",", "")), float(b.replace(",", ""))
    if x == y:
        return True
    if "e" in a + b:
        return abs(x - y) <= 0.5 * 10 ** math.floor(math.log10(max(abs(x), abs(y))))
    places = min(len(a.partition(".")[2]), len(b.partition(".")[2]))
    return round(x, places) == round(y, places)


def same_output(name: str, before: Path, after: Path) -> str:
    """Whether both legs wrote the same thing (parquet: the same data read back)."""
    if name == "compare":  # a page: the shared stylesheet grows with other pages (e.g. 6ed046a's
        # "NOT restored" box), which says nothing of what compare read or computed
        old, new = before.read_bytes(), after.read_bytes()
        if old == new:
            return "same bytes"
        if _unstyled(old) == _unstyled(new):
            return "stylesheet aside, same data"
        # the page's words change between revisions (e.g. "(24 checked)" became "24 cell-metric pairs
        # checked"); what compare read and computed is every number it shows, in order
        return "wording aside, same data" if _same_numbers(_numbers(old), _numbers(new)) else "DIFFERENT"
    if name != "parquet":
        return "same bytes" if before.read_bytes() == after.read_bytes() else "DIFFERENT"
    import pandas as pd
    import pyarrow.parquet as pq

    frames = [pd.read_parquet(p) for p in (before, after)]
    tables = [pq.read_table(p) for p in (before, after)]
    same = frames[0].equals(frames[1]) and tables[0].to_pylist() == tables[1].to_pylist()
    return "same data" if same else "DIFFERENT"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="trials of each run")
    parser.add_argument("--before", default=BASE, help="a revision of this repository, or a checkout folder")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="which of " + ",".join(COMMANDS))
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make_runs(args.make, args.trials)
        return
    names = [c for c in args.commands.split(",") if c]
    unknown = [c for c in names if c not in COMMANDS]
    if unknown:
        parser.error(f"--commands: unknown {', '.join(unknown)} (choose from {', '.join(COMMANDS)})")
    print(load_line())
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        trees = [("before", before_tree(args.before, work)), ("after", REPO)]
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--make", str(work / "runs" / "reports"), "--trials", str(args.trials)],
            check=True,
        )
        size = (work / "runs" / "reports" / A_ID / "journal.jsonl").stat().st_size
        print(
            f"2 runs x {args.trials:,} trials (8 cells; journal {size / 1e6:.0f} MB each) made in "
            f"{time.perf_counter() - start:.0f} s; before = {args.before}, after = this tree"
        )
        print(ROW.format("command", "before MB", "after MB", "before/after", "before s", "after s", "output"))
        for name in names:
            figures = {}
            for leg, tree in trees:
                cwd = work / f"{leg}-{name}"
                linked_copy(work / "runs", cwd)
                figures[leg] = run_leg(tree, COMMANDS[name], cwd)
            (mb_old, s_old), (mb_new, s_new) = figures["before"], figures["after"]
            same = same_output(name, work / f"before-{name}" / OUTPUT[name], work / f"after-{name}" / OUTPUT[name])
            ratio = f"{mb_old / mb_new:.1f}x"
            print(
                ROW.format(LABELS[name], f"{mb_old:.0f}", f"{mb_new:.0f}", ratio, f"{s_old:.1f}", f"{s_new:.1f}", same)
            )


if __name__ == "__main__":
    main()
