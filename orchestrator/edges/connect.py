"""EDGE wiring: turn a testbed description into live handles (edges.deployment): one transport
per host (SSH, or local processes) and its service manager (systemd over SSH, or orch's local
one).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.core.inventory import Host, Testbed
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.services import ServiceManager
from orchestrator.edges.transport import Transport


def connect(testbed: Testbed) -> Deployment:
    """Open one transport per host (SSH connects lazily on first use) and its service manager."""
    hosts: dict[str, HostHandle] = {}
    local = _local_manager(testbed)
    for key, host in testbed.hosts.items():
        if host.transport == "local":
            from orchestrator.edges.transport.local import LocalTransport

            hosts[key] = HostHandle(host, LocalTransport(host.label), local)  # type: ignore[arg-type]
        else:
            transport, services = _ssh_edges(host)
            if host.health_tunnel:  # poll the health port through the SSH connection
                parts = urlsplit(host.health)
                port = parts.port or (443 if parts.scheme == "https" else 80)
                tunnel = transport.open_tunnel(parts.hostname or "127.0.0.1", port)  # type: ignore[attr-defined]
                host = dataclasses.replace(host, health=tunnel.url_for(host.health))
            hosts[key] = HostHandle(host, transport, services)
    return Deployment(testbed, hosts, local)


def _ssh_edges(host: Host) -> tuple[Transport, ServiceManager]:
    from orchestrator.edges.services.systemd import SystemdManager
    from orchestrator.edges.transport.ssh import SshTransport

    ssh = host.ssh
    assert ssh is not None  # config guarantees it for transport: ssh
    transport = SshTransport(
        host.label,
        ssh.host,
        port=ssh.port,
        user=ssh.user,
        key_filename=str(Path(ssh.key).expanduser()) if ssh.key else None,
        known_hosts=str(Path(ssh.known_hosts).expanduser()) if ssh.known_hosts else None,
        accept_new_host_keys=ssh.accept_new_host_keys,
        connect_timeout=ssh.connect_timeout,
        use_sudo=ssh.sudo,
    )
    return transport, SystemdManager(transport, host.label, sudo=ssh.sudo)


def _local_manager(testbed: Testbed) -> object | None:
    local_hosts = [h for h in testbed.hosts.values() if h.transport == "local"]
    if not local_hosts:
        return None
    from orchestrator.edges.services.local import LocalServiceManager, LocalUnit

    units = {}
    for host in local_hosts:
        for unit in host.units:
            argv = tuple(expand_unit_arg(a) for a in (unit.command or ()))
            units[unit.name] = LocalUnit(unit.name, argv, Path(host.env_file), host.dialect, host=host.label)
    assert testbed.state_dir is not None
    return LocalServiceManager(units, testbed.state_dir, host="local")


def expand_unit_arg(arg: str) -> str:
    """Local unit commands may say {python}: the interpreter orch runs under (its venv)."""
    return arg.replace("{python}", sys.executable)
