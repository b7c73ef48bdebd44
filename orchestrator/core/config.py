"""Matrices and inventories: YAML -> typed, frozen models.

Parsing happens in two steps. Pydantic checks the shape (types, unknown keys, ranges); then
small functions normalise what the user wrote into the core's frozen dataclasses (factors with
levels and per-role env values, a repro with metric specs, hosts with defaults filled in).
Every error names ``file:line`` and the key path, and says how to fix it where we can.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
import string
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import regex
from pydantic import BaseModel, Field, ValidationError, model_validator

from orchestrator.core.argsvar import ABSENT, FLAG_NAME, PRESENT, ArgsEdit, FlagSetting, unreachable
from orchestrator.core.bounds import (
    ENV_ENTRY_HINT,
    ENV_ENTRY_TOO_LONG,
    MAX_ARG_BYTES,
    MAX_REPLICATES,
    MAX_SEED,
    MAX_SESSIONS,
    MAX_TEMPLATE_CHARS,
    MAX_UNIT_CHARS,
    unit_problem,
)
from orchestrator.core.endpoints import host_port
from orchestrator.core.gates import MAX_GATES, Gate, default_name
from orchestrator.core.huntconfig import HuntShape, build_hunt
from orchestrator.core.inventory import (
    ROLE_PORTS,
    Dialect,
    Host,
    Inventory,
    SshSettings,
    Testbed,
    UnitSpec,
    shared_env_file,
    shown_names,
)
from orchestrator.core.model import (
    CONTROLLER,
    MAX_PRODUCT,
    MAX_TRIALS,
    Adaptive,
    CellValue,
    Collector,
    EnvValue,
    Factor,
    Level,
    Matrix,
    MetricSpec,
    Repro,
    ValidRule,
    secret_values,
)
from orchestrator.core.redact import Redactor
from orchestrator.core.regexsize import MAX_UNROLLED, unrolled_size
from orchestrator.core.reprourls import flag_origins, known_ports, origins, stray_url_hint, stray_url_message
from orchestrator.core.serverconf import (
    MetricsShape,
    VerifyShape,
    build_metrics,
    build_verify,
    check_roles,
)
from orchestrator.core.shapebase import YAML_BOOLEANS, Shape
from orchestrator.core.sourcemap import PathKey, SourceMap, dotted
from orchestrator.core.yamlsrc import load_yaml
from orchestrator.errors import ConfigError

# Every name pattern ends in \Z, never `$`: `$` also matches before a trailing newline.
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
MAX_ENV_VALUE_BYTES = MAX_ARG_BYTES - 256  # the rest of a process's KEY=value entry: a name of <= 255 and "="
ROLE_NAME = re.compile(r"\A[a-z][a-z0-9_-]{0,30}\Z")
TESTBED_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")  # a folder name: no /, no leading dot
UNIT_NAME = re.compile(r"\A[A-Za-z0-9@_.:][A-Za-z0-9@._:-]{0,255}\Z")  # never an option (no leading -)
SSH_HOST = re.compile(r"\A[A-Za-z0-9_:\[][A-Za-z0-9_.:%\[\]-]{0,252}\Z")  # a name or an address, no option
SSH_USER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PLACEHOLDER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
WEEK_S = 7 * 24 * 3600.0  # the longest timeout or estimate that makes sense
MAX_VALID_RULES = 100
# Metrics and collectors of one matrix. Each regex may take up to a second over a trial's output
# (edges.workload.MATCH_TIMEOUT_S), so their count bounds the matching time of every trial while
# the hosts are edited: 20,000 metrics passed validation and would take hours a trial.
MAX_METRICS = 32
MAX_COLLECTORS = 32
MAX_SECRETS = 256
MAX_ALLOW_URLS = 64
MAX_REPEATED_FAILURES = 1000
MAX_MEMBERS = 256  # hosts of one role (nodes of an instance, or instances)
# a matrix's name titles its runs everywhere (the index, /api/runs, `orch plan`, webhooks, the
# queue), a gate's its verdict (the run's end lines, the report, JUnit); a 900 KB one was accepted
# and printed whole by each. `description:` holds the longer text.
MAX_TITLE = 200
Seconds = Annotated[float, Field(gt=0, le=WEEK_S)]


# --------------------------------------------------------------------------------------------
# Shape (pydantic). Strict about unknown keys; lax about "300" vs 300 (YAML numbers stay text).
# --------------------------------------------------------------------------------------------
_Shape = Shape  # unknown keys refused, no inf/nan, no boolean for a number (core.shapebase)


Scalar = str | bool | None


class FactorShape(_Shape):
    description: str = ""
    # env: what the levels set; flag: one --flag inside an args variable (env: role -> that
    # variable); client: a repro placeholder only (nothing on any host changes, nothing restarts)
    kind: Literal["env", "flag", "client"] = "env"
    env: dict[str, str | list[str]] | None = None  # short form: role -> VAR or [VAR, ...]
    flag: str | None = None  # kind flag: e.g. --cuda-graph-max-bs
    placeholder: str | None = None  # kind client: the {name} it fills (default: the factor's name)
    levels: list[Scalar] | dict[str, dict[str, dict[str, Scalar]] | Scalar]  # a plain value: kind flag/client


class MetricShape(_Shape):
    kind: Literal["proportion", "number"] = "number"
    regex: str
    unit: str = ""
    higher_is_better: bool | None = None


class ValidShape(_Shape):
    """One `repro.valid` rule: exactly one of regex / metric / absent, with its bounds."""

    regex: str | None = None  # a number read from the output (a (?P<value>...) group or one group)
    metric: str | None = None  # a metric of repro.metrics
    absent: str | None = None  # a regex that must not match the output
    min: float | None = None
    max: float | None = None
    min_n: int | None = Field(default=None, ge=1, le=MAX_SESSIONS)  # a proportion's n (sessions done)


class ReproShape(_Shape):
    command: str
    on: str = CONTROLLER
    timeout: float = Field(default=600, gt=0, le=WEEK_S)
    expected_duration: float = Field(default=10, ge=0, le=WEEK_S)
    metrics: dict[str, MetricShape] = Field(min_length=1, max_length=MAX_METRICS)
    valid: list[ValidShape] = Field(default=[], max_length=MAX_VALID_RULES)
    warmup: str | None = None  # a command run after ready, before the measured repro; never counted
    # loopback or inventory URLs the repro may reach besides orch's servers (core.reprourls)
    allow_urls: list[str] = Field(default=[], max_length=MAX_ALLOW_URLS)


class CollectShape(_Shape):
    role: str
    kind: Literal["number"] = "number"
    pattern: str | None = None  # count regex matches in the role's unit logs of this trial
    command: str | None = None  # or run a command on the role's host and parse a number
    unit: str = ""


class AdaptiveShape(_Shape):
    metric: str  # a proportion metric of the repro
    effect: float = Field(default=0.10, gt=0, lt=1)  # smallest rate difference worth detecting
    alpha: float = Field(default=0.05, gt=0, lt=1)
    power: float = Field(default=0.8, gt=0, lt=1)
    min_rounds: int = Field(default=1, ge=1, le=MAX_REPLICATES)
    baseline_runs: int = Field(default=1, ge=1, le=10)  # baseline trials per round (more baseline events per round)
    # the question asked of every cell: "lower" = does it lower the rate vs the baseline (a bug
    # hunt whose baseline has the bug), "higher" the converse, "both" = does it differ at all
    direction: Literal["both", "lower", "higher"] = "both"


class GateShape(_Shape):
    """One `gates:` entry as written in the matrix (checked against the factors in config)."""

    metric: str = Field(min_length=1)
    upper: float | None = None
    lower: float | None = None
    cells: dict[str, str | bool | None] = {}
    name: str | None = None  # shown in the report and as the JUnit test case; default made up

    @model_validator(mode="after")
    def _one_bound(self) -> GateShape:
        if self.upper is None and self.lower is None:
            raise ValueError("a gate needs `upper:` (interval's upper bound <= X) or `lower:` (lower bound >= X)")
        if self.upper is not None and self.lower is not None and self.lower > self.upper:
            # no interval lies inside both: a gate that can never pass (it was accepted, exit 0)
            raise ValueError(f"lower: {self.lower:g} is above upper: {self.upper:g}, so no interval can pass")
        return self


class MatrixShape(_Shape):
    name: str = Field(min_length=1)
    description: str = ""
    factors: dict[str, FactorShape] = Field(min_length=1)
    zips: list[list[str]] = []
    exclude: list[dict[str, Scalar]] = []
    include: list[dict[str, Scalar]] = []
    baseline: dict[str, Scalar] = {}
    replicates: int = Field(default=1, ge=1, le=MAX_REPLICATES)
    order: Literal["randomized", "sequential", "min-restarts"] = "randomized"
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    booleans: tuple[str, str] = ("1", "0")
    # variable names to redact everywhere, beyond *TOKEN*, *KEY*, ...; each is one more alternative
    # of the regex that masks every trial's output and logs (50,000 took ~19 s a MiB, every trial)
    secrets: list[str] = Field(default=[], max_length=MAX_SECRETS)
    health_timeouts: dict[str, Seconds] = {}
    repro: ReproShape
    collect: dict[str, CollectShape] = Field(default={}, max_length=MAX_COLLECTORS)
    adaptive: AdaptiveShape | None = None
    hunt: HuntShape | None = None  # `orch hunt`: which suspect flags cause the failure (core/huntconfig.py)
    metrics: MetricsShape | None = None  # server metrics and GPU telemetry per trial (core/serverconf.py)
    verify: list[VerifyShape] = []  # what a server must report once up (a mismatch voids the trial)
    # stop the sweep after this many consecutive trials failed the same way (0: never stop)
    stop_after_repeated_failures: int = Field(default=3, ge=0, le=MAX_REPEATED_FAILURES)
    gates: list[GateShape] = Field(default=[], max_length=MAX_GATES)  # bounds CI enforces (core.gates)


class SshShape(_Shape):
    host: str | None = Field(default=None, min_length=1)  # required, but a role of several hosts gives it per host
    port: int = Field(default=22, ge=1, le=65535)
    user: str = "root"
    key: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = Field(default=10, gt=0, le=3600)
    sudo: bool = False


class UnitShape(_Shape):
    name: str = Field(min_length=1)
    command: list[str] | None = None  # local transport: how the local manager starts it


class MemberShape(_Shape):
    """One host of a role that has several: what differs from the role's settings. Its `ssh:`
    keys override the role's `ssh:` key by key (usually only `host:`)."""

    ssh: SshShape | None = None
    url: str | None = None  # default: its SSH host and the role's default port
    health: str | None = None
    env_file: str | None = None
    units: list[str | UnitShape] | None = Field(default=None, min_length=1)
    nodes: list[MemberShape] | None = Field(default=None, min_length=1, max_length=MAX_MEMBERS)


class HostShape(_Shape):
    transport: Literal["local", "ssh"] = "local"
    # several hosts: one instance spread over nodes (tensor/expert parallel: edited and restarted
    # together, node rank 0's health is the instance's), or several instances (each its own server)
    nodes: list[MemberShape] | None = Field(default=None, min_length=1, max_length=MAX_MEMBERS)
    instances: list[MemberShape] | None = Field(default=None, min_length=1, max_length=MAX_MEMBERS)
    ssh: SshShape | None = None
    env_file: str = Field(min_length=1)
    dialect: Dialect = "systemd"
    units: list[str | UnitShape] = Field(min_length=1)
    url: str | None = None
    health: str | None = None
    health_timeout: float = Field(default=600, gt=0, le=WEEK_S)
    health_tunnel: bool = False  # reach the health URL through the host's SSH connection
    startup_estimate: float = Field(default=30, ge=0, le=WEEK_S)
    verify_env: bool = True
    after: list[str] = []


class TestbedShape(_Shape):
    description: str = ""
    state_dir: str | None = None  # local transport: pid files and logs of the sim units
    hosts: dict[str, HostShape] = Field(min_length=1)


class InventoryShape(_Shape):
    testbeds: dict[str, TestbedShape] = Field(min_length=1)
    # where relative env_file/state_dir paths start (absolute; default: the inventory's folder).
    # `orch queue` writes it into the copy it keeps, so the copy reads like the original did.
    base_dir: str | None = None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
S = TypeVar("S", bound=BaseModel)


def validate_shape(shape: type[S], data: Any, source: SourceMap) -> S:
    """Pydantic validation with errors translated to file:line, key path and a hint."""
    if not isinstance(data, dict):
        raise source.error((), "expected a mapping at the top level")
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        raise _translate(exc, shape, source) from None


def _translate(exc: ValidationError, shape: type[BaseModel], source: SourceMap) -> ConfigError:
    err = _most_useful(exc.errors())
    loc = _clean_loc(err["loc"])
    if err["type"] == "extra_forbidden":
        return _unknown_key(loc, shape, source)
    if err["type"] == "missing":
        return source.error(loc[:-1], f"missing required key {loc[-1]!r}", _HINTS.get(loc))
    if err["type"] == "too_long":  # the count says it all; the value may be megabytes
        return source.error(loc, _expected(err), _TOO_LONG_HINTS.get(shape, _TOO_LONG_HINTS[MatrixShape]))
    if err["type"] == "too_short":  # what it got is the empty value the message names
        return source.error(loc, _expected(err), _HINTS.get(loc))
    if err["type"] == "value_error":  # a shape's own check: its sentence, not pydantic's prefix and the mapping
        return source.error(loc, str(err.get("ctx", {}).get("error", err["msg"])), _HINTS.get(loc))
    raw = source.raw_of(loc)
    got = repr(raw) if raw is not None else _describe(err.get("input"))
    return source.error(loc, f"{_expected(err)}, got {got}", _hint_for(loc, err, raw))


# What to write where a first matrix often has nothing yet (the README's example, in one line).
_HINTS: dict[PathKey, str] = {
    ("repro", "metrics"): "declare what to read from the repro's output, e.g. metrics: {corruption: {kind: proportion, "
    "regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}} or {wall: {regex: 'wall=(?P<value>[0-9.]+)s', unit: s}}",
}

# A list over its bound, by the file it is in: the inventory's are a role's hosts (MAX_MEMBERS).
_TOO_LONG_HINTS: dict[type[BaseModel], str] = {
    MatrixShape: "split the matrix, or keep what the question needs",
    InventoryShape: "split the hosts into several testbeds, or keep what the question needs",
}


def _most_useful(errors: list[Any]) -> Any:
    # Union types report one error per branch; an unknown or missing key is the clearest, else
    # the deepest location (the branch that got furthest is the one the user meant).
    for wanted in ("extra_forbidden", "missing"):
        for err in errors:
            if err["type"] == wanted:
                return err
    return max(errors, key=lambda e: len(_clean_loc(e["loc"])))


def _clean_loc(loc: tuple[Any, ...]) -> PathKey:
    """Drop pydantic's union-branch markers (e.g. 'list[...]', 'str') from a location."""
    return tuple(p for p in loc if isinstance(p, int) or not re.search(r"[\[\]]|^(str|bool|none)$", p))


def _unknown_key(loc: PathKey, shape: type[BaseModel], source: SourceMap) -> ConfigError:
    key = str(loc[-1])
    known = _known_keys(shape, loc[:-1])
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(known)}" if known else None)
    return source.error(loc, f"unknown key {key!r}", hint)


def _known_keys(shape: type[BaseModel], parent: PathKey) -> list[str]:
    """Field names of the model found at `parent` inside `shape` (best effort)."""
    model: Any = shape
    for part in parent:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        model = _model_in(field.annotation) if field else model
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _model_in(annotation: Any) -> Any:
    """Find a BaseModel class inside an annotation such as dict[str, X] or X | None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _expected(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    table: dict[str, str] = {  # a pydantic error's entries are Any: the messages are text
        "list_type": "expected a list",
        "dict_type": "expected a mapping",
        "string_type": "expected a string",
        "int_parsing": "expected an integer",
        "int_type": "expected an integer",
        "float_parsing": "expected a number",
        "float_type": "expected a number",
        "bool_type": "expected true or false",
        "bool_parsing": "expected true or false",
        "model_type": "expected a mapping",
        "literal_error": "expected " + err.get("ctx", {}).get("expected", "one of the allowed values"),
        "too_short": "must not be empty",
        "too_long": f"has {_length(err.get('input'))} entries; at most {ctx.get('max_length')} are allowed",
        "greater_than": f"must be > {err.get('ctx', {}).get('gt')}",
        "greater_than_equal": f"must be >= {err.get('ctx', {}).get('ge')}",
        "less_than": f"must be < {err.get('ctx', {}).get('lt')}",
        "less_than_equal": f"must be <= {err.get('ctx', {}).get('le')}",
    }
    return table.get(kind, str(err["msg"]).lower())


def _quoted(name: str, limit: int = 80) -> str:
    """A name as an error quotes it: whole when short, else its start and its length (a 200 KB
    name made a 200 KB error line)."""
    if len(name) <= limit:
        return repr(name)
    return f"{name[:limit]!r}... ({len(name):,} characters)"


def _length(value: Any) -> str:
    return f"{len(value):,}" if isinstance(value, (dict, list)) else "too many"


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _hint_for(loc: PathKey, err: Any, raw: str | None) -> str | None:
    if err["type"] == "list_type" and loc and loc[-1] == "levels" and raw:
        return f"write a list such as [{raw}, ...] with at least two levels"
    if err["type"] == "list_type" and raw:
        return f"write [{raw}]"
    if err["type"] == "literal_error" and raw:
        return _close_literal(raw, str(err.get("ctx", {}).get("expected", "")))
    if err["type"] in ("int_parsing", "float_parsing") and raw and raw.strip("'\"").lower() in YAML_BOOLEANS:
        return f"YAML reads {raw} as true/false, not a number: write a number"
    percent = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*%", raw.strip("'\"").strip()) if raw else None
    if err["type"] == "float_parsing" and percent:  # `upper: 5%`, `alpha: 5%`
        share = float(percent.group(1)) / 100
        return f"write a plain number, without '%': a share such as alpha or a proportion's bound is {share:g}"
    if err["type"] == "float_parsing" and _is_gate_bound(loc) and raw and _WITH_UNIT.fullmatch(raw.strip("'\"")):
        return _GATE_UNIT_HINT  # `upper: 60s`: which number 60s is depends on the metric's regex
    return _share_hint(err)


def _close_literal(raw: str, expected: str) -> str | None:
    """`did you mean 'min-restarts'?` for `order: min_restarts`: an unknown factor or key gets its
    near name, and a misspelt choice got only the list to compare it with letter by letter."""
    close = difflib.get_close_matches(raw.strip("'\""), re.findall(r"'([^']*)'", expected), n=1)
    return f"did you mean {close[0]!r}?" if close else None


# a number followed by a unit: `60s`, `5m`, `200ms`, `1.5 s`, `2 GiB`
_WITH_UNIT = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*[^\W\d_]+(?:/[^\W\d_]+)?\s*")
_GATE_UNIT_HINT = "write a plain number in the metric's own unit, the number its regex captures: orch converts no unit"


def _is_gate_bound(loc: PathKey) -> bool:
    """A gate's `upper:`/`lower:`: it bounds the metric's captured number, in whatever unit that is."""
    return len(loc) == 3 and loc[0] == "gates" and loc[2] in ("upper", "lower")


def _share_hint(err: Any) -> str | None:
    """A share (at most 1) written as a percentage, `confidence: 95`: the fix is the share itself.
    Why: "must be < 1, got '95'" left the user to guess that 0.95 was meant."""
    bound = err.get("ctx", {}).get("lt", err.get("ctx", {}).get("le"))
    if err["type"] not in ("less_than", "less_than_equal") or bound != 1:
        return None
    try:  # the matrix's scalars reach the shape as the YAML text
        value = float(err.get("input"))
    except (TypeError, ValueError):
        return None
    return _percent_hint(value)


def _percent_hint(value: float) -> str | None:
    percent = value.is_integer() and 2 <= value <= 100  # 95 is a percentage; 1.5 just too large
    return f"a share, not a percentage: write {value / 100:g}" if percent else None


def read_matrix(path: Path, display: str | None = None) -> Matrix:
    data, source = load_yaml(path, display)
    shape = validate_shape(MatrixShape, data, source)
    return build_matrix(shape, source, source.text)


def read_inventory(path: Path, display: str | None = None) -> Inventory:
    data, source = load_yaml(path, display)
    shape = validate_shape(InventoryShape, data, source)
    base = path.resolve().parent
    if shape.base_dir is not None:
        if not Path(_no_control(shape.base_dir, source, ("base_dir",))).is_absolute():
            raise source.error(("base_dir",), f"base_dir {shape.base_dir!r} is not absolute", "write an absolute path")
        base = Path(shape.base_dir)
    testbeds = {name: _build_testbed(name, tb, base, source) for name, tb in shape.testbeds.items()}
    return Inventory(testbeds, source.file, source.text)


def _build_testbed(name: str, tb: TestbedShape, base: Path, source: SourceMap) -> Testbed:
    where: PathKey = ("testbeds", name)
    if not TESTBED_NAME.match(name):
        raise source.error(
            where,
            f"invalid testbed name {name!r}",
            "letters, digits, _ . -, not starting with . or -; it names a folder",
        )
    if tb.state_dir is not None:
        _no_control(tb.state_dir, source, (*where, "state_dir"))
    members = {role: _build_members(role, h, base, source, (*where, "hosts", role)) for role, h in tb.hosts.items()}
    by_role = {role: hosts[0] for role, hosts in members.items()}
    for role, host in by_role.items():
        for dep in host.after:
            if dep not in by_role:
                raise source.error(
                    (*where, "hosts", role, "after"),
                    f"unknown role {dep!r}",
                    f"roles here: {shown_names(list(by_role), 'roles')}",
                )
    _check_acyclic(by_role, source, where)
    hosts = {h.key: h for group in members.values() for h in group}
    _check_local_units(hosts, source, where)
    _check_own_env_files(hosts, source, where)
    state_dir = (base / tb.state_dir) if tb.state_dir else None
    if any(h.transport == "local" for h in hosts.values()) and state_dir is None:
        state_dir = base / ".orch" / name
    return Testbed(name, tb.description, hosts, state_dir, line=source.line_of(where))


def _build_members(role: str, h: HostShape, base: Path, source: SourceMap, where: PathKey) -> list[Host]:
    """A role's hosts: itself, or its nodes (one multi-node instance), or its instances (each
    one host, or nodes of its own). Each is the role's settings with the member's overrides."""
    if h.nodes is None and h.instances is None:
        return [_build_host(role, h, base, source, where)]
    if h.nodes is not None and h.instances is not None:
        raise source.error(where, "give `nodes:` or `instances:`, not both", "instances may each have nodes:")
    if h.nodes is not None and len(h.nodes) < 2:
        raise source.error((*where, "nodes"), "a multi-node instance needs at least 2 nodes")
    for key in ("url", "health"):
        if getattr(h, key) is not None:
            raise source.error(
                (*where, key), f"a role of several hosts takes `{key}:` per instance", "set it in each instance"
            )
    if h.nodes is not None:
        return _instance(role, h, None, h.nodes, f"{role}.n", base, source, (*where, "nodes"))
    out: list[Host] = []
    for i, inst in enumerate(h.instances or []):
        at: PathKey = (*where, "instances", i)
        if inst.nodes is not None:
            if len(inst.nodes) < 2:
                raise source.error((*at, "nodes"), "a multi-node instance needs at least 2 nodes")
            out += _instance(role, h, inst, inst.nodes, f"{role}.{i}.n", base, source, (*at, "nodes"))
        else:
            out.append(_member(role, h, inst, base, source, at, f"{role}.{i}", 0, ()))
    return out


def _instance(
    role: str,
    h: HostShape,
    inst: MemberShape | None,
    nodes: list[MemberShape],
    prefix: str,
    base: Path,
    source: SourceMap,
    where: PathKey,
) -> list[Host]:
    """The nodes of one multi-node instance; nodes above rank 0 take rank 0's URL and health."""
    keys = tuple(f"{prefix}{r}" for r in range(len(nodes)))
    out: list[Host] = []
    for r, node in enumerate(nodes):
        if node.nodes is not None:
            raise source.error((*where, r, "nodes"), "a node has no nodes of its own")
        if r > 0 and (node.url is not None or node.health is not None):
            raise source.error((*where, r), "only node rank 0 (the first) takes url/health: it serves the instance")
        merged = _overlay(inst, node) if inst is not None else node
        host = _member(role, h, merged, base, source, (*where, r), keys[r], r, keys)
        if r > 0:
            host = dataclasses.replace(host, url=out[0].url, health=out[0].health)
        out.append(host)
    return out


def _overlay(under: MemberShape, over: MemberShape) -> MemberShape:
    """An instance's settings with one node's on top (key by key, ssh included)."""
    given = {k: getattr(over, k) for k in over.model_fields_set if k != "nodes"}
    if under.ssh is not None and over.ssh is not None:
        given["ssh"] = under.ssh.model_copy(update={k: getattr(over.ssh, k) for k in over.ssh.model_fields_set})
    return under.model_copy(update={**given, "nodes": None})


def _member(
    role: str,
    h: HostShape,
    m: MemberShape,
    base: Path,
    source: SourceMap,
    where: PathKey,
    key: str,
    rank: int,
    group: tuple[str, ...],
) -> Host:
    """One host of a role: the role's shape with the member's keys, built like any host."""
    update: dict[str, Any] = {k: getattr(m, k) for k in m.model_fields_set if k not in ("nodes", "ssh")}
    update.update(nodes=None, instances=None)
    if m.ssh is not None:
        ssh = h.ssh.model_copy(update={k: getattr(m.ssh, k) for k in m.ssh.model_fields_set}) if h.ssh else m.ssh
        update["ssh"] = ssh
    host = _build_host(role, h.model_copy(update=update), base, source, where)
    return dataclasses.replace(host, member=key, rank=rank, group=group)


def _check_local_units(hosts: dict[str, Host], source: SourceMap, where: PathKey) -> None:
    """orch's local service manager knows units by name: two local hosts cannot share one."""
    seen: dict[str, str] = {}
    for key, host in hosts.items():
        if host.transport != "local":
            continue
        for unit in host.units:
            other = seen.setdefault(unit.name, key)
            if other != key:
                raise source.error(
                    (*where, "hosts", host.role),
                    f"local unit {unit.name!r} is used by {other} and {key}",
                    "give each local instance its own `units:` (and url)",
                )


def _check_own_env_files(hosts: dict[str, Host], source: SourceMap, where: PathKey) -> None:
    """Each host edits an env file of its own (core.inventory.shared_env_file says why)."""
    shared = shared_env_file(hosts.items())
    if shared is not None:
        first, second, host = shared
        raise source.error(
            (*where, "hosts", host.role),
            f"{first} and {second} name the same env file {host.env_file_at}",
            "give each host its own env_file: orch backs up, edits and restores it per host",
        )


def _followed(path: Path) -> Path | None:
    """`path` with every symbolic link followed, or None when they make a loop, on every Python:
    3.11 and 3.12 raise RuntimeError there, 3.13 returns the path where it found the loop (a link
    still), and `orch validate` on 3.13 said "ok" of an env file that no unit can read."""
    try:
        full = path.resolve()
    except RuntimeError:
        return None
    return None if full.is_symlink() else full


def _build_host(role: str, h: HostShape, base: Path, source: SourceMap, where: PathKey) -> Host:
    if not ROLE_NAME.match(role):
        raise source.error(where, f"invalid role name {role!r}", "use lower-case letters, digits, - and _")
    if h.transport == "ssh" and h.ssh is None:
        raise source.error(where, "transport ssh needs an `ssh:` mapping", "e.g. ssh: {host: 10.0.0.4}")
    if h.transport == "local" and h.ssh is not None:
        raise source.error((*where, "ssh"), "`ssh:` given but transport is local", "set transport: ssh")
    units = tuple(_build_unit(u, h.transport, source, (*where, "units", i)) for i, u in enumerate(h.units))
    if h.ssh is not None:
        if h.ssh.host is None:
            raise source.error((*where, "ssh"), "missing required key 'host'", "e.g. ssh: {host: 10.0.0.4}")
        _check_ssh(h.ssh, source, (*where, "ssh"))
    env_file = _no_control(h.env_file, source, (*where, "env_file"))
    if h.transport == "local" and not Path(env_file).is_absolute():
        try:
            full = _followed(base / env_file)
        except OSError as exc:
            raise source.error((*where, "env_file"), f"cannot resolve {env_file!r}: {exc}") from None
        if full is None:
            raise source.error((*where, "env_file"), f"cannot resolve {env_file!r}: its symbolic links make a loop")
        env_file = str(full)
    elif not env_file.startswith("/"):
        raise source.error((*where, "env_file"), "a remote env_file must be an absolute path")
    address = (h.ssh.host or "").strip("[]") if h.ssh else "127.0.0.1"
    port = ROLE_PORTS.get(role)
    url = h.url or (f"http://{host_port(address, port)}" if port else None)  # an IPv6 host in brackets
    if url is None:
        raise source.error(where, f"role {role!r} has no default port", "set url: and health:")
    health = h.health or url.rstrip("/") + ("/readiness" if role == "router" else "/health")
    for key, value in (("url", url), ("health", health)):
        _check_url(value, source, (*where, key))
    ssh = SshSettings(**h.ssh.model_dump(), given=frozenset(h.ssh.model_fields_set)) if h.ssh else None
    if h.health_tunnel and h.transport != "ssh":
        raise source.error((*where, "health_tunnel"), "health_tunnel needs transport: ssh")
    return Host(
        role,
        h.transport,
        ssh,
        env_file,
        h.dialect,
        units,
        url.rstrip("/"),
        health,
        h.health_timeout,
        h.startup_estimate,
        h.verify_env,
        tuple(h.after),
        h.health_tunnel,
        line=source.line_of(where),
        ssh_line=_given_line(source, where, ("ssh", "host")),
        key_line=_given_line(source, where, ("ssh", "key")),
        known_hosts_line=_given_line(source, where, ("ssh", "known_hosts")),
        health_line=_given_line(source, where, ("health",)) or _given_line(source, where, ("url",)),
        env_file_line=_given_line(source, where, ("env_file",)),
        units_line=_given_line(source, where, ("units",)),
        sudo_line=_given_line(source, where, ("ssh", "sudo")),
        health_given=h.health is not None,
    )


def _given_line(source: SourceMap, where: PathKey, key: PathKey) -> int | None:
    """The line that spells `key` for the host at `where`: its own, else its instance's or its
    role's (a member inherits what it does not override); else the nearest line above it."""
    for cut in range(len(where), 3, -1):  # where[:4] is ("testbeds", NAME, "hosts", ROLE)
        pos = source.positions.get((*where[:cut], *key))
        if pos is not None:
            return pos.line
    return source.line_of((*where, *key))


def _build_unit(u: str | UnitShape, transport: str, source: SourceMap, where: PathKey) -> UnitSpec:
    spec = UnitSpec(u) if isinstance(u, str) else UnitSpec(u.name, tuple(u.command) if u.command else None)
    if not UNIT_NAME.match(spec.name):
        raise source.error(
            where,
            f"invalid unit name {spec.name!r}",
            "letters, digits, @ . _ : -, not starting with - (never an option)",
        )
    for i, arg in enumerate(spec.command or ()):
        if "\x00" in arg:
            raise source.error((*where, "command", i), "a command argument contains a NUL byte")
    if transport == "local" and spec.command is None:
        raise source.error(
            where,
            "a local unit needs a `command:` (argv list)",
            "e.g. {name: sim-decode, command: ['{python}', -m, orchestrator.sim.server]}",
        )
    return spec


def _check_acyclic(hosts: dict[str, Host], source: SourceMap, where: PathKey) -> None:
    state: dict[str, int] = {}

    def visit(role: str, trail: list[str]) -> None:
        if state.get(role) == 1:
            cycle = " -> ".join([*trail[trail.index(role) :], role])
            raise source.error((*where, "hosts", role, "after"), f"restart order has a cycle: {cycle}")
        if state.get(role) == 2:
            return
        state[role] = 1
        for dep in hosts[role].after:
            visit(dep, [*trail, role])
        state[role] = 2

    for role in hosts:
        visit(role, [])


def _no_control(value: str, source: SourceMap, at: PathKey) -> str:
    """Paths and names written into commands and files hold no NUL, line break or other control."""
    if CONTROL.search(value):
        raise source.error(at, f"{value!r} contains a control character (NUL, line break, tab, ...)")
    return value


def _title(name: str, source: SourceMap, at: PathKey, what: str) -> None:
    """A title, not a document: at most MAX_TITLE characters, no control character."""
    if len(name) > MAX_TITLE:
        raise source.error(
            at,
            f"{what} of at most {MAX_TITLE} characters, got {_quoted(name)}",
            "it is shown on every view of the run; write the longer text under description:",
        )
    _no_control(name, source, at)


def _check_ssh(ssh: SshShape, source: SourceMap, where: PathKey) -> None:
    """Host and user reach ssh's argv: they must never read as an option or hold shell syntax."""
    if not SSH_HOST.match(ssh.host or ""):
        raise source.error(
            (*where, "host"),
            f"invalid SSH host {ssh.host!r}",
            "a host name or an IP address: letters, digits, . - _ : [ ], not starting with -",
        )
    if not SSH_USER.match(ssh.user):
        raise source.error(
            (*where, "user"), f"invalid SSH user {ssh.user!r}", "letters, digits, _ . -, not starting with - or a digit"
        )
    for key in ("key", "known_hosts"):
        value = getattr(ssh, key)
        if value is not None:
            _no_control(value, source, (*where, key))


def _check_url(value: str, source: SourceMap, at: PathKey) -> None:
    """An http(s) URL with a host, a port in 1-65535 if given, and no whitespace or control."""
    if CONTROL.search(value) or re.search(r"\s", value):
        raise source.error(at, f"URL {value!r} contains whitespace or a control character")
    try:  # a bracketed host that is no IPv6 address ("http://[::1", "http://[zz]") raises here
        parts = urllib.parse.urlsplit(value)
        hostname = parts.hostname
    except ValueError:
        raise source.error(at, f"not an http(s) URL: {value!r}", "e.g. http://10.0.0.4:30000/health") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise source.error(at, f"not an http(s) URL: {value!r}", "e.g. http://10.0.0.4:30000/health")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and re.search(r":\d*$", parts.netloc)):
        raise source.error(at, f"URL {value!r} has an invalid port", "a port is 1-65535")


def check_template(template: str, source: SourceMap, at: PathKey) -> list[str]:
    """The placeholder names of a command template, each a plain {name}: no conversion (!r), no
    format spec ({x:>999999999} would allocate a gigabyte), no attribute or index ({a.b}, {a[0]}),
    no positional field ({0}, {}); and short enough to run (core.bounds.MAX_TEMPLATE_CHARS)."""
    if len(template) > MAX_TEMPLATE_CHARS:
        raise source.error(
            at,
            f"command longer than {MAX_TEMPLATE_CHARS:,} characters ({len(template):,}): Linux runs a command "
            f"of at most 128 KiB, placeholders filled in",
            "put the long part in a script and run that",
        )
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise source.error(at, f"bad placeholder syntax: {exc}", "write {{ and }} for literal braces") from None
    names = []
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if not PLACEHOLDER.match(name):
            raise source.error(at, f"invalid placeholder {shown}", "write a plain {name}; {{ and }} for literal braces")
        if conversion is not None or spec:
            raise source.error(at, f"placeholder {shown} has a conversion or format spec", f"write {{{name}}}")
        names.append(name)
    return names


def max_cells(matrix: Matrix) -> int:
    """An upper bound of the matrix's cells (the full product; exclude only removes cells)."""
    total = 1
    for n in _axis_sizes(matrix):
        total *= n
        if total > MAX_TRIALS:
            return MAX_TRIALS + 1  # stop multiplying: 40 factors of 1000 levels is a 120-digit number
    return total + len(matrix.include)


def check_replicates(matrix: Matrix, replicates: int, flag: str = "--replicates") -> None:
    """A replicates override (a flag, a queue entry, a run.json) is bounded like the matrix's
    before anything is planned: 10^9 replicates would allocate gigabytes of trial positions."""
    if not 1 <= replicates <= MAX_REPLICATES:
        raise ConfigError(f"{flag}: {replicates} is not in 1-{MAX_REPLICATES:,}")
    cells = max_cells(matrix)
    if cells * replicates > MAX_TRIALS:
        raise ConfigError(
            f"{flag}: {replicates}: up to {cells:,} cells x {replicates:,} replicates "
            f"is more than {MAX_TRIALS:,} trials",
            hint="fewer replicates, or fewer factors or levels",
        )


def placeholders(template: str) -> list[str]:
    """Names used as {name} in a command template (ConfigError-free: caller reports)."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


__all__ = ["ENV_NAME", "placeholders", "read_inventory", "read_matrix", "validate_shape"]


# --------------------------------------------------------------------------------------------
# Matrix normalisation: shapes -> core models, with every cross-reference checked.
# --------------------------------------------------------------------------------------------
NAME = re.compile(r"\A[A-Za-z][A-Za-z0-9_.-]{0,127}\Z")
LEVEL_NAME = re.compile(r"\A[^,=\s\x00-\x1f\x7f][^,=\x00-\x1f\x7f]{0,127}\Z")
STATIC_PLACEHOLDERS = {"run_dir", "trial_dir", "cell", "trial", "trial_seed", "round", "seed", "python", "testbed"}


def build_matrix(shape: MatrixShape, source: SourceMap, text: str) -> Matrix:
    if shape.hunt is not None:
        _check_hunt_keys(shape, source)
    factors = tuple(_build_factor(name, f, shape, source) for name, f in shape.factors.items())
    _check_no_shared_vars(factors, source)
    by_name = {f.name: f for f in factors}
    zips = _build_zips(shape.zips, by_name, source)
    exclude = tuple(
        _build_selector(sel, by_name, source, ("exclude", i), full=False) for i, sel in enumerate(shape.exclude)
    )
    include = tuple(
        _build_selector(sel, by_name, source, ("include", i), full=True) for i, sel in enumerate(shape.include)
    )
    partial = _build_selector(shape.baseline, by_name, source, ("baseline",), full=False)
    for i, name in enumerate(shape.secrets):
        _env_name(name, source, ("secrets", i))
    _title(shape.name, source, ("name",), "a matrix name")
    for i, word in enumerate(shape.booleans):
        _no_control(word, source, ("booleans", i))
    baseline = {f.name: partial.get(f.name, f.levels[0].name) for f in factors}
    matrix = Matrix(
        name=shape.name,
        description=shape.description,
        factors=factors,
        zips=zips,
        exclude=exclude,
        include=include,
        baseline=baseline,
        replicates=shape.replicates,
        order=shape.order,
        seed=shape.seed,
        health_timeouts=dict(shape.health_timeouts),
        repro=_build_repro(shape.repro, source),
        collect=_build_collectors(shape.collect, source),
        path=source.file,
        text=text,
        source=source,
        adaptive=_build_adaptive(shape, source),
        secrets=tuple(shape.secrets),
        stop_after_repeated_failures=shape.stop_after_repeated_failures,
        hunt=build_hunt(
            shape.hunt,
            {f.name: f.level_names for f in factors},
            baseline,
            [n for n, m in shape.repro.metrics.items() if m.kind == "proportion"],
            source,
        ),
        server_metrics=build_metrics(shape.metrics, source),
        verify=build_verify(shape.verify, {f.name: f.level_names for f in factors}, source),
        gates=_build_gates(shape, by_name, source),
    )
    if matrix.hunt is None:  # a hunt never expands its product (2^20 configurations for 20 flags)
        _check_size(matrix, source)
    return matrix


# keys of a matrix a hunt would silently ignore: it picks its own configurations (all failing, each
# flag dropped, ...), sizes their trials itself and stops by its own rule (hunt.posterior)
HUNT_IGNORES = {
    "zips": "a hunt chooses its own configurations",
    "exclude": "a hunt chooses its own configurations",
    "include": "a hunt chooses its own configurations",
    "replicates": "a hunt decides how many trials each configuration gets (hunt.min_failures, max_sessions)",
    "order": "a hunt runs its configurations in the order its search picks them",
    "adaptive": "a hunt stops by its own rule (hunt.posterior)",
}


def _check_hunt_keys(shape: MatrixShape, source: SourceMap) -> None:
    for key, why in HUNT_IGNORES.items():
        if key in shape.model_fields_set and getattr(shape, key) not in (None, [], {}):
            raise source.error((key,), f"`{key}:` does not apply to a hunt: {why}", "remove it")


def _check_size(matrix: Matrix, source: SourceMap) -> None:
    """Refuse a matrix whose product is too large to plan at its factors' line (core.matrix.expand
    checks again, for matrices built elsewhere); the size is never multiplied out past 10^18."""
    cells = max_cells(matrix)
    if cells * matrix.replicates > MAX_TRIALS:
        total = _exact_cells(matrix) * matrix.replicates
        shown = f"{total:,}" if total < 10**18 else "more than 10^18"
        raise source.error(
            ("factors",),
            f"the matrix expands to {shown} trials (over {MAX_TRIALS:,})",
            "split it, use zips, or exclude combinations",
        )
    product = _exact_cells(matrix)
    if product > MAX_PRODUCT:
        raise source.error(
            ("factors",),
            f"the factors' product has {product:,} cells (over {MAX_PRODUCT:,}, before exclude)",
            "split it or use zips; to find which of many flags matter, write a hunt (orch hunt)",
        )


def _exact_cells(matrix: Matrix) -> int:
    total = 1
    for n in _axis_sizes(matrix):
        total *= n
        if total >= 10**18:
            break
    return total


def _axis_sizes(matrix: Matrix) -> list[int]:
    """Levels per axis of the product: each free factor, and each zip (its factors move together)."""
    zipped = {name for group in matrix.zips for name in group}
    sizes = [len(f.levels) for f in matrix.factors if f.name not in zipped]
    return sizes + [len(matrix.factor(group[0]).levels) for group in matrix.zips]


def _build_gates(shape: MatrixShape, factors: dict[str, Factor], source: SourceMap) -> tuple[Gate, ...]:
    """Each gate names a metric the sweep measures and a partial cell selector (core.gates)."""
    metrics = [*shape.repro.metrics, *shape.collect]
    gates = []
    for i, g in enumerate(shape.gates):
        if g.metric not in metrics:
            raise source.error(
                ("gates", i, "metric"),
                f"{g.metric!r} is not a metric of the repro or a collector",
                f"metrics: {', '.join(metrics) or 'none'}",
            )
        _check_share_bounds(g, shape, source, ("gates", i))
        cells = _build_selector(g.cells, factors, source, ("gates", i, "cells"), full=False)
        _title(g.name or "", source, ("gates", i, "name"), "a gate name")
        name = g.name or default_name(g.metric, g.upper, g.lower, cells)
        gates.append(Gate(name=name, metric=g.metric, upper=g.upper, lower=g.lower, cells=cells))
    return tuple(gates)


def _check_share_bounds(g: GateShape, shape: MatrixShape, source: SourceMap, where: PathKey) -> None:
    """A proportion's bounds are shares. Why: `upper: 5` (5% meant) passed every cell, a rate being
    at most 1, so a CI gate that could not fail was green; `lower: 900` could never pass."""
    spec = shape.repro.metrics.get(g.metric)
    if spec is None or spec.kind != "proportion":
        return
    for key, value in (("upper", g.upper), ("lower", g.lower)):
        if value is not None and not 0 <= value <= 1:
            hint = _percent_hint(value) or "a bound between 0 and 1"
            raise source.error((*where, key), f"{g.metric!r} is a proportion (a rate from 0 to 1), got {value:g}", hint)


def _build_adaptive(shape: MatrixShape, source: SourceMap) -> Adaptive | None:
    a = shape.adaptive
    if a is None:
        return None
    proportions = [n for n, m in shape.repro.metrics.items() if m.kind == "proportion"]
    if a.metric not in proportions:
        raise source.error(
            ("adaptive", "metric"),
            f"{a.metric!r} is not a proportion metric of the repro",
            f"proportion metrics: {', '.join(proportions) or 'none'}",
        )
    if shape.replicates < 2:
        raise source.error(("replicates",), "adaptive stopping needs replicates >= 2 (the most rounds a cell may run)")
    return Adaptive(a.metric, a.effect, a.alpha, a.power, a.min_rounds, a.baseline_runs, a.direction)


def _build_factor(name: str, f: FactorShape, m: MatrixShape, source: SourceMap) -> Factor:
    where: PathKey = ("factors", name)
    if not NAME.match(name):
        raise source.error(where, f"invalid factor name {_quoted(name)}", "use letters, digits, _ . -")
    _check_kind_keys(name, f, source, where)
    if f.kind == "flag":
        levels = _flag_levels(f, source, where)
    elif f.kind == "client":
        levels = _client_levels(name, f, m, source, where)
    elif isinstance(f.levels, list):
        levels = _short_form_levels(f, m, source, where)
    elif any(not isinstance(v, dict) for v in f.levels.values()):
        raise source.error(
            (*where, "levels"),
            "levels as a mapping of plain values need `kind: flag` or `kind: client`",
            "an env factor's mapping gives each level role -> VAR: value",
        )
    else:
        if f.env is not None:
            raise source.error(
                (*where, "env"),
                "`env:` is only for the short form (levels: [a, b])",
                "with levels as a mapping, give each level its own role -> VAR: value",
            )
        levels = tuple(
            Level(lname, _level_env(env, m, source, (*where, "levels", lname)))  # type: ignore[arg-type]
            for lname, env in f.levels.items()
        )
    if len(levels) < 2:
        raise source.error(
            (*where, "levels"),
            f"a factor needs at least 2 levels, got {len(levels)}",
            "a factor varies; a setting every trial shares goes in the host's env file (the inventory's "
            "env_file), which orch leaves as it is",
        )
    names = [lv.name for lv in levels]
    for i, lname in enumerate(names):
        if not LEVEL_NAME.match(lname):
            raise source.error(
                (*where, "levels", i),
                f"invalid level name {_quoted(lname)}",
                "at most 128 characters, no ',', '=' or control characters, not starting with a space",
            )
        if lname in names[:i]:
            raise source.error((*where, "levels", i), f"duplicate level {lname!r}")
    _check_distinct_levels(levels, isinstance(f.levels, list), source, where)
    _check_secret_level_names(levels, f, m, source, where)
    return Factor(name, levels, f.description, f.kind)


def _check_distinct_levels(levels: tuple[Level, ...], listed: bool, source: SourceMap, where: PathKey) -> None:
    """Two levels that set the same env and fill the same placeholders are one configuration under
    two names: every comparison between them compares it with itself, so the factor can only show
    noise. A level copied and not edited does it, and so do `on` and `yes` (YAML reads both as true,
    written 1)."""
    for i, level in enumerate(levels):
        same = next((o for o in levels[:i] if (o.env, o.client) == (level.env, level.client)), None)
        if same is not None:
            raise source.error(
                (*where, "levels", i if listed else level.name),
                f"level {level.name!r} sets what level {same.name!r} sets",
                "give each level a value of its own; YAML reads on, yes and true alike, and off, no and false",
            )


def _check_kind_keys(name: str, f: FactorShape, source: SourceMap, where: PathKey) -> None:
    """`flag:` belongs to kind flag, `placeholder:` to kind client; kind client sets no env."""
    if f.kind != "flag" and f.flag is not None:
        raise source.error((*where, "flag"), "`flag:` needs `kind: flag`", "add kind: flag")
    if f.kind != "client" and f.placeholder is not None:
        raise source.error((*where, "placeholder"), "`placeholder:` needs `kind: client`", "add kind: client")
    if f.kind == "flag" and (f.flag is None or not f.env):
        raise source.error(
            where,
            "a flag factor needs `flag:` and `env:` (role -> the args variable)",
            "e.g. flag: --cuda-graph-max-bs, env: {decode: SGLANG_EXTRA_ARGS}",
        )
    if f.kind == "client" and f.env is not None:
        raise source.error(
            (*where, "env"),
            "a client factor changes only the repro: it has no `env:`",
            f"write {{{f.placeholder or name}}} in repro.command",
        )


def _level_items(f: FactorShape, source: SourceMap, where: PathKey) -> list[tuple[str, Scalar, PathKey]]:
    """(level name, value, where) of a flag or client factor: a list names each level by its
    value as written; a mapping gives name: value."""
    if isinstance(f.levels, list):
        out: list[tuple[str, Scalar, PathKey]] = []
        for i, value in enumerate(f.levels):
            at = (*where, "levels", i)
            out.append((source.raw_of(at) or ("null" if value is None else str(value)), value, at))
        return out
    items: list[tuple[str, Scalar, PathKey]] = []
    for lname, given in f.levels.items():
        at = (*where, "levels", lname)
        if isinstance(given, dict):
            raise source.error(at, "expected a plain value, got a mapping", "a flag or client level is one value")
        items.append((lname, given, at))
    return items


def _flag_levels(f: FactorShape, source: SourceMap, where: PathKey) -> tuple[Level, ...]:
    """Each level sets, adds or removes the flag in the role's args variable. A boolean flag's
    levels are present/absent (true/false); a valued flag's are its values, or absent (null)."""
    flag = f.flag or ""
    if not FLAG_NAME.match(flag):
        raise source.error(
            (*where, "flag"), f"invalid flag {flag!r}", "a command-line option such as --cuda-graph-max-bs"
        )
    items = _level_items(f, source, where)
    values = [_flag_value(value, source, at) for _, value, at in items]
    takes_value = any(v not in (None, PRESENT) for v in values)
    if takes_value and PRESENT in values:
        at = items[values.index(PRESENT)][2]
        raise source.error(
            at,
            f"level 'present' mixes a boolean flag with values ({flag} VALUE)",
            "a boolean flag's levels are present/absent; a valued flag's are values or absent",
        )
    targets = {role: [v] if isinstance(v, str) else list(v) for role, v in (f.env or {}).items()}
    levels = []
    for (lname, _, _), value in zip(items, values, strict=True):
        edit = ArgsEdit((FlagSetting(flag, takes_value, value),))
        env: dict[str, dict[str, CellValue]] = {
            role: {_env_name(var, source, (*where, "env", role)): edit for var in vars_}
            for role, vars_ in targets.items()
        }
        levels.append(Level(lname, env))
    return tuple(levels)


def _flag_value(value: Scalar, source: SourceMap, at: PathKey) -> str | None:
    """null/false/absent: no flag; true/present: the flag alone; text: the flag's value."""
    if value is None or value is False or value == ABSENT:
        return None
    if value is True or value == PRESENT:
        return PRESENT
    if CONTROL.search(value) or not value.strip():
        raise source.error(at, f"invalid flag value {value[:64]!r}", "one line of text, not blank")
    _check_value_size(value, source, at)
    return value


def _client_levels(name: str, f: FactorShape, m: MatrixShape, source: SourceMap, where: PathKey) -> tuple[Level, ...]:
    """Each level is a value of one repro placeholder; nothing on any host changes."""
    placeholder = f.placeholder or name
    if not PLACEHOLDER.match(placeholder) or placeholder in STATIC_PLACEHOLDERS:
        raise source.error(
            (*where, "placeholder") if f.placeholder else where,
            f"{placeholder!r} cannot be a repro placeholder",
            "set `placeholder:` to a name of letters, digits and _ that orch does not define itself",
        )
    levels = []
    for lname, value, at in _level_items(f, source, where):
        if value is None:
            raise source.error(at, "a client level needs a value", "e.g. levels: [8, 32]")
        written = _env_value(value, m, source, at)
        levels.append(Level(lname, {}, {placeholder: written or ""}))
    return tuple(levels)


def _check_secret_level_names(
    levels: tuple[Level, ...], f: FactorShape, m: MatrixShape, source: SourceMap, where: PathKey
) -> None:
    """A level name is printed everywhere (cell ids, report, journal, run.json, plan.json, exports,
    `orch plan`): one that is a secret's value (a short-form factor on HF_TOKEN names its levels by
    their values) or looks like a token would publish it. Refused, with a hint to name the levels;
    the message never repeats the name."""
    redactor = Redactor.for_names(m.secrets)
    short = isinstance(f.levels, list)  # a flag or client factor's levels set no plain env value
    values = {v for lv in levels for v in secret_values(lv, redactor)}
    for i, lv in enumerate(levels):
        if short and isinstance(f.levels[i], str) and secret_values(lv, redactor):  # type: ignore[index]
            raise source.error(
                (*where, "levels", i),
                "levels given as a list on a secret variable would be named by their values, "
                "and level names are shown in the report, journal, run.json and plan.json",
                "name the levels: levels: {with_token: {decode: {HF_TOKEN: ...}}, without: {decode: {HF_TOKEN: null}}}",
            )
        if lv.name in values or redactor.changes(lv.name):
            raise source.error(
                (*where, "levels"),
                f"level {i + 1} is named like a secret value "
                "(level names are shown in the report, journal, run.json and plan.json)",
                "give the level a plain name, e.g. with_token",
            )


def _short_form_levels(f: FactorShape, m: MatrixShape, source: SourceMap, where: PathKey) -> tuple[Level, ...]:
    if not f.env:
        raise source.error(
            where,
            "levels given as a list need `env:` (role -> VAR)",
            "e.g. env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}",
        )
    targets = {role: [v] if isinstance(v, str) else list(v) for role, v in f.env.items()}
    out = []
    for i, value in enumerate(f.levels):
        at = (*where, "levels", i)
        name = source.raw_of(at) or ("null" if value is None else str(value))
        written = _env_value(value, m, source, at)
        env: dict[str, dict[str, CellValue]] = {
            role: {_env_name(var, source, (*where, "env", role)): written for var in vars_}
            for role, vars_ in targets.items()
        }
        out.append(Level(name, env))
    return tuple(out)


def _level_env(
    env: dict[str, dict[str, Scalar]], m: MatrixShape, source: SourceMap, where: PathKey
) -> dict[str, dict[str, CellValue]]:
    return {
        role: {
            _env_name(var, source, (*where, role, var)): _env_value(val, m, source, (*where, role, var))
            for var, val in assignments.items()
        }
        for role, assignments in env.items()
    }


def _env_name(var: str, source: SourceMap, at: PathKey) -> str:
    if not ENV_NAME.match(var):
        raise source.error(
            at,
            f"invalid environment variable name {var[:64]!r}{'...' if len(var) > 64 else ''}",
            "at most 255 letters, digits and _, not starting with a digit",
        )
    return var


def _env_value(value: Scalar, m: MatrixShape, source: SourceMap, at: PathKey) -> EnvValue:
    """A YAML boolean is written as booleans[0]/[1] ("1"/"0"), never Python's True/False."""
    if isinstance(value, bool):
        return m.booleans[0] if value else m.booleans[1]
    if value is None:
        return None
    if CONTROL.search(value.replace("\t", "")):
        raise source.error(
            at, "value contains a NUL or line break (or another control character)", "env files hold one-line values"
        )
    _check_value_size(value, source, at)
    return value


def _check_value_size(value: str, source: SourceMap, at: PathKey) -> None:
    """An env or flag value a process can be started with (see core.bounds.MAX_ARG_BYTES)."""
    size = len(value.encode("utf-8", errors="surrogateescape"))
    if size > MAX_ENV_VALUE_BYTES:
        raise source.error(
            at,
            f"value of {size:,} bytes: {ENV_ENTRY_TOO_LONG}",
            ENV_ENTRY_HINT,
        )


def _check_no_shared_vars(factors: tuple[Factor, ...], source: SourceMap) -> None:
    """One variable belongs to one factor, except an args variable: flag factors share it, one
    flag each (an env factor setting it whole would overwrite what they edit)."""
    owner: dict[tuple[str, str], str] = {}  # (role, VAR) -> the env factor, or "flags" factors
    flag_owner: dict[tuple[str, str, str], str] = {}  # (role, VAR, flag) -> the flag factor
    for f in factors:
        flag = _flag_of(f)
        for role, var in sorted({(r, v) for lv in f.levels for r, a in lv.env.items() for v in a}):
            other = owner.setdefault((role, var), f.name if flag is None else f"flag:{f.name}")
            if flag is not None and other.startswith("flag:"):
                other = flag_owner.setdefault((role, var, flag), f.name)
                if other == f.name:
                    continue
                raise source.error(
                    ("factors", f.name),
                    f"{flag} in {role}:{var} is also set by factor {other!r}",
                    "one flag belongs to one factor; use zips to move factors together",
                )
            if other != f.name:
                other = other.removeprefix("flag:")
                raise source.error(
                    ("factors", f.name),
                    f"{role}:{var} is also set by factor {other!r}",
                    "one variable belongs to one factor (flag factors share an args variable, one flag "
                    "each); use zips to move factors together",
                )


def _flag_of(f: Factor) -> str | None:
    for lv in f.levels:
        for assignments in lv.env.values():
            for value in assignments.values():
                if isinstance(value, ArgsEdit):
                    return value.settings[0].flag
    return None


def _build_zips(zips: list[list[str]], factors: dict[str, Factor], source: SourceMap) -> tuple[tuple[str, ...], ...]:
    seen: set[str] = set()
    for i, group in enumerate(zips):
        if len(group) < 2:
            raise source.error(("zips", i), "a zip needs at least two factors")
        for j, name in enumerate(group):
            _known_factor(name, factors, source, ("zips", i, j))
            if name in seen:
                raise source.error(("zips", i, j), f"factor {name!r} is in more than one zip")
            seen.add(name)
        sizes = {name: len(factors[name].levels) for name in group}
        if len(set(sizes.values())) > 1:
            listed = ", ".join(f"{n}={s}" for n, s in sizes.items())
            raise source.error(("zips", i), f"zipped factors need the same number of levels ({listed})")
    return tuple(tuple(g) for g in zips)


def _known_factor(name: str, factors: dict[str, Factor], source: SourceMap, at: PathKey) -> Factor:
    if name not in factors:
        close = difflib.get_close_matches(name, list(factors), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"factors: {', '.join(factors)}"
        raise source.error(at, f"{name!r} is not a declared factor", hint)
    return factors[name]


def _build_selector(
    sel: dict[str, Scalar], factors: dict[str, Factor], source: SourceMap, where: PathKey, *, full: bool
) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in sel.items():
        factor = _known_factor(name, factors, source, (*where, name))
        level = source.raw_of((*where, name)) or str(value)
        if level not in factor.level_names:
            raise source.error(
                (*where, name), f"{level!r} is not a level of {name!r}", f"levels: {', '.join(factor.level_names)}"
            )
        out[name] = level
    missing = [f for f in factors if f not in out]
    if full and missing:
        raise source.error(
            where,
            f"an include entry must name a level for every factor; missing: {', '.join(missing)}",
            "include appends whole cells, it never merges into other cells",
        )
    if not full and not out and where[0] == "exclude":
        raise source.error(where, "an empty exclude entry would exclude every cell")
    return out


def _build_repro(r: ReproShape, source: SourceMap) -> Repro:
    metrics = tuple(_build_metric(name, m, source) for name, m in r.metrics.items())
    check_template(r.command, source, ("repro", "command"))
    _check_on(r.on, source)
    valid = tuple(_build_valid(i, v, {m.name: m for m in metrics}, source) for i, v in enumerate(r.valid))
    if r.warmup is not None:
        check_template(r.warmup, source, ("repro", "warmup"))
    for i, url in enumerate(r.allow_urls):
        _check_url(url, source, ("repro", "allow_urls", i))
    return Repro(r.command, r.on, r.timeout, r.expected_duration, metrics, valid, r.warmup, tuple(r.allow_urls))


def _build_valid(i: int, v: ValidShape, metrics: dict[str, MetricSpec], source: SourceMap) -> ValidRule:
    """One validity rule, checked the way it will run: its regex compiled by the bounded engine,
    its metric known, its bounds meaningful for what it reads."""
    at: PathKey = ("repro", "valid", i)
    given = [(key, value) for key, value in (("regex", v.regex), ("metric", v.metric), ("absent", v.absent)) if value]
    if len(given) != 1:
        raise source.error(
            at,
            "a validity rule needs exactly one of `regex:`, `metric:` or `absent:`",
            r"e.g. {regex: 'error=(?P<value>\d+)', max: 0}, {metric: corruption, min_n: 40} or {absent: 'HTTP 5\d\d'}",
        )
    check, target = given[0]
    has_bounds = v.min is not None or v.max is not None
    if v.min is not None and v.max is not None and v.min > v.max:
        raise source.error((*at, "min"), f"min {v.min:g} is above max {v.max:g}")
    if check == "absent":
        compile_pattern(target, source, (*at, "absent"))
        if has_bounds or v.min_n is not None:
            raise source.error(at, "`absent:` takes no min, max or min_n (the regex must simply not match)")
    elif check == "regex":
        compiled = compile_pattern(target, source, (*at, "regex"))
        if "value" not in compiled.groupindex and compiled.groups != 1:
            raise source.error((*at, "regex"), "a validity regex needs a (?P<value>...) group or exactly one group")
        if v.min_n is not None or not has_bounds:
            raise source.error(at, "a `regex:` rule takes `min:` and/or `max:` (min_n is for proportion metrics)")
    else:
        _check_valid_metric(target, v, metrics, source, at)
    return ValidRule(dotted(at), check, target, v.min, v.max, v.min_n)  # type: ignore[arg-type]


def _check_valid_metric(
    name: str, v: ValidShape, metrics: dict[str, MetricSpec], source: SourceMap, at: PathKey
) -> None:
    spec = metrics.get(name)
    if spec is None:
        raise source.error((*at, "metric"), f"no metric {name!r} in repro.metrics", f"one of: {', '.join(metrics)}")
    if spec.kind == "proportion" and v.min_n is None and v.min is None and v.max is None:
        raise source.error(at, f"give `min_n:` (sessions done) or `min:`/`max:` (the rate) for proportion {name!r}")
    if spec.kind == "number" and (v.min_n is not None or (v.min is None and v.max is None)):
        raise source.error(at, f"number metric {name!r} takes `min:` and/or `max:` (min_n is for proportions)")


def _build_metric(name: str, m: MetricShape, source: SourceMap) -> MetricSpec:
    at: PathKey = ("repro", "metrics", name, "regex")
    if not NAME.match(name):
        raise source.error(("repro", "metrics", name), f"invalid metric name {_quoted(name)}")
    compiled = compile_pattern(m.regex, source, at)
    groups, count = set(compiled.groupindex), compiled.groups
    if m.kind == "proportion" and not {"k", "n"} <= groups:
        raise source.error(
            at,
            "a proportion metric needs named groups (?P<k>...) and (?P<n>...)",
            r"e.g. 'CORRUPTION sessions: (?P<k>\d+)/(?P<n>\d+)'",
        )
    if m.kind == "number" and "value" not in groups and count != 1:
        raise source.error(at, "a number metric needs a (?P<value>...) group or exactly one group")
    _check_unit(m.unit, source, ("repro", "metrics", name, "unit"))
    return MetricSpec(name, m.kind, m.regex, m.unit)


def _check_unit(unit: str, source: SourceMap, at: PathKey) -> None:
    """A unit is shown beside every value on the pages: a short printable word, refused at its line."""
    problem = unit_problem(unit)
    if problem is not None:
        raise source.error(at, problem, f"write a short unit such as s, ms, tok/s or MiB (at most {MAX_UNIT_CHARS})")


def _build_collectors(collect: dict[str, CollectShape], source: SourceMap) -> tuple[Collector, ...]:
    out = []
    for name, c in collect.items():
        at: PathKey = ("collect", name)
        if not NAME.match(name):
            raise source.error(at, f"invalid collector name {_quoted(name)}")
        if (c.pattern is None) == (c.command is None):
            raise source.error(at, "give exactly one of `pattern:` (count matches in the role's logs) or `command:`")
        if c.pattern is not None:
            compile_pattern(c.pattern, source, (*at, "pattern"))
        if c.command is not None:
            check_template(c.command, source, (*at, "command"))
        _check_unit(c.unit, source, (*at, "unit"))
        out.append(Collector(name, c.role, c.pattern, c.command, c.unit))
    return tuple(out)


MAX_PATTERN = 1000  # characters of a metric or collector regex


def compile_pattern(pattern: str, source: SourceMap, at: PathKey) -> regex.Pattern[str]:
    """A metric or collector regex, compiled by the engine that will run it (the `regex`
    package: its matches take a timeout, so a catastrophic pattern cannot hang a sweep)."""
    if len(pattern) > MAX_PATTERN:
        raise source.error(at, f"regular expression longer than {MAX_PATTERN} characters")
    if (items := unrolled_size(pattern)) > MAX_UNROLLED:  # compiling it would allocate without bound
        raise source.error(
            at,
            f"regular expression repeats too much: its counts unroll to {items:,} items (at most {MAX_UNROLLED:,})",
            "use + or * for a long run, e.g. \\d+ rather than \\d{100000}",
        )
    try:
        return regex.compile(pattern, regex.MULTILINE)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise source.error(at, f"invalid regular expression: {exc}") from None


def _check_on(on: str, source: SourceMap) -> None:
    if on != CONTROLLER and not ROLE_NAME.match(on):
        raise source.error(("repro", "on"), f"invalid role {on!r}", "controller or a role of the inventory")


def client_placeholders(matrix: Matrix) -> dict[str, str]:
    """placeholder -> the client factor that fills it."""
    return {p: f.name for f in matrix.factors for lv in f.levels for p in lv.client}


def check_against_inventory(matrix: Matrix, testbed: Testbed) -> None:
    """Cross-checks that need both files: roles exist, placeholders resolve."""
    src, roles = matrix.source, set(testbed.roles)

    def hint(role: str) -> str:
        close = difflib.get_close_matches(role, testbed.roles, n=1)
        known = f"roles in testbed {testbed.name!r}: {shown_names(list(testbed.roles), 'roles')}"
        return f"did you mean {close[0]!r}? {known}" if close else known

    for f in matrix.factors:
        for lv in f.levels:
            for role in lv.env:
                if role not in roles:
                    raise src.error(("factors", f.name), f"role {role!r} is not in the inventory", hint(role))
    if matrix.repro.on != CONTROLLER and matrix.repro.on not in roles:
        raise src.error(
            ("repro", "on"),
            f"role {matrix.repro.on!r} is not in the inventory",
            f"use controller or a role; {hint(matrix.repro.on)}",
        )
    for c in matrix.collect:
        if c.role not in roles:
            raise src.error(("collect", c.name, "role"), f"role {c.role!r} is not in the inventory", hint(c.role))
    for role in matrix.health_timeouts:
        if role not in roles:
            raise src.error(("health_timeouts", role), f"role {role!r} is not in the inventory", hint(role))
    check_roles(matrix.server_metrics, matrix.verify, roles, src, hint)
    _check_flag_values(matrix, testbed)
    _check_repro_urls(matrix, testbed)
    known = STATIC_PLACEHOLDERS | {f"{r}_url" for r in roles}
    client = client_placeholders(matrix)  # filled per cell: the repro's (and warm-up's), not collectors'
    for where, template in [
        (("repro", "command"), matrix.repro.command),
        *([(("repro", "warmup"), matrix.repro.warmup)] if matrix.repro.warmup else []),
        *[(("collect", c.name, "command"), c.command) for c in matrix.collect if c.command],
    ]:
        for name in check_template(template, src, where):
            if name in client and where[0] == "repro":
                continue
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                raise src.error(
                    where,
                    f"undefined placeholder {{{name}}}",
                    f"did you mean {{{close[0]}}}?" if close else f"known: {', '.join(sorted(known))}",
                )


def _check_flag_values(matrix: Matrix, testbed: Testbed) -> None:
    """A flag factor's value the role's hosts cannot pass to the server as one argument is
    refused at its level: the sweep would run, and compare, a server given other arguments (or
    none, when its argparse refuses `'64` and `128'`). What reaches it depends on the dialect
    (core.argsvar.unreachable): under systemd a quoted value with a space arrives whole."""
    for f in matrix.factors:
        if f.kind != "flag":
            continue
        for i, lv in enumerate(f.levels):
            for role, assignments in lv.env.items():
                for var, edit in assignments.items():
                    if isinstance(edit, ArgsEdit):
                        _check_settings(matrix, testbed, (f.name, i, lv.name), role, var, edit)


def _check_settings(
    matrix: Matrix, testbed: Testbed, level: tuple[str, int, str], role: str, var: str, edit: ArgsEdit
) -> None:
    for s in edit.settings:
        if not s.takes_value or s.value is None:
            continue
        for key in testbed.roles.get(role, ()):
            found = unreachable(s.value, testbed.hosts[key].dialect)
            if found is not None:
                raise _unreachable_error(matrix, level, var, s, f"{key} of testbed {testbed.name!r}", found)


def _unreachable_error(
    matrix: Matrix, level: tuple[str, int, str], var: str, s: FlagSetting, host: str, found: tuple[str, str]
) -> ConfigError:
    factor, index, name = level
    at: PathKey = ("factors", factor, "levels", name)
    if at not in matrix.source.positions:  # a list names its levels by their values
        at = ("factors", factor, "levels", index)
    what, why = found
    shown = shlex.quote(matrix.redactor.value(s.flag, s.value or ""))  # as the env file gets it
    example = " (e.g. 64,128 if the flag takes a list)" if what == "a space" else ""
    return matrix.source.error(
        at,
        f"a flag value with {what} cannot reach the server through ${var} on {host}: {why} ({s.flag} {shown})",
        f"write the value without {what}{example}, or give the flag a variable of its own that the unit "
        f'passes as one argument ({s.flag} "${{MY_VAR}}") and vary that with an env factor',
    )


def _check_repro_urls(matrix: Matrix, testbed: Testbed) -> None:
    """A literal URL the repro reaches on loopback or an inventory host must be one of orch's
    servers (core.reprourls): else a stranger there would serve the trials, and they would count."""
    endpoints = matrix.server_metrics.endpoints if matrix.server_metrics else None
    known = known_ports(
        testbed,
        [(e.role, e.port) for e in endpoints or () if e.role is not None and e.port is not None],
        [e.url for e in endpoints or () if e.url is not None],
        matrix.repro.allow_urls,
    )
    repro = matrix.repro
    texts: list[tuple[PathKey, str]] = [(("repro", "command"), repro.command)]
    texts += [(("repro", "warmup"), repro.warmup)] if repro.warmup else []
    texts += [(("factors", f.name, "levels"), v) for f in matrix.factors for lv in f.levels for v in lv.client.values()]
    for where, text in texts:
        for origin in (*origins(text), *flag_origins(text)):
            if not known.serves(origin):
                raise matrix.source.error(where, stray_url_message(origin, known), stray_url_hint(origin))
