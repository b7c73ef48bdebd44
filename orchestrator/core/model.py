"""What a matrix is once read, and the cells and trials it expands into: the frozen types the
rest of orch uses (an inventory's are core.inventory's).

A module of its own, apart from core.config which reads and checks the YAML and core.matrix which
expands a matrix, so that code which only handles matrices, cells and trials (planning, the
sweep, the reports) depends on neither: a short chain of imports under every layer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Literal, NamedTuple

from orchestrator.core.argsvar import ArgsEdit
from orchestrator.core.gates import Gate
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.redact import Redactor
from orchestrator.core.serverconf import ServerMetrics, VerifyRule
from orchestrator.core.sourcemap import SourceMap

EnvValue = str | None  # None: remove the variable from the env file
CellValue = str | None | ArgsEdit  # what a level gives a variable: a value, a removal, or flag edits
MAX_TRIALS = 1_000_000  # planned trials of one run (a plan holds every trial in memory)
# Cells: a report compares every cell with the baseline and tests ~350 contrasts over them, so its
# cost grows with cells x contrasts; 4,096 cells (12 binary flags) builds in ~20 s. More flags than
# that is a hunt (`orch hunt`), not a factorial. The product is bounded before `exclude` thins it,
# so expanding and matching selectors stay within a few seconds.
MAX_CELLS = 4_096
MAX_PRODUCT = 65_536
CONTROLLER = "controller"  # where a repro runs when it runs on no role's host
CellEnv = Mapping[str, Mapping[str, CellValue]]  # role -> VAR -> value (None = removed; ArgsEdit: flags)
Levels = tuple[tuple[str, str], ...]  # ((factor, level), ...)


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
    allow_urls: tuple[str, ...] = ()  # loopback/inventory URLs it may reach besides orch's servers


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

    @cached_property
    def mentioned(self) -> dict[str, frozenset[str]]:
        """role -> every variable any level of the matrix sets or removes on it.

        Every cell owns all of them: a cell that does not mention one gives it its original value
        (or leaves it absent, as originally), never the value an earlier cell wrote; the runner
        writes and verifies that. Roles no level mentions are not in the result: their files are
        never edited."""
        out: dict[str, set[str]] = {}
        for f in self.factors:
            for lv in f.levels:
                for role, assignments in lv.env.items():
                    out.setdefault(role, set()).update(assignments)
        return {role: frozenset(keys) for role, keys in out.items()}

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


def secret_values(level: Level, redactor: Redactor) -> list[str]:
    """The values a level gives to secret variables, and to secret flags of an args variable
    (`kind: flag` on --api-key: the value sits in an ArgsEdit, not in a plain string)."""
    secret = redactor.is_secret_name
    out: list[str] = []
    for assignments in level.env.values():
        for var, v in assignments.items():
            if isinstance(v, str) and secret(var):
                out.append(v)
            elif isinstance(v, ArgsEdit):
                out += [s.value for s in v.settings if s.takes_value and s.value and secret(s.flag)]
    return out


# ---------------------------------------------------------------------------- cells and trials
@dataclass(frozen=True, order=True)
class Cell:
    """One combination of levels, in the matrix's factor order, with the env it gives each role.

    The env is computed once, where cells are made (`expand`, `baseline_cell`): planning, the
    plan's output and the restart costs all read it from here. It is read-only and plays no part
    in comparing or hashing (the levels decide it)."""

    levels: Levels
    env: CellEnv = field(compare=False, repr=False)
    # derived once: a sweep looks cells up and names them for every one of its (up to 10^6) trials
    id: str = field(init=False, compare=False, repr=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # copied, then read-only: the caller's dicts can change no cell, and no reader can either
        frozen = MappingProxyType({role: MappingProxyType(dict(a)) for role, a in self.env.items()})
        object.__setattr__(self, "env", frozen)
        object.__setattr__(self, "id", ",".join(f"{f}={lv}" for f, lv in self.levels))
        object.__setattr__(self, "_hash", hash(self.levels))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Cell], tuple[Levels, dict[str, dict[str, CellValue]]]]:
        # the cached hash of str is per process: rebuild it on unpickle; a mapping proxy does not
        # pickle, its contents do
        return Cell, (self.levels, {role: dict(a) for role, a in self.env.items()})

    def as_dict(self) -> dict[str, str]:
        return dict(self.levels)

    def matches(self, selector: dict[str, str]) -> bool:
        mine = self.as_dict()
        return all(mine.get(f) == lv for f, lv in selector.items())


class Trial(NamedTuple):
    """One cell at one position of the run. A named tuple, not a frozen dataclass: a plan holds
    one per trial (100,000s), and a tuple is immutable at a fraction of the cost to build."""

    # position in the run, 0-based; it shadows tuple.index on purpose (nothing calls tuple.index on a
    # Trial, and every reader says trial.index), which mypy reports as an incompatible override
    index: int  # type: ignore[assignment]
    round: int  # replicate round
    cell: Cell
    is_baseline: bool
