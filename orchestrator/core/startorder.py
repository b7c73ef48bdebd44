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
    placed: set[str] = set()  # what `ordered` holds: a list lookup made 32,768 hosts quadratic

    def visit(key: str) -> None:
        if key in placed:
            return
        placed.add(key)  # before its dependencies: the graph is acyclic (the reader checks)
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
    out_roles = {testbed.hosts[k].role for k in out}  # a host depends on roles, not on hosts
    changed = True
    while changed:  # one pass per level of the `after:` graph
        changed = False
        for key, host in testbed.hosts.items():
            if key not in out and out_roles.intersection(host.after):
                out.add(key)
                out_roles.add(host.role)
                changed = True
    return out
