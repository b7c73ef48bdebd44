"""The matrix's `metrics:` (server metrics, GPU telemetry) and `verify:` (what a server must
report once up) sections: shapes as written, and the checked models (PURE).

    metrics:
      sample_interval: 0.5         # also scrape gauges every 0.5 s while the repro runs (default: off)
      timeout: 2                   # seconds per scrape; a failed scrape is recorded as missing
      gpu: true                    # nvidia-smi + kernel XID errors on hosts that have nvidia-smi
      endpoints:                   # default: /metrics of every role but `router`, SGLang names
        decode: {role: decode}                      # the role's health URL origin + path (/metrics)
        router: {url: "http://127.0.0.1:29000/metrics", names: ["smg_*"]}
        dcgm: {url: "http://gpu1:9400/metrics", names: [DCGM_FI_DEV_POWER_USAGE]}

    verify:                        # a mismatch voids the trial, like an env mismatch
      - when: {cuda_graph: "off"}  # default: every cell
        role: decode
        path: /server_info         # default; older SGLang: /get_server_info (tried next on 404)
        expect: {disable_cuda_graph: true, flags.cuda_graph_max_bs: 64}
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field

from orchestrator.core.shapebase import Shape
from orchestrator.errors import MISSING, ConfigError

PathKey = tuple[str | int, ...]


class SourceMap(Protocol):
    """core.yamlsrc.SourceMap as used here (not imported: config imports this module, and a chain
    config -> serverconf -> yamlsrc would deepen every import path by a level)."""

    file: str

    def raw_of(self, path: PathKey) -> str | None: ...

    def line_of(self, path: PathKey) -> int | None: ...

    def error(self, path: PathKey, message: str, hint: str | None = None) -> ConfigError: ...


MAX_ENDPOINTS = 32
MAX_NAMES = 200
MAX_VERIFY = 200
# what SGLang workers expose that a sweep reads: throughput, queue depth, KV usage, cache hits,
# TTFT and end-to-end latency (python/sglang/srt/metrics/collector.py)
SGLANG_NAMES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:gen_throughput",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:time_to_first_token_seconds",
    "sglang:e2e_request_latency_seconds",
    "sglang:num_requests_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
)
# what the SGLang router (sglang-router / smg) exposes on --prometheus-port that a sweep reads
SMG_NAMES = (
    "smg_router_requests_total",
    "smg_router_request_errors_total",
    "smg_router_ttft_seconds",
    "smg_router_request_duration_seconds",
    "smg_worker_requests_active",
    "smg_worker_health",
)
ENDPOINT_NAME = re.compile(r"\A[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
FIELD = re.compile(r"\A[A-Za-z0-9_-]{1,128}(?:\.[A-Za-z0-9_-]{1,128}){0,7}\Z")
ROUTER_ROLE = "router"  # the default endpoints are the workers: every role but this one


_Shape = Shape


class EndpointShape(_Shape):
    role: str | None = None
    path: str = "/metrics"
    port: int | None = Field(
        default=None, ge=1, le=65535
    )  # another port on the role's host (a router's --prometheus-port)
    url: str | None = None
    names: list[str] | None = Field(default=None, max_length=MAX_NAMES)


class MetricsShape(_Shape):
    sample_interval: float | None = Field(default=None, ge=0.05, le=3600)
    timeout: float = Field(default=2.0, gt=0, le=60)
    gpu: bool = True
    endpoints: dict[str, EndpointShape] | None = None


class VerifyShape(_Shape):
    role: str
    path: str = "/server_info"
    when: dict[str, str | bool | None] = {}
    expect: dict[str, str | bool | int | float | None] = Field(min_length=1, max_length=100)


@dataclass(frozen=True)
class Endpoint:
    """One Prometheus endpoint: a role's (its health URL's host and port, or `port`, + path) or an
    absolute URL."""

    name: str
    role: str | None
    path: str
    url: str | None
    names: tuple[str, ...]
    port: int | None = None


@dataclass(frozen=True)
class ServerMetrics:
    endpoints: tuple[Endpoint, ...] | None  # None: the default (every worker role's /metrics)
    sample_interval_s: float | None
    timeout_s: float
    gpu: bool

    def resolved(self, roles: list[str]) -> tuple[Endpoint, ...]:
        """The endpoints for a testbed's roles (the default: each worker role, SGLang names)."""
        if self.endpoints is not None:
            return self.endpoints
        return tuple(Endpoint(r, r, "/metrics", None, SGLANG_NAMES) for r in roles if r != ROUTER_ROLE)


@dataclass(frozen=True)
class VerifyRule:
    where: str  # `verify[0]`, for messages
    role: str
    path: str
    when: dict[str, str]  # factor -> level; empty: every cell
    expect: tuple[tuple[str, str | bool | int | float | None], ...]  # dotted field -> value
    at: str = ""  # `matrices/m.yaml:31`, the rule's line, for messages

    def applies_to(self, levels: Mapping[str, str]) -> bool:
        return all(levels.get(f) == lv for f, lv in self.when.items())


def build_metrics(shape: MetricsShape | None, source: SourceMap) -> ServerMetrics | None:
    if shape is None:
        return None
    endpoints = None
    if shape.endpoints is not None:
        if len(shape.endpoints) > MAX_ENDPOINTS:
            raise source.error(("metrics", "endpoints"), f"more than {MAX_ENDPOINTS} endpoints")
        endpoints = tuple(_endpoint(n, e, source) for n, e in shape.endpoints.items())
    return ServerMetrics(endpoints, shape.sample_interval, shape.timeout, shape.gpu)


def _http_url(url: str) -> bool:
    """An http(s) URL with a host and a valid port if one is given (urlsplit raises ValueError for
    a bracketed host that is no IPv6 address, .port for a port out of range)."""
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        return False


def _endpoint(name: str, e: EndpointShape, source: SourceMap) -> Endpoint:
    at: PathKey = ("metrics", "endpoints", name)
    if not ENDPOINT_NAME.match(name):
        raise source.error(at, f"invalid endpoint name {name!r}", "letters, digits, _ and -")
    if (e.role is None) == (e.url is None):
        raise source.error(at, "give exactly one of `role:` (its health URL's host and port) or `url:`")
    if e.port is not None and e.role is None:
        raise source.error((*at, "port"), "`port:` goes with `role:` (a `url:` names its own port)")
    if e.url is not None and not _http_url(e.url):
        raise source.error((*at, "url"), f"not an http(s) URL: {e.url!r}", "e.g. http://gpu1:9400/metrics")
    if not e.path.startswith("/") or any(c in e.path for c in " \t\r\n#"):
        raise source.error((*at, "path"), f"invalid path {e.path!r}", "e.g. /metrics")
    default = SMG_NAMES if e.role == ROUTER_ROLE else SGLANG_NAMES
    names = tuple(e.names) if e.names is not None else default
    if not names:
        raise source.error((*at, "names"), "an empty list keeps nothing", "list metric names or globs, e.g. smg_*")
    return Endpoint(name, e.role, e.path, e.url, names, e.port)


def build_verify(
    rules: list[VerifyShape], factors: Mapping[str, tuple[str, ...]], source: SourceMap
) -> tuple[VerifyRule, ...]:
    """`factors`: factor name -> its level names (to check `when:`)."""
    if len(rules) > MAX_VERIFY:
        raise source.error(("verify",), f"more than {MAX_VERIFY} rules")
    return tuple(_verify_rule(i, r, factors, source) for i, r in enumerate(rules))


def _verify_rule(i: int, r: VerifyShape, factors: Mapping[str, tuple[str, ...]], source: SourceMap) -> VerifyRule:
    at: PathKey = ("verify", i)
    when = {}
    for factor, value in r.when.items():
        levels = factors.get(factor)
        if levels is None:
            raise source.error((*at, "when", factor), f"no factor {factor!r}", f"factors: {', '.join(factors)}")
        level = source.raw_of((*at, "when", factor)) or str(value)
        if level not in levels:
            raise source.error(
                (*at, "when", factor), f"{level!r} is not a level of {factor!r}", f"levels: {', '.join(levels)}"
            )
        when[factor] = level
    for key in r.expect:
        if not FIELD.match(key):
            raise source.error(
                (*at, "expect", key), f"invalid field {key!r}", "a name, or a dotted path like flags.cuda_graph"
            )
    if not r.path.startswith("/") or any(c in r.path for c in " \t\r\n#?"):
        raise source.error((*at, "path"), f"invalid path {r.path!r}", "e.g. /server_info")
    line = source.line_of(at)
    located = f"{source.file}:{line}" if line is not None else source.file
    return VerifyRule(f"verify[{i}]", r.role, r.path, when, tuple(r.expect.items()), located)


def check_roles(
    metrics: ServerMetrics | None,
    verify: tuple[VerifyRule, ...],
    roles: set[str],
    source: SourceMap,
    hint: Callable[[str], str],
) -> None:
    """Cross-check with the inventory: every role named exists (`hint(role)`: what to write instead)."""
    for e in (metrics.endpoints or ()) if metrics else ():
        if e.role is not None and e.role not in roles:
            raise source.error(
                ("metrics", "endpoints", e.name, "role"), f"role {e.role!r} is not in the inventory", hint(e.role)
            )
    for i, rule in enumerate(verify):
        if rule.role not in roles:
            raise source.error(("verify", i, "role"), f"role {rule.role!r} is not in the inventory", hint(rule.role))


_ABSENT = object()


def reported_mismatch(info: object, rule: VerifyRule) -> tuple[str, object, object] | None:
    """The first (field, expected, actual) of a rule the server's JSON answer breaks, else None;
    actual is errors.MISSING when the field is absent. Types are compared too: true is not 1."""
    for key, want in rule.expect:
        got = _lookup(info, key)
        if got is _ABSENT:
            return key, want, MISSING
        if not _same(want, got):
            return key, want, got
    return None


def missing_words(info: object, rule: VerifyRule, dotted_key: str) -> str:
    """Why a field absent from the answer voids the trial: the server does not report that name (a
    misspelt `expect:` key voids every trial of its cells), with the nearest name it does report."""
    parent, _, last = dotted_key.rpartition(".")
    level = _lookup(info, parent) if parent else info
    names = [str(k) for k in level] if isinstance(level, dict) else []
    near = difflib.get_close_matches(last, names, n=1)
    guess = f" (did you mean {'.'.join([parent, near[0]]) if parent else near[0]}?)" if near else ""
    at = f"{rule.at}: " if rule.at else ""
    return f"{at}{rule.path} reports no field {dotted_key}{guess}: check the name; the trial is void"


def _lookup(info: object, dotted_key: str) -> object:
    value = info
    for part in dotted_key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _same(want: object, got: object) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(want) == float(got)
    if isinstance(want, str) and isinstance(got, (int, float)):  # the matrix's YAML keeps numbers as text
        return _number(want) == float(got)
    return type(want) is type(got) and want == got


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
