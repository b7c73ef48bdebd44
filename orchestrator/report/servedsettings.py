"""The server settings a parallel run's testbeds served one cell with otherwise, in one line each.

Pure: reads the trials' `provenance` (edges.provenance.TrialDescriber: per trial and host, the
digest of what the server says about itself, its text once per digest). Why: run.json's host facts
leave the server info out of the testbeds' comparison (it is the first cell's: core.hostfacts
BY_CELL), so testbed x serving a cell with tp_size 2 and y with 4 (another launch script, a unit
edited by hand) was said nowhere, and the cell's trials pooled both. Compared per cell and role,
setting by setting; where a testbed runs (host, ports, URLs) differs by design and is left out, as
is what a server draws at each start (a seed: named, or seen varying within one testbed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.core.records import SERVER_INFO_VOLATILE, RunManifest, TrialProvenance, TrialRecord
from orchestrator.core.words import counted, noun
from orchestrator.report.factwords import by_value, quote, quote_apart
from orchestrator.report.model import Finding

# where a testbed's server runs, and what changes from start to start (core.records
# SERVER_INFO_VOLATILE: a journal written before random_seed joined it still holds one): never a
# difference between testbeds
PLACE_KEYS = frozenset({"host", "port", "dist_init_addr"}) | SERVER_INFO_VOLATILE
PLACE_ENDS = ("_host", "_port", "_url", "_addr", "_urls", "_ports")
SETTINGS_SAID = 10  # findings; more differing settings are counted in one more line
CELLS_NAMED = 3

Settings = dict[str, str]  # setting -> its value as JSON text
Sides = dict[str, set[str]]  # a side (a testbed; run A or B) -> the server info digests it served with
Differences = dict[tuple[str, str, tuple[tuple[str, str], ...]], list[str]]  # (role, key, side values) -> cells


@dataclass
class CellServers:
    """What served each cell of one run (or testbed): (cell, role) -> the server info digests, and
    each digest's settings. A few digests a cell: what `orch compare` keeps of a run's trials."""

    digests: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    texts: dict[str, Settings] = field(default_factory=dict)

    def add(self, cell: str, provenance: Mapping[str, TrialProvenance]) -> None:
        """One trial's servers (role -> what served it; its text in the first trial of a digest)."""
        for role, p in provenance.items():
            if not p.server_info_sha:
                continue
            self.digests.setdefault((cell, role), set()).add(p.server_info_sha)
            if p.server_info and p.server_info_sha not in self.texts:
                self.texts[p.server_info_sha] = _settings(p.server_info)


def served_setting_findings(manifest: RunManifest, trials: Sequence[TrialRecord]) -> list[Finding]:
    """One caution per role and setting that some cell's testbeds served with other values."""
    beds: dict[str, CellServers] = {}
    for t in trials:
        beds.setdefault(t.testbed, CellServers()).add(t.cell, t.provenance)
    seen = setting_differences(beds)
    out = [_finding(manifest, role, key, dict(values), cells) for (role, key, values), cells in seen.items()]
    if len(out) > SETTINGS_SAID:
        rest = len(out) - SETTINGS_SAID
        more = Finding(
            kind="caution", text=f"Testbeds served {counted(rest, 'more server setting')} otherwise (not listed)."
        )
        out = [*out[:SETTINGS_SAID], more]
    return out


def setting_differences(sides: Mapping[str, CellServers]) -> Differences:
    """PURE: (role, setting, each side's value) -> the cells whose sides served it so, cells by name.
    Shared by a run's testbeds (sides: testbed names) and `orch compare` (sides: A and B); a cell
    only one side ran is compared with nothing."""
    by_cell: dict[tuple[str, str], Sides] = {}
    texts: dict[str, Settings] = {}
    for side, servers in sides.items():
        texts.update(servers.texts)  # a digest is of its text: the same digest, the same settings
        for cell_role, digests in servers.digests.items():
            by_cell.setdefault(cell_role, {})[side] = digests
    seen: Differences = {}
    for (cell, role), served in sorted(by_cell.items(), key=lambda kv: kv[0][0]):
        for key, values in _differing(served, texts).items():
            seen.setdefault((role, key, tuple(values.items())), []).append(cell)
    return seen


def _settings(text: str) -> Settings:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in data.items() if not _place(k)}


def _place(key: str) -> bool:
    """Where a testbed's server runs: its own by design, never a difference."""
    return key in PLACE_KEYS or key.endswith(PLACE_ENDS)


def _differing(beds: Mapping[str, set[str]], texts: Mapping[str, Settings]) -> dict[str, dict[str, str]]:
    """setting -> testbed -> its value, for the settings the testbeds had otherwise. A setting
    whose value differs among one testbed's own trials of the cell is left out: that is the
    server's per-start value (a seed drawn at each restart), not the testbed's."""
    if len(beds) < 2 or len({frozenset(d) for d in beds.values()}) < 2:
        return {}
    values: dict[str, dict[str, str]] = {}
    varies: set[str] = set()
    for name, digests in sorted(beds.items()):
        for key in dict.fromkeys(k for d in sorted(digests) for k in texts.get(d, {})):
            had = dict.fromkeys(texts[d][key] for d in sorted(digests) if key in texts.get(d, {}))
            if len(had) > 1:
                varies.add(key)
            values.setdefault(key, {})[name] = next(iter(had))
    return {k: v for k, v in values.items() if k not in varies and len(set(v.values())) > 1}


def _finding(manifest: RunManifest, role: str, key: str, values: dict[str, str], cells: list[str]) -> Finding:
    shown = by_value({name: manifest.redactor.value(key, v) for name, v in values.items()})
    said = "; ".join(f"{quote(v)} on {', '.join(names)}" for v, names in shown.items())
    text = (
        f"Testbeds served other server settings: the {role} role's {key} was {said} "
        f"(server info, in {_cells(cells)}); a cell's trials pooled over them mix both."
    )
    return Finding(kind="caution", text=text)


def _cells(cells: list[str]) -> str:
    named = ", ".join(cells[:CELLS_NAMED]) + (
        f" and {len(cells) - CELLS_NAMED} more" if len(cells) > CELLS_NAMED else ""
    )
    return f"{noun(len(cells), 'cell')} {named}"


def run_setting_lines(a: RunManifest, sa: CellServers, b: RunManifest, sb: CellServers) -> list[str]:
    """`orch compare`: one line per role and setting that a cell both runs ran was served with
    otherwise in A than in B, from what served each trial. Why per cell: run.json's host facts hold
    the server info of the cell each run ran first (core.hostfacts.BY_CELL), so two runs whose first
    cells set other flags read as served otherwise, and a tp_size that differed in every cell but
    the first was said nowhere. Values masked as each run's report masks them."""
    out = []
    for (role, key, values), cells in setting_differences({"A": sa, "B": sb}).items():
        va, vb = dict(values)["A"], dict(values)["B"]
        qa, qb = quote_apart(a.redactor.value(key, va), b.redactor.value(key, vb))
        out.append(f"the {role} role's server setting {key} was {qa} in A, {qb} in B (server info, in {_cells(cells)})")
    if len(out) > SETTINGS_SAID:
        out = [*out[:SETTINGS_SAID], f"{len(out) - SETTINGS_SAID} more server settings differed (not listed)"]
    return out
