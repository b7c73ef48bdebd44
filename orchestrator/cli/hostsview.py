"""The hosts of the chosen testbeds as orch read them, for `orch validate`: what a user writing an
inventory for real hosts checks before the first run (the address, user and key orch will log in
with, the env file it will edit, the unit it will restart, the URL it will wait on), with what orch
filled in itself marked as a default. Bounded: an inventory may hold 1,000 hosts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from orchestrator.core.inventory import KNOWN_SHOWN, Host, Testbed
from orchestrator.core.words import counted

HOSTS_PER_ROLE = 3  # a role of 256 instances shows its first few, then how many more


def host_lines(testbeds: Sequence[Testbed], inventory: str) -> Iterator[str]:
    """Per testbed, a heading and a line per host: its first KNOWN_SHOWN roles, HOSTS_PER_ROLE
    hosts of each, then counts of the rest."""
    for testbed in testbeds:
        where = f"{inventory}:{testbed.line}" if testbed.line else inventory
        yield f"testbed {testbed.name!r} ({where}): {counted(len(testbed.hosts), 'host')}"
        roles = list(testbed.roles.items())
        width = max(len(key) for key in testbed.hosts)
        for role, keys in roles[:KNOWN_SHOWN]:
            for key in keys[:HOSTS_PER_ROLE]:
                yield f"  {role:<{width}}  {host_line(testbed.hosts[key], width)}"
            if len(keys) > HOSTS_PER_ROLE:
                yield f"  {role}: ... and {counted(len(keys) - HOSTS_PER_ROLE, 'more host', 'more hosts')}"
        rest = roles[KNOWN_SHOWN:]
        if rest:
            hosts = sum(len(keys) for _, keys in rest)
            yield f"  ... and {counted(len(rest), 'more role', 'more roles')} ({counted(hosts, 'host')})"


def host_line(host: Host, width: int) -> str:
    """label, how orch reaches it, what it edits, restarts and waits on: '(default ...)' where the
    inventory left a value to orch."""
    units = ", ".join(unit.name for unit in host.units)
    health = host.health if host.health_given else f"{host.health} (default)"
    return f"{host.key:<{width}}  {_reach(host)}  env {host.env_file}  unit {units}  health {health}"


def _reach(host: Host) -> str:
    """'ssh user@host:port (default user, port)  key PATH', or 'local'."""
    ssh = host.ssh
    if ssh is None:
        return "local"
    defaulted = [name for name in ("user", "port") if name not in ssh.given]
    marks = f" (default {', '.join(defaulted)})" if defaulted else ""
    key = ssh.key if ssh.key else "(default: ssh-agent, ~/.ssh)"
    return f"ssh {ssh.user}@{host.address}{marks}  key {key}"
