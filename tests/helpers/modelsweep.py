"""A seeded random sweep on the fakes, with random faults, checked against a model of its own.

Two promises: a variable one cell set never stays set for the next, and a fault never leaves a
host changed without a way back. `scenario(seed)` draws a matrix (1-4 factors over prefill, decode
and router: env values with spaces, quotes, # and =, a level that removes a variable, flags inside
an args variable), each host's original env file (keys there or not, duplicates, comments, no
final newline) and up to two faults (a unit that fails to start, a command that fails, a dropped
connection, an interrupt in a random trial phase, a failing workload). `check(scenario, tmp)`
runs it through sweep.api on tests/helpers/parallel_fakes' Fleet and, at every workload, compares
each host's env file and its units' live env with `expected_text`/`expected_values` below: written
from the matrix's words, not from orch's code. After the run (and `orch resume` or `orch restore`
where it stopped), every env file must be byte-identical to its original, every trial journaled
as finished exactly once, and, in a run without faults, every unit restarted exactly when its
file changed (as the plan says). A broken promise is an AssertionError naming the seed.
"""

from __future__ import annotations

import _thread
import random
import re
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import FakeTransport, Reply

from helpers import parallel_fakes as pf
from orchestrator.core.records import TrialRecord
from orchestrator.errors import Interrupted, OrchError, TransportError
from orchestrator.store.journal import read_journal
from orchestrator.sweep import api, hosts, phases
from orchestrator.sweep.progress import QuietProgress

ROLES = ("prefill", "decode", "router")
TB = "A"
ARGS = "EXTRA_ARGS"
KEYS = ("K1", "K2", "K3", "K4", "K5")
VALUES = ("0", "1", "on", "a b", 'say "hi"', "x#y", "k=v", "$HOME", "back\\slash", "tab\tin", "8", "p q r")
FLAGS = ("--alpha", "--beta", "--gamma")
ARG_WORDS = ("--tp 8", "--trust-remote-code", "--mem 0.8", "--alpha 3", "--beta")
_SAFE = re.compile(r"[A-Za-z0-9_./:,@%+=-]+")
Settings = dict[str, "str | None | tuple[tuple[str, bool, str | None], ...]"]  # VAR -> value / removed / flags


# ---------------------------------------------------------------- the model (independent of orch)
def quoted(value: str) -> str:
    """How an env file holds a value both readers agree on: bare if plain, else in double quotes
    with \\ " $ and ` escaped (README: env files)."""
    if _SAFE.fullmatch(value):
        return value
    return '"' + "".join("\\" + c if c in '\\"$`' else c for c in value) + '"'


@dataclass(frozen=True)
class Line:
    """One line of an original env file: an assignment (key, value) or other text."""

    text: str  # without its line end
    key: str | None = None
    value: str | None = None
    prefix: str = ""  # "export " (shell dialect), kept by an edit


@dataclass(frozen=True)
class EnvFile:
    lines: tuple[Line, ...]
    final_newline: bool
    dialect: str = "systemd"  # or shell: `set -a; . FILE` in a wrapper; appended lines are `export K=v`
    eol: str = "\n"  # or CRLF (a file saved on Windows): every line's end, an appended line's too

    def render(self, kept: Sequence[tuple[int, Line]] | None = None) -> str:
        """The text, or that of `kept` (index in the original, line): each line with its own end,
        the last original line without one when the file has no final newline."""
        kept = list(enumerate(self.lines)) if kept is None else kept
        last = len(self.lines) - 1
        return "".join(line.text + ("" if i == last and not self.final_newline else self.eol) for i, line in kept)

    @property
    def append_eol(self) -> str:
        """An appended line ends as the file's lines do (LF in a file with no line end at all)."""
        return self.eol if len(self.lines) > 1 or (self.lines and self.final_newline) else "\n"

    def values(self) -> dict[str, str]:
        """What the unit's reader takes: the last duplicate wins; bash keeps the CR of a CRLF line
        end in the value (a shell file's last line without an end has none)."""
        out: dict[str, str] = {}
        last = len(self.lines) - 1
        for i, line in enumerate(self.lines):
            if line.key is not None and line.value is not None:
                cr = self.dialect == "shell" and self.eol == "\r\n" and (i < last or self.final_newline)
                out[line.key] = line.value + "\r" * cr
        return out


def flagged(original: str | None, flags: Sequence[tuple[str, bool, str | None]]) -> str | None:
    """An args variable with each flag set (in flag order): every occurrence removed, the new
    tokens where the first was, else at the end (README: flag factors)."""
    words = shlex.split(original or "")
    for flag, takes_value, value in sorted(flags):
        new = [] if value is None else [flag, value] if takes_value else [flag]
        out, placed, i = [], False, 0
        while i < len(words):
            if words[i] != flag:
                out.append(words[i])
                i += 1
                continue
            i += 1
            if takes_value and i < len(words) and not words[i].startswith("--"):
                i += 1
            if not placed:
                out += new
                placed = True
        words = out if placed else out + new
    text = " ".join(shlex.quote(w) for w in words)
    return None if original is None and not text else text


def expected_text(original: EnvFile, settings: Settings) -> str:
    """The original file with exactly these settings: a set key's last line gets the new value
    (untouched if it already reads so), a missing key is appended, a removed key loses every line;
    every other line is the original's. (Appended lines in the settings' order: `same_file`
    takes them in any order.)"""
    head, appended = _expected_parts(original, settings)
    return head + "".join(line + original.append_eol for line in appended)


def same_file(got: str, original: EnvFile, settings: Settings) -> bool:
    """`got` is the model's file, its appended lines in any order (their order means nothing to
    either reader; that a cell's bytes never differ between its trials, the restart count shows)."""
    head, appended = _expected_parts(original, settings)
    return got.startswith(head) and sorted(got[len(head) :].splitlines(keepends=True)) == sorted(
        line + original.append_eol for line in appended
    )


def _expected_parts(original: EnvFile, settings: Settings) -> tuple[str, list[str]]:
    lines = list(enumerate(original.lines))
    values = original.values()
    appended: list[str] = []
    for key, setting in settings.items():
        value = flagged(values.get(key), setting) if isinstance(setting, tuple) else setting
        where = [n for n, (_, line) in enumerate(lines) if line.key == key]
        if value is None:
            lines = [(i, line) for i, line in lines if line.key != key]
        elif not where:
            appended.append(("export " if original.dialect == "shell" else "") + f"{key}={quoted(value)}")
        elif lines[where[-1]][1].value != value:
            index, old = lines[where[-1]]
            lines[where[-1]] = (index, Line(f"{old.prefix}{key}={quoted(value)}", key, value, old.prefix))
    head = original.render(lines)
    if appended and head and not head.endswith("\n"):  # an appended line starts a line of its own
        head += original.append_eol
    return head, appended


def expected_values(original: EnvFile, settings: Settings) -> dict[str, str]:
    """What a unit started on that file holds (the keys the original or the matrix names)."""
    out = original.values()
    for key, setting in settings.items():
        value = flagged(out.get(key), setting) if isinstance(setting, tuple) else setting
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------- drawing a scenario
@dataclass
class Factor:
    name: str
    shape: dict[str, Any]  # the matrix YAML's factor, as data
    settings: dict[str, dict[str, Settings]]  # level -> role -> settings


@dataclass
class Fault:
    kind: str  # fail_start, command_fails, drop, interrupt, workload_fails
    at: int  # the n-th trial attempt (apply calls, from 1) on its testbed it hits
    role: str = "decode"
    phase: str = ""  # interrupt: where
    way_back: str = "resume"  # interrupt: then resume, or restore
    testbed: str = TB  # a parallel sweep: the testbed whose host it hits (its n-th attempt counts there)


@dataclass
class Scenario:
    seed: int
    originals: dict[str, EnvFile]
    factors: list[Factor]
    replicates: int
    faults: list[Fault] = field(default_factory=list)
    order: str = "randomized"
    testbeds: tuple[str, ...] = (TB,)  # 2-3: a parallel sweep, each testbed with these originals
    links: dict[str, str] = field(default_factory=dict)  # role -> where its env file (a symlink) leads
    exclude: list[dict[str, str]] = field(default_factory=list)  # partial cells
    include: list[dict[str, str]] = field(default_factory=list)  # whole cells (excluded ones)

    def cells(self) -> list[dict[str, str]]:
        """The model's cells (README: matrix syntax): the factors' product, minus every cell an
        `exclude` entry matches on all its keys, plus each `include` cell."""
        cells: list[dict[str, str]] = [{}]
        for f in self.factors:
            cells = [{**c, f.name: lv} for c in cells for lv in f.settings]
        kept = [c for c in cells if not any(all(c[k] == v for k, v in e.items()) for e in self.exclude)]
        return kept + [dict(c) for c in self.include]

    def matrix_text(self) -> str:
        data = {
            "name": f"model{self.seed}",
            "factors": {f.name: f.shape for f in self.factors},
            "replicates": self.replicates,
            "order": self.order,
            **({"exclude": self.exclude} if self.exclude else {}),
            **({"include": self.include} if self.include else {}),
            "repro": {
                "command": "fake-repro --trial {trial}",
                "on": "prefill",
                "timeout": 30,
                "metrics": {"events": {"kind": "proportion", "regex": r"events=(?P<k>\d+)/(?P<n>\d+)"}},
            },
        }
        return yaml.safe_dump(data, sort_keys=False)

    def settings(self, levels: Mapping[str, str], role: str) -> Settings:
        out: Settings = {}
        flags: dict[str, list[tuple[str, bool, str | None]]] = {}
        for f in self.factors:
            for key, value in f.settings[levels[f.name]].get(role, {}).items():
                if isinstance(value, tuple):
                    flags.setdefault(key, []).extend(value)
                else:
                    out[key] = value
        for key, fl in flags.items():
            out[key] = tuple(fl)
        return out

    def mentioned(self, role: str) -> set[str]:
        return {k for f in self.factors for lv in f.settings.values() for k in lv.get(role, {})}


def draw_file(rng: random.Random, role: str) -> EnvFile:
    lines: list[Line] = []
    for _ in range(rng.randint(0, 7)):
        kind = rng.random()
        if kind < 0.15:
            lines.append(Line(rng.choice(("# a comment", "# K1=commented out", '# say "x" = y', ""))))
        elif kind < 0.3:
            words = rng.sample(ARG_WORDS, rng.randint(0, 3))
            value = " ".join(words)
            lines.append(Line(f"{ARGS}={quoted(value)}", ARGS, value))
        else:
            key, value = rng.choice(KEYS), rng.choice(VALUES)
            lines.append(Line(f"{key}={quoted(value)}", key, value))
    if rng.random() < 0.3 and lines:  # a duplicate of an earlier line
        lines.append(rng.choice(lines))
    return EnvFile(tuple(lines), rng.random() < 0.7)


def draw_factor(rng: random.Random, index: int, used: dict[str, set[str]], shell: Set[str] = frozenset()) -> Factor:
    """`shell`: the roles whose env file a wrapper script sources; a flag value with a space
    cannot reach their server (orch refuses it: core.argsvar.unreachable), so theirs has none."""
    name = f"f{index}"
    kind = rng.random()
    roles = rng.sample(ROLES, rng.randint(1, 2))
    if kind < 0.3:  # a flag inside each role's args variable
        flag = rng.choice([f for f in FLAGS if all(f not in used[r] for r in roles)] or [f"--extra{index}"])
        for r in roles:
            used[r].add(flag)
        valued = rng.random() < 0.5
        raw = ["absent", "16", "a,b" if shell & set(roles) else "a b"] if valued else ["absent", "present"]
        levels = dict(zip(("l0", "l1", "l2"), raw[: rng.randint(2, len(raw))], strict=False))
        shape = {"kind": "flag", "flag": flag, "env": {r: ARGS for r in roles}, "levels": levels}
        settings = {
            lv: {r: {ARGS: ((flag, valued, None if v == "absent" else v),)} for r in roles} for lv, v in levels.items()
        }
        return Factor(name, shape, settings)
    free = {r: [k for k in KEYS if k not in used[r]] for r in roles}
    if kind < 0.6 and all(free.values()):  # short form: one variable per role, a value per level
        keys = {r: rng.choice(free[r]) for r in roles}
        for r in roles:
            used[r].add(keys[r])
        names = [v for v in VALUES if not re.search(r"[,=\x00-\x1f]", v)]  # level names: no , = or control
        values = rng.sample(names, rng.randint(2, 3))
        shape = {"env": dict(keys), "levels": values}
        return Factor(name, shape, {v: {r: {keys[r]: v} for r in roles} for v in values})
    # full form: each level sets (or removes) its own variables, per role
    levels: dict[str, dict[str, Settings]] = {}
    for n in range(rng.randint(2, 3)):
        level = draw_level(rng, roles, used)
        for _ in range(50):  # orch refuses two levels that set the same (config)
            if level not in levels.values():
                break
            level = draw_level(rng, roles, used)
        else:  # every variable of these roles is taken: no level differs (seed 138 looped for ever)
            raise NoRoom(name)
        levels[f"v{n}"] = level
    for lv in levels.values():
        for r, assigns in lv.items():
            used[r].update(assigns)
    shape = {"levels": {lv: {r: dict(a) for r, a in s.items()} for lv, s in levels.items()}}
    return Factor(name, shape, levels)


class NoRoom(Exception):
    """A factor that cannot get two levels that differ: the earlier factors took every variable."""


def draw_level(rng: random.Random, roles: list[str], used: dict[str, set[str]]) -> dict[str, Settings]:
    """A full-form level: up to 2 variables per role, each set or removed (None)."""
    level: dict[str, Settings] = {}
    for r in roles:
        choices = [k for k in KEYS if k not in used[r]]
        for key in rng.sample(choices, min(len(choices), rng.randint(0, 2))):
            level.setdefault(r, {})[key] = None if rng.random() < 0.25 else rng.choice(VALUES)
    return level


FAULTS = ("fail_start", "command_fails", "drop", "interrupt", "workload_fails")
PHASES = ("apply", "after_apply", "restart", "after_restart", "after_wait", "workload", "after_journal")


def shell_file(rng: random.Random, file: EnvFile) -> EnvFile:
    """The file as a shell-dialect host's: some assignments with `export ` before them."""
    lines = tuple(
        Line("export " + line.text, line.key, line.value, "export ") if line.key and rng.random() < 0.4 else line
        for line in file.lines
    )
    return EnvFile(lines, file.final_newline, "shell", file.eol)


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    originals = {r: draw_file(rng, r) for r in ROLES}
    shell = random.Random(f"dialect {seed}")  # its own stream: the other draws are as before it came
    originals = {r: shell_file(shell, f) if shell.random() < 0.4 else f for r, f in originals.items()}
    used: dict[str, set[str]] = {r: set() for r in ROLES}
    shells = {r for r, f in originals.items() if f.dialect == "shell"}
    factors = []
    for i in range(rng.randint(1, 4)):
        try:
            factors.append(draw_factor(rng, i, used, shells))
        except NoRoom:  # the factors drawn so far took every variable: the matrix has those
            break
    replicates = rng.randint(1, 2)
    faults = []
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        kind = rng.choice(FAULTS)
        faults.append(
            Fault(kind, rng.randint(1, 6), rng.choice(ROLES), rng.choice(PHASES), rng.choice(("resume", "restore")))
        )
    more = random.Random(f"more {seed}")  # draws added later: a stream of their own, as the dialects'
    order = more.choice(("randomized", "sequential", "min-restarts"))
    if faults and more.random() < 0.15:  # an interrupt while a host is put back (the run's end, or orch restore)
        faults.append(Fault("interrupt", more.randint(1, 6), more.choice(ROLES), "restore", "restore"))
    if faults and more.random() < 0.2:  # a host's connection drops as the way back begins
        faults.append(Fault("drop_way_back", 0, more.choice(ROLES)))
    sc = Scenario(seed, originals, factors, replicates, faults, order)
    _draw_more(random.Random(f"sweep2 {seed}"), sc)
    _draw_shell_crlf(random.Random(f"shellcrlf {seed}"), sc)
    return sc


TESTBEDS = ("A", "B", "C")
BOM = "\ufeff"


def _draw_more(rng: random.Random, sc: Scenario) -> None:
    """Draws added later still (their own stream): parallel testbeds, CRLF and a BOM, a symlinked
    env file, exclude/include."""
    sc.testbeds = TESTBEDS[: rng.choice((1, 1, 1, 2, 2, 3))]
    for role, f in list(sc.originals.items()):
        if f.dialect == "systemd" and rng.random() < 0.25:  # bash keeps a CR in values: systemd only
            f = EnvFile(f.lines, f.final_newline, f.dialect, "\r\n")
        if f.lines and f.dialect == "systemd" and rng.random() < 0.1:  # a BOM glued to the first line:
            # systemd takes no name from it (orch refuses a shell file with it: a command line)
            first = f.lines[0]
            f = EnvFile((Line(BOM + first.text), *f.lines[1:]), f.final_newline, f.dialect, f.eol)
        sc.originals[role] = f
        if rng.random() < 0.15:
            sc.links[role] = f"../real/{role}.env"
    cells = sc.cells()
    if len(cells) >= 3 and rng.random() < 0.35:
        for _ in range(rng.randint(1, 2)):
            names = rng.sample([f.name for f in sc.factors], rng.randint(1, min(2, len(sc.factors))))
            pick = rng.choice(cells)
            sc.exclude.append({n: pick[n] for n in names})
        gone = [c for c in cells if c not in sc.cells()]
        if len(gone) == len(cells):  # every cell excluded: orch refuses that matrix (a test of its own)
            sc.exclude.pop()
            gone = [c for c in cells if c not in sc.cells()]
        sc.include = rng.sample(gone, min(len(gone), rng.randint(0, 2)))
        baseline = {f.name: next(iter(f.settings)) for f in sc.factors}  # the first levels'
        if baseline not in sc.cells():  # orch refuses a matrix without its baseline cell (a test of its own)
            sc.include.append(baseline)
    for f in sc.faults:
        f.testbed = rng.choice(sc.testbeds)


def _draw_shell_crlf(rng: random.Random, sc: Scenario) -> None:
    """Draws added last (their own stream): a shell host no factor edits gets CRLF line ends (half
    of them), and then a value with a CR inside its double quotes (a third). Only there: orch's
    preflight refuses a CRLF shell file the matrix edits (bash would read each value orch writes
    with a \\r after it), and its shell reader any file with a BOM (bash runs the first line as
    a command), so neither is a file orch sweeps. Its blank lines go: a blank CRLF line is a lone
    \\r, which bash runs as a command and orch's reader refuses (a file orch would not sweep)."""
    for role, f in list(sc.originals.items()):
        if f.dialect != "shell" or sc.mentioned(role) or rng.random() >= 0.5:
            continue
        lines = [line for line in f.lines if line.text]
        keyed = [i for i, line in enumerate(lines) if line.key is not None]
        if keyed and rng.random() < 0.35:
            i = rng.choice(keyed)
            old, value = lines[i], rng.choice(("a\rb", "x\r", "\r"))
            lines[i] = Line(f"{old.prefix}{old.key}={quoted(value)}", old.key, value, old.prefix)
        sc.originals[role] = EnvFile(tuple(lines), f.final_newline, f.dialect, "\r\n")


def features(sc: Scenario) -> list[str]:
    """What the later draws gave this scenario (the bench counts them)."""
    out = [f"testbeds={len(sc.testbeds)}"]
    out += ["crlf"] * any(f.eol == "\r\n" for f in sc.originals.values())
    out += ["shell-crlf"] * any(f.eol == "\r\n" and f.dialect == "shell" for f in sc.originals.values())
    out += ["shell-cr-in-quotes"] * any(
        f.dialect == "shell" and any("\r" in (line.value or "") for line in f.lines) for f in sc.originals.values()
    )
    out += ["bom"] * any(f.lines and f.lines[0].text.startswith(BOM) for f in sc.originals.values())
    out += ["symlink"] * bool(sc.links)
    out += ["exclude"] * bool(sc.exclude) + ["include"] * bool(sc.include)
    return out


# ---------------------------------------------------------------- running it
class Interrupt(KeyboardInterrupt):
    """The user's Ctrl-C, raised by a fault in the main thread."""


@dataclass
class Watch:
    """What the run did, seen from the fakes: each workload's files and live envs, and restarts."""

    sc: Scenario
    fleet: pf.Fleet
    levels_of: dict[int, dict[str, str]]  # trial -> its levels (the plan's order)
    attempts: int = 0  # Services.apply calls so far
    attempts_on: dict[str, int] = field(default_factory=dict)  # testbed -> its Services.apply calls so far
    fired: list[str] = field(default_factory=list)  # the faults that fired, as kind[:phase]
    problems: list[str] = field(default_factory=list)
    seen: list[tuple[str, int, dict[str, int]]] = field(default_factory=list)  # (testbed, trial, role -> starts)
    lock: threading.Lock = field(default_factory=threading.Lock)  # runner threads count attempts
    ended: Any = None  # the last SweepOutcome of run/resume that was not interrupted
    way_back_errors: list[str] = field(default_factory=list)  # a way back that failed (then taken again)
    restarts: tuple[int, int] = (0, 0)  # without faults: (units the plan restarts, of which on an unchanged file)

    def host(self, role: str, tb: str = TB) -> tuple[FakeTransport, Any]:
        return self.fleet.transports[(tb, role)], self.fleet.managers[(tb, role)]

    def at_workload(self, tb: str, trial: int) -> None:
        levels = self.levels_of[trial]
        starts = {}
        for role in ROLES:
            t, m = self.host(role, tb)
            settings = self.sc.settings(levels, role)
            want = expected_text(self.sc.originals[role], settings)
            got = env_bytes(t, role).decode("utf-8", "surrogateescape")
            if not same_file(got, self.sc.originals[role], settings):
                self.problems.append(f"trial {trial} {tb} {role}: file {got!r}, model {want!r} ({settings})")
            env = {k: v for k, v in (m.environ(f"{tb}-{role}") or {}).items() if k != "PATH"}
            live_want = expected_values(self.sc.originals[role], settings)
            if env != live_want:
                self.problems.append(f"trial {trial} {tb} {role}: live env {env}, model {live_want}")
            starts[role] = m.units[f"{tb}-{role}"].starts
        with self.lock:
            self.seen.append((tb, trial, starts))


def env_bytes(t: FakeTransport, role: str) -> bytes:
    """The env file's bytes, through its symlink if it is one."""
    return t.files.get(t.resolve(f"/etc/orch/{role}.env"), b"")


class LinkFleet(pf.Fleet):
    """The fleet, each role of `links` with its env file a symlink to `links[role]` (relative)."""

    def __init__(self, env: dict[str, str], links: Mapping[str, str]) -> None:
        super().__init__(env)
        self.links = dict(links)

    def host(self, testbed: str, key: str, host: Any) -> tuple[FakeTransport, Any]:
        new = (testbed, key) not in self.transports
        t, m = super().host(testbed, key, host)
        if new and key in self.links:
            t.links[host.env_file] = self.links[key]
            t.files[t.resolve(host.env_file)] = t.files.pop(host.env_file)
        return t, m


def _trial_of(command: str) -> int:
    return int(command.split("--trial", 1)[1].split()[0].strip("'"))


@contextmanager
def _hooks(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Count trial attempts at Services.apply, fire the scenario's faults at theirs, and watch
    every workload."""
    sc = watch.sc

    attempt = threading.local()  # the attempt this thread's trial is (a parallel sweep: per testbed)

    def due(kind: str) -> list[Fault]:
        n = getattr(attempt, "n", watch.attempts)
        return [f for f in sc.faults if f.kind == kind and f.at == n and f.testbed == _testbed()]

    def interrupt(phase: str) -> None:
        for f in due("interrupt"):
            if f.phase == phase:
                f.at = -1  # once
                watch.fired.append(f"interrupt:{phase}")
                if threading.current_thread() is threading.main_thread():
                    raise Interrupt(f"interrupted at {phase}")
                _thread.interrupt_main()  # a runner thread: the user's Ctrl-C reaches the main thread

    apply, restart, wait = phases.Services.apply, phases.Services.restart, phases.Services.wait_healthy

    def apply_(self: phases.Services, step: Any, ctx: Any) -> None:
        with watch.lock:
            tb = self.deployment.testbed.name
            watch.attempts += 1
            watch.attempts_on[tb] = attempt.n = watch.attempts_on.get(tb, 0) + 1
            _arm(watch, tb)
        interrupt("apply")
        apply(self, step, ctx)
        interrupt("after_apply")

    def restart_(self: phases.Services, ctx: Any) -> None:
        interrupt("restart")
        restart(self, ctx)
        interrupt("after_restart")

    def wait_(self: phases.Services, since: float, restarted: set[str]) -> dict[str, float]:
        out = wait(self, since, restarted)
        interrupt("after_wait")
        return out

    def repro(testbed: str, command: str) -> Reply | None:
        watch.at_workload(testbed, _trial_of(command))
        interrupt("workload")
        for _ in due("workload_fails"):
            watch.fired.append("workload_fails")
            return Reply(3, "", "boom: the workload failed\n")
        return None

    monkeypatch.setattr(phases.Services, "apply", apply_)
    monkeypatch.setattr(phases.Services, "restart", restart_)
    monkeypatch.setattr(phases.Services, "wait_healthy", wait_)
    watch.fleet.repro_hook = repro
    from orchestrator.store import journal as journal_mod

    append = journal_mod.Journal.append

    def append_(self: Any, record: Any) -> Any:
        out = append(self, record)
        if isinstance(record, TrialRecord):
            interrupt("after_journal")
        return out

    monkeypatch.setattr(journal_mod.Journal, "append", append_)
    restore_host = hosts.HostGuard._restore_host

    def restore_host_(self: hosts.HostGuard, role: str) -> None:
        for f in sc.faults:
            if f.kind == "interrupt" and f.phase == "restore" and f.role == role and 0 <= f.at <= watch.attempts:
                if f.testbed != self.deployment.testbed.name:
                    continue
                if threading.current_thread() is threading.main_thread():
                    f.at = -1
                    watch.fired.append("interrupt:restore")
                    raise Interrupt(f"interrupted while {role} is restored")
        restore_host(self, role)

    monkeypatch.setattr(hosts.HostGuard, "_restore_host", restore_host_)
    yield


def _testbed() -> str:
    """The testbed this thread runs (a parallel sweep names its runner threads testbed-NAME)."""
    name = threading.current_thread().name
    return name.removeprefix("testbed-") if name.startswith("testbed-") else TB


def _arm(watch: Watch, tb: str) -> None:
    """Faults due at this attempt (on testbed `tb`) that act through the fakes."""
    for f in watch.sc.faults:
        if f.at != watch.attempts_on[tb] or f.testbed != tb:
            continue
        t, m = watch.host(f.role, tb)
        if f.kind in ("fail_start", "command_fails", "drop"):
            watch.fired.append(f.kind)  # armed: it hits the host's next start, command or call
        if f.kind == "fail_start":
            m.units[f"{tb}-{f.role}"].fail_starts = 1
        elif f.kind == "command_fails":
            t.script(["systemctl", "show", "-p", "ExecStart"], Reply(1, "", "Failed to connect to bus\n"), times=1)
        elif f.kind == "drop":
            _drop_once(t)


def _drop_once(t: FakeTransport) -> None:
    """The host's connection drops at its next write, read or command."""
    originals = {name: getattr(t, name) for name in ("write_bytes_atomic", "read_entry", "run")}

    def dropping(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            for n, fn in originals.items():
                setattr(t, n, fn)
            raise TransportError(t.host, "connection lost: Broken pipe")

        return call

    for name in originals:
        setattr(t, name, dropping(name))


# ---------------------------------------------------------------- one seed, end to end
def _quiet(started: api.Started) -> QuietProgress:
    return QuietProgress()


def _no_warning(message: str) -> None:
    pass


def check(seed: int, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Watch:
    """Run scenario(seed) through the API, the way back after an interrupt too; raise an
    AssertionError naming the seed at the first broken promise."""
    sc = scenario(seed)
    fleet = LinkFleet({r: sc.originals[r].render() for r in ROLES}, sc.links)
    pf.install(monkeypatch, fleet)
    (tmp / "m.yaml").write_text(sc.matrix_text())
    (tmp / "inv.yaml").write_text(inventory(sc))
    req = api.SweepRequest(
        tmp / "m.yaml",
        tmp / "inv.yaml",
        testbeds=sc.testbeds,
        reports_dir=tmp / "reports",
        run_id="r1",
        skip_preflight=True,
        seed=seed,
    )
    plan = api.prepare(req, warn=_no_warning).plan
    watch = Watch(sc, fleet, {s.trial.index: dict(s.trial.cell.as_dict()) for s in plan.steps})
    run_dir = tmp / "reports" / "r1"
    with _hooks(watch, monkeypatch):
        stopped = _run(watch, lambda: api.run(req, _quiet, warn=_no_warning))
        way = next((f.way_back for f in sc.faults if f.kind == "interrupt"), "restore")
        for _ in range(4):  # the way back, as the user takes it, until the run ends with its hosts back
            if not stopped:
                break
            for f in sc.faults:
                if f.kind == "drop_way_back" and f.at == 0:
                    f.at = -1
                    watch.fired.append(f.kind)
                    _drop_once(watch.host(f.role, f.testbed)[0])
            try:  # a fault during the way back fails that command (the user runs it again)
                if way == "restore":
                    outcome = api.restore(api.RestoreRequest(run_dir), QuietProgress(), warn=_no_warning)
                    stopped = any(tb.not_restored for tb in outcome.testbeds)
                else:
                    stopped = _run(watch, lambda: api.resume(api.ResumeRequest(run_dir), _quiet, warn=_no_warning))
            except OrchError as exc:
                watch.way_back_errors.append(f"{way}: {exc}")
    problems = [*_cell_problems(sc, plan), *watch.problems, *_end_problems(sc, fleet, run_dir, plan, watch)]
    assert not problems, f"seed {seed}: " + "\n".join(problems[:6])
    return watch


def _cell_problems(sc: Scenario, plan: Any) -> list[str]:
    """The plan runs the model's cells (exclude/include applied), each `replicates` times."""
    want = sorted(sorted(c.items()) for c in sc.cells() for _ in range(sc.replicates))
    got = sorted(sorted(dict(s.trial.cell.as_dict()).items()) for s in plan.steps)
    return [] if got == want else [f"the plan's cells {got}, model {want}"]


def inventory(sc: Scenario) -> str:
    """The testbeds, each host in its original file's dialect."""
    out, role = [], ""
    for line in pf.inventory_text(sc.testbeds, ROLES).splitlines():
        role = line.strip().rstrip(":") if line.startswith("      ") and not line.startswith("       ") else role
        out.append(line.replace("dialect: systemd", f"dialect: {sc.originals[role].dialect}") if role else line)
    return "\n".join(out) + "\n"


def _run(watch: Watch, call: Callable[[], Any]) -> bool:
    """True when the sweep needs a way back: interrupted (raised, or ended so), or ended with hosts
    it could not restore (its summary says `orch restore RUN_DIR`)."""
    try:
        outcome = call()
    except (KeyboardInterrupt, Interrupted):
        return True
    if not outcome.interrupted:
        watch.ended = outcome
    return bool(outcome.interrupted or outcome.not_restored)


def _end_problems(sc: Scenario, fleet: pf.Fleet, run_dir: Path, plan: Any, watch: Watch) -> list[str]:
    out = []
    for tb in sc.testbeds:
        out += _host_end_problems(sc, fleet, tb)
    out += _journal_problems(run_dir, plan, watch.ended)
    if not watch.fired:
        out += _restart_problems(sc, fleet, plan, watch, run_dir)
    return out


def _host_end_problems(sc: Scenario, fleet: pf.Fleet, tb: str) -> list[str]:
    """Testbed `tb` after the way back: each env file the original (a symlink still one, to the
    same place), nothing beside it, each unit on the original env, no needless restart."""
    out = []
    for role in ROLES:
        t, m = fleet.transports[(tb, role)], fleet.managers[(tb, role)]
        got = env_bytes(t, role)
        if got != sc.originals[role].render().encode():
            out.append(f"end {tb} {role}: file {got!r}, original {sc.originals[role].render()!r}")
        path = f"/etc/orch/{role}.env"
        if t.links.get(path) != sc.links.get(role):
            out.append(f"end {tb} {role}: the env file links to {t.links.get(path)}, was {sc.links.get(role)}")
        left = sorted(p for p in t.files if p not in (path, t.resolve(path)))
        if left:
            out.append(f"end {tb} {role}: left beside the env file: {left}")
        env = {k: v for k, v in (m.environ(f"{tb}-{role}") or {}).items() if k != "PATH"}
        if env != sc.originals[role].values():
            out.append(f"end {tb} {role}: unit runs on {env}, original {sc.originals[role].values()}")
        if not sc.mentioned(role) and m.restarts():  # its file never changes
            out.append(f"end {tb} {role}: no level edits it, yet its unit restarted {len(m.restarts())}x")
    return out


def _journal_problems(run_dir: Path, plan: Any, ended: Any) -> list[str]:
    """Every finished trial journaled as finished exactly once (failed attempts retried aside); a
    run that ended (not interrupted, not stopped early) finished every planned trial, as it says."""
    journal = run_dir / "journal.jsonl"
    if not journal.exists():
        return []
    records = [r for r in read_journal(journal).records if isinstance(r, TrialRecord)]
    finished: dict[int, int] = {}
    for r in records:
        if r.status in ("completed", "failed") and not r.retried:
            finished[r.trial] = finished.get(r.trial, 0) + 1
    out = [f"trial {t} journaled as finished {n} times" for t, n in finished.items() if n != 1]
    planned = {s.trial.index for s in plan.steps}
    unknown = set(finished) - planned
    out += [f"trials {sorted(unknown)} are not the plan's"] if unknown else []
    if ended is not None and ended.stopped is None:
        if set(finished) != planned:
            out.append(f"the run ended {ended.status} with trials {sorted(planned - set(finished))} unfinished")
        if (ended.completed + ended.failed, ended.planned) != (len(planned), len(planned)):
            out.append(
                f"the run says {ended.completed} + {ended.failed} of {ended.planned}, the plan has {len(planned)}"
            )
    return out


def _restart_problems(sc: Scenario, fleet: pf.Fleet, plan: Any, watch: Watch, run_dir: Path) -> list[str]:
    """Without faults: the run went through the plan once; on each testbed each unit started again
    exactly when its file's text changed from that testbed's trial before (the first: from the
    original), as the plan says, and once more at the end if the last cell left it changed."""
    steps = {s.trial.index: s for s in plan.steps}
    order = sorted(t for _, t, _ in watch.seen)
    if order != sorted(steps) or (len(sc.testbeds) == 1 and [t for _, t, _ in watch.seen] != list(steps)):
        return [f"workloads ran trials {[t for _, t, _ in watch.seen]}, the plan has {list(steps)}"]
    journaled = {
        r.trial: set(r.restarted) for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)
    }
    out = []
    for tb in sc.testbeds:
        out += _testbed_restarts(sc, fleet, tb, steps, watch, journaled)
    return out


def _testbed_restarts(
    sc: Scenario, fleet: pf.Fleet, tb: str, steps: dict[int, Any], watch: Watch, journaled: dict[int, set[str]]
) -> list[str]:
    out = []
    before = {r: sc.originals[r].render() for r in ROLES}
    starts = {r: 1 for r in ROLES}
    for trial, seen in [(t, seen) for b, t, seen in watch.seen if b == tb]:
        texts = {r: expected_text(sc.originals[r], sc.settings(watch.levels_of[trial], r)) for r in ROLES}
        changed_roles = {f"{role}:{tb}-{role}" for role in ROLES if texts[role] != before[role]}
        if journaled.get(trial) != changed_roles:
            out.append(f"trial {trial}: journaled restarts {journaled.get(trial)}, the files changed {changed_roles}")
        for role in ROLES:
            changed = texts[role] != before[role]
            planned = any(key == role for key, _ in steps[trial].restart_units)
            starts[role] += changed
            if seen[role] != starts[role]:
                out.append(f"trial {trial} {tb} {role}: {seen[role] - 1} restarts so far, model {starts[role] - 1}")
                starts[role] = seen[role]
            before[role] = texts[role]
            if len(sc.testbeds) > 1:  # the plan's order is one testbed's; in parallel each takes the next
                continue
            watch.restarts = (watch.restarts[0] + planned, watch.restarts[1] + (planned and not changed))
            if changed and not planned:  # the plan may restart more: it never reads a file (a value
                # a cell sets may be the original's), and the runner recomputes from the real files
                out.append(f"trial {trial} {role}: its file changed, the plan restarts nothing")
    for role in ROLES:
        final = fleet.managers[(tb, role)].units[f"{tb}-{role}"].starts
        want = starts[role] + (before[role] != sc.originals[role].render())
        if final != want:
            out.append(f"end {tb} {role}: {final - 1} restarts in all, model {want - 1}")
    return out
