"""The simulator's configurable flag model (PURE): which flags cause the failure, so tests and
benchmarks can set the truth a culprit hunt must find.

Read from the decode server's environment (its env file), all optional; without SIM_CULPRITS the
built-in DSV4 model of sim/model.py applies unchanged:

* ``SIM_CULPRITS``: causes joined by ``|`` (OR), each ``flag&flag&...:rate`` (AND of its flags,
  failing that share of sessions), e.g. ``bf16_index_k&cuda_graph&multi_stream_overlap:0.16``;
* ``SIM_FLAG_EFFECTS``: ``flag:delta,...`` small independent additions to the session rate;
* ``SIM_BACKGROUND``: the session failure rate with no cause on (default 0.005);
* ``SIM_TRIAL_ICC``: trial-to-trial variation (intra-class correlation of a trial's sessions,
  default 0): every trial's rate is drawn from a Beta with the configured mean and this ICC.

A flag is one of the server's own (bf16_index_k, cuda_graph, multi_stream_overlap) or the name
of an env var that is on when it reads true/1/yes/y (SGLang-style booleans); up to 20 flags.
Why a separate model: the DSV4 AND is one truth; a hunt must also be tested on an OR of two
causes, a single culprit and decoys with a small effect of their own.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import NamedTuple

MAX_FLAGS = 20
BUILTIN = ("bf16_index_k", "cuda_graph", "multi_stream_overlap")
_TRUE = ("true", "1", "yes", "y")
_FLAG = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class CulpritSpecError(ValueError):
    """A SIM_CULPRITS / SIM_FLAG_EFFECTS value the simulator cannot read (it refuses to start)."""


class Cause(NamedTuple):
    flags: frozenset[str]
    rate: float  # share of sessions failing when every flag of the cause is on


class CulpritModel(NamedTuple):
    causes: tuple[Cause, ...]
    effects: tuple[tuple[str, float], ...] = ()
    background: float = 0.005
    icc: float = 0.0

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(f for c in self.causes for f in c.flags) | {f for f, _ in self.effects}

    def session_rate(self, on: frozenset[str]) -> float:
        """Mean share of failing sessions with these flags on: the causes and effects act
        independently (1 - product of the chances each does not strike)."""
        clean = 1.0 - self.background
        for cause in self.causes:
            if cause.flags <= on:
                clean *= 1.0 - cause.rate
        for flag, delta in self.effects:
            if flag in on:
                clean *= 1.0 - delta
        return 1.0 - clean

    def trial_rate(self, on: frozenset[str], rng: random.Random) -> float:
        """One trial's rate: the mean, varied from trial to trial (Beta with the model's ICC)."""
        p = self.session_rate(on)
        if self.icc <= 0.0 or p <= 0.0 or p >= 1.0:
            return p
        scale = (1.0 - self.icc) / self.icc
        return rng.betavariate(p * scale, (1.0 - p) * scale)


def request_rate(session_rate: float, rounds: int) -> float:
    """Per-request rate giving `session_rate` over a session of `rounds` requests."""
    return 1.0 - (1.0 - session_rate) ** (1.0 / max(rounds, 1))


def flags_on(model: CulpritModel, builtin: Mapping[str, bool], env: Mapping[str, str]) -> frozenset[str]:
    """The model's flags that are on: the server's own from its parsed config, others from env."""
    on = set()
    for flag in model.flags:
        if flag in builtin:
            if builtin[flag]:
                on.add(flag)
        elif env.get(flag, "").strip().lower() in _TRUE:
            on.add(flag)
    return frozenset(on)


def model_from_env(env: Mapping[str, str]) -> CulpritModel | None:
    spec = env.get("SIM_CULPRITS", "").strip()
    if not spec:
        return None
    causes = tuple(_cause(part) for part in spec.split("|"))
    effects = tuple(_effect(part) for part in env.get("SIM_FLAG_EFFECTS", "").split(",") if part.strip())
    model = CulpritModel(
        causes,
        effects,
        _unit("SIM_BACKGROUND", env.get("SIM_BACKGROUND", "0.005")),
        _unit("SIM_TRIAL_ICC", env.get("SIM_TRIAL_ICC", "0")),
    )
    if len(model.flags) > MAX_FLAGS:
        raise CulpritSpecError(f"SIM_CULPRITS/SIM_FLAG_EFFECTS name {len(model.flags)} flags (at most {MAX_FLAGS})")
    return model


def _cause(part: str) -> Cause:
    names, sep, rate = part.strip().rpartition(":")
    if not sep:
        raise CulpritSpecError(f"SIM_CULPRITS: {part!r} has no rate (write flag&flag:0.15)")
    flags = frozenset(_flag(n) for n in names.split("&"))
    return Cause(flags, _unit("SIM_CULPRITS", rate))


def _effect(part: str) -> tuple[str, float]:
    name, sep, delta = part.strip().rpartition(":")
    if not sep:
        raise CulpritSpecError(f"SIM_FLAG_EFFECTS: {part!r} has no rate (write flag:0.01)")
    return _flag(name), _unit("SIM_FLAG_EFFECTS", delta)


def _flag(name: str) -> str:
    name = name.strip()
    if not _FLAG.match(name):
        raise CulpritSpecError(f"SIM_CULPRITS: invalid flag name {name!r}")
    return name


def _unit(where: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise CulpritSpecError(f"{where}: invalid number {raw!r}") from None
    if not 0.0 <= value < 1.0:
        raise CulpritSpecError(f"{where}: {value} not in [0, 1)")
    return value
