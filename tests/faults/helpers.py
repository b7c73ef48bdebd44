"""Helpers for the fault-injection tests: a private simulated testbed in tmp_path (free loopback
ports, its own env files and state dir), `orch` as a subprocess or in-process, and the checks
every fault test ends with: hosts byte-identical, no process, lock or backup file left, the
journal valid with each planned trial present exactly once.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.inproc import run_main
from helpers.netutil import free_ports, port_open  # noqa: F401 (re-exported for test modules)
from helpers.procs import kill_by_pid, pid_running, processes_mentioning  # noqa: F401 (pid_running for test modules)

from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.store.journal import read_journal
from orchestrator.store.manifest import load_plan, trials_of

PYTHON = sys.executable
ROLES = ("prefill", "decode", "router")
TRACEBACK = "Traceback (most recent call last)"

# Env files as a team would have them: comments, CRLF, no final newline; orch must put them back
# byte for byte whatever happens to the controller.
ENV_FILES = {
    "prefill": "# prefill flags\nSIM_WARMUP_S=0.1\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\n",
    "decode": (
        "# decode flags\r\nSIM_WARMUP_S=0.1\r\nSIM_SEED=7\r\nSGLANG_DSV4_BF16_INDEX_K=1\r\n"
        'SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\r\nSGLANG_EXTRA_ARGS=""'
    ),
    "router": "SIM_WARMUP_S=0.1\n",
}

REPRO = (
    "{python} -m orchestrator.sim.repro --router {router_url} --sessions 6 --rounds 1 "
    "--max-tokens 200 --seed {trial_seed}"
)
METRICS = """\
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
    wall: {regex: 'wall=(?P<value>[0-9.]+)s', unit: s}
"""


def matrix_yaml(
    *,
    name: str = "faults",
    replicates: int = 2,
    extra_factor: str = "",
    command: str = REPRO,
    timeout: float = 60,
    extra: str = "",
    order: str = "randomized",
) -> str:
    """2 factors x 2 levels on decode (+ an optional third factor), a small repro."""
    return (
        textwrap.dedent("""\
        name: {name}
        factors:
          cuda_graph:
            levels:
              on: {{decode: {{SGLANG_EXTRA_ARGS: ""}}}}
              off: {{decode: {{SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}}
          overlap:
            env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
            levels: [on, off]
        """).format(name=name)
        + extra_factor
        + textwrap.dedent(f"""\
        replicates: {replicates}
        order: {order}
        seed: 5
        repro:
          command: {json.dumps(command)}
          timeout: {timeout}
        """)
        + METRICS
        + extra
    )


@dataclass(frozen=True)
class SimBed:
    """A private simulated testbed: three sim units on free ports, env files in `root`."""

    root: Path
    inventory: Path
    matrix: Path
    ports: dict[str, int]
    originals: dict[str, bytes]

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def env_file(self, role: str) -> Path:
        return self.root / f"{role}.env"

    def run_dir(self, run_id: str) -> Path:
        return self.reports / run_id

    def write_matrix(self, text: str) -> Path:
        self.matrix.write_text(text)
        return self.matrix

    def run_args(self, run_id: str, *more: str) -> list[str]:
        return [
            "run",
            str(self.matrix),
            "-i",
            str(self.inventory),
            "--out",
            str(self.reports),
            "--run-id",
            run_id,
            *more,
        ]


def make_simbed(
    root: Path,
    matrix: str | None = None,
    env_files: dict[str, str] | None = None,
    health_timeout: float = 30,
    decode_dialect: str = "systemd",
) -> SimBed:
    """Write env files (ENV_FILES, or the given texts), an inventory on free ports and a matrix
    under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    pp, dp, rp = free_ports(3)
    originals = {}
    for role, text in {**ENV_FILES, **(env_files or {})}.items():
        data = text.encode()
        (root / f"{role}.env").write_bytes(data)
        originals[role] = data
    srv = f'["{PYTHON}", -m, orchestrator.sim.server'
    inv = root / "inventory.yaml"
    inv.write_text(
        textwrap.dedent(f"""\
        testbeds:
          sim:
            state_dir: state
            hosts:
              prefill:
                env_file: prefill.env
                units: [{{name: f-prefill, command: {srv}, --role, prefill, --port, "{pp}"]}}]
                url: http://127.0.0.1:{pp}
                health_timeout: {health_timeout}
              decode:
                env_file: decode.env
                dialect: {decode_dialect}
                units: [{{name: f-decode, command: {srv}, --role, decode, --port, "{dp}"]}}]
                url: http://127.0.0.1:{dp}
                health_timeout: {health_timeout}
              router:
                env_file: router.env
                units: [{{name: f-router, command: {srv}, --role, router, --port, "{rp}",
                          --prefill-url, "http://127.0.0.1:{pp}", --decode-url, "http://127.0.0.1:{dp}"]}}]
                url: http://127.0.0.1:{rp}
                health_timeout: {health_timeout}
                after: [prefill, decode]
        """)
    )
    m = root / "m.yaml"
    m.write_text(matrix if matrix is not None else matrix_yaml())
    return SimBed(root, inv, m, {"prefill": pp, "decode": dp, "router": rp}, originals)


# ------------------------------------------------------------------ running orch


def orch_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_TEST_")}
    env.update(PYTHONUNBUFFERED="1", NO_COLOR="1", COLUMNS="400", TERM="dumb")
    return env


def spawn_orch(
    bed: SimBed, args: list[str], env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """`python -m orchestrator.cli.main ARGS` in its own process group, output to files (no pipe to
    fill up while the test sleeps before a kill)."""
    log = log or bed.root / f"orch-{time.monotonic_ns()}.log"
    out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed below
    try:
        proc = subprocess.Popen(
            [PYTHON, "-m", "orchestrator.cli.main", *args],
            cwd=bed.root,
            env={**orch_env(), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()
    proc.log = log  # type: ignore[attr-defined]
    return proc


def output_of(proc: subprocess.Popen[bytes]) -> str:
    return proc.log.read_text(errors="replace")  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Done:
    code: int
    output: str


def orch(bed: SimBed, args: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> Done:
    """Run orch to the end as a subprocess; its exit code and its combined output."""
    proc = spawn_orch(bed, args, env)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"orch {' '.join(args)} did not finish in {timeout} s:\n{output_of(proc)}") from None
    return Done(code, output_of(proc))


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the controller only (not the units it started: they live in their own sessions,
    exactly as after a real kill -9) and reap it."""
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


# ------------------------------------------------------------------ checks


def trial_records(run_dir: Path) -> list[TrialRecord]:
    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


def manifest(run_dir: Path) -> RunManifest:
    """run.json with its planned trials (kept in plan.json); read as is, without load_manifest's
    side effect of declaring the run's secret names in this test process."""
    head = RunManifest.model_validate_json((run_dir / "run.json").read_text())
    return head if head.plan else head.model_copy(update={"plan": trials_of(load_plan(run_dir, head))})


def journal_tally(run_dir: Path) -> tuple[int, list[int], list[int]]:
    """(planned, lost trials, trials recorded more than once) over finished records."""
    planned = [p.trial for p in manifest(run_dir).plan]
    seen: dict[int, int] = {}
    for r in trial_records(run_dir):
        if r.status in ("completed", "failed"):
            seen[r.trial] = seen.get(r.trial, 0) + 1
    lost = [t for t in planned if t not in seen]
    twice = [t for t, n in seen.items() if n > 1]
    return len(planned), lost, twice


def sim_processes(bed: SimBed) -> list[tuple[int, str]]:
    """Sim servers on our ports and repro clients talking to them."""
    return processes_mentioning(
        [f"--port {p}" for p in bed.ports.values()] + [f"127.0.0.1:{p}" for p in bed.ports.values()]
    )


def leftovers(bed: SimBed) -> list[str]:
    """Everything a finished or restored run must not leave behind; empty when clean."""
    problems = []
    for role, data in bed.originals.items():
        now = bed.env_file(role).read_bytes()
        if now != data:
            problems.append(f"{role}.env changed: {now!r} != {data!r}")
    problems += [f"port {p} ({r}) still open" for r, p in bed.ports.items() if port_open(p)]
    for pid_file in bed.state_dir.glob("*.pid") if bed.state_dir.exists() else []:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if pid_running(pid):
            problems.append(f"{pid_file.name}: pid {pid} still running")
    problems += [f"process left: {pid} {cmd}" for pid, cmd in sim_processes(bed)]
    problems += [f"lock file left: {p.name}" for p in bed.root.glob("*.orch-lock")]
    problems += [f"host backup left: {p.name}" for p in bed.root.glob("*.orch-backup-*")]
    problems += [f"host record of the units' states left: {p.name}" for p in bed.root.glob("*.orch-units-*")]
    return problems


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def assert_clean(bed: SimBed, grace_s: float = 0.0) -> None:
    """Hosts restored and nothing left. grace_s lets processes that are already dying exit."""
    if grace_s:
        wait_for(lambda: not leftovers(bed), grace_s)
    problems = leftovers(bed)
    assert not problems, "\n".join(problems)


def assert_no_traceback(text: str) -> None:
    assert TRACEBACK not in text, text


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"^error: ", line)]


def cleanup_processes(bed: SimBed) -> None:
    """Last resort after a failed test: SIGKILL sim processes on OUR ports (by pid)."""
    for pid, _ in sim_processes(bed):
        kill_by_pid(pid)


def run_cli(argv: list[str], capsys) -> Done:  # type: ignore[no-untyped-def]
    """`orch ARGV` in this process (no interpreter start-up, imports already paid): for faults
    that need no signal or kill delivered to the controller."""
    from orchestrator.cli.main import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refusing the command line
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return Done(code, captured.out + captured.err)


def orch_here(bed: SimBed, args: list[str]) -> Done:
    """`orch ARGS` run to the end in this process, from the testbed's folder as orch() runs it, its
    output collected: orch() without an interpreter start and imports (~1-2 CPU-s each), for the
    harnesses' way back and views that nothing signals (no capsys needed: stdout and stderr are
    redirected, into one stream, while it runs)."""
    buf = io.StringIO()
    code = run_main(args, bed.root, {}, buf, buf)
    return Done(code, buf.getvalue())


def section(html: str, section_id: str) -> str:
    """The text of one <section id=...> of a report page."""
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert match, f"report has no section {section_id!r}"
    return match.group(1)


def by_trial(run_dir: Path) -> dict[int, TrialRecord]:
    return {r.trial: r for r in trial_records(run_dir)}


def count_trials(run_dir: Path) -> int:
    """Finished trial records so far (0 before the journal exists): for polling a live run."""
    if not (run_dir / "journal.jsonl").exists():
        return 0
    return len(trial_records(run_dir))
