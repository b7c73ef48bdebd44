"""Loopback never through a proxy: the environment orch gives what it starts on this machine.

Why: a lab's login node often exports http_proxy (for pip, curl, a model download), and HTTP
clients honour it for every address NO_PROXY does not name, loopback included. The real
sglang-router (reqwest) then sent its worker health checks for 127.0.0.1 to the proxy, answered
"insufficient healthy workers", and every trial of README's first command failed. The proxy is
kept (a server may still need it to fetch weights); only the loopback names are added to
NO_PROXY and no_proxy, as curl and Python's urllib read them. A NO_PROXY of `*` already covers it.
"""

from __future__ import annotations

from collections.abc import Mapping

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
NO_PROXY_VARS = ("no_proxy", "NO_PROXY")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def loopback_unproxied(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the loopback names in NO_PROXY and no_proxy when it sets a proxy (both
    spellings hold the union of what either named: clients differ in which they read)."""
    out = dict(env)
    if not any(out.get(name) for name in PROXY_VARS):
        return out
    named: list[str] = []
    for var in NO_PROXY_VARS:
        named += [n.strip() for n in out.get(var, "").split(",") if n.strip() and n.strip() not in named]
    if "*" in named:
        return out
    merged = ",".join(named + [n for n in LOOPBACK if n not in named])
    out.update(dict.fromkeys(NO_PROXY_VARS, merged))
    return out
