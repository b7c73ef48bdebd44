"""Which workers a router has registered, and which of them are not the inventory's (PURE).

A trial is data only if orch's own processes served it. The readiness wait already refuses a
router that registers FEWER workers than the inventory puts behind it; one that registers MORE
(a teammate's server added through the router's worker API, a stale registration of a server on
another port, an extra `--decode URL` in the router's command line) would send part of the
repro to a server orch never started, checked or restarted. So the router's own list of workers
is read (sglang-router 0.3.2: GET /workers, `{"workers":[{"url":...,"worker_type":"decode",...}],
"total":N,"stats":{...}}`) and every URL in it must be one of the inventory's instances.

URLs are compared as endpoints (host, port), not as text: the router keeps a URL as it was given
(`http://localhost:30002/` stays so), `localhost`, `127.0.0.1` and `::1` are one loopback, and a
default port is the scheme's. A router started with `--dp-aware` registers one worker per DP
rank (`http://host:port@3`): the rank is not part of the endpoint. Such a router's counts (a
router that gives no list) are ranks x instances, and the ranks per instance are the workers'
`--dp-size`, which orch does not know here: its counts are not compared (excess_problem), and each
trial's record says so (DP_COUNTS_UNCHECKED), instead of calling every trial's router a stranger's.
A host name the router uses and an address the inventory uses (or the other way round) match when
the caller passes what the name resolves to (``addresses``); resolving is I/O, so it is done by
the edge that calls this.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from orchestrator.core.endpoints import DEFAULT_PORTS, canonical_host

# A DP-aware router's per-rank suffix on a worker URL.
DP_RANK = re.compile(r"@\d+$")
# Most workers one answer is read for (a router in front of thousands is not a test bed). A list
# longer than this is no proof that none is a stranger's: it fails the check (too_many).
MAX_WORKERS = 4096
# The router flag that registers each DP rank of a worker as a worker of its own.
DP_AWARE_FLAG = "--dp-aware"
# The router flags that give it workers on its command line: one URL each, or (the list) several.
WORKER_LIST_FLAG = "--worker-urls"
WORKER_FLAGS = ("--prefill", "--decode", WORKER_LIST_FLAG)
# What a trial record says of a DP-aware router (the role is put in front).
DP_COUNTS_UNCHECKED = (
    "started with --dp-aware (one worker registered per DP rank): its worker counts were not compared with "
    "the inventory's instances; the workers it lists, when it lists them, were"
)


@dataclass(frozen=True)
class Registered:
    """One worker the router lists: its URL as the router spells it, and its kind (prefill,
    decode, regular; "" when the router does not say)."""

    url: str
    kind: str = ""


def registered_workers(value: object) -> tuple[Registered, ...] | None:
    """The workers a router's worker-list answer names, or None when it is not such a list (an
    older router, another proxy: then only counts can be compared). Shapes: sglang-router's
    `/workers` (`{"workers": [{"url": ..., "worker_type": ...}, ...]}`) and the older
    `/list_workers` (`{"urls": [...]}`). At most MAX_WORKERS + 1 are read: one past the bound is
    enough for too_many to refuse the list."""
    if not isinstance(value, dict):
        return None
    items = value.get("workers")
    if isinstance(items, list):
        found = [_registered(item) for item in items[: MAX_WORKERS + 1]]
        if all(r is not None for r in found):
            return tuple(r for r in found if r is not None)
        return None
    urls = value.get("urls")
    if isinstance(urls, list) and all(isinstance(u, str) for u in urls):
        return tuple(Registered(u) for u in urls[: MAX_WORKERS + 1])
    return None


def _registered(item: object) -> Registered | None:
    if not isinstance(item, dict) or not isinstance(item.get("url"), str):
        return None
    kind = item.get("worker_type")
    return Registered(item["url"], kind.lower() if isinstance(kind, str) else "")


def too_many(listed: Sequence[Registered]) -> str | None:
    """Why a worker list longer than orch reads fails the check (None when it is not). Why: a
    stranger past the first MAX_WORKERS was dropped unread (4,096 entries of an instance and then
    another server passed, in ~120 KB); a list orch cannot read whole proves nothing about who
    serves, as one too large to read (edges.registrations)."""
    if len(listed) <= MAX_WORKERS:
        return None
    return (
        f"lists {MAX_WORKERS + 1:,} workers or more, more than the {MAX_WORKERS:,} orch reads: it cannot tell "
        "that none of them is a server orch did not start"
    )


def endpoint(url: str) -> tuple[str, int] | None:
    """(host, port) of a worker URL, lower case, loopback names as "loopback", the scheme's port
    when none is written, a DP rank suffix dropped; None when it names no host."""
    text = DP_RANK.sub("", url.strip()).rstrip("/")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    host = canonical_host(parts.hostname or "")
    if not host:
        return None
    return host, DEFAULT_PORTS.get(parts.scheme.lower(), 80) if port is None else port


def strangers(
    registered: Sequence[Registered],
    instances: Mapping[str, Sequence[str]],
    addresses: Mapping[str, frozenset[str]] | None = None,
) -> tuple[Registered, ...]:
    """The registered workers that are none of the inventory's instances (role -> instance URLs).
    A worker whose kind is one of the roles is compared with that role's instances only (a
    decode registered as prefill is a stranger too); any other kind with every instance.
    ``addresses``: what host names resolve to (name -> addresses), so that a name and its address
    match; a name missing from it matches only itself."""
    resolved = addresses or {}
    out = []
    for worker in registered:
        urls = instances.get(worker.kind) if worker.kind in instances else [u for us in instances.values() for u in us]
        if not any(_same(worker.url, url, resolved) for url in urls or ()):
            out.append(worker)
    return tuple(out)


def _same(a: str, b: str, addresses: Mapping[str, frozenset[str]]) -> bool:
    ea, eb = endpoint(a), endpoint(b)
    if ea is None or eb is None or ea[1] != eb[1]:
        return False
    return bool(_names(ea[0], addresses) & _names(eb[0], addresses))


def _names(host: str, addresses: Mapping[str, frozenset[str]]) -> set[str]:
    """A host and what it resolves to, loopback addresses read as LOOPBACK."""
    return {host} | {canonical_host(a) for a in addresses.get(host, frozenset())}


def strangers_message(found: Sequence[Registered], instances: Mapping[str, Sequence[str]]) -> str:
    """The router's strangers in the user's words: which workers, and what the inventory has."""
    named = "; ".join(
        f"lists {w.kind + ' ' if w.kind else ''}worker {w.url}, which is not one of the inventory's instances"
        for w in found
    )
    listed = ", ".join(f"{role} {' '.join(urls)}" for role, urls in instances.items())
    return f"{named} ({listed})"


def dp_aware(commands: Iterable[Sequence[str]], env_values: Iterable[str]) -> bool:
    """Is a router started with --dp-aware: a word of one of its units' command lines (the
    inventory's `command:`), or of a value of its env file (one its unit expands into ExecStart,
    such as SGLANG_EXTRA_ARGS)?"""
    words = [w for command in commands for w in command] + [w for value in env_values for w in value.split()]
    return any(w == DP_AWARE_FLAG or w.startswith(DP_AWARE_FLAG + "=") for w in words)


def command_workers(commands: Iterable[Sequence[str]]) -> int:
    """How many workers a router's command lines give it: the distinct endpoints after its
    `--prefill URL [BOOTSTRAP_PORT]`, `--decode URL` and `--worker-urls URL...` flags. Why:
    sglang-router 0.3.2 registers them one by one and calls itself ready once one prefill and one
    decode are (measured: `healthy_workers 2, total_workers 2` for ~10 ms with a third `--decode`
    on its command line, longer on a loaded machine), so a worker list read then can miss the
    very worker that serves part of the repro; the readiness wait holds out for this many."""
    found: set[tuple[str, int]] = set()
    for command in commands:
        words = list(command)
        for i, word in enumerate(words):
            flag, eq, value = word.partition("=")
            if flag not in WORKER_FLAGS:
                continue
            rest = [value] if eq else words[i + 1 :]
            urls = [rest[0]] if flag != WORKER_LIST_FLAG and rest else rest
            for url in urls:
                if url.startswith("-") or url == "|":
                    break
                key = endpoint(url)
                if key is not None:
                    found.add(key)
    return len(found)


def excess_problem(totals: Mapping[str, int], expected: Mapping[str, int], *, dp_ranks: bool = False) -> str | None:
    """A router that gives only counts (role -> workers registered; "" for a flat total): more
    registered, for a role the body names as the inventory does or in all, than the inventory's
    instances behind it (``expected``, role -> instances); None otherwise. ``dp_ranks``: a
    --dp-aware router, whose counts are DP ranks (instances x each one's unknown DP size): more
    is what it always registers, so nothing is compared (the trial record says so)."""
    if dp_ranks:
        return None
    for role, total in totals.items():
        if role in expected and total > expected[role]:
            return f"registers {total} {role} workers, the inventory has {expected[role]} {role} instances"
    registered, want = sum(totals.values()), sum(expected.values())
    if registered > want:
        listed = ", ".join(f"{role} {n}" for role, n in expected.items())
        return f"registers {registered} workers, the inventory has {want} instances behind it ({listed})"
    return None
