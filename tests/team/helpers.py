"""Helpers for the team-feature tests: a private simulated deployment (free loopback ports, its
own env files), tiny matrices, a webhook receiver, and running `orch` as a separate process (what
is signalled) or in the test's process (what nothing signals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

from helpers.inproc import orch_in
from helpers.netutil import free_ports, port_open  # noqa: F401 (re-exported for test modules)

from orchestrator.sweep.progress import QuietProgress
from orchestrator.team.overnight import QueueSweep
from orchestrator.team.queue import Queue, QueueItem, SweepOutcome

REPO = Path(__file__).resolve().parents[2]

ENV_FILES = {
    "prefill.env": "# prefill\nSIM_WARMUP_S=0.1\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\n",
    "decode.env": '# decode\r\nSIM_WARMUP_S=0.1\r\nSGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\r\nSGLANG_EXTRA_ARGS=""',
    "router.env": "SIM_WARMUP_S=0.1\n",
}


@dataclass(frozen=True)
class SimSite:
    """A simulated PD deployment of our own: env files and inventory in `folder`."""

    folder: Path
    inventory: Path
    ports: tuple[int, ...]
    originals: dict[str, bytes] = field(repr=False)

    def env_files_unchanged(self) -> list[str]:
        """Names of env files that differ from their original bytes (empty: all restored)."""
        return [n for n, data in self.originals.items() if (self.folder / n).read_bytes() != data]

    def listening(self) -> list[int]:
        return [p for p in self.ports if port_open(p)]


def inventory_text(ports: tuple[int, int, int], testbed: str = "sim", folder: str = "", header: bool = True) -> str:
    """One simulated testbed; `folder` (relative to the inventory) holds its env files and state."""
    pp, rp, dp = ports
    srv = '["{python}", -m, orchestrator.sim.server'
    d = f"{folder}/" if folder else ""
    text = textwrap.dedent(f"""\
        testbeds:
          {testbed}:
            state_dir: {d}state
            hosts:
              prefill:
                env_file: {d}prefill.env
                units: [{{name: q-prefill, command: {srv}, --role, prefill, --port, "{pp}"]}}]
                url: http://127.0.0.1:{pp}
                health_timeout: 30
                startup_estimate: 0.5
              decode:
                env_file: {d}decode.env
                units: [{{name: q-decode, command: {srv}, --role, decode, --port, "{dp}"]}}]
                url: http://127.0.0.1:{dp}
                health_timeout: 30
                startup_estimate: 0.5
              router:
                env_file: {d}router.env
                units: [{{name: q-router, command: {srv}, --role, router, --port, "{rp}",
                          --prefill-url, "http://127.0.0.1:{pp}", --decode-url, "http://127.0.0.1:{dp}"]}}]
                url: http://127.0.0.1:{rp}
                health_timeout: 30
                startup_estimate: 0.3
                after: [prefill, decode]
        """)
    return text if header else text.split("\n", 1)[1]


def make_site(folder: Path, ports: tuple[int, int, int] | None = None) -> SimSite:
    folder.mkdir(parents=True, exist_ok=True)
    ports = ports or tuple(free_ports(3))  # type: ignore[assignment]
    for name, text in ENV_FILES.items():
        (folder / name).write_bytes(text.encode())
    inv = folder / "inventory.yaml"
    inv.write_text(inventory_text(ports))  # type: ignore[arg-type]
    return SimSite(folder, inv, tuple(ports), {n: t.encode() for n, t in ENV_FILES.items()})  # type: ignore[arg-type]


def matrix_text(name: str, *, replicates: int = 1, after_repro: str = "", timeout: int = 60) -> str:
    """Two cells (overlap on/off); `after_repro` is a shell command run after the repro."""
    command = "{python} -m orchestrator.sim.repro --router {router_url} --sessions 6 --rounds 1 --seed {trial_seed}"
    if after_repro:
        command += f" && {after_repro}"
    return textwrap.dedent(f"""\
        name: {name}
        factors:
          overlap:
            env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
            levels: [on, off]
        replicates: {replicates}
        order: sequential
        repro:
          command: {json.dumps(command)}
          timeout: {timeout}
          metrics:
            corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
        """)


def orch_in_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """orch() run in this process (helpers.inproc): same cwd, no ORCH_WEBHOOKS but the test's,
    COLUMNS=200; for a command nothing signals, without the ~1-2 CPU-s of a new interpreter."""
    return orch_in(list(args), cwd, {"ORCH_WEBHOOKS": None, "COLUMNS": "200", **(env or {})})


def start_orch(*args: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    full_env.pop("ORCH_WEBHOOKS", None)
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.main", *args],
            cwd=cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=full_env,
        )


@dataclass
class Receiver:
    """A local webhook receiver: records (path, JSON body) of every POST; answers with the
    status codes queued in `answers` (then 200)."""

    url: str
    received: list[tuple[str, object]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    hits: int = 0


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    lock = threading.Lock()
    state: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            rec = state[0]
            with lock:
                rec.hits += 1
                code = rec.answers.pop(0) if rec.answers else 200
                if code == 200:
                    rec.received.append((self.path, json.loads(body)))
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def queue_sweep(reports: Path, sweeps: Any, warn: Callable[[str], None] = lambda message: None) -> QueueSweep:
    """A queue item's sweep over `sweeps` (a stand-in for sweep.api), showing nothing but `warn`."""
    return QueueSweep(
        reports,
        terminal=lambda started: QuietProgress(),
        show=lambda outcome: None,
        note=lambda message: None,
        error=lambda item, message: None,
        warn=warn,
        sweeps=sweeps,
    )


# ---------------------------------------------------------------------------- the queue's loop
def add(q: Queue, name: str, priority: int = 0, webhooks: tuple[str, ...] = ()) -> QueueItem:
    return q.add(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, priority, webhooks)


class FakeSweeps:
    """Plays given outcomes per matrix name; records what it was asked to run."""

    def __init__(self, tmp_path: Path, outcomes: dict[str, list[str]]) -> None:
        self.tmp_path, self.outcomes = tmp_path, outcomes
        self.calls: list[tuple[str, str, float | None, str | None]] = []

    def __call__(self, item: QueueItem, deadline: float | None, record_run_dir) -> SweepOutcome:  # noqa: ANN001
        name = Path(item.matrix).stem
        status = self.outcomes[name].pop(0)
        self.calls.append((name, item.state, deadline, item.run_dir))
        if status == "raise":
            self._run_dir(name, record_run_dir)
            raise KeyboardInterrupt
        if status == "locked":
            return SweepOutcome("locked", 2, None, "testbed 'sim' is locked")
        if status == "error":
            return SweepOutcome("error", 2, None, "preflight: host down")
        if status == "error-mid-run":  # failed after its run directory was made
            return SweepOutcome("error", 1, self._run_dir(name, record_run_dir), "journal: disk full")
        return SweepOutcome(
            status,
            {"completed": 0, "failed": 1, "interrupted": 130}[status],  # type: ignore[arg-type]
            self._run_dir(name, record_run_dir),
            f"{name} {status}",
        )

    def _run_dir(self, name: str, record_run_dir) -> Path:  # noqa: ANN001
        run_dir = self.tmp_path / "reports" / f"run-{name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text("{}")
        record_run_dir(run_dir)
        return run_dir


def unrestored_run(reports: Path) -> Path:
    """A completed run whose final restore left `decode` changed, in status.json as the sweep
    writes it (RestoreStatus is the writer `orch restore` uses; the sweep's LiveStatus writes
    the same fields through the same left_changed)."""
    from helpers.report_synth import synthetic_run, write_run

    from orchestrator.store.atomic import write_json_atomic
    from orchestrator.store.liveness import StatusFile
    from orchestrator.team.livestatus import RestoreStatus

    manifest, records = synthetic_run(replicates=1, failures=False)
    run_dir = write_run(reports / manifest.run_id, manifest, records)
    status = StatusFile(
        run_id=manifest.run_id, name=manifest.name, testbed="local", host="h", pid=1, pid_start=1,
        state="finished", started=manifest.started, updated=manifest.started, done=8, total=8, failed=0,
    )  # fmt: skip
    write_json_atomic(run_dir / "status.json", status)
    RestoreStatus(run_dir).restore_ended(["decode"])
    return run_dir
