"""Benchmark: what `orch resume` reads from a 100,000-trial journal; print time and peak RSS.

Target (issue 6, printed, not asserted): resume from a 100,000-trial journal <= 1 s. The journal
work on resume is: cut a torn last line (repair_torn_tail), learn which trials are finished
(trial_statuses), and reopen the journal for appending (which refuses a torn tail). Each figure
is measured in a fresh process, so peak RSS is that step's own. --compare also times the old
way (read_journal: every line validated into a TrialRecord), which takes ~10 s.

    /root/venv-orch/bin/python bench/bench_journal.py [--trials 100000] [--compare]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from helpers.report_synth import ALL_OFF, synthetic_run  # noqa: E402

from orchestrator.core.records import EventRecord, Failure, TrialRecord  # noqa: E402
from orchestrator.store.journal import (  # noqa: E402
    Journal,
    read_journal,
    repair_torn_tail,
    trial_statuses,
)

RETRY_EVERY = 50  # one trial in 50 fails once and is retried
INTERRUPTED = 3  # the last trials were cut off by the crash


def write_journal(path: Path, trials: int) -> int:
    """A journal shaped like a crashed 100,000-trial sweep: events, failures with retries,
    interrupted trials at the end and a torn last line. Returns the number of finished trials."""
    _, templates = synthetic_run(replicates=1, baseline=ALL_OFF, failures=False)
    failure = Failure(kind="infrastructure", error="HealthTimeout", message="decode not ready")
    start = EventRecord(run_id=templates[0].run_id, event="run_started", at=templates[0].started)
    lines = [start.model_dump_json()]
    finished = trials - INTERRUPTED
    for trial in range(trials):
        record = templates[trial % len(templates)].model_copy(update={"trial": trial, "round": trial // 8})
        if trial >= finished:
            record = _failed(record, "interrupted", failure.model_copy(update={"kind": "interrupted"}))
        elif trial % RETRY_EVERY == 0:
            lines.append(_failed(record, "failed", failure).model_dump_json())
            record = record.model_copy(update={"attempt": 2})
        lines.append(record.model_dump_json())
    torn = lines[-1][: len(lines[-1]) // 2]
    path.write_text("\n".join(lines) + "\n" + torn, encoding="utf-8")
    return finished


def _failed(record: TrialRecord, status: str, failure: Failure) -> TrialRecord:
    return record.model_copy(update={"status": status, "failure": failure, "metrics": {}})


def child(mode: str, path: Path) -> None:
    """One measured step in this (fresh) process; prints a JSON line."""
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "resume":
        repaired = repair_torn_tail(path)
        statuses = trial_statuses(path)
        Journal(path).close()  # what the runner does before its first append
        finished, extra = len(statuses.finished), f"repaired torn tail: {repaired}"
    elif mode == "statuses":
        statuses = trial_statuses(path)
        finished = len(statuses.finished)
        extra = f"interrupted {len(statuses.interrupted)}, torn tail {statuses.torn_tail}"
    else:  # the old way: every record validated, then the same answer
        records = read_journal(path).records
        finished = len({r.trial for r in records if isinstance(r, TrialRecord) and r.status in ("completed", "failed")})
        extra = "read_journal"
    print(
        json.dumps(
            {
                "mode": mode,
                "wall": time.perf_counter() - start,
                "cpu": time.process_time() - cpu,
                "rss_mb": peak_rss_mb(),
                "finished": finished,
                "extra": extra,
            }
        )
    )


def peak_rss_mb() -> float:
    """This process's peak RSS. Not getrusage: on Linux a child's ru_maxrss starts from its
    parent's at fork, so it would report the parent's (journal-writing) peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(mode: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--compare", action="store_true", help="also time read_journal (~10 s)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return

    print(
        "load average: {:.2f} {:.2f} {:.2f} on {} cores (a busy machine inflates every figure)".format(
            *os.getloadavg(), os.cpu_count()
        )
    )
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "journal.jsonl"
        made = time.perf_counter()
        expected = write_journal(path, args.trials)
        print(
            f"journal: {args.trials:,} trials, {path.stat().st_size / 1e6:.0f} MB, torn last line "
            f"(written in {time.perf_counter() - made:.1f} s)"
        )
        modes = ["statuses", "resume"] + (["read_journal"] if args.compare else [])
        for mode in modes:
            if mode == "resume":  # the torn tail is cut by this step: measure on a copy
                copy = path.with_name("resume.jsonl")
                copy.write_bytes(path.read_bytes())
                result = measure(mode, copy)
            else:
                result = measure(mode, path)
            ok = "ok" if result["finished"] == expected else f"WRONG (expected {expected})"
            print(
                f"{mode:>12}: {result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU, peak RSS "
                f"{result['rss_mb']:.0f} MB (whole process); {result['finished']:,} finished {ok}; "
                f"{result['extra']}"
            )
    print("target: resume <= 1 s for 100,000 trials")


if __name__ == "__main__":
    main()
