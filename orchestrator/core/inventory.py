"""What an inventory is once read: testbeds, their hosts, and how orch reaches each one.

A module of its own, apart from the matrix's types (core.model) and the YAML reader
(core.config): the edges (transports, service managers, deployments) and the host-side steps
of a sweep handle hosts and never a matrix, so they sit right above this module.
"""

from __future__ import annotations

import difflib
import hashlib
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from orchestrator.core.endpoints import host_port
from orchestrator.errors import ConfigError

Dialect = Literal["systemd", "shell"]
# each role's usual port (DESIGN.md): a URL not given is the host's address on it
ROLE_PORTS = {"prefill": 30000, "router": 30001, "decode": 30002}


@dataclass(frozen=True)
class SshSettings:
    host: str
    port: int
    user: str
    key: str | None
    known_hosts: str | None
    accept_new_host_keys: bool
    connect_timeout: float
    sudo: bool
    # the keys the inventory spells (the rest are defaults): `orch validate` marks what it filled in
    given: frozenset[str] = field(default=frozenset(), compare=False)


@dataclass(frozen=True)
class UnitSpec:
    name: str
    command: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Host:
    role: str
    transport: Literal["local", "ssh"]
    ssh: SshSettings | None
    env_file: str
    dialect: Dialect
    units: tuple[UnitSpec, ...]
    url: str
    health: str
    health_timeout_s: float
    startup_estimate_s: float
    verify_env: bool
    after: tuple[str, ...]
    health_tunnel: bool = False
    # a role of several hosts (Testbed.hosts is keyed by `key`): `decode.0`, `decode.n1`, `decode.0.n1`
    member: str = ""  # "" for a role's only host: its key is the role
    rank: int = 0  # node rank in a multi-node instance; only rank 0 serves, and its health is the instance's
    group: tuple[str, ...] = ()  # keys of every node of this host's instance (itself included); () alone
    line: int | None = field(default=None, compare=False)  # where the inventory declares it, for messages
    # where the inventory names its SSH address, its SSH key, its known_hosts and its health URL (the nearest
    # enclosing line when defaulted): a message about one of them points at the line to fix
    ssh_line: int | None = field(default=None, compare=False)
    key_line: int | None = field(default=None, compare=False)
    known_hosts_line: int | None = field(default=None, compare=False)
    health_line: int | None = field(default=None, compare=False)
    env_file_line: int | None = field(default=None, compare=False)  # an env file or unit preflight cannot
    units_line: int | None = field(default=None, compare=False)  # find is fixed where the inventory names it
    sudo_line: int | None = field(default=None, compare=False)  # `ssh.sudo: true` a host's sudo refuses
    health_given: bool = field(default=True, compare=False)  # False: orch made it of url (`orch validate` says so)

    @property
    def key(self) -> str:
        return self.member or self.role

    @property
    def label(self) -> str:
        return f"{self.key} ({self.address})" if self.ssh else f"{self.key} (local)"

    @property
    def address(self) -> str:
        """`host:port`, an IPv6 address in brackets (`[2001:db8::2]:22`: `2001:db8::2:22` reads as
        another address); "local" without SSH."""
        return host_port(self.ssh.host, self.ssh.port) if self.ssh else "local"

    @property
    def env_file_at(self) -> str:
        """Which file on which machine this host's env file is, as the inventory spells it."""
        return f"{self.address}:{self.env_file}"


@dataclass(frozen=True)
class Testbed:
    name: str
    description: str
    hosts: dict[str, Host]  # host key -> host, in declared order (the key is the role, for a role of one host)
    state_dir: Path | None
    line: int | None = field(default=None, compare=False)  # where the inventory declares it, for messages

    @cached_property
    def roles(self) -> dict[str, tuple[str, ...]]:
        """role -> its hosts' keys, in declared order (one key, the role's name, for most roles)."""
        out: dict[str, list[str]] = {}
        for key, host in self.hosts.items():
            out.setdefault(host.role, []).append(key)
        return {role: tuple(keys) for role, keys in out.items()}

    def first(self, role: str) -> Host:
        """The role's first host (rank 0 of its first instance): where `repro.on: ROLE` runs and
        what {ROLE_url} means."""
        return self.hosts[self.roles[role][0]]


def shared_env_file(hosts: Iterable[tuple[str, Host]]) -> tuple[str, str, Host] | None:
    """The first two of these (name, host) pairs that name one env file: (first, second, host).
    Why refused: orch backs up, edits and restores an env file per host, so two hosts on one file
    clobber each other's cells, and the second backup saves the first one's cell as "original"."""
    seen: dict[str, str] = {}
    for name, host in hosts:
        first = seen.setdefault(host.env_file_at, name)
        if first != name:
            return first, name, host
    return None


@dataclass(frozen=True)
class Inventory:
    testbeds: dict[str, Testbed]
    path: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def testbed(self, name: str | None) -> Testbed:
        if name is None:
            return next(iter(self.testbeds.values()))
        if name not in self.testbeds:
            raise ConfigError(
                f"no testbed named {name!r}",
                file=self.path,
                hint=known_names_hint(name, list(self.testbeds), "testbeds"),
            )
        return self.testbeds[name]


KNOWN_SHOWN = 8  # names listed in a hint before "N testbeds in all": an inventory may hold 256


def shown_names(known: Sequence[str], what: str) -> str:
    """The first few of `known`, then how many there are: "a, b, ... (41 roles in all)"."""
    shown = ", ".join(known[:KNOWN_SHOWN])
    return f"{shown}, ... ({len(known):,} {what} in all)" if len(known) > KNOWN_SHOWN else shown


def known_names_hint(name: str, known: list[str], what: str) -> str:
    """The hint for a name not found: close spellings first (a typo among many), then a few of the
    known names, never the whole list of a large inventory on one line."""
    same_but_case = [k for k in known if k.lower() == name.lower()]  # difflib counts case: 'TB1' vs 'tb1' is 0.33
    close = (
        same_but_case + [c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.75) if c not in same_but_case]
    )[:3]
    shown = shown_names(known, what)
    if not close:
        return f"known: {shown}"
    return f"did you mean {' or '.join(repr(c) for c in close)}? known: {shown}"


def port_warnings(testbeds: Iterable[Testbed], inventory: str) -> list[str]:
    """`INVENTORY:LINE: ` warnings for a health URL on the usual port of another role of its
    testbed (decode's on 30000 beside a prefill: a block copied from prefill's), where orch would
    wait on the wrong server. Only then: a port moved elsewhere, or onto the port of a role the
    testbed lacks, is a choice, so it is not said. The first KNOWN_SHOWN, then how many
    more: 1,000 instances copied from one block are one mistake, not 1,000 lines."""
    out: list[str] = []
    for testbed in testbeds:
        for host in testbed.hosts.values():
            if host.rank > 0:  # a node above rank 0 has its instance's health URL, said once
                continue
            own = ROLE_PORTS.get(host.role)
            port = urllib.parse.urlsplit(host.health).port
            other = next(
                (r for r, p in ROLE_PORTS.items() if p == port and r in testbed.roles and r != host.role), None
            )
            if own is None or other is None:
                continue
            out.append(
                f"{inventory}:{host.health_line}: {host.label}: health URL {host.health} is on port {port}, "
                f"{other}'s usual port ({host.role}'s is {own}); check `health:` and `url:`"
            )
    if len(out) > KNOWN_SHOWN:
        more = len(out) - KNOWN_SHOWN
        out[KNOWN_SHOWN:] = [f"{inventory}: ... and {more:,} more health URLs on another role's usual port"]
    return out


def host_where(host: Host, inventory: str, about: str = "") -> str:
    """`INVENTORY:LINE: `, where the inventory declares this host, or "" when either is unknown.
    Why: the host's label says which machine, not which entry to fix in an inventory of many
    testbeds and instances; a bad-input message names its file and line (errors.ConfigError).
    `about` "host" or "key": the line of its `ssh:` address or key instead (a failed connect);
    "sudo": its `ssh.sudo:` (the host's sudo refused); "env_file" or "units": the line naming its
    env file or units (preflight found none such)."""
    lines = {
        "host": host.ssh_line,
        "key": host.key_line,
        "sudo": host.sudo_line,
        "env_file": host.env_file_line,
        "units": host.units_line,
    }
    line = lines.get(about) or host.line
    return f"{inventory}:{line}: " if inventory and line else ""
