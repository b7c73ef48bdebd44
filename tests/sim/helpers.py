"""Helpers for the simulator tests: start real server processes on free loopback ports, poll
them, and check by PID that nothing is left running."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pytest
from helpers.netutil import free_ports
from helpers.procs import pid_running  # noqa: F401 (for the sim test modules)

SERVER = [sys.executable, "-m", "orchestrator.sim.server"]
REPRO = [sys.executable, "-m", "orchestrator.sim.repro"]


def free_port() -> int:
    """One free loopback port (helpers.netutil: this xdist worker's own slice, if any)."""
    return free_ports(1)[0]


def get(url: str, timeout: float = 2.0) -> tuple[int, dict[str, object]]:
    """GET a JSON endpoint; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_until(predicate, timeout: float, interval: float = 0.01) -> float:
    """Poll until predicate() is true; return the seconds it took; fail the test at timeout."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - start


@dataclass
class Server:
    role: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Sim:
    """Starts simulator servers as child processes and guarantees they are stopped."""

    tmp: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(
        self, role: str, env: Mapping[str, str] = {}, port: int | None = None, extra: tuple[str, ...] = ()
    ) -> Server:
        port = free_port() if port is None else port
        log = self.tmp / f"{role}-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*SERVER, "--role", role, "--port", str(port), *extra],
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(proc)
        return Server(role, port, proc, log)

    def start(self, role: str, env: Mapping[str, str] = {}, extra: tuple[str, ...] = ()) -> Server:
        """Spawn and wait until the port accepts connections."""
        server = self.spawn(role, env, extra=extra)
        wait_until(lambda: _listening(server), timeout=10)
        return server

    def deployment(self, env: Mapping[str, str]) -> tuple[Server, Server, Server]:
        """prefill + decode + router, ready (router /readiness 200)."""
        base = {"SIM_WARMUP_S": "0", **env}
        prefill, decode = self.start("prefill", base), self.start("decode", base)
        router = self.start("router", base, extra=("--prefill-url", prefill.url, "--decode-url", decode.url))
        wait_until(lambda: get(router.url + "/readiness")[0] == 200, timeout=10)
        return prefill, decode, router

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in self.started:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(5)


def _listening(server: Server) -> bool:
    if server.proc.poll() is not None:
        pytest.fail(f"{server.role} exited with {server.proc.returncode}:\n{server.text()}")
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", server.port)) == 0


def run_repro(router: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*REPRO, "--router", router, *args], capture_output=True, text=True, timeout=timeout)
