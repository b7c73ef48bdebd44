"""Benchmark: how long a fresh `orch` (or simulator) process takes before it does anything.

The test suite starts over a thousand processes: `orch` commands, the simulated servers and the
repro clients. Each path below is one fresh interpreter (`python -c ...`), timed from spawn to
exit; printed is the median of N starts per path (the paths take turns, so a change in the
machine's load falls on all of them), and the ratio of the eager import set to it. The eager set
is what every `orch` start imported before the CLI imported lazily: the modules cli.main
imported at its top (the sweep API with pydantic, YAML, numpy and httpx; rich; cli.output,
cli.hunt, cli.team), then the parser built. One path does more than start: `orch report` on a
small finished run (16 trials; a rate and two numbers), the render every sweep ends with; most
of its time is imports too. With --before DIR the same paths also run on another
checkout (PYTHONPATH=DIR), e.g. the commit before the change, side by side.

    python bench/bench_startup.py [--starts 15] [--before /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import load_line

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from helpers.report_synth import synthetic_run, write_run  # noqa: E402

EAGER = (
    "import orchestrator.cli.main as m, orchestrator.sweep.api, orchestrator.core.config, "
    "orchestrator.cli.output, orchestrator.cli.hunt, orchestrator.cli.team, orchestrator.sweep.progress, "
    "orchestrator.sweep.signals, rich.markup\n"
    "m.build_parser()"
)

MATRIX = """\
name: startup
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 1
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4 --rounds 1 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def orch(*argv: str) -> str:
    """Python that runs `orch ARGV` (its output thrown away) and fails unless it exits 0."""
    return (
        "import contextlib, io, sys\n"
        "from orchestrator.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        code = main({list(argv)!r})\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        "sys.exit(code)\n"
    )


def finished_run(folder: Path) -> Path:
    """A finished run of 8 cells x 2 rounds with a failure rate and two number metrics (the
    report tests' synthetic run): what `orch report` renders at the end of such a sweep."""
    manifest, records = synthetic_run()
    return write_run(folder / manifest.run_id, manifest, records)


def paths(matrix: Path, run: Path) -> list[tuple[str, str]]:
    given = (str(matrix), "-i", str(REPO / "inventory" / "local.yaml"))
    reports = matrix.parent / "reports"  # an empty reports folder (a missing one is refused: exit 2)
    reports.mkdir(exist_ok=True)
    return [
        ("python -c pass (the floor)", "pass"),
        ("eager import set (old orch start)", EAGER),
        ("orch --help", orch("--help")),
        ("orch validate (2 cells, no gates)", orch("validate", *given)),
        ("orch plan (2 cells)", orch("plan", *given)),
        ("orch status", orch("status", "--reports", str(reports))),
        ("orch report (16 trials, 3 metrics)", orch("report", str(run))),
        ("import orchestrator.sim.server", "import orchestrator.sim.server"),
        ("import orchestrator.sim.repro", "import orchestrator.sim.repro"),
    ]


def start(code: str, tree: Path, cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}) on {tree}: {code!r}\n{done.stdout}{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=15, help="fresh interpreters per path (median of N)")
    parser.add_argument("--before", type=Path, help="another checkout to time the same paths on, side by side")
    args = parser.parse_args()
    print(load_line())
    trees = [("after", REPO)] + ([("before", args.before.resolve())] if args.before else [])
    for _, tree in trees:  # bytecode for both, or a tree without it (PYTHONDONTWRITEBYTECODE) compiles at every start
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "orchestrator")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    with tempfile.TemporaryDirectory() as tmp:
        matrix = Path(tmp) / "m.yaml"
        matrix.write_text(MATRIX)
        cases = paths(matrix, finished_run(Path(tmp) / "runs"))
        times: dict[tuple[str, str], list[float]] = {(t, name): [] for t, _ in trees for name, _ in cases}
        for _ in range(args.starts):  # round robin: each path sees the same load over the run
            for t, tree in trees:
                for name, code in cases:
                    times[(t, name)].append(start(code, tree, Path(tmp)))
    median = {key: statistics.median(v) for key, v in times.items()}
    print(f"median of {args.starts} fresh interpreter starts, seconds from spawn to exit")
    head = f"{'path':<36}" + "".join(f" {t:>8}" for t, _ in trees) + "  eager/path"
    print(head + ("  before/after" if args.before else ""))
    eager = median[("after", cases[1][0])]
    for name, _ in cases:
        row = f"{name:<36}" + "".join(f" {median[(t, name)]:>7.3f}s" for t, _ in trees)
        row += f"  {eager / median[('after', name)]:>9.1f}x"
        if args.before:
            row += f"  {median[('before', name)] / median[('after', name)]:>11.1f}x"
        print(row)


if __name__ == "__main__":
    main()
