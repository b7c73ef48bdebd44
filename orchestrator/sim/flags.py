"""Simulator configuration read from the process environment (PURE).

The servers take their flags from the environment, exactly as a systemd unit with
``EnvironmentFile=`` would hand them over, and parse them the way SGLang does. The parsing
quirks are the point: ``SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=off`` is *ignored with a warning*
(newer SGLang boolean parsing), so the overlap silently stays on. orch must catch that.
"""

from __future__ import annotations

import shlex
from typing import Literal, Mapping, NamedTuple

from orchestrator.sim.culprits import CulpritModel, CulpritSpecError, flags_on, model_from_env

Role = Literal["prefill", "decode", "router"]
ROLES: tuple[Role, ...] = ("prefill", "decode", "router")

_TRUE = ("true", "1", "yes", "y")
_FALSE = ("false", "0", "no", "n")

DEFAULT_WARMUP_S = 1.0
DEFAULT_CUDA_GRAPH_MAX_BS = 8


class SimConfigError(ValueError):
    """A flag the real server would refuse at start-up (exit code 2, like argparse)."""


class SimConfig(NamedTuple):
    """The effective flags of one simulated server, after SGLang-style parsing."""

    role: Role
    warmup_s: float = DEFAULT_WARMUP_S
    seed: int = 0
    bf16_index_k: bool = False
    multi_stream_overlap: bool = True
    cuda_graph: bool = True
    cuda_graph_max_bs: int = DEFAULT_CUDA_GRAPH_MAX_BS
    max_running_requests: int | None = None
    fail_start: bool = False
    never_ready: bool = False
    culprits: CulpritModel | None = None  # the configurable flag model (sim/culprits.py), else DSV4's
    culprit_flags: frozenset[str] = frozenset()  # the culprit model's flags that are on
    # what the server logs at start-up about values it ignored
    warnings: tuple[str, ...] = ()

    def effective_flags(self) -> dict[str, object]:
        """The flags as the server reports them in its start line and /get_server_info."""
        return {
            "bf16_index_k": self.bf16_index_k,
            "multi_stream_overlap": self.multi_stream_overlap,
            "cuda_graph": self.cuda_graph,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "max_running_requests": self.max_running_requests,
            "warmup_s": self.warmup_s,
            "seed": self.seed,
        }


def parse_env_bool(name: str, raw: str | None, default: bool, warnings: list[str]) -> bool:
    """Newer SGLang boolean parsing: true/1/yes/y and false/0/no/n (any case); anything else is
    ignored with a warning and the default stays in force."""
    if raw is None:
        return default
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    warnings.append(
        f"WARNING: {name}={raw!r} is not a valid boolean (use true/1/yes/y or false/0/no/n); "
        f"ignoring it, {name} stays {default}"
    )
    return default


class ExtraArgs(NamedTuple):
    cuda_graph: bool = True
    cuda_graph_max_bs: int = DEFAULT_CUDA_GRAPH_MAX_BS
    max_running_requests: int | None = None


def parse_extra_args(text: str) -> ExtraArgs:
    """Parse SGLANG_EXTRA_ARGS like the server's argparse would; unknown flags are fatal."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise SimConfigError(f"SGLANG_EXTRA_ARGS: cannot split {text!r}: {exc}") from exc
    values: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        flag, _, inline = tokens[i].partition("=")
        if flag == "--disable-cuda-graph" and not inline:
            values["cuda_graph"] = False
            i += 1
        elif flag in ("--cuda-graph-max-bs", "--max-running-requests"):
            raw, i = (inline, i + 1) if inline else (_next(tokens, i, flag), i + 2)
            values[flag[2:].replace("-", "_")] = _positive_int(flag, raw)
        else:
            raise SimConfigError(f"unrecognized arguments: {tokens[i]}")
    return ExtraArgs(**values)  # type: ignore[arg-type]


def _next(tokens: list[str], i: int, flag: str) -> str:
    if i + 1 >= len(tokens):
        raise SimConfigError(f"argument {flag}: expected one argument")
    return tokens[i + 1]


def _positive_int(flag: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SimConfigError(f"argument {flag}: invalid int value: {raw!r}") from None
    if value < 1:
        raise SimConfigError(f"argument {flag}: must be >= 1, got {value}")
    return value


def _float(name: str, raw: str | None, default: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SimConfigError(f"{name}: invalid number {raw!r}") from None
    if value < 0:
        raise SimConfigError(f"{name}: must be >= 0, got {value}")
    return value


def _int(name: str, raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SimConfigError(f"{name}: invalid integer {raw!r}") from None


def config_from_env(role: Role, env: Mapping[str, str]) -> SimConfig:
    """Build the effective configuration of a server from its environment."""
    warnings: list[str] = []
    extra = parse_extra_args(env.get("SGLANG_EXTRA_ARGS", ""))
    try:
        culprits = model_from_env(env)
    except CulpritSpecError as exc:
        raise SimConfigError(str(exc)) from None
    cfg = SimConfig(
        role=role,
        warmup_s=_float("SIM_WARMUP_S", env.get("SIM_WARMUP_S"), DEFAULT_WARMUP_S),
        seed=_int("SIM_SEED", env.get("SIM_SEED"), 0),
        bf16_index_k=parse_env_bool("SGLANG_DSV4_BF16_INDEX_K", env.get("SGLANG_DSV4_BF16_INDEX_K"), False, warnings),
        multi_stream_overlap=parse_env_bool(
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP",
            env.get("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"),
            True,
            warnings,
        ),
        cuda_graph=extra.cuda_graph,
        cuda_graph_max_bs=extra.cuda_graph_max_bs,
        max_running_requests=extra.max_running_requests,
        fail_start=env.get("SIM_FAIL_START", "").lower() in _TRUE,
        never_ready=env.get("SIM_NEVER_READY", "").lower() in _TRUE,
        warnings=tuple(warnings),
        culprits=culprits,
    )
    if culprits is None:
        return cfg
    builtin = {"bf16_index_k": cfg.bf16_index_k, "cuda_graph": cfg.cuda_graph}
    builtin["multi_stream_overlap"] = cfg.multi_stream_overlap
    return cfg._replace(culprit_flags=flags_on(culprits, builtin, env))
