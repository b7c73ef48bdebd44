"""Whether the repro's literal URLs reach orch's own servers (PURE).

orch checks, every trial, that each role's ports are held by the processes of its units. That
proves nothing about the repro when its command names a server by a literal URL
(`--router http://127.0.0.1:30001` copied from a wiki while the inventory's router is on 31001,
or a typo'd port): a stranger answering there serves the whole repro, and the trial completes
as data although none of orch's servers saw a request. `{router_url}` and `{<role>_url}` are
filled in from the inventory, so they cannot miss.

So a URL written into `repro.command`, `repro.warmup` or a client factor's level is judged when
its host is this machine's loopback or a host the inventory names: its port must be one orch
knows there (a role's `url:` or `health:` port, a port on a local unit's command line such as
the router's `--prometheus-port`, a `metrics:` endpoint's), or it must be listed in
`repro.allow_urls`. Any other host (huggingface.co, a teammate's dashboard) is not judged: orch
cannot tell whether it is part of the deployment, and it is not the inventory's. Host names are
compared as written (nothing is resolved here): a name of this machine that is neither
`localhost` nor in the inventory is not judged.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from orchestrator.core.endpoints import DEFAULT_PORTS, LOOPBACK, canonical_host, host_port
from orchestrator.core.inventory import Host, Testbed

# the authority of an http(s) URL as it appears in a shell command or a quoted JSON payload: it
# ends at a path, query, quote, blank or shell punctuation; braces are kept to spot placeholders
URL_AUTHORITY = re.compile(r"(?i)\bhttps?://([A-Za-z0-9._~%@:\[\]{}!$&*+=-]+)")
BIND_ALL = frozenset({"0.0.0.0", "::", "[::]"})
NOT_LITERAL = "{}$"  # a placeholder orch fills, or a variable the shell expands
PORT_ARG = re.compile(r"\A--?[A-Za-z0-9_-]*port(?:=(\d{1,5}))?\Z")


@dataclass(frozen=True)
class Origin:
    """Where a literal URL points: its host (LOOPBACK for any loopback name) and port (None: not
    a valid port)."""

    url: str
    host: str
    port: int | None
    written: str = ""  # as the command wrote it, when not as a URL (`--host 127.0.0.1 --port 30009`)


@dataclass(frozen=True)
class KnownPorts:
    """What orch knows of a testbed: host -> its ports (LOOPBACK: every port of the testbed, as a
    loopback URL means the controller's machine or, with `repro.on:`, the repro's host), and the
    (host, port) pairs the matrix allows on top."""

    testbed: str
    ports: dict[str, frozenset[int]]
    allowed: frozenset[tuple[str, int | None]]

    def judged(self, origin: Origin) -> bool:
        return origin.host in self.ports

    def serves(self, origin: Origin) -> bool:
        if (origin.host, origin.port) in self.allowed or not self.judged(origin):
            return True
        return origin.port is not None and origin.port in self.ports[origin.host]

    def listed(self, host: str) -> str:
        """The ports orch knows on `host`, for a message."""
        return ", ".join(str(p) for p in sorted(self.ports.get(host, ())))


def stray_url_message(origin: Origin, known: KnownPorts) -> str:
    where = "this machine's loopback" if origin.host == LOOPBACK else f"inventory host {origin.host}"
    port = f"port {origin.port}" if origin.port is not None else "its invalid port"
    named = origin.written or origin.url
    return (
        f"{named} is none of the servers of testbed {known.testbed!r} (on {where} orch knows ports "
        f"{known.listed(origin.host) or 'none'}): whatever answers {port} would serve the repro, and its "
        f"trials would count as data"
    )


def stray_url_hint(origin: Origin) -> str:
    """What to write instead, or how to keep a server that is meant (the URL to list, ready to paste)."""
    instead = "--base-url {router_url} for --host/--port" if origin.written else "{router_url} (or {<role>_url})"
    return (
        f"write {instead}: orch fills it in from the inventory; if that server is meant "
        "(an exporter, a Prometheus pushgateway, an SSH tunnel to the testbed), list it: repro.allow_urls: "
        f'["{origin.url}"]'
    )


def origins(text: str) -> Iterator[Origin]:
    """Every literal http(s) URL in a command or value; one whose authority holds a placeholder
    (`http://{host}:8000`) or a shell expansion (`http://localhost:$PORT`, `$(cat port)`,
    `` `cat port` ``) is skipped: what fills it is not literal, so its host or port is not known
    here (a port left empty before one is not port 80)."""
    for match in URL_AUTHORITY.finditer(text):
        written = match.group(1)
        if any(c in written for c in NOT_LITERAL) or written.endswith(":"):
            continue
        authority = written.rstrip(".!&*+=-")
        if not authority:
            continue
        scheme = match.group(0).split(":", 1)[0].lower()
        origin = parse_origin(f"{scheme}://{authority}")
        if origin is not None:
            yield origin


def flag_origins(text: str) -> Iterator[Origin]:
    """The server a client names by `--host H --port N` (sglang.bench_serving's form) in one
    command of a shell line (split at `;`, `&&`, `|`): judged like the URL it stands for. A line
    the shell words cannot be told of (an open quote) or a value that is not literal (a
    placeholder, `$PORT`) names none."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return
    command: dict[str, str] = {}
    for word, following in itertools.pairwise((*words, "")):
        if word and all(c in lexer.punctuation_chars for c in word):  # the end of one command
            yield from _host_port(command)
            command = {}
            continue
        name, eq, value = word.partition("=")
        if name in ("--host", "--port"):
            command[name] = value if eq else following
    yield from _host_port(command)


def _host_port(command: dict[str, str]) -> Iterator[Origin]:
    host, port = command.get("--host", ""), command.get("--port", "")
    if not host or not port.isdigit() or any(c in host + port for c in NOT_LITERAL):
        return
    if host in BIND_ALL:  # where a server the repro starts listens, not one it reaches
        return
    origin = parse_origin(f"http://{host_port(host, port)}")
    if origin is not None:
        yield dataclasses.replace(origin, written=f"--host {host} --port {port}")


def parse_origin(url: str) -> Origin | None:
    """The origin of one URL, or None when it has no host (`http://:80`) or is no URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:  # a bracketed host that is no IPv6 address
        return None
    if not host:
        return None
    try:
        port = parts.port
    except ValueError:  # out of range, or not a number
        port = None
    else:
        port = DEFAULT_PORTS.get(parts.scheme.lower()) if port is None else port
    return Origin(f"{parts.scheme}://{parts.netloc}", canonical_host(host), port)


def known_ports(
    testbed: Testbed, role_ports: Iterable[tuple[str, int]], declared: Iterable[str], allowed: Sequence[str]
) -> KnownPorts:
    """`role_ports`: (role, port) of the matrix's `metrics:` endpoints on a role's hosts (a
    router's --prometheus-port); `declared`: its endpoints' URLs; `allowed`: `repro.allow_urls`."""
    ports: dict[str, set[int]] = {}
    for host in testbed.hosts.values():
        names, served = _host_ports(host)
        extra = {port for role, port in role_ports if role == host.role}
        for name in names:
            ports.setdefault(name, set()).update(served | extra)
    for origin in (parse_origin(u) for u in declared):
        if origin is not None and origin.port is not None:
            ports.setdefault(origin.host, set()).add(origin.port)
    # loopback is where the repro runs (the controller, or its host with `repro.on:`): any port
    # of the testbed may be reached through it (a local testbed, an SSH tunnel)
    ports[LOOPBACK] = {p for found in ports.values() for p in found}
    pairs = {(o.host, o.port) for o in (parse_origin(u) for u in allowed) if o is not None}
    return KnownPorts(testbed.name, {h: frozenset(p) for h, p in ports.items()}, frozenset(pairs))


def _host_ports(host: Host) -> tuple[set[str], set[int]]:
    """The names one host goes by (its URL's, its health URL's, its SSH host) and the ports the
    inventory says it serves: its URL's, its health URL's, those on its local units' command
    lines (`--port`, `--prometheus-port`, worker URLs)."""
    names, ports = set(), set(_command_ports(host))
    for origin in (parse_origin(host.url), parse_origin(host.health)):
        if origin is not None:
            names.add(origin.host)
            if origin.port is not None:
                ports.add(origin.port)
    if host.ssh is not None:
        names.add(canonical_host(host.ssh.host.strip("[]")))
    return names, ports


def _command_ports(host: Host) -> Iterator[int]:
    for unit in host.units:
        for arg, following in itertools.pairwise((*(unit.command or ()), "")):
            flag = PORT_ARG.match(arg)
            value = flag.group(1) if flag and flag.group(1) else following if flag else ""
            if value.isdigit() and 0 < int(value) < 65536:
                yield int(value)
            for origin in origins(arg):
                if origin.port is not None:
                    yield origin.port
