"""EDGE handles: a deployment is a testbed's hosts, each with its live transport and service
manager. Opening them is edges.connect's; checking every host before anything is changed is
edges.preflight's.

The runner only ever sees `Deployment`; tests can build one from fakes or from real hosts. The
types live apart from `connect` (which knows SSH, systemd and local processes), so what only
acts on hosts through their handles depends on the handles, not on every transport.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from orchestrator.core.inventory import Host, Testbed
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
