"""A parallel sweep on the fakes (tests/fakes.py): an inventory of N testbeds whose hosts are ssh
hosts with made-up addresses, `session.connect` answering with FakeTransport/FakeServiceManager
deployments, and the runners' HTTP client answered from the fake units (one MockTransport for
every testbed). The whole `api.run` path runs (locks, backup, trials, restore, report) with no
socket and no process, unless the matrix's repro runs on the controller.

A repro `on:` a host is the scripted command `fake-repro ...`; Fleet.repro_hook may answer it
(block, fail, stand for a kill -9) per testbed."""

from __future__ import annotations

import re
import socket
import sys
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from fakes import REPRO_OUTPUT, FakeServiceManager, FakeTransport, FakeUnit, Reply

from orchestrator.core import gpuinfo
from orchestrator.core.inventory import Host, Testbed
from orchestrator.core.records import TrialRecord
from orchestrator.edges import preflight as preflight_mod
from orchestrator.edges import provenance
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.store.journal import read_journal
from orchestrator.sweep import api, session
from orchestrator.sweep import runner as runner_mod
from orchestrator.sweep.apitypes import SweepOutcome
from orchestrator.sweep.progress import QuietProgress
from orchestrator.sweep.sources import StepSource

ReproHook = Callable[[str, str], "Reply | None"]  # (testbed, command) -> its answer, or None: the default


def fake_matrix(name: str, replicates: int, *, extra: str = "") -> str:
    """The matrix a sweep on the fakes runs: factor d sets D on decode (levels 1, 2), and the repro
    `fake-repro` on prefill counts events (FakeTransport answers it); `extra`: top-level YAML lines
    (e.g. `order: sequential`)."""
    return (
        f"name: {name}\n"
        "factors:\n"
        '  d: {env: {decode: D}, levels: ["1", "2"]}\n'
        f"replicates: {replicates}\n"
        f"{extra}"
        "repro:\n"
        '  command: "fake-repro --trial {trial}"\n'
        "  on: prefill\n"
        "  timeout: 30\n"
        "  metrics:\n"
        "    events: {kind: proportion, regex: 'events=(?P<k>\\d+)/(?P<n>\\d+)'}\n"
    )


def inventory_text(names: Sequence[str], roles: Sequence[str] = ("prefill", "decode")) -> str:
    """Testbeds `names`, each with the same roles (the later ones start after the first)."""
    out = ["testbeds:"]
    for name in names:
        out += [f"  {name}:", "    hosts:"]
        for ri, role in enumerate(roles):
            addr = f"{name}-{role}.fake"
            out += [
                f"      {role}:",
                "        transport: ssh",
                f"        ssh: {{host: {addr}, user: root}}",
                f"        env_file: /etc/orch/{role}.env",
                "        dialect: systemd",
                f"        units: [{name}-{role}]",
                f"        url: http://{addr}:{30000 + ri}",
                f"        health: http://{addr}:{30000 + ri}/health",
                "        health_timeout: 5",
            ]
            if ri:
                out.append(f"        after: [{roles[0]}]")
    return "\n".join(out) + "\n"


class Fleet:
    """Every fake host of every testbed, kept across connects (a host outlives a controller)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env  # role -> its env file's text, on every testbed
        self.transports: dict[tuple[str, str], FakeTransport] = {}  # (testbed, role) -> ...
        self.managers: dict[tuple[str, str], FakeServiceManager] = {}
        self.origin: dict[str, tuple[str, str]] = {}  # "host:port" -> (testbed, role)
        self.repro_hook: ReproHook | None = None
        self.info: dict[str, dict[str, object]] = {}  # testbed -> its servers' /get_server_info beside the version
        # (testbed, role) -> its server's /get_server_info beside the version, from what it runs now
        # (e.g. its env file: Fleet.file); given, it answers in place of `info`
        self.info_of: Callable[[str, str], dict[str, object]] | None = None

    def host(self, testbed: str, key: str, host: Host) -> tuple[FakeTransport, FakeServiceManager]:
        k = (testbed, key)
        if k not in self.transports:
            t = FakeTransport(host.label, {host.env_file: self.env[key]})
            t.allow_file_commands()
            t.script(gpuinfo.COMMAND, stdout=gpuinfo.NO_NVIDIA_SMI + "\n")
            t.script(re.compile(r"orch-unrestored"), lambda text, argv, t=t: _unrestored(t, argv))
            for u in host.units:
                exec_start = f"{{ argv[]=/usr/bin/fake-server --unit {u.name} ; }}\n"
                t.script(["systemctl", "show", "-p", "ExecStart", "--value", u.name], stdout=exec_start)
            t.script(re.compile(r"^fake-repro\b"), lambda text, argv, tb=testbed: self._repro(tb, text))
            self.transports[k] = t
            units = [FakeUnit(u.name, active=True) for u in host.units]
            self.managers[k] = FakeServiceManager(t, host.env_file, host.dialect, units, host.label)
            url = httpx.URL(host.url)
            self.origin[f"{url.host}:{url.port}"] = k
        return self.transports[k], self.managers[k]

    def _repro(self, testbed: str, text: str) -> Reply:
        got = self.repro_hook(testbed, text) if self.repro_hook is not None else None
        return got if got is not None else Reply(0, REPRO_OUTPUT)

    def connect(self, testbed: Testbed) -> Deployment:
        hosts = {}
        for key, host in testbed.hosts.items():
            t, m = self.host(testbed.name, key, host)
            hosts[key] = HostHandle(host, t, m)
        return Deployment(testbed, hosts)

    def client(self, *args: object, **kwargs: object) -> httpx.Client:
        def handler(request: httpx.Request) -> httpx.Response:
            k = self.origin.get(f"{request.url.host}:{request.url.port}")
            if k is None:
                raise httpx.ConnectError("no host", request=request)
            m = self.managers[k]
            if not any(m.running(u) for u in m.units):
                raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
            if request.url.path == "/get_server_info":
                said = self.info_of(*k) if self.info_of is not None else self.info.get(k[0], {})
                return httpx.Response(200, json={"version": "fake-1.0", **said})
            return httpx.Response(200, text="ok") if all(m.ready(u) for u in m.units) else httpx.Response(503)

        return httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)

    def file(self, testbed: str, role: str) -> bytes:
        return self.transports[(testbed, role)].files[f"/etc/orch/{role}.env"]

    def extra_files(self, testbed: str, role: str) -> list[str]:
        """What lies beside the env file: host-side backups, locks (none once restored)."""
        return sorted(p for p in self.transports[(testbed, role)].files if p != f"/etc/orch/{role}.env")


def _unrestored(t: FakeTransport, argv: Sequence[str] | None) -> Reply:
    prefix = argv[-1] if argv else ""
    return Reply(0, "".join(p + "\n" for p in sorted(t.files) if p.startswith(prefix)))


def install(monkeypatch: pytest.MonkeyPatch, fleet: Fleet) -> None:
    """Point orch's session and runners at the fleet; the manifest's controller commit is not asked
    of git (the unit tier starts no process)."""
    monkeypatch.setattr(session, "connect", fleet.connect)
    monkeypatch.setattr(provenance, "orch_commit", lambda root=None: ("", False))
    monkeypatch.setattr(runner_mod, "httpx", types.SimpleNamespace(Client=fleet.client))


def install_with_preflight(monkeypatch: pytest.MonkeyPatch, fleet: Fleet) -> None:
    """install(), and preflight's health GETs answered by the fleet and the fake names resolving
    without a lookup: for the commands that run preflight (`orch hunt` has no --skip-preflight)."""
    install(monkeypatch, fleet)
    monkeypatch.setattr(preflight_mod, "httpx", types.SimpleNamespace(Client=fleet.client, HTTPError=httpx.HTTPError))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])


def write_files(tmp_path: Path, matrix: str, names: Sequence[str]) -> tuple[Path, Path]:
    (tmp_path / "m.yaml").write_text(matrix)
    (tmp_path / "inv.yaml").write_text(inventory_text(names))
    return tmp_path / "m.yaml", tmp_path / "inv.yaml"


def run(tmp_path: Path, matrix: Path, inventory: Path, testbeds: Sequence[str], **kw: object) -> SweepOutcome:
    """`orch run` through the API, run id r1 (its folder: tmp_path/reports/r1)."""
    req = api.SweepRequest(
        matrix,
        inventory,
        testbeds=tuple(testbeds),
        reports_dir=tmp_path / "reports",
        run_id="r1",
        skip_preflight=True,
        seed=1,
        **kw,  # type: ignore[arg-type]
    )
    return api.run(req, lambda started: QuietProgress(), warn=lambda message: None)


def interrupted_sweep(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    testbeds: Sequence[str] = ("A",),
    edit_inventory: Callable[[str], str] | None = None,
) -> tuple[Fleet, SweepOutcome, Path]:
    """A 2x3 sweep (run id r1) Ctrl-C'd in its third trial's repro, hosts restored, on a new fleet
    installed for the test (`edit_inventory`: the inventory's text changed before the run): the
    fleet, the outcome and the inventory's path. What a resume, a restore or their refusals start from."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix(name, 3, extra="seed: 7\n"), testbeds)
    if edit_inventory is not None:
        i.write_text(edit_inventory(i.read_text()))
    calls: list[str] = []

    def repro(testbed: str, command: str) -> Reply | None:
        calls.append(command)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return None

    fleet.repro_hook = repro
    req = api.SweepRequest(
        m, i, testbeds=tuple(testbeds), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True
    )
    outcome = api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert outcome.interrupted and all(fleet.file(t, "decode") == b"D=0\n" for t in testbeds)
    fleet.repro_hook = None
    return fleet, outcome, i


def trials_journaled(journal: Path) -> int:
    return sum(isinstance(r, TrialRecord) for r in read_journal(journal).records) if journal.exists() else 0


def runner_threads() -> list[str]:
    """The runner threads still alive (execute names them testbed-<name>)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("testbed-")]


def sweep_stops(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An Event set once a step source is closed: no runner gets another trial from then on (a
    runner closes the shared source when an error or --fail-fast ends the sweep)."""
    closed = threading.Event()
    close = StepSource.close

    def closing(self: StepSource) -> None:
        close(self)
        closed.set()

    monkeypatch.setattr(StepSource, "close", closing)
    return closed


def runners_made(monkeypatch: pytest.MonkeyPatch) -> list[runner_mod.Runner]:
    """The runners the sweep makes from now on (a parallel sweep: one per testbed), in order."""
    made: list[runner_mod.Runner] = []

    class Recorded(runner_mod.Runner):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(runner_mod, "Runner", Recorded)
    return made


def main_thread_waits_for_runners() -> bool:
    """The main thread is inside _join_all's wait for the runner threads (where a Ctrl-C is taken
    as an order to stop them), not on its way there."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    inner = None
    while frame is not None:
        if frame.f_code is runner_mod._join_all.__code__:
            return inner is not None  # _join_all has called something: its Event.wait
        inner, frame = frame, frame.f_back
    return False


# GPUs per testbed (nvidia-smi answered on each testbed's decode host)
H100 = ("NVIDIA H100 80GB HBM3", "550.54.15")
H200 = ("NVIDIA H200", "560.35.03")


def nvidia_smi(model: str, driver: str) -> str:
    """What gpuinfo.COMMAND prints on a host with two GPUs of `model` (tests/test_provenance.py)."""
    banner = f"| NVIDIA-SMI {driver}     Driver Version: {driver}     CUDA Version: 12.4     |\n"
    return f"{model}, {driver}\n" * 2 + f"{gpuinfo.BANNER}\nMon Nov 30 12:00:00 2026\n" + banner


class GpuFleet(Fleet):
    """The fleet, the decode host of each testbed answering nvidia-smi as `gpus` says at the next connect."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.gpus: dict[str, tuple[str, str]] = {}  # testbed -> its decode host's GPUs

    def host(self, testbed: str, key: str, host: Host) -> tuple[FakeTransport, FakeServiceManager]:
        t, m = super().host(testbed, key, host)
        if key == "decode" and testbed in self.gpus:
            t.script(gpuinfo.COMMAND, stdout=nvidia_smi(*self.gpus[testbed]))  # later scripts win
        return t, m


def fleet(monkeypatch: pytest.MonkeyPatch, **gpus: tuple[str, str]) -> GpuFleet:
    f = GpuFleet({"prefill": "P=0\n", "decode": "D=0\n"})
    f.gpus = dict(gpus)
    install(monkeypatch, f)
    return f
