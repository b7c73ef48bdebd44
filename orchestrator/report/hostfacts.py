"""The host facts a run's trials were not alike in: a parallel run's testbeds that found other facts,
and a resume that found other facts than the session before it.

Pure: reads run.json's `testbed_hosts` and `hosts_changed` (core.hostfacts). Why: a cell's trials
are pooled over testbeds and sessions; testbed B on other GPUs or another server version, or a run
resumed on them, makes that pool mix two things under one name, and the testbed tests
(report.testbeds) only see it if the numbers happen to move. One sentence per fact, in the words
`orch compare` uses for host facts (report.unlike), masked as the report masks host lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator.core.hostfacts import BY_CELL, latest_facts
from orchestrator.core.records import HostsChanged, RunManifest
from orchestrator.core.words import counted
from orchestrator.report.factwords import by_value, quote, quote_apart, whose, word
from orchestrator.report.model import Finding

# where a testbed's role runs (store.planrecord): separate deployments differ there by design
PLACE = frozenset({"address", "transport", "env_file", "dialect", "units", "health"})
UNCOMPARED = PLACE | BY_CELL  # and what follows the cell first run (core.hostfacts)


def host_fact_findings(manifest: RunManifest) -> list[Finding]:
    """The testbeds' differing facts, then the facts that changed between sessions."""
    return [*testbed_fact_findings(manifest), *session_change_findings(manifest)]


def testbed_fact_findings(manifest: RunManifest) -> list[Finding]:
    """One caution per role and fact that the testbeds recorded otherwise (a fact some testbed did
    not record, e.g. its servers never answered, is compared among those that did)."""
    beds = {name: manifest.testbed_hosts[name] for name in manifest.testbeds if name in manifest.testbed_hosts}
    out = []
    for role in dict.fromkeys(r for facts in beds.values() for r in facts):
        keys = dict.fromkeys(k for facts in beds.values() for k in facts.get(role, {}) if k not in UNCOMPARED)
        for key in keys:
            values = {name: _shown(manifest, key, f[role][key]) for name, f in beds.items() if key in f.get(role, {})}
            if len({_placeless(key, v) for v in values.values()}) > 1:
                text = f"Testbeds are not copies: the {role} role's {word(key)} differed: {_by_testbed(values)}"
                out.append(Finding(kind="caution", text=text + "; a cell's trials pooled over them mix both."))
    return out


# a command line's words that say where its server listens or finds its peers: a URL, an address:port (a word
# of its own, no dot after: not an image's `nvidia/tritonserver:24.05`), a place flag's value
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_HOST_PORT = re.compile(r"(?<![\w./-])([\w.-]+):(\d{1,5})(?![\w.])")
_LOWEST_SERVER_PORT = 1024  # below it, `NAME:24` with a bare NAME is taken for an image's tag (`sglang:24`)
_PLACE_FLAG = re.compile(
    r"(--?(?:[a-z0-9]+[-_])*(?:port|host|hostname|addr|address|ip|url|urls)(?:[-_][a-z0-9]+)*)(=|\s+)((?!-)\S+)",
    re.IGNORECASE,
)


def _placeless(key: str, value: str) -> str:
    """A units' command line with where it listens taken out: separate deployments differ there by
    design (two copies of the simulator on one machine differed in every port, a caution per role).
    Any other fact as it is."""
    if key != "exec_start":
        return value
    value = _PLACE_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}PLACE", value)
    return _HOST_PORT.sub(_host_port, _URL.sub("PLACE", value))


def _host_port(match: re.Match[str]) -> str:
    """An address:port taken out; a bare name with a port below 1024 kept, for it reads as an image
    named without a path (`sglang:24` vs `sglang:25`: another release, not another place). Where
    in doubt the words stay and the caution is said: a needless caution costs less than a
    difference called a copy."""
    host, port = match.group(1), int(match.group(2))
    if "." in host or host == "localhost" or port >= _LOWEST_SERVER_PORT:
        return "PLACE"
    return match.group(0)


def session_change_findings(manifest: RunManifest) -> list[Finding]:
    """One caution per fact a resume found otherwise than the session before it had."""
    out = []
    for i, change in enumerate(manifest.hosts_changed):
        first = (manifest.testbed_hosts.get(change.testbed) if change.testbed else None) or manifest.hosts
        before = latest_facts(first.get(change.role, {}), manifest.hosts_changed[:i], change.testbed, change.role)
        for key, after in change.facts.items():
            was, now = quote_apart(_shown(manifest, key, before.get(key, "")), _shown(manifest, key, after))
            text = (
                f"Host facts changed between sessions: {whose(change.testbed)}{change.role} role's {word(key)} "
                f"was {was} {_since(manifest.hosts_changed[:i], change, key)}, {now} in resume {change.session} "
                f"({trials_ran(change)}); trials on either side of the change are not like-for-like."
            )
            out.append(Finding(kind="caution", text=text))
    return out


def _since(earlier: list[HostsChanged], change: HostsChanged, key: str) -> str:
    """Which session the value before the change is of: the first, or the resume that found it."""
    last = [c for c in earlier if c.testbed == change.testbed and c.role == change.role and key in c.facts]
    return f"in resume {last[-1].session}" if last else "as the run began"


def trials_ran(change: HostsChanged) -> str:
    """What the session that found the change ran: how many trials, from when."""
    if not change.trials:
        return "which ran no trial"
    return f"which ran {counted(change.trials, 'trial')} from {change.since}"


def _shown(manifest: RunManifest, key: str, value: str) -> str:
    return manifest.redactor.value(key, value)


def _by_testbed(values: Mapping[str, str]) -> str:
    """'x' on A, C; 'y' on B: each value once with the testbeds that found it (two values quoted
    from where they differ, as compare quotes them)."""
    grouped = by_value(values)
    quoted: dict[str, str] = {}
    if len(grouped) == 2:
        a, b = grouped
        quoted = dict(zip((a, b), quote_apart(a, b), strict=True))
    return "; ".join(f"{quoted.get(v) or quote(v)} on {', '.join(names)}" for v, names in grouped.items())
