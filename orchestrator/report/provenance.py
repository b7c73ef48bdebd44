"""The report's provenance beyond the manifest: who started the run, and what served each trial.

Each trial record names, per host, the server version, digests of the server's self-description
and of its units' command lines, and the env file's sha256 (edges.provenance.TrialDescriber).
The report groups trials that share all four (a group per cell and host, typically) and lists
the trials of each group, so every trial is labelled, and each text is shown once.

A journal is scanned for these without parsing whole lines: `provenance` is the record's last
field, so the tail of a line after its key is parsed alone (a line written another way is parsed
whole). An older journal without the field gives no groups, and the report says so.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import pydantic

from orchestrator.core import jsontext
from orchestrator.core.records import Controller, Frozen, RunManifest, ServedGroup, TrialProvenance
from orchestrator.core.redact import Redactor

KEY = b'"provenance":'
NOT_RECORDED = "not recorded (a run from an older orch)"
_ROLES = pydantic.TypeAdapter(dict[str, TrialProvenance])


class Served(Frozen):
    groups: list[ServedGroup]
    texts: dict[str, str]  # digest -> the server info or command line it stands for


def controller_lines(manifest: RunManifest) -> dict[str, str]:
    """What the report shows of the controller (every line; older runs say "not recorded")."""
    c = manifest.controller
    if c is None:
        return {"controller": NOT_RECORDED}
    lines = {
        "orch": _orch(c),
        "host": c.host or "unknown",
        "user": c.user or "unknown",
        "command": manifest.redactor.text(c.command),
        "python": c.python,
        "packages": ", ".join(f"{k} {v}" for k, v in sorted(c.packages.items())) or "unknown",
    }
    for i, r in enumerate(manifest.resumed_by, 1):  # a resume may run another orch, elsewhere
        lines[f"resume {i}"] = f"{manifest.redactor.text(r.command)} ({r.user or '?'}@{r.host or '?'}, orch {_orch(r)})"
    return lines


def _orch(c: Controller) -> str:
    commit = (c.orch_commit + (" (with uncommitted changes)" if c.orch_dirty else "")) if c.orch_commit else "none"
    return f"{c.orch_version}, git commit {commit}"


def served(entries: Iterable[tuple[int, dict[str, TrialProvenance]]], redactor: Redactor) -> Served:
    """PURE: group (trial, host -> facts) by host and facts, keeping each text once."""
    groups: dict[tuple[str, str, str, str, str], list[int]] = {}
    texts: dict[str, str] = {}
    for trial, hosts in entries:
        for host, p in hosts.items():
            groups.setdefault((host, p.server_version, p.server_info_sha, p.exec_start_sha, p.env_sha256), []).append(
                trial
            )
            if p.server_info:
                texts.setdefault(p.server_info_sha, redactor.text(p.server_info))
            if p.exec_start:
                texts.setdefault(p.exec_start_sha, redactor.text(p.exec_start))
    return Served(
        groups=[
            ServedGroup(
                host=k[0],
                server_version=k[1],
                server_info_sha=k[2],
                exec_start_sha=k[3],
                env_sha256=k[4],
                trials=ranges(sorted(set(trials))),
                count=len(set(trials)),
            )
            for k, trials in sorted(groups.items(), key=lambda kv: (kv[0][0], min(kv[1])))
        ],
        texts=texts,
    )


def ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    out: list[str] = []
    start = prev = None
    for n in [*numbers, None]:
        if start is not None and (n is None or n != prev + 1):  # type: ignore[operator]
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ", ".join(out)


Provenances = Iterator[tuple[int, dict[str, TrialProvenance]]]  # (trial, host -> what served it)


def scan_journal(path: Path, offsets: Collection[int] | None = None) -> Provenances:
    """(trial, host -> facts) of every trial line of a journal that has them (`offsets`: only the
    lines that start at these bytes, e.g. the completed records'). Trials of one cell end in the
    same bytes, so each distinct tail is parsed once (100,000 trials: about a second)."""
    parsed: dict[bytes, dict[str, TrialProvenance]] = {}
    end = 0
    with path.open("rb") as handle:
        for line in handle:
            start, end = end, end + len(line)
            if offsets is not None and start not in offsets:
                continue
            at = line.rfind(KEY)
            if at < 0:  # an event, or a trial from an older orch
                continue
            found = _tail(line, at, parsed)
            if found is not None:
                yield found


def _tail(
    line: bytes, at: int, parsed: dict[bytes, dict[str, TrialProvenance]]
) -> tuple[int, dict[str, TrialProvenance]] | None:
    try:
        trial = int(line[:200].split(b'"trial":', 1)[1].split(b",", 1)[0])
        body = line[at + len(KEY) :].rstrip()[:-1]  # up to the record's closing brace
        hosts = parsed.get(body)
        if hosts is None:
            hosts = parsed[body] = _ROLES.validate_json(body)
        return trial, hosts
    except (IndexError, ValueError, pydantic.ValidationError):
        try:  # written another way: the whole line
            data = jsontext.loads(line)
            return int(data["trial"]), _ROLES.validate_python(data.get("provenance") or {})
        except (ValueError, KeyError, TypeError, RecursionError, pydantic.ValidationError):
            return None
