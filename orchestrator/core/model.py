"""What a matrix and an inventory are once read: the frozen types the rest of orch uses.

A module of its own, apart from core.config which reads and checks the YAML, so that code which
only handles matrices, cells and hosts (planning, the edges, the sweep) does not depend on the
YAML reader and its validation: a short chain of imports under every layer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from orchestrator.core.argsvar import ArgsEdit
from orchestrator.core.gates import Gate
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.redact import Redactor
from orchestrator.core.serverconf import ServerMetrics, VerifyRule
from orchestrator.core.sourcemap import SourceMap
from orchestrator.errors import ConfigError

Dialect = Literal["systemd", "shell"]
EnvValue = str | None  # None: remove the variable from the env file
CellValue = str | None | ArgsEdit  # what a level gives a variable: a value, a removal, or flag edits
MAX_TRIALS = 1_000_000  # planned trials of one run (a plan holds every trial in memory)
CONTROLLER = "controller"  # where a repro runs when it runs on no role's host


@dataclass(frozen=True)
class Level:
    name: str
    env: dict[str, dict[str, CellValue]]  # role -> VAR -> value (an ArgsEdit for a flag factor)
    client: dict[str, str] = field(default_factory=dict)  # repro placeholder -> value (kind client)


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Level, ...]
    description: str = ""
    kind: Literal["env", "flag", "client"] = "env"

    def level(self, name: str) -> Level:
        return next(lv for lv in self.levels if lv.name == name)

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Literal["proportion", "number"]
    regex: str
    unit: str = ""


@dataclass(frozen=True)
class ValidRule:
    """When a trial's output is valid data. A trial that breaks a rule is void: recorded as an
    infrastructure failure (retried, never counted), because what it measured was not the
    deployment under test (error sessions, HTTP errors, fewer sessions than asked)."""

    where: str  # `repro.valid[0]`, for messages
    check: Literal["regex", "metric", "absent"]
    target: str  # the regex (regex, absent) or the metric's name (metric)
    min: float | None = None
    max: float | None = None
    min_n: int | None = None

    def describe(self) -> str:
        """`repro.valid[0] (/error=(?P<value>...)/ max 0)`: the rule as the user wrote it."""
        what = f"metric {self.target}" if self.check == "metric" else f"/{self.target}/"
        if self.check == "absent":
            what = f"absent /{self.target}/"
        bounds = [f"{name} {value:g}" for name, value in (("min", self.min), ("max", self.max)) if value is not None]
        if self.min_n is not None:
            bounds.append(f"min_n {self.min_n}")
        return f"{self.where} ({' '.join([what, *bounds])})"


@dataclass(frozen=True)
class Repro:
    command: str
    on: str
    timeout_s: float
    expected_duration_s: float
    metrics: tuple[MetricSpec, ...]
    valid: tuple[ValidRule, ...] = ()
    warmup: str | None = None  # command run after ready and before the measured repro (not counted)


@dataclass(frozen=True)
class Collector:
    name: str
    role: str
    pattern: str | None
    command: str | None
    unit: str = ""


@dataclass(frozen=True)
class Adaptive:
    """Sequential design: stop a cell once its comparison with the baseline is decided."""

    metric: str
    effect: float
    alpha: float
    power: float
    min_rounds: int
    baseline_runs: int
    direction: Literal["both", "lower", "higher"] = "both"


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    factors: tuple[Factor, ...]
    zips: tuple[tuple[str, ...], ...]
    exclude: tuple[dict[str, str], ...]
    include: tuple[dict[str, str], ...]
    baseline: dict[str, str]
    replicates: int
    order: Literal["randomized", "sequential", "min-restarts"]
    seed: int | None
    health_timeouts: dict[str, float]
    repro: Repro
    collect: tuple[Collector, ...]
    path: str
    text: str
    source: SourceMap
    adaptive: Adaptive | None = None
    secrets: tuple[str, ...] = ()  # variable names declared secret (`secrets: [...]`), beyond *TOKEN* etc.
    stop_after_repeated_failures: int = 3  # consecutive same failures that stop a sweep (0: never)
    hunt: HuntSpec | None = None  # the `hunt:` section (orch hunt)
    server_metrics: ServerMetrics | None = None  # `metrics:`: Prometheus scrapes and GPU telemetry per trial
    verify: tuple[VerifyRule, ...] = ()  # `verify:`: fields a server must report once up
    gates: tuple[Gate, ...] = ()  # bounds on intervals that `orch run` exits non-zero for

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)

    @property
    def roles(self) -> set[str]:
        return {role for f in self.factors for lv in f.levels for role in lv.env}

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @cached_property
    def redactor(self) -> Redactor:
        """What masks this matrix's secrets wherever its values are shown or written: by name, and
        by the values its levels give secret variables (a repro that echoes its token)."""
        names = Redactor.for_names(self.secrets)
        return Redactor.for_names(
            self.secrets, (v for f in self.factors for lv in f.levels for v in secret_values(lv, names))
        )


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

    @property
    def key(self) -> str:
        return self.member or self.role

    @property
    def label(self) -> str:
        if self.ssh:
            return f"{self.key} ({self.ssh.host}:{self.ssh.port})"
        return f"{self.key} (local)"


@dataclass(frozen=True)
class Testbed:
    name: str
    description: str
    hosts: dict[str, Host]  # host key -> host, in declared order (the key is the role, for a role of one host)
    state_dir: Path | None

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
                hint=f"known: {', '.join(self.testbeds)}",
            )
        return self.testbeds[name]


def secret_values(level: Level, redactor: Redactor) -> list[str]:
    """The values a level gives to secret variables."""
    secret = redactor.is_secret_name
    return [v for a in level.env.values() for var, v in a.items() if isinstance(v, str) and secret(var)]
