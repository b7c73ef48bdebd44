"""EDGE wiring: turn a testbed description into live handles (transport + service manager per
role). Checking every host before anything is changed is edges.preflight's.

The runner only ever sees `Deployment`; tests can build one from fakes or from real hosts.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.core.model import Host, Testbed
from orchestrator.edges.services import ServiceManager
from orchestrator.edges.transport import Transport
from orchestrator.errors import OrchError


@dataclass
class HostHandle:
    host: Host
    transport: Transport
    services: ServiceManager

    @property
    def role(self) -> str:
        return self.host.role

    @property
    def key(self) -> str:
        """This host's key in Deployment.hosts (the role, for a role of one host)."""
        return self.host.key

    @property
    def serves(self) -> bool:
        """Whether its own ports answer: not a node above rank 0 of a multi-node instance."""
        return self.host.rank == 0

    @property
    def units(self) -> list[str]:
        return [u.name for u in self.host.units]


@dataclass
class Deployment:
    testbed: Testbed
    hosts: dict[str, HostHandle]  # host key -> handle (the key is the role, for a role of one host)
    local_manager: object | None = field(default=None)  # LocalServiceManager, if any

    def close(self) -> None:
        for handle in self.hosts.values():
            try:
                handle.transport.close()
            except OrchError:
                pass


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
            units[unit.name] = LocalUnit(unit.name, argv, Path(host.env_file), host.dialect)
    assert testbed.state_dir is not None
    return LocalServiceManager(units, testbed.state_dir, host="local")


def expand_unit_arg(arg: str) -> str:
    """Local unit commands may say {python}: the interpreter orch runs under (its venv)."""
    return arg.replace("{python}", sys.executable)


def health_ports(host: Host) -> list[int]:
    """The ports orch relies on for a host (its health URL and its URL), as the inventory gives
    them (a health tunnel rewrites the handle's URL to a local port; the host's is this one)."""
    ports = []
    for url in (host.health, host.url):
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if port not in ports:
            ports.append(port)
    return ports
