"""The order a testbed's hosts start in, from its `after:` graph (a router after its workers):
which hosts restart first and whose readiness waits on whom. A function of the testbed alone,
apart from planning, so that what restarts and restores hosts needs no plan.
"""

from __future__ import annotations

from orchestrator.core.inventory import Testbed


def restart_order(testbed: Testbed, roles: set[str]) -> list[str]:
    """Hosts (keys of testbed.hosts; a role of one host is its own key) in dependency order: a
    host comes after every host of each role in its `after` list."""
    ordered: list[str] = []

    def visit(key: str) -> None:
        if key in ordered:
            return
        for dep in testbed.hosts[key].after:
            for other in testbed.roles.get(dep, ()):
                if other in roles:
                    visit(other)
        ordered.append(key)

    for key in testbed.hosts:
        if key in roles:
            visit(key)
    return ordered


def dependants(testbed: Testbed, roles: set[str]) -> set[str]:
    """Hosts whose readiness depends on any of these hosts (e.g. the router on its workers)."""
    out = set(roles)
    changed = True
    while changed:
        changed = False
        for key, host in testbed.hosts.items():
            if key not in out and any(testbed.hosts[k].role in host.after for k in out):
                out.add(key)
                changed = True
    return out
