"""PURE: a matrix's `hunt:` section - `orch hunt` searches which of the matrix's factors (the
suspect flags) cause a failure. Shape and validation here, at file:line; the search itself is
core/hunt.py.

    hunt:
      metric: corruption        # a proportion metric of the repro: the failure rate
      failing: {overlap: on}    # each suspect's failing level (default: its baseline level)
      clean: {overlap: off}     # each suspect's clean level (default: its other level)
      min_failures: 2           # failures that confirm the failing configuration fails
      posterior: 0.95           # stop when the likeliest culprit set has this posterior
      confidence: 0.99          # a single-flag drop "passes" / "fails" on its own trials at this level
      icc: 0.03                 # least trial-to-trial variation (tempers each trial's evidence; the
                                # trials' own estimate, core/huntspread.py, is used when higher)
      sessions_per_trial: 10    # what the repro runs per trial (planning and the first choices)
      max_sessions: 3000        # the hunt's budget
      max_or: 4                 # OR hypotheses up to this many flags in all (0: AND only)

Every factor of a hunt matrix is a suspect flag, so the all-failing configuration is every
factor at its failing level and the all-clean one every factor at its clean level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field

from orchestrator.core.shapebase import Shape
from orchestrator.errors import ConfigError

MAX_SUSPECTS = 20
Where = tuple[str | int, ...]


class SourceMap(Protocol):
    """What this module needs of core.yamlsrc.SourceMap (not imported: config imports this
    module, and the import chain would grow a level)."""

    def error(self, path: Where, message: str, hint: str | None = None) -> ConfigError: ...

    def raw_of(self, path: Where) -> str | None: ...


class HuntShape(Shape):
    metric: str
    failing: dict[str, str | bool | None] = {}
    clean: dict[str, str | bool | None] = {}
    min_failures: int = Field(default=2, ge=1, le=100)
    posterior: float = Field(default=0.95, gt=0.5, lt=1)
    confidence: float = Field(default=0.99, gt=0.5, lt=1)
    icc: float = Field(default=0.03, ge=0, lt=1)
    sessions_per_trial: int = Field(default=10, ge=1, le=100_000)
    max_sessions: int = Field(default=3000, ge=1, le=10_000_000)
    max_or: int = Field(default=4, ge=0, le=4)


@dataclass(frozen=True)
class HuntSpec:
    metric: str
    flags: tuple[str, ...]  # the suspect factors, in the matrix's order
    failing: Mapping[str, str]  # factor -> its failing level
    clean: Mapping[str, str]  # factor -> its clean level
    min_failures: int
    posterior: float
    confidence: float
    icc: float
    sessions_per_trial: int
    max_sessions: int
    max_or: int

    def levels(self, config: int) -> tuple[tuple[str, str], ...]:
        """(factor, level) of a configuration: bit i set is flag i at its failing level."""
        return tuple((f, self.failing[f] if config >> i & 1 else self.clean[f]) for i, f in enumerate(self.flags))

    def config_of(self, levels: Mapping[str, str]) -> int | None:
        """The configuration of a trial's levels (None: not a hunt configuration)."""
        config = 0
        for i, f in enumerate(self.flags):
            level = levels.get(f)
            if level == self.failing[f]:
                config |= 1 << i
            elif level != self.clean[f]:
                return None
        return config

    def in_words(self, config: int) -> str:
        """A configuration by what sets it apart, as `orch plan` lists the first wave: "all failing
        but overlap clean", "only bf16_index_k, cuda_graph failing". Why: its cell id names all 16
        flags (300 characters), so a progress line of it hid which flags were dropped."""
        kind, names = set_apart(tuple(f for i, f in enumerate(self.flags) if config >> i & 1), self.flags)
        if kind == "all":
            return "all flags at their failing level"
        if kind == "none":
            return "all flags at their clean level"
        if kind == "all but":
            return "all failing but " + ", ".join(names) + " clean"
        return "only " + ", ".join(names) + " failing"


def set_apart(failing: Sequence[str], flags: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """How to name a configuration with `failing` of `flags` at their failing level, shortest first:
    ("all", ()), ("none", ()), ("all but", the clean ones) when more than half fail, else ("only",
    the failing ones). One rule for the terminal's words (HuntSpec.in_words) and the hunt page's."""
    if len(failing) == len(flags):
        return "all", ()
    if not failing:
        return "none", ()
    if 2 * len(failing) > len(flags):
        return "all but", tuple(f for f in flags if f not in failing)
    return "only", tuple(failing)


def build_hunt(
    shape: HuntShape | None,
    factors: Mapping[str, Sequence[str]],
    baseline: Mapping[str, str],
    proportions: Sequence[str],
    source: SourceMap,
) -> HuntSpec | None:
    """Check the section against the matrix's factors and metrics; errors at file:line."""
    if shape is None:
        return None
    if shape.metric not in proportions:
        raise source.error(
            ("hunt", "metric"),
            f"{shape.metric!r} is not a proportion metric of the repro",
            f"proportion metrics: {', '.join(proportions) or 'none'}",
        )
    if len(factors) > MAX_SUSPECTS:
        raise source.error(("factors",), f"a hunt takes at most {MAX_SUSPECTS} suspect flags, got {len(factors)}")
    failing = _levels(shape.failing, "failing", factors, source)
    clean = _levels(shape.clean, "clean", factors, source)
    for name, levels in factors.items():
        bad = failing.setdefault(name, baseline.get(name, levels[0]))
        if name not in clean:
            others = [lv for lv in levels if lv != bad]
            if len(others) != 1:
                raise source.error(
                    ("factors", name),
                    f"suspect {name!r} has {len(levels)} levels: which one is clean?",
                    f"name it under hunt.clean.{name}",
                )
            clean[name] = others[0]
        if clean[name] == bad:
            raise source.error(
                ("hunt", "clean", name), f"suspect {name!r}: its clean level is its failing level {bad!r}"
            )
    return HuntSpec(
        metric=shape.metric,
        flags=tuple(factors),
        failing=failing,
        clean=clean,
        min_failures=shape.min_failures,
        posterior=shape.posterior,
        confidence=shape.confidence,
        icc=shape.icc,
        sessions_per_trial=shape.sessions_per_trial,
        max_sessions=shape.max_sessions,
        max_or=shape.max_or,
    )


def section_line(text: str, key: str) -> int | None:
    """The line of a top-level `key:` in a matrix's text (1-based), for errors about the section."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(f"{key}:"):
            return number
    return None


def _levels(
    given: Mapping[str, str | bool | None], key: str, factors: Mapping[str, Sequence[str]], source: SourceMap
) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in given.items():
        where: Where = ("hunt", key, name)
        if name not in factors:
            raise source.error(where, f"{name!r} is not a factor of the matrix", f"factors: {', '.join(factors)}")
        level = source.raw_of(where) or str(value)
        if level not in factors[name]:
            raise source.error(where, f"{level!r} is not a level of {name!r}", f"levels: {', '.join(factors[name])}")
        out[name] = level
    return out
