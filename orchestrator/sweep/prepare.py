"""Preparing a sweep: read the matrix and the inventory, pick the testbeds, make the plan. No
host is touched and nothing of the run machinery (transports, HTTP, the runner) is imported, so
`orch validate`, `orch plan` and `orch run --dry-run` start without it; sweep.api runs what is
prepared here (and re-exports these names: api.prepare is the API)."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from orchestrator.core.bounds import MAX_COMMAND_BYTES, MAX_TESTBEDS
from orchestrator.core.config import (
    check_against_inventory,
    check_replicates,
    read_inventory,
    read_matrix,
)
from orchestrator.core.inventory import KNOWN_SHOWN, Host, Inventory, Testbed, port_warnings, shared_env_file
from orchestrator.core.matrix import LevelIndex, client_values, level_index, warnings_for
from orchestrator.core.model import CONTROLLER, Matrix, Trial
from orchestrator.core.plan import make_plan
from orchestrator.core.sourcemap import PathKey
from orchestrator.core.steps import Plan
from orchestrator.errors import ConfigError, UsageError
from orchestrator.store.manifest import check_run_id
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.apitypes import PreparedSweep, SweepRequest, TestbedSelection, Warn
from orchestrator.sweep.commands import command_values, render_command

BUNDLED_INVENTORY = Path("inventory/local.yaml")  # the CLI's default (cli.args.DEFAULT_INVENTORY)


def prepare(request: SweepRequest, *, warn: Warn | None = None) -> PreparedSweep:
    """Read the matrix and inventory, pick the testbeds and make the plan (no I/O on hosts).
    With `warn`, the plan's warnings (a huge matrix, ...) are also shown through it."""
    matrix, inventory = load(request.matrix, request.inventory)
    if request.replicates is not None:
        check_replicates(matrix, request.replicates, "--replicates")
    hunting = matrix.hunt is not None  # a hunt plans its first wave only (core/huntplan.py)
    testbeds = select_testbeds(inventory, request.testbeds)
    if hunting:
        from orchestrator.core.huntplan import hunt_plan  # the search (numpy, scipy): only for a hunt

        plan = hunt_plan(matrix, testbeds[0], request.seed)
    else:
        plan = make_plan(matrix, testbeds[0], request.seed, request.replicates)
    warnings = () if hunting else tuple(warnings_for(matrix, len(plan.steps)))
    warnings += tuple(port_warnings(testbeds, inventory.path))
    for other in testbeds[1:]:
        check_same_roles(plan.testbed, other, inventory)
        check_against_inventory(matrix, other)
    check_separate_testbeds(testbeds, inventory)
    if warn is not None:
        for warning in warnings:
            warn(warning)
    return PreparedSweep(plan, inventory, tuple(testbeds), warnings)


def load(matrix_path: Path, inventory_path: Path) -> tuple[Matrix, Inventory]:
    matrix = read_matrix(matrix_path, shown_path(matrix_path))
    if not inventory_path.exists():
        raise UsageError(f"inventory {inventory_path} not found", hint=_missing_inventory_hint(inventory_path))
    return matrix, read_inventory(inventory_path, shown_path(inventory_path))


def _missing_inventory_hint(path: Path) -> str:
    """The default (the bundled simulator's) is missing when orch runs outside its checkout; any
    other path was given with -i, so telling that user to pass -i would send them in a circle."""
    if path == BUNDLED_INVENTORY:
        return "run from the orch checkout or pass -i INVENTORY"
    return "check the path given with -i (for real hosts: a copy of inventory/example-pd.yaml)"


def shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (ValueError, RuntimeError, OSError):  # elsewhere, or a symlink loop (read_matrix says so)
        return str(path)


def select_testbeds(inventory: Inventory, selection: TestbedSelection) -> list[Testbed]:
    if selection is None:
        return [inventory.testbed(None)]
    if selection == "all":
        chosen = list(inventory.testbeds.values())
    else:
        chosen = [inventory.testbed(n) for n in selection]
    _check_testbed_count(chosen, inventory, selection)
    return chosen


def _check_testbed_count(chosen: Sequence[Testbed], inventory: Inventory, selection: TestbedSelection) -> None:
    """ConfigError (exit 2, before any host is touched) at the first testbed over MAX_TESTBEDS.
    Why: nothing bounded them, and every testbed costs a runner thread and its hosts' connections,
    and is connected, locked and backed up before the first trial: `-t all` on an inventory of
    thousands of testbeds spent minutes and thousands of threads before any trial ran."""
    if len(chosen) <= MAX_TESTBEDS:
        return
    first_over = chosen[MAX_TESTBEDS]
    asked = "-t all" if selection == "all" else "-t"
    raise ConfigError(
        f"{asked} picks {len(chosen)} testbeds, more than the {MAX_TESTBEDS} one run uses at once (each is a "
        f"runner thread with its hosts' connections, locked and backed up before the first trial): this is "
        f"testbed {MAX_TESTBEDS + 1}; nothing was touched",
        file=inventory.path,
        line=first_over.line,
        path=f"testbeds.{first_over.name}",
        hint=f"name at most {MAX_TESTBEDS} with -t A,B,..., or split the sweep into several runs",
    )


def check_same_roles(first: Testbed, other: Testbed, inventory: Inventory) -> None:
    if set(first.hosts) != set(other.hosts):
        raise ConfigError(
            f"testbeds {first.name!r} and {other.name!r} have different roles "
            f"({', '.join(first.hosts)} vs {', '.join(other.hosts)})",
            file=inventory.path,
            line=other.line,
            path=f"testbeds.{other.name}",
            hint="parallel testbeds must be copies of one deployment",
        )


def check_separate_testbeds(testbeds: Sequence[Testbed], inventory: Inventory) -> None:
    """Parallel testbeds edit env files of their own: a copied testbed whose address was not
    changed would lock, back up and edit the first one's files under it."""
    shared = shared_env_file((f"{tb.name}/{key}", h) for tb in testbeds for key, h in tb.hosts.items())
    if shared is not None:
        first, second, host = shared
        raise ConfigError(
            f"{first} and {second} name the same env file {host.env_file_at}",
            file=inventory.path,
            line=host.line,
            hint="parallel testbeds must be separate deployments: give each its own hosts",
        )
    _check_separate_local_units(testbeds, inventory)


def _check_separate_local_units(testbeds: Sequence[Testbed], inventory: Inventory) -> None:
    """Two testbeds' local units of one name in one state_dir share a pid file and the mark orch
    finds a process by, so each testbed's restart would stop the other's server. Why: a copy of
    inventory/local.yaml's testbed keeps its `state_dir: .orch/local-sim` unless the copier sees it."""
    seen: dict[tuple[str, str], str] = {}
    for tb in testbeds:
        if tb.state_dir is None:
            continue
        where = str(tb.state_dir.resolve())
        for h in tb.hosts.values():
            for unit in h.units if h.transport == "local" else ():
                first = seen.setdefault((where, unit.name), tb.name)
                if first != tb.name:
                    raise ConfigError(
                        f"testbeds {first!r} and {tb.name!r} both keep local unit {unit.name!r} in state_dir "
                        f"{where} (one pid file and log: one testbed's restart could stop the other's server)",
                        file=inventory.path,
                        line=tb.line,
                        path=f"testbeds.{tb.name}.state_dir",
                        hint="give each testbed its own state_dir",
                    )


_HINTS = {
    "key": "check `key:`: the path is read here, on the controller; ~ is your home",
    "known_hosts": "check `known_hosts:`: the path is read here, on the controller; ~ is your home",
    "both": "check `key:` and `known_hosts:`: the paths are read here, on the controller; ~ is your home",
}
_NAMED = {"key": "SSH key", "known_hosts": "known_hosts file"}


def missing_key_files(testbeds: Sequence[Testbed], inventory: Inventory) -> list[ConfigError]:
    """Each SSH key or known_hosts file the inventory names that this machine lacks, at the line
    naming it (one error per line, with how many hosts it reaches), in the inventory's order. Why
    now: both are the controller's files, so looking costs no host, and `orch run` found them only
    when connecting (preflight, at the role's line or the address's)."""
    users: dict[tuple[int | None, str, str], list[Host]] = {}
    for testbed in testbeds:
        for host in testbed.hosts.values():
            for what, path, line in _ssh_files(host):
                if not Path(path).expanduser().is_file():
                    users.setdefault((line, what, path), []).append(host)
    return [
        ConfigError(
            f"{_NAMED[what]} {path} not found on this machine ({_hosts_phrase(hosts)})",
            file=inventory.path,
            line=line,
            hint=_HINTS[what],
        )
        for (line, what, path), hosts in sorted(users.items(), key=lambda kv: kv[0][0] or 0)
    ]


def _ssh_files(host: Host) -> list[tuple[str, str, int | None]]:
    """(which, path, line) of the files the SSH transport reads here for `host`: its key, its known_hosts."""
    ssh = host.ssh
    if ssh is None:
        return []
    named = (("key", ssh.key, host.key_line), ("known_hosts", ssh.known_hosts, host.known_hosts_line))
    return [(what, path, line) for what, path, line in named if path]


def _hosts_phrase(hosts: Sequence[Host]) -> str:
    """'decode (10.0.0.3:22)', or the first and how many more: a key shared by 1,000 hosts."""
    more = f" and {len(hosts) - 1:,} more {'host' if len(hosts) == 2 else 'hosts'}" if len(hosts) > 1 else ""
    return f"{hosts[0].label}{more}"


def bounded_problems(problems: Sequence[ConfigError], inventory: Inventory, *, hints: bool = True) -> list[str]:
    """The first KNOWN_SHOWN problems (without their hints unless `hints`), then how many more:
    1,000 roles each naming their own missing key made 1,000 lines."""
    shown = [str(p) if hints else str(p).removesuffix(f" ({p.hint})") for p in problems[:KNOWN_SHOWN]]
    rest = problems[KNOWN_SHOWN:]
    if rest:
        files = "SSH key files" if _keys_only(rest) else "SSH files"
        shown.append(f"{inventory.path}: ... and {len(rest):,} more {files} not found")
    return shown


def _keys_only(problems: Sequence[ConfigError]) -> bool:
    """Every one of `problems` is a missing key (none a known_hosts file): said as "SSH key files"."""
    return all(p.hint == _HINTS["key"] for p in problems)


def check_key_files(testbeds: Sequence[Testbed], inventory: Inventory) -> None:
    """Refuse a run (or a resume) whose SSH key or known_hosts file is missing here (exit 2), before
    any host is contacted: every missing file at once, each at its line, the first KNOWN_SHOWN and
    how many more (as preflight says every host's problem: a user who fixed one is not sent back
    by the next). Not a host check: it reads only this machine's files and costs no host, so
    --skip-preflight (which skips asking the hosts, edges.preflight) keeps it."""
    missing = missing_key_files(testbeds, inventory)
    if len(missing) == 1:
        raise missing[0]
    if missing:
        keys_only = _keys_only(missing)
        lines = bounded_problems(missing, inventory, hints=False)
        raise ConfigError(
            f"{'SSH key' if keys_only else 'SSH'} files not found on this machine, no host was contacted:\n  "
            + "\n  ".join(lines),
            hint=_HINTS["key" if keys_only else "both"],
        )


def check_new_run(request: SweepRequest, prepared: PreparedSweep) -> None:
    """What `run` refuses about the request itself (a bad or taken --run-id) and about this machine
    (a repro program it lacks), checked without touching a host, so `orch run --dry-run` refuses
    what the real run would."""
    run_dir = request.reports_dir / (check_run_id(request.run_id) if request.run_id is not None else "new-run")
    if request.run_id is not None and run_dir.exists():
        raise UsageError(f"{run_dir} already exists", hint="pick another --run-id")
    check_repro_program(prepared.plan, prepared.testbeds[0], RunDir(run_dir))


# Linux execs an argument of at most 128 KiB (core.bounds.MAX_ARG_BYTES), and a command runs as one
# (`sh -c COMMAND`, locally or on a host). The matrix bounds a command as written (core.config);
# placeholders can still make it long ({run_dir} 1,500 times is 13 KB as written and over 100 KB
# filled in), and a command that cannot start fails every trial only after the hosts were edited
# and restarted. So each is filled in for every cell with the run's own values before anything runs.
def check_command_lengths(plan: Plan, testbeds: Sequence[Testbed], run_dir: RunDir) -> None:
    """ConfigError at the command's line when one, filled in for a cell's first trial on one of
    the testbeds, is over MAX_COMMAND_BYTES (the margin to the kernel's limit covers the later
    trials' longer numbers)."""
    matrix = plan.matrix
    levels = level_index(matrix)
    firsts = list({step.trial.cell: step.trial for step in reversed(plan.steps)}.values())  # one per cell
    for testbed in testbeds:
        for where, template, trial in _commands(matrix, firsts):
            size = len(
                _filled(template, plan, testbed, run_dir, trial, levels).encode("utf-8", errors="surrogateescape")
            )
            if size > MAX_COMMAND_BYTES:
                cell = f" for cell {trial.cell.id}" if trial else ""
                raise matrix.source.error(
                    where,
                    f"the command is {size:,} bytes once its placeholders are filled in{cell} (over "
                    f"{MAX_COMMAND_BYTES:,}: Linux runs a command of at most 128 KiB)",
                    "use each placeholder once, or put the long part in a script",
                )


def _filled(
    template: str, plan: Plan, testbed: Testbed, run_dir: RunDir, trial: Trial | None, levels: LevelIndex
) -> str:
    """A command as it runs for `trial` (None: a collector's) on `testbed`: its placeholders filled
    in with the run's own values (sweep.commands)."""
    client = client_values(trial.cell, levels) if trial else {}
    trial_dir = str(run_dir.trial(trial.index if trial else 0).path)
    return render_command(template, command_values(plan.seed, testbed, str(run_dir.path), trial_dir, trial, client))


def _commands(matrix: Matrix, trials: list[Trial]) -> Iterator[tuple[PathKey, str, Trial | None]]:
    """(where, template, trial) of every command to check: the repro's and warm-up's per cell,
    each collector's once."""
    repro = matrix.repro
    for trial in trials:
        yield ("repro", "command"), repro.command, trial
        if repro.warmup:
            yield ("repro", "warmup"), repro.warmup, trial
    for c in matrix.collect:
        if c.command:
            yield ("collect", c.name, "command"), c.command, None


# the shell's own words: a command starting with one runs no program orch could look for
_SHELL_WORDS = frozenset(
    "! { ( [ [[ . : case cd command eval exec exit export for if set source test time trap ulimit umask "
    "unset until while".split()
)
_SHELL_SYNTAX = set("$`*?[]{}()<>|;&~\\'\"")


def check_repro_program(plan: Plan, testbed: Testbed, run_dir: RunDir) -> None:
    """ConfigError at the command's line when the repro (or its warm-up), run here on the
    controller, starts a program this machine does not have: a typo in its path failed every trial
    only after each cell's restarts (minutes a unit on real hosts). Checked when a run starts and
    by its dry run; `orch validate` and `queue add` may run on another machine than tonight's, and
    do not. A command whose program the shell decides (a builtin, a variable, a path relative to
    the run folder) is left to it."""
    repro = plan.matrix.repro
    if repro.on != CONTROLLER or not plan.steps:
        return
    trial, levels = plan.steps[0].trial, level_index(plan.matrix)
    for where, template in ((("repro", "command"), repro.command), (("repro", "warmup"), repro.warmup)):
        program = _program(_filled(template, plan, testbed, run_dir, trial, levels)) if template else None
        if program is not None and not _runnable(program):
            raise plan.matrix.source.error(
                where,
                f"{program}: no such program on this machine (the repro runs here, on the controller)",
                "check the command's path, or install it; nothing was touched",
            )


def _program(command: str) -> str | None:
    """The program a shell command starts, when it can be told without running the shell: its first
    word after any NAME=value assignments (None: a builtin, an expansion, a relative path)."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: the shell says what is wrong
        return None
    first = next((w for w in words if "=" not in w or w.startswith("=")), None)
    if first is None or first in _SHELL_WORDS or _SHELL_SYNTAX & set(first):
        return None
    if "/" in first and not first.startswith("/"):  # relative to the run folder the repro runs in
        return None
    return first


def _runnable(program: str) -> bool:
    if program.startswith("/"):
        return os.path.isfile(program) and os.access(program, os.X_OK)
    return shutil.which(program) is not None
