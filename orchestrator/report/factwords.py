"""Host facts in words, as `orch compare` (report.unlike) and the run's own report
(report.hostfacts) say them: each fact's name, and two values quoted so that where they differ shows.

Its own module, below both: the run's report must not import the comparison's matrix rebuilding.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

from orchestrator.core.clip import clip

V = TypeVar("V", bound=Hashable)

QUOTE_CHARS = 160  # of a quoted command, regex or line: a whole repro command can be a paragraph


# run.json's host facts in words: where a role ran (store.planrecord) and what orch found there
# (edges.provenance.describe_host); a fact not named here is said by its key
HOST_FACTS = {
    "address": "address",
    "transport": "transport",
    "env_file": "env file",
    "dialect": "env file dialect",
    "units": "units",
    "health": "health URL",
    "exec_start": "units' command line",
    "server_info": "server info",
    "server_version": "server version",
    "env_sha256_before": "env file as the run began (sha256)",
    "repro_check": "check for what the repro left running",
}
# and the GPU facts (core.gpuinfo.FIELDS), which compare says whole for one-testbed runs but fact
# by fact wherever a fact is one line of its own (a testbed's, a session's)
FACT_WORDS = {
    **HOST_FACTS,
    "gpu_model": "GPU model",
    "gpu_driver": "GPU driver",
    "cuda": "CUDA version",
    "gpu": "nvidia-smi",
}


def word(key: str) -> str:
    """A host fact's name in words (its key when it has none)."""
    return FACT_WORDS.get(key, key)


def whose(testbed: str) -> str:
    """What a role's fact belongs to: `testbed T's ` for one testbed of several, else `the `."""
    return f"testbed {testbed}'s " if testbed else "the "


def by_value(values: Mapping[str, V]) -> dict[V, list[str]]:
    """testbed -> value, as value -> the testbeds that had it (first seen first)."""
    grouped: dict[V, list[str]] = {}
    for name, value in values.items():
        grouped.setdefault(value, []).append(name)
    return grouped


def quote_or_none(text: str | None) -> str:
    """quote, and a value one side did not record said so."""
    return quote(text) if text is not None else "not recorded"


def quote_apart(a: str | None, b: str | None) -> tuple[str, str]:
    """Two texts quoted so that where they differ shows: past a long common start, each is quoted
    from a little before its first difference (the start left out as '…'); None: not recorded."""
    if a is None or b is None:
        return quote_or_none(a), quote_or_none(b)
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, same - QUOTE_CHARS // 4)
    if start == 0:
        return quote(a), quote(b)
    return "…" + quote(a[start:]), "…" + quote(b[start:])


def quote(text: str | None, limit: int = QUOTE_CHARS) -> str:
    """A text in quotes as written (repr would double a regex's every backslash), cut at `limit`."""
    if text is None:
        return "none"
    return "'" + clip(text, limit) + "'"
