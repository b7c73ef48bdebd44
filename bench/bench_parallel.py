"""Parallel testbeds: trials per hour with N simulated testbeds vs one, measured side by side.

Builds an inventory of N copies of the simulated PD deployment (free ports, private env files),
runs the same sweep with `-t tb1` and with `-t tb1,...,tbN`, and prints the wall time, trials
per hour and the speed-up. The issue's goal: 4 testbeds give >= 3.5x the trials per hour of one.

    python bench/bench_parallel.py [--testbeds 4] [--trials 16] [--warmup 1.0] [--sessions 10]

What bounds the speed-up here: each trial waits on a server warm-up (a sleep, as a real server's
load time is), then runs the repro (CPU). On 2 cores, N repros at once share the CPU, so the
speed-up approaches N only while warm-up dominates the trial.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

MATRIX = """\
name: bench-parallel
factors:
  cuda_graph:
    levels:
      on: {{decode: {{SGLANG_EXTRA_ARGS: ""}}}}
      off: {{decode: {{SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}}
  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [on, off]
replicates: {replicates}
order: sequential
repro:
  command: >-
    {{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions {sessions} --rounds 2
    --seed {{trial_seed}}
  timeout: 120
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(root: Path, n: int, warmup: float, sessions: int, trials: int) -> Path:
    srv = '["{python}", -m, orchestrator.sim.server'
    blocks = []
    for i in range(1, n + 1):
        name, (pp, rp, dp) = f"tb{i}", (free_port(), free_port(), free_port())
        for role, extra in (
            ("prefill", ""),
            ("decode", 'SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\nSGLANG_EXTRA_ARGS=""\n'),
            ("router", ""),
        ):
            (root / f"{name}-{role}.env").write_text(f"SIM_WARMUP_S={warmup}\nSGLANG_DSV4_BF16_INDEX_K=1\n{extra}")
        blocks.append(
            textwrap.indent(
                textwrap.dedent(f"""\
            {name}:
              state_dir: state-{name}
              hosts:
                prefill: {{env_file: {name}-prefill.env, url: "http://127.0.0.1:{pp}", startup_estimate: {warmup},
                           units: [{{name: {name}-p, command: {srv}, --role, prefill, --port, "{pp}"]}}]}}
                decode: {{env_file: {name}-decode.env, url: "http://127.0.0.1:{dp}", startup_estimate: {warmup},
                          units: [{{name: {name}-d, command: {srv}, --role, decode, --port, "{dp}"]}}]}}
                router:
                  env_file: {name}-router.env
                  url: http://127.0.0.1:{rp}
                  after: [prefill, decode]
                  units: [{{name: {name}-r, command: {srv}, --role, router, --port, "{rp}",
                            --prefill-url, "http://127.0.0.1:{pp}", --decode-url, "http://127.0.0.1:{dp}"]}}]
            """),
                "  ",
            )
        )
    (root / "inventory.yaml").write_text("testbeds:\n" + "".join(blocks))
    (root / "m.yaml").write_text(MATRIX.format(replicates=max(1, trials // 4), sessions=sessions))
    return root / "inventory.yaml"


def sweep(root: Path, testbeds: str, run_id: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "run",
            "m.yaml",
            "-i",
            "inventory.yaml",
            "-t",
            testbeds,
            "--out",
            "reports",
            "--run-id",
            run_id,
            "--seed",
            "1",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"sweep on {testbeds} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testbeds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument(
        "--warmup", type=float, default=3.0, help="server warm-up per restart, seconds (real servers: 30 s to 50 min)"
    )
    ap.add_argument("--sessions", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-par-") as tmp:
        root = Path(tmp)
        build(root, args.testbeds, args.warmup, args.sessions, args.trials)
        names = ",".join(f"tb{i}" for i in range(1, args.testbeds + 1))
        one = sweep(root, "tb1", "one")
        many = sweep(root, names, "many")
    trials = max(1, args.trials // 4) * 4
    print(f"{trials} trials, warm-up {args.warmup:g} s per restart, {args.sessions} sessions per repro")
    print(f"{'testbeds':>9} {'wall s':>8} {'trials/hour':>12}")
    print(f"{1:>9} {one:>8.1f} {3600 * trials / one:>12.0f}")
    print(f"{args.testbeds:>9} {many:>8.1f} {3600 * trials / many:>12.0f}")
    print(f"speed-up: {one / many:.2f}x with {args.testbeds} testbeds (goal >= 3.5x for 4)")


if __name__ == "__main__":
    main()
