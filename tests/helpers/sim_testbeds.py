"""Several private copies of the simulated PD deployment in one inventory (testbeds tb1, tb2, ...),
each on its own free ports and env files in a test's folder: for sweeps and hunts across parallel
testbeds. And the last resort after a failed test: SIGKILL, by pid, the processes on those ports."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from helpers.netutil import free_ports
from helpers.procs import kill_by_pid, processes_mentioning

SERVER = '["{python}", -m, orchestrator.sim.server'


def write_inventory(folder: Path, names: list[str], env: Mapping[str, str]) -> tuple[Path, list[int]]:
    """inventory.yaml in folder with one testbed per name (its env files `NAME-ROLE.env` start as
    env[ROLE]); returns its path and every port its units listen on."""
    blocks, all_ports = [], []
    for name in names:
        pp, rp, dp = free_ports(3)
        all_ports += [pp, rp, dp]
        for role, text in env.items():
            (folder / f"{name}-{role}.env").write_text(text)
        blocks.append(textwrap.indent(_testbed(name, pp, rp, dp), "  "))
    path = folder / "inventory.yaml"
    path.write_text("testbeds:\n" + "".join(blocks))
    return path, all_ports


def _testbed(name: str, pp: int, rp: int, dp: int) -> str:
    return textwrap.dedent(f"""\
        {name}:
          state_dir: state-{name}
          hosts:
            prefill:
              env_file: {name}-prefill.env
              units: [{{name: {name}-prefill, command: {SERVER}, --role, prefill, --port, "{pp}"]}}]
              url: http://127.0.0.1:{pp}
              health_timeout: 30
            decode:
              env_file: {name}-decode.env
              units: [{{name: {name}-decode, command: {SERVER}, --role, decode, --port, "{dp}"]}}]
              url: http://127.0.0.1:{dp}
              health_timeout: 30
            router:
              env_file: {name}-router.env
              units: [{{name: {name}-router, command: {SERVER}, --role, router, --port, "{rp}",
                        --prefill-url, "http://127.0.0.1:{pp}", --decode-url, "http://127.0.0.1:{dp}"]}}]
              url: http://127.0.0.1:{rp}
              health_timeout: 30
              after: [prefill, decode]
        """)


def env_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.env"))}


def kill_servers_on(ports: list[int]) -> None:
    """SIGKILL the simulator servers listening on these ports (their process groups), by pid."""
    for pid, cmd in processes_mentioning([f"--port {p} " for p in ports]):
        if "orchestrator.sim.server" in cmd:
            kill_by_pid(pid)
