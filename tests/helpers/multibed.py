"""A deployment of fakes whose roles have several hosts (issue 14): the testbed is read from an
inventory text with orch's own reader (so `nodes:`/`instances:` are parsed as users write them),
then every host gets its own FakeTransport and FakeServiceManager.

Health, as a multi-node SGLang instance behaves: only node rank 0 serves HTTP, and it answers 200
only while every node of its instance runs and is ready (rank 0 waits for the other ranks)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import httpx
from fakes import REPRO_OUTPUT, FakeServiceManager, FakeTransport, FakeUnit

from orchestrator.core.config import read_inventory
from orchestrator.core.inventory import Testbed
from orchestrator.edges.deployment import Deployment, HostHandle


@dataclass
class MultiBed:
    deployment: Deployment
    transports: dict[str, FakeTransport]  # host key -> its transport
    managers: dict[str, FakeServiceManager]
    client: httpx.Client
    originals: dict[str, bytes]
    health_hits: dict[str, int]  # host key -> health requests it answered

    def file(self, key: str) -> bytes:
        return self.transports[key].files[self.deployment.hosts[key].host.env_file]

    def restarts(self) -> list[str]:
        return [f"{key}:{u}" for key, m in self.managers.items() for u in m.restarts()]


def multi_bed(tmp_path: Path, inventory: str, envs: dict[str, str], *, active: bool = True) -> MultiBed:
    """`envs`: host key -> its env file's text (each host has its own file)."""
    path = tmp_path / "inventory.yaml"
    path.write_text(inventory)
    testbed = read_inventory(path).testbed(None)
    transports, managers, handles = {}, {}, {}
    for key, host in testbed.hosts.items():
        t = FakeTransport(host.label, {host.env_file: envs[key]})
        t.allow_file_commands()
        t.script(re.compile(r"^fake-repro\b"), stdout=REPRO_OUTPUT)
        t.script(re.compile(r"nvidia-smi"), stdout="--no-nvidia-smi--\n")  # GPU telemetry: none here
        for u in host.units:
            t.script(["systemctl", "show", "-p", "ExecStart", "--value", u.name], stdout="{ argv[]=/usr/bin/srv ; }\n")
        units = [FakeUnit(u.name, active=active) for u in host.units]
        transports[key] = t
        managers[key] = FakeServiceManager(t, host.env_file, host.dialect, units, host.label)
        handles[key] = HostHandle(host, t, managers[key])
    deployment = Deployment(testbed, handles)
    hits: dict[str, int] = {}
    client = httpx.Client(transport=httpx.MockTransport(_handler(testbed, managers, hits)), timeout=2.0)
    originals = {key: transports[key].files[h.host.env_file] for key, h in handles.items()}
    return MultiBed(deployment, transports, managers, client, originals, hits)


def _handler(testbed: Testbed, managers: dict[str, FakeServiceManager], hits: dict[str, int]):  # type: ignore[no-untyped-def]
    serving = {_origin(h.url): key for key, h in testbed.hosts.items() if h.rank == 0}

    def handle(request: httpx.Request) -> httpx.Response:
        key = serving.get(_origin(str(request.url)))
        if key is None:
            raise httpx.ConnectError(f"no fake host at {request.url}", request=request)
        nodes = testbed.hosts[key].group or (key,)
        mine = managers[key]
        if not any(mine.running(u) for u in mine.units):
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        hits[key] = hits.get(key, 0) + 1
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"version": "fake-1.0"})
        ready = all(managers[n].ready(u) for n in nodes for u in managers[n].units)
        return httpx.Response(200, text="ok") if ready else httpx.Response(503, text="loading")

    return handle


def _origin(url: str) -> str:
    parts = httpx.URL(url)
    return f"{parts.host}:{parts.port}"
