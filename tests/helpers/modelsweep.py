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

import random
import re
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
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

    def render(self, kept: Sequence[tuple[int, Line]] | None = None) -> str:
        """The text, or that of `kept` (index in the original, line): each line with its own end,
        the last original line without one when the file has no final newline."""
        kept = list(enumerate(self.lines)) if kept is None else kept
        last = len(self.lines) - 1
        return "".join(line.text + ("" if i == last and not self.final_newline else "\n") for i, line in kept)

    def values(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in self.lines:
            if line.key is not None and line.value is not None:
                out[line.key] = line.value  # the last duplicate wins
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
    return head + "".join(line + "\n" for line in appended)


def same_file(got: str, original: EnvFile, settings: Settings) -> bool:
    """`got` is the model's file, its appended lines in any order (their order means nothing to
    either reader; that a cell's bytes never differ between its trials, the restart count shows)."""
    head, appended = _expected_parts(original, settings)
    return got.startswith(head) and sorted(got[len(head) :].splitlines(keepends=True)) == sorted(
        line + "\n" for line in appended
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
        head += "\n"
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
    at: int  # the n-th trial attempt (apply calls, from 1) it hits
    role: str = "decode"
    phase: str = ""  # interrupt: where
    way_back: str = "resume"  # interrupt: then resume, or restore


@dataclass
class Scenario:
    seed: int
    originals: dict[str, EnvFile]
    factors: list[Factor]
    replicates: int
    faults: list[Fault] = field(default_factory=list)
    order: str = "randomized"

    def matrix_text(self) -> str:
        data = {
            "name": f"model{self.seed}",
            "factors": {f.name: f.shape for f in self.factors},
            "replicates": self.replicates,
            "order": self.order,
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


def draw_factor(rng: random.Random, index: int, used: dict[str, set[str]]) -> Factor:
    name = f"f{index}"
    kind = rng.random()
    roles = rng.sample(ROLES, rng.randint(1, 2))
    if kind < 0.3:  # a flag inside each role's args variable
        flag = rng.choice([f for f in FLAGS if all(f not in used[r] for r in roles)] or [f"--extra{index}"])
        for r in roles:
            used[r].add(flag)
        valued = rng.random() < 0.5
        raw = ["absent", "16", "a b"] if valued else ["absent", "present"]
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
        level: dict[str, Settings] = {}
        for r in roles:
            choices = [k for k in KEYS if k not in used[r]]
            for key in rng.sample(choices, min(len(choices), rng.randint(0, 2))):
                level.setdefault(r, {})[key] = None if rng.random() < 0.25 else rng.choice(VALUES)
        levels[f"v{n}"] = level
    for lv in levels.values():
        for r, assigns in lv.items():
            used[r].update(assigns)
    shape = {"levels": {lv: {r: dict(a) for r, a in s.items()} for lv, s in levels.items()}}
    return Factor(name, shape, levels)


FAULTS = ("fail_start", "command_fails", "drop", "interrupt", "workload_fails")
PHASES = ("apply", "after_apply", "restart", "after_restart", "after_wait", "workload", "after_journal")


def shell_file(rng: random.Random, file: EnvFile) -> EnvFile:
    """The file as a shell-dialect host's: some assignments with `export ` before them."""
    lines = tuple(
        Line("export " + line.text, line.key, line.value, "export ") if line.key and rng.random() < 0.4 else line
        for line in file.lines
    )
    return EnvFile(lines, file.final_newline, "shell")


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    originals = {r: draw_file(rng, r) for r in ROLES}
    shell = random.Random(f"dialect {seed}")  # its own stream: the other draws are as before it came
    originals = {r: shell_file(shell, f) if shell.random() < 0.4 else f for r, f in originals.items()}
    used: dict[str, set[str]] = {r: set() for r in ROLES}
    factors = [draw_factor(rng, i, used) for i in range(rng.randint(1, 4))]
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
    return Scenario(seed, originals, factors, replicates, faults, order)


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
    fired: list[str] = field(default_factory=list)  # the faults that fired, as kind[:phase]
    problems: list[str] = field(default_factory=list)
    seen: list[tuple[int, dict[str, int]]] = field(default_factory=list)  # (trial, unit -> starts) per workload
    ended: Any = None  # the last SweepOutcome of run/resume that was not interrupted
    way_back_errors: list[str] = field(default_factory=list)  # a way back that failed (then taken again)
    restarts: tuple[int, int] = (0, 0)  # without faults: (units the plan restarts, of which on an unchanged file)

    def host(self, role: str) -> tuple[FakeTransport, Any]:
        return self.fleet.transports[(TB, role)], self.fleet.managers[(TB, role)]

    def at_workload(self, trial: int) -> None:
        levels = self.levels_of[trial]
        starts = {}
        for role in ROLES:
            t, m = self.host(role)
            settings = self.sc.settings(levels, role)
            want = expected_text(self.sc.originals[role], settings)
            got = t.files.get(f"/etc/orch/{role}.env", b"").decode("utf-8", "surrogateescape")
            if not same_file(got, self.sc.originals[role], settings):
                self.problems.append(f"trial {trial} {role}: file {got!r}, model {want!r} ({settings})")
            env = {k: v for k, v in (m.environ(f"{TB}-{role}") or {}).items() if k != "PATH"}
            live_want = expected_values(self.sc.originals[role], settings)
            if env != live_want:
                self.problems.append(f"trial {trial} {role}: live env {env}, model {live_want}")
            starts[role] = m.units[f"{TB}-{role}"].starts
        self.seen.append((trial, starts))


def _trial_of(command: str) -> int:
    return int(command.split("--trial", 1)[1].split()[0].strip("'"))


@contextmanager
def _hooks(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Count trial attempts at Services.apply, fire the scenario's faults at theirs, and watch
    every workload."""
    sc = watch.sc

    def due(kind: str) -> list[Fault]:
        return [f for f in sc.faults if f.kind == kind and f.at == watch.attempts]

    def interrupt(phase: str) -> None:
        for f in due("interrupt"):
            if f.phase == phase and threading.current_thread() is threading.main_thread():
                f.at = -1  # once
                watch.fired.append(f"interrupt:{phase}")
                raise Interrupt(f"interrupted at {phase}")

    apply, restart, wait = phases.Services.apply, phases.Services.restart, phases.Services.wait_healthy

    def apply_(self: phases.Services, step: Any, ctx: Any) -> None:
        watch.attempts += 1
        _arm(watch)
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
        watch.at_workload(_trial_of(command))
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
                if threading.current_thread() is threading.main_thread():
                    f.at = -1
                    watch.fired.append("interrupt:restore")
                    raise Interrupt(f"interrupted while {role} is restored")
        restore_host(self, role)

    monkeypatch.setattr(hosts.HostGuard, "_restore_host", restore_host_)
    yield


def _arm(watch: Watch) -> None:
    """Faults due at this attempt that act through the fakes."""
    for f in watch.sc.faults:
        if f.at != watch.attempts:
            continue
        t, m = watch.host(f.role)
        if f.kind in ("fail_start", "command_fails", "drop"):
            watch.fired.append(f.kind)  # armed: it hits the host's next start, command or call
        if f.kind == "fail_start":
            m.units[f"{TB}-{f.role}"].fail_starts = 1
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
    fleet = pf.Fleet({r: sc.originals[r].render() for r in ROLES})
    pf.install(monkeypatch, fleet)
    (tmp / "m.yaml").write_text(sc.matrix_text())
    (tmp / "inv.yaml").write_text(inventory(sc))
    req = api.SweepRequest(
        tmp / "m.yaml",
        tmp / "inv.yaml",
        testbeds=(TB,),
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
                    _drop_once(watch.host(f.role)[0])
            try:  # a fault during the way back fails that command (the user runs it again)
                if way == "restore":
                    outcome = api.restore(api.RestoreRequest(run_dir), QuietProgress(), warn=_no_warning)
                    stopped = any(tb.not_restored for tb in outcome.testbeds)
                else:
                    stopped = _run(watch, lambda: api.resume(api.ResumeRequest(run_dir), _quiet, warn=_no_warning))
            except OrchError as exc:
                watch.way_back_errors.append(f"{way}: {exc}")
    problems = [*watch.problems, *_end_problems(sc, fleet, run_dir, plan, watch)]
    assert not problems, f"seed {seed}: " + "\n".join(problems[:6])
    return watch


def inventory(sc: Scenario) -> str:
    """The one testbed, each host in its original file's dialect."""
    out, role = [], ""
    for line in pf.inventory_text([TB], ROLES).splitlines():
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
    for role in ROLES:
        got = fleet.file(TB, role)
        if got != sc.originals[role].render().encode():
            out.append(f"end {role}: file {got!r}, original {sc.originals[role].render()!r}")
        left = fleet.extra_files(TB, role)
        if left:
            out.append(f"end {role}: left beside the env file: {left}")
        env = {k: v for k, v in (fleet.managers[(TB, role)].environ(f"{TB}-{role}") or {}).items() if k != "PATH"}
        if env != sc.originals[role].values():
            out.append(f"end {role}: unit runs on {env}, original {sc.originals[role].values()}")
        if not sc.mentioned(role) and fleet.managers[(TB, role)].restarts():  # its file never changes
            out.append(
                f"end {role}: no level edits it, yet its unit restarted {len(fleet.managers[(TB, role)].restarts())}x"
            )
    out += _journal_problems(run_dir, plan, watch.ended)
    if not watch.fired:
        out += _restart_problems(sc, fleet, plan, watch, run_dir)
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
    """Without faults: the run went through the plan once; each unit started again exactly when its
    file's text changed from the trial before (the first: from the original), as the plan says,
    and once more at the end if the last cell left it changed (the restore)."""
    out = []
    steps = {s.trial.index: s for s in plan.steps}
    order = [t for t, _ in watch.seen]
    if order != [s.trial.index for s in plan.steps]:
        return [f"workloads ran trials {order}, the plan has {[s.trial.index for s in plan.steps]}"]
    before = {r: sc.originals[r].render() for r in ROLES}
    starts = {r: 1 for r in ROLES}
    journaled = {
        r.trial: set(r.restarted) for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)
    }
    for trial, seen in watch.seen:
        changed_roles = {
            f"{role}:{TB}-{role}"
            for role in ROLES
            if expected_text(sc.originals[role], sc.settings(watch.levels_of[trial], role)) != before[role]
        }
        if journaled.get(trial) != changed_roles:
            out.append(f"trial {trial}: journaled restarts {journaled.get(trial)}, the files changed {changed_roles}")
        for role in ROLES:
            text = expected_text(sc.originals[role], sc.settings(watch.levels_of[trial], role))
            changed = text != before[role]
            planned = (role, f"{TB}-{role}") in steps[trial].restart_units
            starts[role] += changed
            if seen[role] != starts[role]:
                out.append(f"trial {trial} {role}: {seen[role] - 1} restarts so far, model {starts[role] - 1}")
                starts[role] = seen[role]
            watch.restarts = (watch.restarts[0] + planned, watch.restarts[1] + (planned and not changed))
            if changed and not planned:  # the plan may restart more: it never reads a file (a value
                # a cell sets may be the original's), and the runner recomputes from the real files
                out.append(f"trial {trial} {role}: its file changed, the plan restarts nothing")
            before[role] = text
    for role in ROLES:
        final = fleet.managers[(TB, role)].units[f"{TB}-{role}"].starts
        want = starts[role] + (before[role] != sc.originals[role].render())
        if final != want:
            out.append(f"end {role}: {final - 1} restarts in all, model {want - 1}")
    return out
