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


def router_workers(deployment: Deployment, h: HostHandle) -> tuple[tuple[str, int], ...]:
    """(role, instances) behind a router: the roles it starts after, each with its serving hosts
    (one per instance: nodes above rank 0 are not workers the router registers)."""
    return tuple((role, len(urls)) for role, urls in router_instances(deployment, h).items())


def router_host(host: Host) -> tuple[str, ...]:
    """The names the inventory gives a router's machine (its url's host, its ssh host): a worker
    the router lists on its own loopback (http://127.0.0.1:30002) is the instance on that machine."""
    names = (urlsplit(host.url).hostname or "", host.ssh.host if host.ssh else "")
    return tuple(n for n in names if n)


def router_instances(deployment: Deployment, h: HostHandle) -> dict[str, tuple[str, ...]]:
    """role -> the `url:` of each instance behind a router (the roles it starts after, each serving
    host): the only workers it may register."""
    testbed = deployment.testbed
    return {
        role: tuple(deployment.hosts[key].host.url for key in testbed.roles[role] if deployment.hosts[key].serves)
        for role in testbed.hosts[h.key].after
        if role in testbed.roles
    }
