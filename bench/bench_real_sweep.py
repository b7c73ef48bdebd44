"""Random sweeps on the REAL testbed (systemd 252 + OpenSSH), checked against the model sweep's model.

bench_model_sweep checks random sweeps on the fakes, whose units get their env from orch's own
env-file reader: what systemd's EnvironmentFile= (or bash's `set -a; . FILE`) really hands the
process was never compared with the model for random values. Here it is: the testbed boots once;
each seed draws (a stream of its own, with tests/helpers/modelsweep's value and file draws) a
small sweep (1-2 factors over decode and/or prefill, replicates 1) on `dsv4-pd` (systemd dialect)
or `dsv4-pd-shell` (decode in the shell dialect), writes each host's env file as a drawn original
(CRLF, a BOM, duplicates, no final newline, values with blanks, quotes, #, =, $HOME, \\, tabs),
restarts its unit on it, runs `orch run` through the CLI with collectors that save each trial's
/proc/PID/environ on the host, and checks: the units run on the original as the model reads it;
every trial's live env holds exactly the cell's settings per the model (a removed key absent,
every other original key as the original gives it); the env files are byte-identical after the
run; nothing of orch's is left beside them. Prints seeds, trials checked, problems, seconds.

    nice python bench/bench_real_sweep.py --first 0 --count 3
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the model, the testbed, the checks shared with the tests

from helpers import realsweep as rs  # noqa: E402
from testbed.fixture import boot_testbed, shutdown  # noqa: E402
from timing import load_line  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--count", type=int, default=3, help="seeds to run")
    parser.add_argument("--minutes", type=float, default=0, help="stop starting seeds after this long (0: never)")
    args = parser.parse_args()
    lab = Path(tempfile.mkdtemp(prefix="realsweep-lab-"))
    t0 = time.perf_counter()
    tb = boot_testbed(lab)
    print(f"testbed booted in {time.perf_counter() - t0:.1f} s", flush=True)
    broken: list[rs.Real] = []
    drew: collections.Counter[str] = collections.Counter()
    done = trials = 0
    try:
        for seed in range(args.first, args.first + args.count):
            if args.minutes and time.perf_counter() - t0 > args.minutes * 60:
                break
            real = rs.draw(seed)
            s0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    rs.check(tb, real, Path(tmp))
                except Exception as exc:  # noqa: BLE001 - a crash is a finding too
                    real.problems.append(f"{type(exc).__name__}: {str(exc)[:800]}")
            done, trials = done + 1, trials + real.trials
            drew.update(rs.features(real))
            status = "ok" if not real.problems else f"BROKE: {real.problems[0][:400]}"
            took = time.perf_counter() - s0
            print(
                f"  seed {seed} {real.testbed} {len(real.sc.factors)}f {real.trials} trials {took:.1f} s {status}",
                flush=True,
            )
            if real.problems:
                broken.append(real)
        rs.restore_testbed(tb)
    finally:
        shutdown(tb)
        shutil.rmtree(lab, ignore_errors=True)
    wall = time.perf_counter() - t0
    print(load_line())
    print(f"seeds {args.first}..{args.first + done - 1}: {done} run, {len(broken)} broke; trials checked {trials}")
    print(f"wall {wall:.1f} s (boot and teardown included; {wall / max(done, 1):.1f} s a seed)")
    print("drew: " + ", ".join(f"{k} {v}" for k, v in sorted(drew.items())))
    for real in broken:
        print(f"  seed {real.seed} ({real.testbed}):")
        for p in real.problems[:6]:
            print(f"    {p[:1200]}")
        print("    matrix: " + json.dumps(rs.matrix_text(real))[:1500])
        for role in rs.ROLES:
            print(f"    {role} original: {real.sc.originals[role].render()!r}")


if __name__ == "__main__":
    main()
