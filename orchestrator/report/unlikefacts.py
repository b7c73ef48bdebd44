"""The host facts `orch compare` sets side by side when a run ran on several testbeds, or was
resumed on other facts (run.json's `testbed_hosts` and `hosts_changed`: core.hostfacts).

Why: `hosts` holds only the first testbed's facts, as the first session found them. Compared
alone, testbed B of a parallel run on other GPUs, or a resume on another server version, read as
alike in both runs. Pure: from the two run.json files, masked as the report masks host lines.
One line per differing fact, in the words report.factwords gives host facts; what a run's own
report already says (its testbeds not copies of each other, a resume on other facts) is one line
per run here, pointing to that report.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.hostfacts import BY_CELL
from orchestrator.core.records import RunManifest
from orchestrator.core.words import listed
from orchestrator.report.factwords import by_value, quote_apart, quote_or_none, whose, word
from orchestrator.report.hostfacts import testbed_fact_findings, trials_ran

Beds = dict[str, dict[str, dict[str, str]]]  # testbed -> role -> fact -> value (masked)


def several_testbeds(a: RunManifest, b: RunManifest) -> bool:
    """Whether either run kept every testbed's facts (a parallel run): then compare reads them."""
    return bool(a.testbed_hosts or b.testbed_hosts)


def testbed_lines(a: RunManifest, b: RunManifest) -> list[str]:
    """Each testbed's facts against the other run's: a testbed both ran on against itself, and
    those only one ran on against the other run's (its own such testbeds, else all of them). A
    fact a running side has not recorded yet is one line for that run (not_yet), as for one testbed."""
    out = [f"{side}'s testbeds were not copies: see its report" for side, m in (("A", a), ("B", b)) if _apart(m)]
    ba, bb = _beds(a), _beds(b)
    if set(ba) != set(bb):
        out.append(f"A ran on {_testbeds(ba)}, B on {_testbeds(bb)}")
    running, unknown = running_sides(a, b), set[str]()
    for name in (n for n in ba if n in bb):
        out += _fact_lines({name: ba[name]}, {name: bb[name]}, whose(name), running, unknown)
    only_a, only_b = ({n: f for n, f in x.items() if n not in y} for x, y in ((ba, bb), (bb, ba)))
    if only_a or only_b:
        out += _fact_lines(only_a or ba, only_b or bb, whose(""), running, unknown)
    return out + [not_yet(side) for side in sorted(unknown)]


def running_sides(a: RunManifest, b: RunManifest) -> frozenset[str]:
    """The sides whose run.json says running (it runs, or its controller died): what a session
    finds on its hosts is recorded at that session's end, so a fact it lacks is not known yet."""
    return frozenset(side for side, m in (("A", a), ("B", b)) if m.status == "running")


def not_yet(side: str) -> str:
    """A running run's host facts (or its controller died): run.json gets a session's at its end."""
    return (
        f"{side} is still running (or its controller died): its host facts are not recorded yet (run.json "
        "gets them at its end), so whether they differ from the other run's is not known"
    )


def session_lines(a: RunManifest, b: RunManifest) -> list[str]:
    """One line per run resumed on other host facts: which facts, in which resume, how many trials
    ran after; the change itself (both values) is on that run's own report."""
    out = []
    for side, m in (("A", a), ("B", b)):
        said = [
            f"{whose(c.testbed)}{c.role} role's {', '.join(word(k) for k in c.facts)} in resume {c.session} "
            f"({trials_ran(c)})"
            for c in m.hosts_changed
        ]
        if said:
            out.append(
                f"{side} was resumed on other host facts: {'; '.join(said)}: its cells mix trials from before "
                "and after the change (see its report)"
            )
    return out


def _apart(m: RunManifest) -> bool:
    """Whether the run's testbeds found a fact otherwise among themselves (its report says which)."""
    return bool(testbed_fact_findings(m))


def _beds(m: RunManifest) -> Beds:
    """Each testbed's facts, masked; a run without `testbed_hosts` (one testbed, or an older
    run.json) by `hosts`, its first testbed's. What follows the cell a testbed ran first (its
    server info: core.hostfacts.BY_CELL) is left out: two testbeds' first cells are not one cell."""
    kept = m.testbed_hosts or {(m.testbeds or [m.testbed])[0]: m.hosts}
    return {
        name: {
            role: {k: m.redactor.value(k, v) for k, v in facts.items() if k not in BY_CELL}
            for role, facts in kept[name].items()
        }
        for name in (m.testbeds or list(kept))
        if name in kept
    }


def _fact_lines(
    ba: Beds, bb: Beds, where: str, running: frozenset[str] = frozenset(), unknown: set[str] | None = None
) -> list[str]:
    """One line per role and fact whose values differ between A's testbeds and B's. A fact (or a
    role) a `running` side has not recorded is added to `unknown` instead: said per fact, every
    fact read as a difference."""
    out = []
    for role in sorted({r for beds in (ba, bb) for facts in beds.values() for r in facts}):
        ra, rb = ({n: f[role] for n, f in beds.items() if role in f} for beds in (ba, bb))
        if not ra or not rb:
            missing = "B" if ra else "A"
            if missing in running and unknown is not None:
                unknown.add(missing)
            else:
                out.append(f"{where}{role} role ran in {'A' if ra else 'B'} only")
            continue
        for key in sorted({k for facts in (*ra.values(), *rb.values()) for k in facts}):
            va, vb = ({n: f.get(key) for n, f in r.items()} for r in (ra, rb))
            lacking = {side for side, v in (("A", va), ("B", vb)) if None in v.values()} & running
            if lacking and unknown is not None:
                unknown.update(lacking)
            elif set(va.values()) != set(vb.values()):
                out.append(f"{where}{role} role's {word(key)} differed: {_values(va, vb)}")
    return out


def _values(va: Mapping[str, str | None], vb: Mapping[str, str | None]) -> str:
    """'x' in A, 'y' in B for one testbed against one (quoted from where they differ); else each
    value with the testbeds that had it: in A 'x' on t1 and 'y' on t2; in B 'x' on t3."""
    if len(va) == len(vb) == 1:
        qa, qb = quote_apart(*va.values(), *vb.values())
        return f"{qa} in A, {qb} in B"
    return f"in A {_by_testbed(va)}; in B {_by_testbed(vb)}"


def _by_testbed(values: Mapping[str, str | None]) -> str:
    return " and ".join(f"{quote_or_none(v)} on {', '.join(names)}" for v, names in by_value(values).items())


def _testbeds(beds: Mapping[str, object]) -> str:
    return listed("testbed", (repr(n) for n in beds))
