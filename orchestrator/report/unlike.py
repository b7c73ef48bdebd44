"""What else differed between two runs that `orch compare` sets side by side.

Compare matches cells by their level names, and a reader takes a row's difference as the change's
("B is better than A"). That holds only when nothing else changed: another testbed or host, other
server builds, another repro command (more sessions, another workload), other validity rules, a
level that sets other env values under the same name, other GPUs, driver or CUDA. Each is said,
one line each, above the rows. A metric whose definition differs (its kind, its regex, how a
collector reads it) measured something else under one name: it is not compared at all, since no
caution makes its rows mean anything. Everything here is read from the two run.json files (their
matrix and inventory texts, hosts with their GPUs, and what served the trials) and, where given, the
server settings each cell was served with (from its trials): pure, no file is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from orchestrator.core import gpuinfo
from orchestrator.core.bounded import MAX_CONFIG_BYTES
from orchestrator.core.config import MatrixShape, build_matrix, validate_shape
from orchestrator.core.hostfacts import BY_CELL
from orchestrator.core.model import Level, Matrix
from orchestrator.core.records import RunManifest
from orchestrator.core.words import counted
from orchestrator.core.yamlsrc import parse_yaml
from orchestrator.errors import ConfigError
from orchestrator.report.factwords import quote as _quote
from orchestrator.report.factwords import quote_apart, word
from orchestrator.report.servedsettings import CellServers, run_setting_lines
from orchestrator.report.unlikefacts import not_yet, running_sides, session_lines, several_testbeds, testbed_lines

LEVEL_LINES = 3  # levels whose settings differ, named one by one before "and N more"


@dataclass(frozen=True)
class Unlike:
    metrics: Mapping[str, str]  # metric -> how its definition differs between A and B: not compared
    context: tuple[str, ...]  # every other difference, one sentence each


def unlike(a: RunManifest, b: RunManifest, servers: tuple[CellServers, CellServers] | None = None) -> Unlike:
    """PURE: how run B differs from run A besides its cells' levels. `servers`: what served each
    cell of A and of B (from their trials); where both runs have them, the server settings are
    compared cell by cell, and the first cell's server info in run.json's host facts is left out."""
    ma, mb = (matrix_of(m) for m in (a, b)) if a.matrix_sha256 != b.matrix_sha256 else (None, None)
    metrics = _metric_definitions(a, b, ma, mb)
    per_cell = servers if servers is not None and all(s.digests for s in servers) else None
    settings = run_setting_lines(a, per_cell[0], b, per_cell[1]) if per_cell else []
    context = [*_matrix_lines(a, b, ma, mb), *_host_lines(a, b, bool(per_cell)), *_served_lines(a, b), *settings]
    if a.orch_version != b.orch_version:
        context.append(f"orch {a.orch_version} ran A, orch {b.orch_version} ran B (how it judges a trial may differ)")
    return Unlike(metrics, tuple(context))


def matrix_of(m: RunManifest) -> Matrix | None:
    """The run's matrix read back from run.json's text, or None where it cannot be (a hand-made or
    older run.json; a text larger than any matrix file orch reads: parsing is bounded by it)."""
    if not m.matrix_text or len(m.matrix_text) > MAX_CONFIG_BYTES:
        return None
    try:
        data, source = parse_yaml(m.matrix_text, m.matrix_path)
        return build_matrix(validate_shape(MatrixShape, data, source), source, m.matrix_text)
    except ConfigError:
        return None


def _metric_definitions(a: RunManifest, b: RunManifest, ma: Matrix | None, mb: Matrix | None) -> dict[str, str]:
    """Each metric of both runs whose definition differs, and how."""
    out: dict[str, str] = {}
    for name in (n for n in a.metrics if n in b.metrics):
        if a.metrics[name] != b.metrics[name]:
            out[name] = f"a {a.metrics[name]} in A, a {b.metrics[name]} in B"
        elif ma is not None and mb is not None and (da := _definition(ma, name)) != (db := _definition(mb, name)):
            out[name] = f"{da} in A, {db} in B"
    return out


def _definition(m: Matrix, name: str) -> str:
    """How a matrix measures one metric, in words: the regex on the repro's output, or the collector."""
    spec = next((s for s in m.repro.metrics if s.name == name), None)
    if spec is not None:
        return f"regex {_quote(spec.regex)}" + _in_unit(spec.unit)
    got = next((c for c in m.collect if c.name == name), None)
    if got is None:
        return "not defined"
    how = f"pattern {_quote(got.pattern)}" if got.pattern else _quote(got.command)
    return f"collected on {got.role} by {how}{_in_unit(got.unit)}"


def _in_unit(unit: str) -> str:
    """A unit is part of a definition: the same regex in s in A and in ms in B measures two things."""
    return f" in {_quote(unit)}" if unit else ""


def _matrix_lines(a: RunManifest, b: RunManifest, ma: Matrix | None, mb: Matrix | None) -> list[str]:
    """What differs in the matrices beyond the metrics: its name, repro, validity rules, levels."""
    out = []
    if a.name != b.name:
        out.append(f"A = {a.run_id} is a run of matrix {a.name!r}, B = {b.run_id} of matrix {b.name!r}")
    if a.matrix_sha256 == b.matrix_sha256:
        return out
    if ma is None or mb is None:
        return [
            *out,
            f"the matrix file differs ({_first_difference(a.matrix_text, b.matrix_text)}); it could not be "
            "read back from run.json, so what differs, its metrics' definitions too, was not checked",
        ]
    found = _repro_lines(ma, mb) + _level_lines(ma, mb)
    if not found:
        found = [
            f"the matrix file differs ({_first_difference(a.matrix_text, b.matrix_text)}), not in its repro, "
            "metrics, validity rules or the settings of the levels both ran"
        ]
    return out + found


def _repro_lines(ma: Matrix, mb: Matrix) -> list[str]:
    out = []
    if " ".join(ma.repro.command.split()) != " ".join(mb.repro.command.split()):
        out.append(
            f"the repro command differs (another workload or sessions per trial): A ran "
            f"{_quote(ma.repro.command)}, B ran {_quote(mb.repro.command)}"
        )
    if ma.repro.warmup != mb.repro.warmup:
        out.append(f"the warm-up differs: A {_quote(ma.repro.warmup)}, B {_quote(mb.repro.warmup)}")
    if _rules(ma) != _rules(mb):
        out.append("the validity rules (repro.valid) differ: which trials count as data is not decided alike")
    return out


def _rules(m: Matrix) -> list[tuple[object, ...]]:
    return [(r.check, r.target, r.min, r.max, r.min_n) for r in m.repro.valid]


def _level_lines(ma: Matrix, mb: Matrix) -> list[str]:
    """Levels of one name whose settings differ: their cells are matched, but ran other settings."""
    factors_b = {f.name: f for f in mb.factors}
    lines = []
    for fa in ma.factors:
        levels_b = {x.name: x for x in factors_b[fa.name].levels} if fa.name in factors_b else {}
        for lv in fa.levels:
            other = levels_b.get(lv.name)
            if other is not None and _settings(lv) != _settings(other):
                lines.append(f"{fa.name}={lv.name} sets {_settings(lv)} in A, {_settings(other)} in B")
    if len(lines) > LEVEL_LINES:
        lines = [*lines[:LEVEL_LINES], f"and {counted(len(lines) - LEVEL_LINES, 'more level')}"]
    return [f"a level of one name ran other settings: {'; '.join(lines)}"] if lines else []


def _settings(lv: Level) -> str:
    env = [
        f"{role}:{var}={'(removed)' if v is None else v if isinstance(v, str) else v.describe()}"
        for role, values in sorted(lv.env.items())
        for var, v in sorted(values.items())
    ]
    return _quote(" ".join(env + [f"{{{k}}}={v}" for k, v in sorted(lv.client.items())]) or "nothing")


def _host_lines(a: RunManifest, b: RunManifest, per_cell: bool = False) -> list[str]:
    """Where the runs ran and on what: each testbed's facts where either ran on several (else the
    first testbed's, as `hosts` holds them, and its GPUs whole), then the resumes on other facts.
    `per_cell`: the server settings are compared cell by cell, so not the first cell's here."""
    if several_testbeds(a, b):
        where = testbed_lines(a, b) or _inventory_lines(a, b)
    else:
        where = [*(_testbed_lines(a, b, per_cell) or _inventory_lines(a, b)), *_gpu_lines(a, b)]
    return [*where, *session_lines(a, b)]


def _inventory_lines(a: RunManifest, b: RunManifest) -> list[str]:
    """The inventory file, said only where no host line says what in it differed."""
    if a.inventory_sha256 == b.inventory_sha256:
        return []
    return [f"the inventory file differs ({_first_difference(a.inventory_text, b.inventory_text)})"]


def _testbed_lines(a: RunManifest, b: RunManifest, per_cell: bool = False) -> list[str]:
    """Where one-testbed runs ran: the testbed, each role's host facts that differ."""
    out = []
    if a.testbed != b.testbed:
        out.append(f"A ran on testbed {a.testbed!r}, B on {b.testbed!r}")
    running, unknown = running_sides(a, b), set()
    for role in sorted(set(a.hosts) | set(b.hosts)):
        ha, hb = (_host_facts(m, role, BY_CELL if per_cell else frozenset()) for m in (a, b))
        if ha is None or hb is None:
            if ha != hb:
                out.append(f"the {role} role ran on {_host(ha)} in A, on {_host(hb)} in B")
            continue
        unknown |= {
            side
            for side, mine, other in (("A", ha, hb), ("B", hb, ha))
            if side in running and other.keys() - mine.keys()
        }
        if said := _facts_that_differ(ha, hb, running):
            out.append(f"the {role} role's " + "; its ".join(said))
    return out + [not_yet(side) for side in sorted(unknown)]


def _host_facts(m: RunManifest, role: str, left_out: frozenset[str] = frozenset()) -> dict[str, str] | None:
    """A role's host facts as the page may show them (masked as the report masks host lines), its
    GPU facts left to _gpu_lines, which says them whole, and `left_out` too; None: no such role."""
    described = m.hosts.get(role)
    if described is None:
        return None
    return {k: m.redactor.value(k, v) for k, v in described.items() if k not in gpuinfo.FIELDS and k not in left_out}


def _host(facts: Mapping[str, str] | None) -> str:
    return _quote(", ".join(f"{k}={v}" for k, v in sorted(facts.items()))) if facts else "no host"


def _facts_that_differ(
    ha: Mapping[str, str], hb: Mapping[str, str], running: frozenset[str] = frozenset()
) -> list[str]:
    """Each host fact that differs, by name, as it was in A and in B. Why not the whole host line:
    cut at QUOTE_CHARS, a command line that differed at its end read the same in both runs, and
    any difference read as another host. A fact a `running` side has not recorded yet is left to
    one line for that run (unlikefacts.not_yet): said per fact, every fact read as a difference."""
    said = []
    for key in sorted(set(ha) | set(hb)):
        va, vb = ha.get(key), hb.get(key)
        if (va is None and "A" in running) or (vb is None and "B" in running):
            continue
        if va != vb:
            qa, qb = quote_apart(va, vb)
            said.append(f"{word(key)} differed: {qa} in A, {qb} in B")
    return said


def _gpu_lines(a: RunManifest, b: RunManifest) -> list[str]:
    """Each role's GPUs, driver and CUDA version where they differ (run.json's host lines, asked of
    nvidia-smi once per run): other hardware under one cell's name. A role whose GPUs only one run
    knows is said once for all such roles, with why the other does not: never guessed alike."""
    out, one_sided = [], []
    for role in sorted(set(a.hosts) & set(b.hosts)):
        ga, gb = (_gpus(m, role) for m in (a, b))
        if ga == gb or not (ga and ga.known or gb and gb.known):
            continue
        if ga and ga.known and gb and gb.known:
            out.append(f"the {role} role ran on GPUs {_quote(ga.in_words())} in A, on {_quote(gb.in_words())} in B")
        else:
            one_sided.append((role, ga, gb))
    if one_sided:
        out.append(_one_sided(one_sided))
    return out


def _gpus(m: RunManifest, role: str) -> gpuinfo.GpuInfo | None:
    """The role's GPU facts as the page may show them (masked as the report masks host lines)."""
    described = m.hosts.get(role) or {}
    return gpuinfo.of_host({k: m.redactor.value(k, described[k]) for k in gpuinfo.FIELDS if k in described})


def _one_sided(roles: list[tuple[str, gpuinfo.GpuInfo | None, gpuinfo.GpuInfo | None]]) -> str:
    """One sentence for the roles whose GPUs one run names and the other does not, saying why not."""
    said = []
    for role, ga, gb in roles:
        known, run, other, missing = (ga, "A", "B", gb) if ga and ga.known else (gb, "B", "A", ga)
        why = "nvidia-smi was not available (not there, or it failed)" if missing else "run.json records none"
        words = known.in_words() if known else gpuinfo.NOT_AVAILABLE
        said.append(f"the {role} role ran on {_quote(words)} in {run}; in {other} {why}")
    return f"the GPUs are known in one run only, so whether they differed is not known: {'; '.join(said)}"


def _served_lines(a: RunManifest, b: RunManifest) -> list[str]:
    """What served the trials, per host (run.json's `served`, written at each run's end, or by the
    `orch restore` that ends a killed one): the server version, and the units' command lines (a
    model path, a --tp) outside the factors."""
    out = []
    for host in sorted({g.host for g in a.served} & {g.host for g in b.served}):
        va, vb = (_each(m, host, lambda g: g.server_version or "unknown") for m in (a, b))
        if va != vb:
            out.append(f"{host} served A with server {', '.join(va)}, B with {', '.join(vb)}")
        if _each(a, host, lambda g: g.exec_start_sha) != _each(b, host, lambda g: g.exec_start_sha):
            out.append(f"{host}'s units ran other command lines in A and in B (see each run's report: what served it)")
    return out


def _each(m: RunManifest, host: str, field: Callable[..., str]) -> list[str]:
    return sorted({field(g) for g in m.served if g.host == host})


def _first_difference(a: str, b: str) -> str:
    """Where two texts first differ, quoted: 'line 7: A ..., B ...'."""
    la, lb = a.splitlines(), b.splitlines()
    at = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), min(len(la), len(lb)))
    if at >= max(len(la), len(lb)):
        return "in whitespace or a masked secret only"
    here, there = (_quote(lines[at].strip()) if at < len(lines) else "(the end)" for lines in (la, lb))
    return f"first at line {at + 1}: A {here}, B {there}"


def lines_of(found: Unlike) -> Iterable[str]:
    """Every difference as a sentence: the metrics left out first (they change what is compared)."""
    for name, how in found.metrics.items():
        yield f"{name} is not compared: its definition differs ({how}): the runs measured another thing under one name"
    yield from found.context
