"""What run.json keeps of the host facts each session found: every testbed's, the first session's.

Pure: no I/O. Each session of a run (the run, then each `orch resume`) asks its hosts once what
they run (edges.provenance.describe_host: units' command line, server version, GPUs, the env
file's sha256). Two rules, each learned from a fact that was lost:
- a parallel run keeps every testbed's facts (run.json's `testbed_hosts`): keeping one per role
  ("testbeds are copies") hid a testbed that ran other GPUs or another server version;
- the first session's facts stay; a later session that found a fact otherwise is recorded
  beside them (`hosts_changed`), never over them: a run resumed on other GPUs named only the
  last ones, and its trials on either side of the change read as like-for-like.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.core.records import HostsChanged, RunManifest

Facts = dict[str, dict[str, str]]  # role -> fact -> value

# Facts that follow the cell a session first ran, not the host: the server info's summary holds
# tp_size, flags, disable_cuda_graph (edges.provenance.KEEP), asked at whichever cell came first.
# Compared, they would call every resume and every testbed different; what served each trial is
# compared trial by trial instead (run.json's `served`).
BY_CELL = frozenset({"server_info"})


@dataclass
class TrialsRan:
    """What hosts_changed needs of the trials a session ran on one testbed: which (their count) and
    when the first began. The controller keeps this, not the trials' records: a record (repro
    output tail, provenance, metrics) is ~12 KB in memory, and a sweep runs thousands."""

    trials: set[int] = field(default_factory=set)
    first_started: str = ""  # ISO 8601 in UTC, as every record's `started`: the least sorts first

    def add(self, trial: int, started: str) -> None:
        self.trials.add(trial)
        if not self.first_started or started < self.first_started:
            self.first_started = started

    def merged(self, other: TrialsRan) -> TrialsRan:
        starts = [s for s in (self.first_started, other.first_started) if s]
        return TrialsRan(self.trials | other.trials, min(starts, default=""))


def recorded_hosts(
    manifest: RunManifest, found: Mapping[str, Facts], session: int, ran: Mapping[str, TrialsRan] | None = None
) -> dict[str, object]:
    """run.json's host fields once a session ends: `found` (testbed -> role -> facts this session
    found) merged into what the manifest holds, `session` the session's number (0: the run, n:
    resumed_by[n-1]), `ran` the trials it ran on each testbed. A fact not recorded yet is added;
    one recorded and found otherwise is kept as it was and the new value goes into hosts_changed."""
    names = manifest.testbeds or [manifest.testbed]
    parallel = len(names) > 1
    changes = list(manifest.hosts_changed)
    kept: dict[str, Facts] = {}
    every = TrialsRan()
    for one in (ran or {}).values():
        every = every.merged(one)
    for i, name in enumerate(names):
        first = manifest.testbed_hosts.get(name) or (manifest.hosts if i == 0 else {})
        on = (ran or {}).get(name, TrialsRan()) if parallel else every
        kept[name], new = _merged(first, found.get(name, {}), changes, (name if parallel else "", session, on))
        changes += new
    update: dict[str, object] = {"hosts": kept[names[0]], "hosts_changed": changes}
    if parallel:
        update["testbed_hosts"] = kept
    return update


def _merged(
    first: Facts, found: Facts, earlier: Sequence[HostsChanged], at: tuple[str, int, TrialsRan]
) -> tuple[Facts, list[HostsChanged]]:
    """One testbed's facts: the recorded ones first (their order kept, so a one-session run.json
    is what `{**description, **found}` wrote), then the newly found; and the facts that changed
    since the latest value recorded (the first session's, or an earlier resume's change)."""
    testbed, session, ran = at
    kept: Facts = {}
    changes = []
    for role in dict.fromkeys([*first, *found]):
        had, now = first.get(role, {}), found.get(role, {})
        latest = latest_facts(had, earlier, testbed, role)
        differ = {k: v for k, v in now.items() if k in latest and latest[k] != v and k not in BY_CELL}
        kept[role] = {**had, **{k: v for k, v in now.items() if k not in had}}
        if differ:
            changes.append(
                HostsChanged(
                    session=session,
                    testbed=testbed,
                    role=role,
                    facts=differ,
                    trials=len(ran.trials),
                    since=ran.first_started,
                )
            )
    return kept, changes


def latest_facts(first: Mapping[str, str], changes: Iterable[HostsChanged], testbed: str, role: str) -> dict[str, str]:
    """A role's facts as the latest session that found them had them: the first session's with
    each later change laid over them, in order."""
    out = dict(first)
    for c in changes:
        if c.testbed == testbed and c.role == role:
            out.update(c.facts)
    return out
