"""Parallel testbeds on the fakes, for the sweep API: an inventory of N testbeds (ssh hosts with
made-up addresses, never dialled), `session.connect` answering with FakeTransport /
FakeServiceManager deployments whose files and units outlive a controller (run, kill -9,
restore and resume see the same hosts), and the runner's HTTP client answered from the fake
units. A testbed in `Fleet.down` answers nothing, as a host that is powered off.

No process starts and no socket opens: the unit tier."""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fakes import REPRO_OUTPUT, FakeServiceManager, FakeTransport, FakeUnit, Reply

from helpers.parallel_fakes import ReproHook  # the inventory and files: helpers.parallel_fakes
from orchestrator.core import gpuinfo
from orchestrator.core.inventory import Host, Testbed
from orchestrator.edges import provenance
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.errors import TransportError
from orchestrator.sweep import api, session
from orchestrator.sweep import runner as runner_mod
from orchestrator.sweep.progress import QuietProgress


class Fleet:
    """Every fake host of every testbed, kept across connects (a host outlives a controller)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env  # role -> its env file's original text
        self.transports: dict[tuple[str, str], FakeTransport] = {}
        self.managers: dict[tuple[str, str], FakeServiceManager] = {}
        self.down: set[str] = set()
        self.origin: dict[str, tuple[str, str]] = {}  # "host:port" -> (testbed, role)
        self.repro_hook: ReproHook | None = None

    def connect(self, testbed: Testbed) -> Deployment:
        hosts = {}
        for key, host in testbed.hosts.items():
            t, m = self._host(testbed.name, key, host)
            if testbed.name in self.down:
                hosts[key] = HostHandle(host, _Dead(host.label), _Dead(host.label))  # type: ignore[arg-type]
            else:
                hosts[key] = HostHandle(host, t, m)
        return Deployment(testbed, hosts)

    def client(self, *args: object, **kwargs: object) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self._answer), timeout=2.0)

    def file(self, testbed: str, role: str) -> bytes:
        return self.transports[(testbed, role)].files[f"/etc/orch/{role}.env"]

    def extra_files(self, testbed: str, role: str) -> list[str]:
        return sorted(p for p in self.transports[(testbed, role)].files if p != f"/etc/orch/{role}.env")

    def _host(self, tb: str, key: str, host: Host) -> tuple[FakeTransport, FakeServiceManager]:
        if (tb, key) not in self.transports:
            t = FakeTransport(host.label, {host.env_file: self.env[key]})
            t.allow_file_commands()
            t.script(gpuinfo.COMMAND, stdout=gpuinfo.NO_NVIDIA_SMI + "\n")
            t.script(re.compile(r"orch-unrestored"), lambda text, argv, t=t: _listing(t, argv[-1]))
            for u in host.units:
                t.script(
                    ["systemctl", "show", "-p", "ExecStart", "--value", u.name],
                    stdout=f"{{ argv[]=/usr/bin/fake-server --unit {u.name} ; }}\n",
                )
            t.script(re.compile(r"^fake-repro\b"), lambda text, argv, tb=tb: self._repro(tb, text))
            self.transports[(tb, key)] = t
            units = [FakeUnit(u.name, active=True) for u in host.units]
            self.managers[(tb, key)] = FakeServiceManager(t, host.env_file, host.dialect, units, host.label)
            url = httpx.URL(host.url)
            self.origin[f"{url.host}:{url.port}"] = (tb, key)
        return self.transports[(tb, key)], self.managers[(tb, key)]

    def _repro(self, tb: str, text: str) -> Reply:
        got = self.repro_hook(tb, text) if self.repro_hook is not None else None
        return got if got is not None else Reply(0, REPRO_OUTPUT)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        key = self.origin.get(f"{request.url.host}:{request.url.port}")
        if key is None or key[0] in self.down:
            raise httpx.ConnectError("no route to host", request=request)
        m = self.managers[key]
        if not any(m.running(u) for u in m.units):
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"version": "fake-1.0"})
        return httpx.Response(200, text="ok") if all(m.ready(u) for u in m.units) else httpx.Response(503)


def _listing(t: FakeTransport, prefix: str) -> Reply:
    """What `ls PREFIX*` of orch's leftover check finds on the host."""
    return Reply(0, "".join(p + "\n" for p in sorted(t.files) if p.startswith(prefix)))


class _Dead:
    """A host that does not answer: every transport or service call fails as ssh would."""

    def __init__(self, label: str) -> None:
        self.host = label

    def __getattr__(self, name: str) -> Callable[..., object]:
        if name == "close":
            return lambda *a, **k: None

        def dead(*args: object, **kwargs: object) -> object:
            raise TransportError(self.host, "ssh: connect to host: No route to host")

        return dead


def install(monkeypatch: pytest.MonkeyPatch, fleet: Fleet) -> None:
    """Connects reach the fleet; the controller's description asks no `git` (no process starts)."""
    monkeypatch.setattr(session, "connect", fleet.connect)
    monkeypatch.setattr(provenance, "orch_commit", lambda root=None: ("", False))
    monkeypatch.setattr(runner_mod, "httpx", types.SimpleNamespace(Client=fleet.client))


def run(
    tmp_path: Path, matrix: Path, inventory: Path, testbeds: tuple[str, ...], run_id: str = "r1"
) -> api.SweepOutcome:
    request = api.SweepRequest(
        matrix,
        inventory,
        testbeds=testbeds,
        reports_dir=tmp_path / "reports",
        run_id=run_id,
        skip_preflight=True,
        seed=1,
    )
    return api.run(request, lambda s: QuietProgress(), warn=lambda m: None)


def resume(run_dir: Path) -> api.SweepOutcome:
    return api.resume(api.ResumeRequest(run_dir), lambda s: QuietProgress(), warn=lambda m: None)


def restore(run_dir: Path) -> api.RestoreOutcome:
    return api.restore(api.RestoreRequest(run_dir), QuietProgress(), warn=lambda m: None)
