"""Benchmark: orchestration overhead per trial of orch vs an Ansible playbook and a bash loop.

    /root/venv-orch/bin/python bench/bench_overhead.py [--target sim|testbed] [--trials 12]

Every tool runs the SAME sequence of trials: set SGLANG_OPT_USE_MULTI_STREAM_OVERLAP on decode
(0, 1, 0, ... so every trial changes the file), restart decode, wait until decode and the router
are ready, run the simulator's repro with a few sessions. Per trial

    overhead = trial wall time - restart-to-healthy time of decode - repro time

measured the same way for all three tools (bench/README.md says why this is fair):
- the repro runs through bench/peers/timed_repro.sh, which writes its start and end times;
- trial i's wall time runs from the end of repro i-1 to the end of repro i, so whatever a tool
  does between trials (journal, log collection, its own bookkeeping) counts; N+1 trials are run
  to measure N (the first one also absorbs start-up: SSH connections, Ansible's loading);
- restart-to-healthy is read from the server's own log: from the old process's "stopping" line
  (it got SIGTERM) to the new process's "ready" line (its /health turned 200).

Targets (printed, never asserted): on the SSH testbed, orch's median overhead <= 0.2 s a trial and
<= 0.1x Ansible's. --target testbed boots the real 3-host systemd + sshd testbed (root).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from string import Template
from typing import Any, Callable, Protocol

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"
TIMED_REPRO = PEERS / "timed_repro.sh"
SIMCTL = PEERS / "simctl.sh"
FLAG = "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"
TOOLS = ("orch", "ansible", "bash")
DEFAULT_ANSIBLE_VENV = Path.home() / ".cache" / "orch-bench" / "ansible-venv"
# orch's command line, in-process; a baseline checkout from before the layered packages has cli.py
ENTRY = (
    "import sys\ntry:\n    from orchestrator.cli.main import main\nexcept ImportError:\n"
    "    from orchestrator.cli import main\nsys.exit(main(sys.argv[1:]))"
)
LOG_EVENT = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[(\w+)\] (stopping|ready)\s*$")


class BenchError(RuntimeError):
    """The benchmark could not run or could not measure what it ran."""


# ----------------------------------------------------------------------------- measurement (pure)
@dataclass(frozen=True)
class ReproSpan:
    trial: int
    start: float
    end: float
    exit_code: int


@dataclass(frozen=True)
class LogEvent:
    at: float  # epoch seconds, from the server's own timestamp
    kind: str  # "stopping" (got SIGTERM) or "ready" (/health turned 200)


@dataclass(frozen=True)
class Sample:
    trial: int
    wall_s: float
    restart_s: float  # restart-to-healthy of decode, from its log
    repro_s: float

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.restart_s - self.repro_s


@dataclass(frozen=True)
class Summary:
    tool: str
    samples: tuple[Sample, ...]

    def median(self, what: Callable[[Sample], float]) -> float:
        return statistics.median(what(s) for s in self.samples)

    def p90(self, what: Callable[[Sample], float]) -> float:
        values = sorted(what(s) for s in self.samples)
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=10, method="inclusive")[-1]


def parse_times(text: str) -> list[ReproSpan]:
    """Lines "TAG START END EXIT" written by timed_repro.sh, ordered by trial."""
    spans = []
    for line in text.splitlines():
        if line.strip():
            tag, start, end, code = line.split()
            spans.append(ReproSpan(int(tag), float(start), float(end), int(code)))
    return sorted(spans, key=lambda s: s.trial)


def parse_events(log: str) -> list[LogEvent]:
    """The "stopping" and "ready" lines of a simulator log, in time order."""
    events = []
    for line in log.splitlines():
        m = LOG_EVENT.search(line)
        if m:
            at = datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
            events.append(LogEvent(at, m.group(3)))
    return sorted(events, key=lambda e: e.at)


def measure(tool: str, spans: list[ReproSpan], events: list[LogEvent], trials: int) -> list[Sample]:
    """One Sample per trial 1..trials: the restart of trial i lies between the end of repro i-1
    and the start of repro i (a tool waits for health before it runs the repro)."""
    if [s.trial for s in spans[: trials + 1]] != list(range(trials + 1)):
        raise BenchError(f"{tool}: expected repro times of trials 0..{trials}, got {[s.trial for s in spans]}")
    failed = [s.trial for s in spans if s.exit_code != 0]
    if failed:
        raise BenchError(f"{tool}: the repro failed in trials {failed}")
    samples = []
    for prev, cur in zip(spans, spans[1 : trials + 1], strict=False):
        restart = restart_to_healthy(events, prev.end, cur.start)
        if restart is None:
            raise BenchError(
                f"{tool}: trial {cur.trial}: no stop and ready of decode between the two repros "
                "(was decode restarted? is its log complete?)"
            )
        samples.append(Sample(cur.trial, cur.end - prev.end, restart, cur.end - cur.start))
    return samples


def restart_to_healthy(events: list[LogEvent], after: float, before: float) -> float | None:
    """Seconds from the last "stopping" in (after, before) to the first "ready" after it."""
    window = [e for e in events if after < e.at < before]
    stops = [i for i, e in enumerate(window) if e.kind == "stopping"]
    if not stops:
        return None
    ready = next((e for e in window[stops[-1] :] if e.kind == "ready"), None)
    return None if ready is None else ready.at - window[stops[-1]].at


@dataclass(frozen=True)
class TrialMarks:
    """orch's own timestamps of one trial (journal: started, ended)."""

    trial: int
    started: float
    ended: float


def orch_breakdown(
    marks: list[TrialMarks], spans: list[ReproSpan], events: list[LogEvent], trials: int
) -> list[tuple[str, float]]:
    """Where orch's overhead goes, as medians over trials 1..trials (each phase from observed
    timestamps: the journal's started/ended, the server log, the repro wrapper)."""
    by_trial = {m.trial: m for m in marks}
    phases: dict[str, list[float]] = {
        "after the repro (metrics, log collection)": [],
        "between trials (journal, next trial's set-up)": [],
        "before the restart (env edit, unit checks, restart call)": [],
        "after ready (health detection, verification, repro launch)": [],
    }
    names = list(phases)
    for prev, cur in zip(spans, spans[1 : trials + 1], strict=False):
        m_prev, m_cur = by_trial.get(prev.trial), by_trial.get(cur.trial)
        window = [e for e in events if prev.end < e.at < cur.start]
        stop = next((e.at for e in reversed(window) if e.kind == "stopping"), None)
        ready = next((e.at for e in window if e.kind == "ready" and stop is not None and e.at > stop), None)
        if m_prev is None or m_cur is None or stop is None or ready is None:
            continue
        for name, value in zip(
            names,
            (m_prev.ended - prev.end, m_cur.started - m_prev.ended, stop - m_cur.started, cur.start - ready),
            strict=True,
        ):
            phases[name].append(value)
    return [(name, statistics.median(v)) for name, v in phases.items() if v]


def format_table(summaries: list[Summary]) -> str:
    base = next((s for s in summaries if s.tool == "orch"), None)
    rows = [("tool", "trials", "wall med", "restart->healthy", "repro med", "overhead med", "overhead p90", "vs orch")]
    for s in summaries:
        ov = s.median(lambda x: x.overhead_s)
        ratio = "1.0x" if s is base else (f"{ov / base.median(lambda x: x.overhead_s):.1f}x" if base else "-")
        rows.append(
            (
                s.tool,
                str(len(s.samples)),
                f"{s.median(lambda x: x.wall_s):.3f} s",
                f"{s.median(lambda x: x.restart_s):.3f} s",
                f"{s.median(lambda x: x.repro_s):.3f} s",
                f"{ov:.3f} s",
                f"{s.p90(lambda x: x.overhead_s):.3f} s",
                ratio,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def verdict(summaries: list[Summary]) -> list[str]:
    by = {s.tool: s.median(lambda x: x.overhead_s) for s in summaries}
    lines = []
    if "orch" in by:
        lines.append(f"orch median overhead {by['orch']:.3f} s per trial (target on the SSH testbed: <= 0.2 s)")
        if "ansible" in by and by["ansible"] > 0:
            lines.append(f"orch / Ansible = {by['orch'] / by['ansible']:.3f} (target: <= 0.1)")
        if "bash" in by and by["bash"] > 0:
            lines.append(f"orch / bash loop = {by['orch'] / by['bash']:.3f}")
        for name in (n for n in by if n.startswith("orch@") and by[n] > 0):
            lines.append(f"orch / {name} = {by['orch'] / by[name]:.3f} (same run; no worse than the baseline: <= 1)")
    return lines


# ----------------------------------------------------------------------------- settings, targets
@dataclass(frozen=True)
class Settings:
    trials: int  # measured trials per tool (trials + 1 are run)
    sessions: int
    rounds: int
    warmup_s: float  # decode's simulated warm-up
    poll_s: float  # the peers' health poll interval
    health_timeout_s: float
    python: str
    workdir: Path
    server_metrics: str = ""  # orch's matrix `metrics:` section (empty: none), e.g. "{}" or "{sample_interval: 0.5}"


@dataclass(frozen=True)
class Endpoints:
    decode_health: str
    router_ready: str
    router_url: str


class Target(Protocol):
    """Where the trials run: the local simulator, or the SSH + systemd testbed."""

    name: str

    def orch_inventory(self, d: Path) -> tuple[Path, str]:
        """An inventory for orch and the testbed name in it."""
        ...

    def orch_decode_log(self, d: Path, since: float) -> str: ...

    def peer_endpoints(self) -> Endpoints: ...

    def peer_prepare(self, d: Path) -> None:
        """Put decode in its initial state (overlap=1, healthy) before a peer runs."""
        ...

    def peer_finish(self, d: Path) -> None: ...

    def peer_decode_log(self, d: Path, since: float) -> str: ...

    def ansible_setup(self, d: Path, python: str) -> tuple[str, dict[str, str]]:
        """The Ansible inventory text and the target's playbook variables."""
        ...

    def bash_env(self, d: Path) -> dict[str, str]: ...

    def close(self) -> None: ...


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def env_text(role: str, warmup_s: float) -> str:
    """Initial flags of a simulated server (decode starts with overlap on, like production)."""
    lines = [f"SIM_WARMUP_S={warmup_s if role != 'router' else 0.1}", "SIM_SEED=7"]
    if role != "router":
        lines.append("SGLANG_DSV4_BF16_INDEX_K=1")
    if role == "decode":
        lines += [f"{FLAG}=1", 'SGLANG_EXTRA_ARGS=""']
    return "".join(f"{line}\n" for line in lines)


def server_argv(python: str, role: str, ports: dict[str, int]) -> list[str]:
    argv = [python, "-m", "orchestrator.sim.server", "--role", role, "--port", str(ports[role])]
    if role == "router":
        argv += [
            "--prefill-url",
            f"http://127.0.0.1:{ports['prefill']}",
            "--decode-url",
            f"http://127.0.0.1:{ports['decode']}",
        ]
    return argv


def wait_url(url: str, timeout_s: float) -> None:
    """Untimed set-up helper: poll until the URL answers 200."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"{url}: not healthy after {timeout_s:g} s (set-up)")
        time.sleep(0.05)


class SimTarget:
    """Local simulator processes: orch manages its own (LocalServiceManager); the peers get theirs
    through simctl.sh, a stand-in for systemctl. Each tool gets fresh servers and ports."""

    name = "sim"
    ROLES = ("prefill", "decode", "router")

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.ports: dict[str, int] = {}

    def orch_inventory(self, d: Path) -> tuple[Path, str]:
        ports = dict(zip(self.ROLES, free_ports(3), strict=True))
        hosts = {}
        for role in self.ROLES:
            (d / f"{role}.env").write_text(env_text(role, self.s.warmup_s))
            path = "/readiness" if role == "router" else "/health"
            hosts[role] = {
                "transport": "local",
                "env_file": f"{role}.env",
                "units": [{"name": f"bench-{role}", "command": server_argv("{python}", role, ports)}],
                "url": f"http://127.0.0.1:{ports[role]}",
                "health": f"http://127.0.0.1:{ports[role]}{path}",
                "health_timeout": self.s.health_timeout_s,
            }
        hosts["router"]["after"] = ["prefill", "decode"]
        inventory = {"testbeds": {"bench-sim": {"state_dir": "state", "hosts": hosts}}}
        path = d / "inventory.yaml"
        path.write_text(json.dumps(inventory, indent=1))  # JSON is YAML
        return path, "bench-sim"

    def orch_decode_log(self, d: Path, since: float) -> str:
        return (d / "state" / "bench-decode.log").read_text(errors="replace")

    def peer_endpoints(self) -> Endpoints:
        p = self.ports
        return Endpoints(
            f"http://127.0.0.1:{p['decode']}/health",
            f"http://127.0.0.1:{p['router']}/readiness",
            f"http://127.0.0.1:{p['router']}",
        )

    def peer_prepare(self, d: Path) -> None:
        self.ports = dict(zip(self.ROLES, free_ports(3), strict=True))
        sim = d / "sim"
        sim.mkdir(parents=True)
        for role in self.ROLES:
            (sim / f"{role}.env").write_text(env_text(role, self.s.warmup_s))
            (sim / f"{role}.cmd").write_text("\n".join(server_argv(self.s.python, role, self.ports)) + "\n")
            self._simctl(d, "start", role)
        ends = self.peer_endpoints()
        wait_url(ends.decode_health, 60)
        wait_url(ends.router_ready, 60)

    def peer_finish(self, d: Path) -> None:
        for role in self.ROLES:
            self._simctl(d, "stop", role)

    def peer_decode_log(self, d: Path, since: float) -> str:
        return (d / "sim" / "decode.log").read_text(errors="replace")

    def ansible_setup(self, d: Path, python: str) -> tuple[str, dict[str, str]]:
        inventory = Template((PEERS / "ansible" / "inventory-sim.ini.tmpl").read_text()).substitute(python=python)
        return inventory, {
            "trial_tasks": str(PEERS / "ansible" / "trial-simctl.yml"),
            "env_file": str(d / "sim" / "decode.env"),
            "unit": "decode",
            "simctl": f"{SIMCTL}",
            "simctl_dir": str(d / "sim"),
        }

    def bash_env(self, d: Path) -> dict[str, str]:
        return {
            "ENV_FILE": str(d / "sim" / "decode.env"),
            "SSH_CONFIG": "",
            "DECODE_HOST": "",
            "RESTART": f"SIMCTL_DIR={shlex.quote(str(d / 'sim'))} bash {shlex.quote(str(SIMCTL))} restart decode",
        }

    def close(self) -> None:
        """Nothing shared to tear down: each peer's servers are stopped by peer_finish."""

    def _simctl(self, d: Path, action: str, role: str) -> None:
        subprocess.run(
            ["bash", str(SIMCTL), action, role],
            env={**os.environ, "SIMCTL_DIR": str(d / "sim")},
            check=True,
            timeout=30,
        )


class TestbedTarget:
    """The real testbed (tests/testbed/fixture.py): 3 namespaced hosts with systemd 252 + sshd.

    Set-up (untimed): decode's warm-up is set to --warmup and its start limit is lifted with a
    drop-in (StartLimitIntervalSec=0), because back-to-back restarts of a 1-2 s trial would hit
    systemd's default limit of 5 starts in 10 s; orch clears that itself (reset-failed), the
    peers would fail, so for a like-for-like comparison nobody meets it."""

    name = "testbed"
    UNIT = "sglang-dsv4-decode"
    ENV_FILE = "/etc/sglang/decode.env"

    def __init__(self, s: Settings) -> None:
        sys.path.insert(0, str(REPO / "tests"))
        from testbed.fixture import boot_testbed  # the project's own testbed, not ../shared

        self.s = s
        t0 = time.monotonic()
        self.tb = boot_testbed(s.workdir / "lab")
        print(f"testbed booted in {time.monotonic() - t0:.1f} s (bridge {self.tb.bridge})", flush=True)
        self.ssh("decode", f"sed -i 's/^SIM_WARMUP_S=.*/SIM_WARMUP_S={s.warmup_s}/' {self.ENV_FILE}")
        self.ssh(
            "decode",
            f"mkdir -p /etc/systemd/system/{self.UNIT}.service.d && printf '[Unit]\\n"
            f"StartLimitIntervalSec=0\\n' > /etc/systemd/system/{self.UNIT}.service.d/bench.conf"
            " && systemctl daemon-reload",
        )
        self.original = self.ssh("decode", f"base64 -w0 {self.ENV_FILE}")
        self.peer_prepare(s.workdir)

    def ssh(self, host: str, command: str) -> str:
        return self.tb.ssh(host, command, timeout=60).stdout

    def orch_inventory(self, d: Path) -> tuple[Path, str]:
        return self.tb.inventory, "dsv4-pd"

    def orch_decode_log(self, d: Path, since: float) -> str:
        return self.ssh("decode", f"journalctl -u {self.UNIT} -o cat --no-pager --since @{int(since) - 1}")

    peer_decode_log = orch_decode_log

    def peer_endpoints(self) -> Endpoints:
        ip = {h.name: h.ip for h in self.tb.hosts}
        return Endpoints(
            f"http://{ip['decode']}:30002/health",
            f"http://{ip['router']}:30001/readiness",
            f"http://{ip['router']}:30001",
        )

    def peer_prepare(self, d: Path) -> None:
        self.ssh("decode", f"echo {self.original} | base64 -d > {self.ENV_FILE} && systemctl restart {self.UNIT}")
        ends = self.peer_endpoints()
        wait_url(ends.decode_health, 60)
        wait_url(ends.router_ready, 60)

    def peer_finish(self, d: Path) -> None:
        """Nothing to do: the next peer_prepare puts decode back."""

    def ansible_setup(self, d: Path, python: str) -> tuple[str, dict[str, str]]:
        decode_ip = self.tb.host("decode").ip
        inventory = Template((PEERS / "ansible" / "inventory-testbed.ini.tmpl").read_text()).substitute(
            decode_ip=decode_ip, key=self.tb.key, known_hosts=self.tb.known_hosts
        )
        return inventory, {
            "trial_tasks": str(PEERS / "ansible" / "trial-systemd.yml"),
            "env_file": self.ENV_FILE,
            "unit": self.UNIT,
        }

    def bash_env(self, d: Path) -> dict[str, str]:
        return {
            "ENV_FILE": self.ENV_FILE,
            "SSH_CONFIG": str(self.tb.lab / "state" / "decode" / "ssh_config"),
            "DECODE_HOST": "decode",
            "RESTART": f"systemctl restart {self.UNIT}",
        }

    def close(self) -> None:
        from testbed.fixture import shutdown

        shutdown(self.tb)


# ----------------------------------------------------------------------------- the three tools
def matrix_text(s: Settings, times: Path) -> str:
    """orch's matrix for the sequence: overlap 0, 1, 0, ... on decode, sequential order."""
    reps = (s.trials + 2) // 2  # rounds of 2 cells: at least trials + 1 trials
    command = (
        f"bash {shlex.quote(str(TIMED_REPRO))} {shlex.quote(str(times))} {{trial}} {{python}} "
        f"-m orchestrator.sim.repro --router {{router_url}} --sessions {s.sessions} "
        f"--rounds {s.rounds} --seed {{trial}}"
    )
    return textwrap.dedent(f"""\
        name: bench-overhead
        factors:
          overlap:
            env: {{decode: {FLAG}}}
            levels: ["0", "1"]
        replicates: {reps}
        order: sequential
        health_timeouts: {{prefill: {s.health_timeout_s}, decode: {s.health_timeout_s}, router: {s.health_timeout_s}}}
        repro:
          command: {json.dumps(command)}
          timeout: 120
          metrics:
            corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
        """) + (f"metrics: {s.server_metrics}\n" if s.server_metrics else "")


@dataclass(frozen=True)
class Leg:
    """One way of running orch: this checkout, or an older one (the baseline of the same run)."""

    name: str  # printed, e.g. "orch" or "orch@7624cce"
    checkout: Path | None = None  # None: this checkout; else its orchestrator package is imported


def run_orch(
    target: Target, s: Settings, leg: Leg = Leg("orch"), run: int = 0
) -> tuple[list[Sample], list[tuple[str, float]]]:
    d = s.workdir / f"{leg.name.replace('@', '-')}-{run}"
    d.mkdir()
    times = d / "times.txt"
    inventory, testbed = target.orch_inventory(d)
    if leg.checkout is not None:  # an older orch may not know newer testbeds' keys: give it only this one
        data = yaml_load(inventory)
        data["testbeds"] = {testbed: data["testbeds"][testbed]}
        inventory = d / "inventory-baseline.yaml"
        inventory.write_text(json.dumps(data, indent=1))  # JSON is YAML
    (d / "matrix.yaml").write_text(matrix_text(s, times))
    since = time.time()
    argv = [
        s.python,
        "-c",
        ENTRY,
        "run",
        str(d / "matrix.yaml"),
        "-i",
        str(inventory),
        "-t",
        testbed,
        "--out",
        str(d / "reports"),
        "--run-id",
        "bench",
        "--retries",
        "0",
    ]
    env = None if leg.checkout is None else {**os.environ, "PYTHONPATH": str(leg.checkout)}
    _run_logged(argv, d / "orch.log", cwd=d, timeout=_budget(s), env=env)
    log = target.orch_decode_log(d, since)
    (d / "decode.log").write_text(log)
    spans, events = parse_times(times.read_text()), parse_events(log)
    samples = measure(leg.name, spans, events, s.trials)
    breakdown = orch_breakdown(journal_marks(d / "reports" / "bench" / "journal.jsonl"), spans, events, s.trials)
    return samples, breakdown


def yaml_load(path: Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise BenchError(f"{path}: not a mapping")
    return data


def orch_legs(args: argparse.Namespace) -> list[Leg]:
    """The baseline checkouts' orch (in the order given), then this checkout's."""
    legs = []
    for given in args.baseline_checkout:
        path, _, name = given.partition("=")
        legs.append(Leg(f"orch@{name or Path(path).name}", Path(path).resolve()))
    return [*legs, Leg("orch")]


def run_orch_legs(
    target: Target, s: Settings, legs: list[Leg], repeat: int, breakdowns: dict[str, list[list[tuple[str, float]]]]
) -> list[Summary]:
    """Each leg `repeat` times, interleaved (A B A B ...), so both see the same machine load."""
    samples: dict[str, list[Sample]] = {leg.name: [] for leg in legs}
    for run in range(repeat):
        for leg in legs:
            t0 = time.monotonic()
            got, breakdown = run_orch(target, s, leg, run)
            samples[leg.name] += got
            breakdowns.setdefault(leg.name, []).append(breakdown)
            median = statistics.median(x.overhead_s for x in got)
            print(
                f"{leg.name} (run {run + 1}/{repeat}): {len(got) + 1} trials in {time.monotonic() - t0:.1f} s, "
                f"overhead median {median:.3f} s, load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    return [Summary(name, tuple(got)) for name, got in samples.items()]


def merge_breakdowns(runs: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Per phase, the median of each run's median (one run: its own figures)."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for phase, value in run:
            values.setdefault(phase, []).append(value)
    return [(phase, statistics.median(v)) for phase, v in values.items()]


def journal_marks(path: Path) -> list[TrialMarks]:
    from orchestrator.core.records import TrialRecord
    from orchestrator.store.journal import read_journal

    def epoch(iso: str) -> float:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()

    return [
        TrialMarks(r.trial, epoch(r.started), epoch(r.ended))
        for r in read_journal(path).records
        if isinstance(r, TrialRecord)
    ]


def run_ansible(target: Target, s: Settings, playbook_bin: Path) -> list[Sample]:
    d = s.workdir / "ansible"
    (d / "home").mkdir(parents=True)
    times = d / "times.txt"
    target.peer_prepare(d)
    try:
        inventory, extra = target.ansible_setup(d, str(playbook_bin.parent / "python"))
        (d / "inventory.ini").write_text(inventory)
        (d / "ansible.cfg").write_text(
            Template((PEERS / "ansible" / "ansible.cfg.tmpl").read_text()).substitute(
                inventory=d / "inventory.ini", home=d / "home"
            )
        )
        ends = target.peer_endpoints()
        variables = {
            **extra,
            "trials": s.trials + 1,
            "decode_health": ends.decode_health,
            "router_ready": ends.router_ready,
            "router_url": ends.router_url,
            "poll": s.poll_s,
            "health_retries": int(s.health_timeout_s / s.poll_s),
            "python": s.python,
            "sessions": s.sessions,
            "rounds": s.rounds,
            "timed_repro": str(TIMED_REPRO),
            "times": str(times),
        }
        (d / "vars.json").write_text(json.dumps(variables))
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(d / "ansible.cfg"),
            "ANSIBLE_HOME": str(d / "home"),
            "SIMCTL_DIR": extra.get("simctl_dir", ""),
        }
        since = time.time()
        _run_logged(
            [str(playbook_bin), str(PEERS / "ansible" / "playbook.yml"), "-e", f"@{d / 'vars.json'}"],
            d / "ansible.log",
            cwd=d,
            env=env,
            timeout=_budget(s) + 60,
        )
        log = target.peer_decode_log(d, since)
        (d / "decode.log").write_text(log)
    finally:
        target.peer_finish(d)
    return measure("ansible", parse_times(times.read_text()), parse_events(log), s.trials)


def run_bash(target: Target, s: Settings) -> list[Sample]:
    d = s.workdir / "bash"
    (d / "out").mkdir(parents=True)
    times = d / "times.txt"
    target.peer_prepare(d)
    try:
        ends = target.peer_endpoints()
        env = {
            **os.environ,
            **target.bash_env(d),
            "TRIALS": str(s.trials + 1),
            "DECODE_HEALTH": ends.decode_health,
            "ROUTER_READY": ends.router_ready,
            "ROUTER_URL": ends.router_url,
            "POLL": f"{s.poll_s:g}",
            "HEALTH_TIMEOUT": f"{s.health_timeout_s:g}",
            "PYTHON": s.python,
            "SESSIONS": str(s.sessions),
            "ROUNDS": str(s.rounds),
            "TIMES": str(times),
            "OUT": str(d / "out"),
        }
        since = time.time()
        _run_logged(["bash", str(PEERS / "bash_loop.sh")], d / "bash.log", cwd=d, env=env, timeout=_budget(s))
        log = target.peer_decode_log(d, since)
        (d / "decode.log").write_text(log)
    finally:
        target.peer_finish(d)
    return measure("bash", parse_times(times.read_text()), parse_events(log), s.trials)


def _budget(s: Settings) -> float:
    """A generous bound on one tool's whole sequence (a hung tool must not hang the bench)."""
    return 120 + (s.trials + 1) * (s.health_timeout_s + 60)


def _run_logged(argv: list[str], log: Path, *, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> None:
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise BenchError(f"{argv[0]}: still running after {timeout:g} s (log: {log})") from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise BenchError(
            f"{Path(argv[0]).name} {' '.join(argv[1:3])}: exit code {proc.returncode} (log: {log})\n{tail}"
        )


def ensure_ansible(venv: Path, python: str) -> Path:
    """ansible-playbook from a private venv, created with ansible-core from PyPI if missing
    (never a project dependency)."""
    playbook = venv / "bin" / "ansible-playbook"
    if playbook.exists():
        return playbook
    print(f"installing ansible-core into {venv} ...", flush=True)
    base = shutil.which("python3") or python
    # README's install puts uv beside orch. Compiled as pip compiles: each ansible-playbook start
    # took 0.72 s instead of 0.35 s without its bytecode (PYTHONDONTWRITEBYTECODE on these machines)
    uv = Path(python).parent / "uv"
    if uv.exists():
        target = ["--python", str(venv / "bin" / "python")]
        subprocess.run([str(uv), "venv", "-q", "--python", base, str(venv)], check=True)
        subprocess.run([str(uv), "pip", "install", "-q", "--compile-bytecode", *target, "ansible-core"], check=True)
    else:
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "ansible-core"], check=True)
    if not playbook.exists():
        raise BenchError(f"{playbook}: not installed (pip install ansible-core into {venv} failed?)")
    return playbook


# ----------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=("sim", "testbed"), default="sim")
    p.add_argument("--trials", type=int, default=12, help="measured trials per tool (one more is run)")
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of orch,ansible,bash")
    p.add_argument("--sessions", type=int, default=4, help="repro sessions per trial")
    p.add_argument("--rounds", type=int, default=1, help="repro rounds per session")
    p.add_argument("--warmup", type=float, default=1.0, help="decode's simulated warm-up, seconds")
    p.add_argument(
        "--peer-poll",
        type=float,
        default=1.0,
        help="seconds between the peers' health polls (DESIGN.md's loop sleeps 5)",
    )
    p.add_argument("--health-timeout", type=float, default=60.0)
    p.add_argument(
        "--server-metrics",
        default="",
        metavar="YAML",
        help="orch scrapes server metrics: the matrix's `metrics:` section, e.g. '{}' (workers' /metrics before and "
        "after each repro) or '{sample_interval: 0.5}'",
    )
    p.add_argument(
        "--baseline-checkout",
        action="append",
        default=[],
        metavar="DIR[=NAME]",
        help="also run orch from this older checkout (e.g. `git archive 7624cce orchestrator | tar -x -C DIR`), "
        "interleaved with this one: a baseline measured in the same run, under the same load; labelled orch@NAME "
        "(default: the folder's name); may be given more than once",
    )
    p.add_argument("--repeat", type=int, default=1, help="runs of each orch leg, interleaved")
    p.add_argument("--ansible-venv", type=Path, default=DEFAULT_ANSIBLE_VENV)
    p.add_argument("--workdir", type=Path, help="keep the work files here (default: a temporary folder)")
    args = p.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    if not tools or set(tools) - set(TOOLS) or args.trials < 1 or args.peer_poll <= 0 or args.repeat < 1:
        p.error("--tools takes orch,ansible,bash; --trials >= 1; --peer-poll > 0; --repeat >= 1")
    for given in args.baseline_checkout:
        if not (Path(given.partition("=")[0]) / "orchestrator").is_dir():
            p.error(f"--baseline-checkout {given}: no orchestrator/ package there")
    args.tools = tools
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "bash" in args.tools and shutil.which("curl") is None:
        raise BenchError("the bash loop needs curl (apt-get install curl)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="orch-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    s = Settings(
        args.trials,
        args.sessions,
        args.rounds,
        args.warmup,
        args.peer_poll,
        args.health_timeout,
        sys.executable,
        workdir,
        args.server_metrics,
    )
    playbook = ensure_ansible(args.ansible_venv, sys.executable) if "ansible" in args.tools else None
    load0 = os.getloadavg()
    print(
        f"target {args.target}: {args.trials} measured trials per tool ({args.trials + 1} run), repro "
        f"{args.sessions} sessions x {args.rounds} rounds, decode warm-up {args.warmup:g} s, peers poll "
        f"every {args.peer_poll:g} s; load average {load0[0]:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    target: Target = TestbedTarget(s) if args.target == "testbed" else SimTarget(s)
    summaries: list[Summary] = []
    breakdowns: dict[str, list[list[tuple[str, float]]]] = {}
    try:
        for tool in args.tools:
            if tool == "orch":
                summaries += run_orch_legs(target, s, orch_legs(args), args.repeat, breakdowns)
                continue
            t0 = time.monotonic()
            if tool == "ansible":
                assert playbook is not None
                samples = run_ansible(target, s, playbook)
            else:
                samples = run_bash(target, s)
            summaries.append(Summary(tool, tuple(samples)))
            print(f"{tool}: {len(samples) + 1} trials in {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        target.close()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(format_table(summaries))
    print()
    for line in verdict(summaries):
        print(line)
    for name, runs in breakdowns.items():
        print(f"where {name}'s overhead goes (medians per trial{', median over runs' if len(runs) > 1 else ''}):")
        for phase, value in merge_breakdowns(runs):
            print(f"  {value:6.3f} s  {phase}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end ({load0[0]:.2f} at the start)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench_overhead: {exc}", file=sys.stderr)
        sys.exit(1)
