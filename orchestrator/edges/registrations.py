"""Ask a router which workers it has registered, and name those that are not the inventory's (EDGE:
httpx + name resolution; what the answers mean is core.routerworkers).

Why: the readiness wait counts a router ready once its workers are healthy and at least the
inventory's instances are registered. A router that registers more (a teammate's server added
through its worker API, a stale registration of a server on another port, an extra `--decode URL`
in its command line or env file) sends part of the repro to a server orch did not start, so
such a trial must not count as data. Called once the wait is over (the router registers workers
as they turn healthy; the wait holds out up to 5 s for those its command line lists, which
sglang-router 0.3.2 may register ~10 ms after calling itself ready: edges.health), so each trial
costs one more GET (~1 ms on a LAN).

sglang-router 0.3.2 lists its workers on GET /workers (their URLs as it was given them, and their
`worker_type`); older ones on /list_workers. A router without a list (404, or not a list) is
judged by the counts in its /readiness body; one with neither (the bundled simulator's router,
which routes to the one prefill and decode on its command line) cannot be asked and passes.
Host names are resolved only when a URL matches no instance as written, so a deployment whose
router uses the inventory's URLs costs no lookup.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from orchestrator.core.endpoints import LOOPBACK
from orchestrator.core.routerworkers import (
    Registered,
    endpoint,
    excess_problem,
    registered_workers,
    strangers,
    strangers_message,
    too_many,
)
from orchestrator.edges.httpread import NotJson, get_json

# Where a router lists its workers: sglang-router >= 0.2 first, then the older name.
WORKER_LIST_PATHS = ("/workers", "/list_workers")
# One GET on a router that has just answered its readiness.
LIST_TIMEOUT_S = 2.0


def router_strangers(
    client: httpx.Client,
    health_url: str,
    instances: Mapping[str, Sequence[str]],
    totals: Mapping[str, int],
    router_host: Sequence[str] = (),
    *,
    dp_ranks: bool = False,
) -> str | None:
    """Why the router behind `health_url` (its /readiness) registers workers that are not the
    inventory's `instances` (role -> instance URLs), in the user's words ("lists decode worker
    ..."); None when it does not, or says nothing either way. ``totals``: the workers its last
    readiness answer counts (role -> N, "" for a flat total), for a router that lists none.
    ``router_host``: names of the router's machine (a worker it lists on its loopback runs there).
    ``dp_ranks``: a --dp-aware router, whose counts are not compared (core.routerworkers.excess_problem)."""
    listed = _worker_list(client, health_url)
    if listed is not None:
        if (refused := too_many(listed)) is not None:
            return refused
        found = strangers(listed, instances)
        if found:  # as written they differ: a name and its address may still be one host
            found = strangers(found, instances, _addresses(found, instances, router_host))
        return strangers_message(found, instances) if found else None
    return excess_problem(totals, {role: len(urls) for role, urls in instances.items()}, dp_ranks=dp_ranks)


def _worker_list(client: httpx.Client, health_url: str) -> tuple[Registered, ...] | None:
    parts = urlsplit(health_url)
    for path in WORKER_LIST_PATHS:
        listed = registered_workers(_get(client, urlunsplit((parts.scheme, parts.netloc, path, "", ""))))
        if listed is not None:
            return listed
    return None


def _get(client: httpx.Client, url: str) -> object:
    """The JSON a 200 answer carries, else None (not there: an older router has the other path;
    not JSON). An answer too large or too slow raises (httpread's AnswerTooLarge, AnswerTimedOut):
    a list orch cannot read proves nothing about who serves, so the trial fails naming it rather
    than be judged by counts that would pass."""
    try:
        status, value = get_json(client, url, deadline_s=LIST_TIMEOUT_S)
    except (httpx.HTTPError, NotJson):
        return None
    return value if status == 200 else None


def _addresses(
    found: Sequence[Registered], instances: Mapping[str, Sequence[str]], router_host: Sequence[str]
) -> dict[str, frozenset[str]]:
    """What the host names in these URLs resolve to (IP literals need no lookup); the router's own
    names (and what they resolve to) are its loopback too."""
    urls = [w.url for w in found] + [u for urls in instances.values() for u in urls]
    hosts = {e[0] for u in urls if (e := endpoint(u)) is not None and e[0] != LOOPBACK}
    out = {host: _resolve(host) for host in hosts if not _is_address(host)}
    own = {h.lower() for h in router_host if h}
    own |= {a for h in own if not _is_address(h) for a in _resolve(h)}
    for host in hosts:
        if host in own or out.get(host, frozenset()) & own:
            out[host] = out.get(host, frozenset()) | {LOOPBACK}
    return out


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _resolve(host: str) -> frozenset[str]:
    """A host name's addresses (empty if it does not resolve); asked once per sweep process."""
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return frozenset()
