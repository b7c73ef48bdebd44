"""Fakes at the seams: an in-memory transport, service manager and health side for runner tests.

Modelled on httpx's ``MockTransport(handler)`` and Invoke's ``MockContext``: a fake does exactly
what a test scripted and nothing else. An unscripted command is refused with an AssertionError
naming it, so a test can never pass because a fake quietly answered something it was not told
to (the refusal is also logged in ``refused``, in case the code under test swallows it).

What each fake stands for:
- ``FakeTransport``: one host's files (bytes by path; symlinks in ``links``, modes and owners in
  ``modes``, followed and kept as the real transports do) and shell; every call is logged.
- ``FakeServiceManager``: systemd on that host. Each start reads the unit's env file from the
  host's FakeTransport with orch's own reader for the dialect (``envfile.read_values``), so
  ``environ(unit)`` holds what a real process would have got; MainPID changes at every start.
  Its health ports are held by its running unit, unless a test puts a stranger on one
  (``strangers[port] = Holder(...)``).
- ``health_client(bed)``: an ``httpx.Client`` over ``httpx.MockTransport`` whose handler answers
  each host's health URL 200 only while the units behind it run and are ready (503 while
  loading, connection refused when nothing runs).
- ``make_bed`` / ``make_matrix`` / ``make_plan``: a Deployment of fakes from an inventory-like
  description, so a test reads "a 2-role deployment, 4 trials, assert".
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import yaml

from orchestrator.core import gpuinfo
from orchestrator.core.config import MatrixShape, build_matrix, validate_shape
from orchestrator.core.envfile import Dialect, read_values
from orchestrator.core.inventory import Host, SshSettings, Testbed, UnitSpec
from orchestrator.core.plan import make_plan as _make_plan
from orchestrator.core.steps import Plan
from orchestrator.core.yamlsrc import parse_yaml
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.identity import Holder, PortScan, Socket, UnitId
from orchestrator.edges.lock import CREATE as LOCK_CREATE
from orchestrator.edges.lock import READ as LOCK_READ
from orchestrator.edges.lock import TAKE_OVER as LOCK_TAKE_OVER
from orchestrator.edges.preflight import WRITE_PROBE
from orchestrator.edges.remote_leftovers import SCRIPT as LEFT_SCRIPT
from orchestrator.edges.remote_scope import PROBE as SCOPE_PROBE
from orchestrator.edges.services import UnitState
from orchestrator.edges.transport import FileEntry, Result
from orchestrator.errors import CommandFailed, CommandInterrupted, EnvFileError, ServiceError, TransportError
from orchestrator.sweep.drift import SET_ASIDE
from orchestrator.sweep.hosts import REMOVE_RUN_FILES
from orchestrator.sweep.runner import Runner, RunOptions

try:  # the typed timeout of issue 11 (errors.CommandTimedOut carries its Result)
    from orchestrator.errors import CommandTimedOut
except ImportError:  # pragma: no cover - a tree from before it landed
    CommandTimedOut = None  # type: ignore[assignment,misc]
try:  # a write told what the file must hold (errors.FileChanged)
    from orchestrator.errors import FileChanged
except ImportError:  # pragma: no cover - a tree from before it landed
    FileChanged = TransportError  # type: ignore[assignment,misc]

Handler = Callable[[str, "Sequence[str] | None"], "Reply"]


# ============================================================================ transport
@dataclass(frozen=True)
class Reply:
    """A scripted answer to one command (what Invoke's MockContext calls a Result)."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timeout: bool = False  # raise as a command that outlived its timeout and was killed
    # block until the run's stop Event is set, then end as a command killed on its host then (the
    # printed output kept); a run without a stop Event, which nothing could cancel, is refused
    until_stopped: bool = False


@dataclass
class _Script:
    matcher: str | tuple[str, ...] | re.Pattern[str]
    answer: Reply | Handler
    times: int | None  # None: any number of times

    def matches(self, text: str, argv: Sequence[str] | None) -> bool:
        if isinstance(self.matcher, re.Pattern):
            return self.matcher.search(text) is not None
        if isinstance(self.matcher, tuple):  # an argv prefix
            return argv is not None and tuple(argv[: len(self.matcher)]) == self.matcher
        return self.matcher == text


_sequence = itertools.count()


@dataclass(frozen=True)
class Call:
    """One entry of a fake's call log: what was asked, of which target. `seq` orders calls
    across every fake of a test (restart waves span hosts)."""

    op: str  # run, read, write, exists, close / restart, stop, ...
    target: str  # the command text, the path or the unit
    seq: int = field(default_factory=lambda: next(_sequence))
    stop: threading.Event | None = field(default=None, compare=False)  # run: the Event it was given
    env: Mapping[str, str] | None = field(default=None, compare=False)  # run: the variables it was given
    scope: str | None = field(default=None, compare=False)  # run: the transient scope it ran in


DEFAULT_MODE = (0o644, 0, 0)  # a file a write creates: mode (root's umask 022), uid, gid
# the few account names tests give owners by (set_mode, mode_of), as a fake host's passwd/group
IDS = {"root": 0, "sglang": 1001, "nobody": 65534, "nogroup": 65534}


class FakeTransport:
    """The Transport protocol in memory: files by path, scripted commands, a call log. Each file
    also has a mode and an owner (`mode_of`, `set_mode`), kept by writes as the real transports
    keep them: an existing file keeps its own, a new one gets DEFAULT_MODE, a copy written with
    `like=` takes its source's (0600 if the source is gone)."""

    def __init__(self, host: str = "fake", files: Mapping[str, bytes | str] | None = None) -> None:
        self.host = host
        self.files: dict[str, bytes] = {p: _bytes(d) for p, d in (files or {}).items()}
        # symlinks: path -> target (relative to the link's folder, or absolute); reads and writes
        # follow them, as both real transports do (a write replaces the target, the link stays)
        self.links: dict[str, str] = {}
        self.modes: dict[str, tuple[int, int, int]] = {}  # path -> (mode, uid, gid); unset: DEFAULT_MODE
        self.calls: list[Call] = []
        self.refused: list[str] = []  # unscripted commands, kept even if the caller swallowed the error
        self.closed = False
        self._scripts: list[_Script] = []
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- scripting
    def script(
        self,
        command: str | Sequence[str] | re.Pattern[str],
        reply: Reply | Handler | None = None,
        *,
        times: int | None = None,
        **fields: Any,
    ) -> None:
        """Answer `command` with `reply` (or Reply(**fields)). A string matches the command text
        exactly, a list or tuple is an argv prefix, a compiled regex searches the text. Later
        scripts win over earlier ones; `times` limits how often a script answers."""
        matcher: str | tuple[str, ...] | re.Pattern[str]
        matcher = command if isinstance(command, (str, re.Pattern)) else tuple(command)
        answer = reply if reply is not None else Reply(**fields)
        with self._lock:
            self._scripts.insert(0, _Script(matcher, answer, times))

    def allow_file_commands(self) -> None:
        """Script the few file commands orch's edges run (`true`, `test -w/-e/-L`, `cat`, `rm -f`,
        preflight's write probe (a file it holds is writable, its folder too), the
        lock's exclusive create and takeover), acting on the in-memory files, and the look for what a
        repro run on the host left running (nothing: script LEFT_SCRIPT again to leave something),
        and whether a repro there runs in a transient scope (no: script SCOPE_PROBE again for yes).
        Everything else stays refused."""
        self.script(("true",), Reply())
        self.script(("test", "-w"), lambda text, argv: Reply(0 if argv and argv[-1] in self.files else 1))
        self.script(("sh", "-c", WRITE_PROBE), self._write_probe)
        self.script(("test", "-e"), lambda text, argv: Reply(0 if argv and self.resolve(argv[-1]) in self.files else 1))
        self.script(("test", "-L"), lambda text, argv: Reply(0 if argv and argv[-1] in self.links else 1))
        self.script(("cat",), self._cat)
        self.script(("rm", "-f"), self._rm)
        self.script(("sh", "-c", LOCK_CREATE), self._create_exclusive)
        self.script(("sh", "-c", LOCK_TAKE_OVER), self._take_over)
        self.script(("sh", "-c", LOCK_READ), self._read_lock)
        self.script(("sh", "-c", REMOVE_RUN_FILES), self._remove_run_files)
        self.script(("sh", "-c", SET_ASIDE), self._set_aside)
        self.script(("sh", "-c", LEFT_SCRIPT), Reply())
        self.script(("sh", "-c", SCOPE_PROBE), Reply(stdout="orch-scope|no|a fake host\n"))

    def set_mode(self, path: str, mode: int, owner: str = "root:root") -> None:
        """Give a file a mode and an owner ("user:group", names from IDS), as chmod and chown would."""
        user, group = owner.split(":")
        with self._lock:
            self.modes[path] = (mode, IDS[user], IDS[group])

    def mode_of(self, path: str) -> tuple[int, str]:
        """(mode, "user:group") of a file: as set, as a write left it, else a new file's."""
        with self._lock:
            mode, uid, gid = self.modes.get(path, DEFAULT_MODE)
        users = {i: n for n, i in IDS.items() if n != "nogroup"}
        groups = {i: n for n, i in IDS.items() if n != "nobody"}
        return mode, f"{users.get(uid, uid)}:{groups.get(gid, gid)}"

    def commands(self) -> list[str]:
        """The commands run so far, in order."""
        with self._lock:
            return [c.target for c in self.calls if c.op == "run"]

    # ---------------------------------------------------------------- the protocol
    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        sudo: bool = False,
        stop: threading.Event | None = None,
        env: Mapping[str, str] | None = None,
        scope: str | None = None,
    ) -> Result:
        argv = None if isinstance(command, str) else list(command)
        text = command if isinstance(command, str) else shlex.join(argv or [])
        if stop is not None and stop.is_set():  # as the real transports: nothing runs
            with self._lock:
                self.calls.append(Call("run", text, stop=stop, env=env, scope=scope))
            raise CommandInterrupted(Result(self.host, text, -1, "", "", 0.0))
        reply = self._answer(text, argv, stop, env, scope)
        if reply.until_stopped:
            if stop is None:
                raise AssertionError(f"{self.host}: `{text}` waits for a stop Event, but was run without one")
            if not stop.wait(timeout if timeout is not None else 600):
                reply = replace(reply, until_stopped=False, timeout=True)
            else:
                raise CommandInterrupted(Result(self.host, text, -15, reply.stdout, reply.stderr, 0.0))
        if reply.timeout:  # what LocalTransport raises: the command was killed at its timeout
            killed = Result(self.host, text, -1, reply.stdout, reply.stderr, timeout or 0.0)
            if CommandTimedOut is not None:
                raise CommandTimedOut(killed, timeout or 0.0)
            raise TransportError(self.host, f"command timed out after {timeout or 0:g} s and was killed: {text}")
        result = Result(self.host, text, reply.exit_code, reply.stdout, reply.stderr, 0.0)
        if check and not result.ok:
            raise CommandFailed(self.host, text, reply.exit_code, reply.stdout, reply.stderr)
        return result

    def read_bytes(self, path: str) -> bytes:
        with self._lock:
            self.calls.append(Call("read", path))
            real = self.resolve(path)
            if real not in self.files:
                raise TransportError(self.host, f"cannot read {path}: No such file or directory")
            return self.files[real]

    def read_entry(self, path: str) -> FileEntry:
        with self._lock:
            self.calls.append(Call("read", path))  # one read, as read_bytes: one round trip
            real = self.resolve(path)
            if real not in self.files:
                return FileEntry(None, self.links.get(path))
            return FileEntry(self.files[real], self.links.get(path), *self.modes.get(real, DEFAULT_MODE))

    def write_bytes_atomic(
        self, path: str, data: bytes, *, like: str | None = None, expect: bytes | None = None
    ) -> None:
        with self._lock:
            self.calls.append(Call("write", path))
            real = self.resolve(path)
            if expect is not None and self.files.get(real) != expect:  # compared on the host, as ssh's script does
                raise FileChanged(self.host, path)
            if like is not None:
                source = self.resolve(like)
                self.modes[real] = self.modes.get(source, DEFAULT_MODE) if source in self.files else (0o600, 0, 0)
            elif real not in self.files:  # created: whatever mode a path of that name had is gone
                self.modes[real] = DEFAULT_MODE
            self.files[real] = bytes(data)  # an old file keeps its own mode and owner

    def write_then_run(
        self, path: str, data: bytes, command: str, *, timeout: float, expect: bytes | None = None
    ) -> Result:
        self.write_bytes_atomic(path, data, expect=expect)
        return self.run(command, timeout=timeout, check=False)

    def exists(self, path: str) -> bool:
        with self._lock:
            self.calls.append(Call("exists", path))
            return self.resolve(path) in self.files

    def resolve(self, path: str) -> str:
        """The path a symlinked `path` leads to (`path` itself when it is no link)."""
        with self._lock:
            for _ in range(8):
                if path not in self.links:
                    return path
                path = posixpath.normpath(posixpath.join(posixpath.dirname(path), self.links[path]))
            return path

    def close(self) -> None:
        with self._lock:
            self.calls.append(Call("close", ""))
            self.closed = True

    # ---------------------------------------------------------------- internals
    def _answer(
        self,
        text: str,
        argv: Sequence[str] | None,
        stop: threading.Event | None = None,
        env: Mapping[str, str] | None = None,
        scope: str | None = None,
    ) -> Reply:
        with self._lock:
            self.calls.append(Call("run", text, stop=stop, env=env, scope=scope))
            script = next((s for s in self._scripts if s.matches(text, argv)), None)
            if script is None:
                self.refused.append(text)
                raise AssertionError(f"{self.host}: unscripted command refused: {text} (script it with .script())")
            if script.times is not None:
                script.times -= 1
                if script.times == 0:
                    self._scripts.remove(script)
        answer = script.answer
        return answer if isinstance(answer, Reply) else answer(text, argv)

    def _write_probe(self, text: str, argv: Sequence[str] | None) -> Reply:
        """preflight.WRITE_PROBE: a file held is writable (its folder too); another cannot be opened."""
        if argv and argv[-1] in self.files:
            return Reply()
        return Reply(1, stdout="file: No such file or directory\n")

    def _cat(self, text: str, argv: Sequence[str] | None) -> Reply:
        path = argv[-1] if argv else ""
        with self._lock:
            if path not in self.files:
                return Reply(1, stderr=f"cat: {path}: No such file or directory\n")
            return Reply(0, self.files[path].decode("utf-8", errors="replace"))

    def _rm(self, text: str, argv: Sequence[str] | None) -> Reply:
        with self._lock:
            for path in (argv or [])[2:]:
                self.files.pop(path, None)
        return Reply()

    def _remove_run_files(self, text: str, argv: Sequence[str] | None) -> Reply:
        """sweep.hosts' tidy-up: remove $2 (the run's backup), $3 (its record of the units' states)
        and `.NAME.orch-*` beside $1 (no symlinks here)."""
        assert argv is not None and len(argv) == 7, f"{self.host}: unexpected tidy-up command: {text}"
        directory, name = posixpath.split(argv[4])
        prefix = posixpath.join(directory, f".{name}.orch-")
        with self._lock:
            for path in [p for p in self.files if p.startswith(prefix) or p in argv[5:]]:
                del self.files[path]
        return Reply()

    def _set_aside(self, text: str, argv: Sequence[str] | None) -> Reply:
        """sweep.drift.SET_ASIDE ($1 file, $2 where to keep what is there, $3 mode, $4 uid:gid): a
        link is moved aside whole, a file copied (mode 600) to a free name; then a missing file is
        made empty with mode $3 and owner $4."""
        assert argv is not None and len(argv) == 8, f"{self.host}: unexpected set-aside command: {text}"
        path, keep, mode, owner = argv[4:8]
        out = ""
        with self._lock:
            if keep:
                kept, n = keep, 1
                while kept in self.files or kept in self.links:
                    n += 1
                    kept = f"{keep}.{n}"
                if path in self.links:
                    self.links[kept] = self.links.pop(path)
                else:
                    self.files[kept], self.modes[kept] = self.files[self.resolve(path)], (0o600, 0, 0)
                out = f"orch-kept {kept}\n"
            real = self.resolve(path)
            if mode and real not in self.files:
                uid, gid = owner.split(":")
                self.files[real], self.modes[real] = b"", (int(mode, 8), int(uid), int(gid))
        return Reply(0, out)

    def _create_exclusive(self, text: str, argv: Sequence[str] | None) -> Reply:
        """`set -C; printf "%s\\n" "$1" > "$2"`: create $2 holding $1, fail if it exists."""
        assert argv is not None and len(argv) == 6, f"{self.host}: unexpected lock command: {text}"
        payload, path = argv[4], argv[5]
        with self._lock:
            if path in self.files:
                return Reply(1, stderr=f"sh: 1: cannot create {path}: File exists\n")
            self.files[path] = (payload + "\n").encode()
        return Reply()

    def _read_lock(self, text: str, argv: Sequence[str] | None) -> Reply:
        """edges.lock.READ ($1: the lock, $2: a byte cap). Every in-memory file is a regular file,
        so it is a `cat` of $1: answered by whatever answers `cat $1` (a test that hooks `cat`,
        e.g. to interleave a second controller, hooks the lock's reads too), cut at the cap."""
        assert argv is not None and len(argv) == 6, f"{self.host}: unexpected lock read: {text}"
        path, cap = argv[4], int(argv[5])
        script = self._script_for(shlex.join(["cat", path]), ["cat", path])
        reply = script.answer if isinstance(script.answer, Reply) else script.answer(text, ["cat", path])
        return replace(reply, stdout=reply.stdout.encode()[:cap].decode("utf-8", errors="replace"))

    def _script_for(self, text: str, argv: Sequence[str]) -> _Script:
        with self._lock:
            script = next((s for s in self._scripts if s.matches(text, argv)), None)
        if script is None:
            raise AssertionError(f"{self.host}: a lock read needs `cat` scripted (allow_file_commands)")
        return script

    def _take_over(self, text: str, argv: Sequence[str] | None) -> Reply:
        """edges.lock.TAKE_OVER: replace $2 by $3 only if it still holds $1 (trailing newlines
        aside), atomically; exit 3 when it is gone, 4 when it holds another holder."""
        assert argv is not None and len(argv) == 7, f"{self.host}: unexpected lock takeover: {text}"
        expected, path, payload = argv[4], argv[5], argv[6]
        with self._lock:
            if path not in self.files:
                return Reply(3)
            if self.files[path].decode("utf-8", errors="replace").rstrip("\n") != expected:
                return Reply(4)
            self.files[path] = (payload + "\n").encode()
        return Reply()


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


# ============================================================================ service manager
# Fake units' pids start above any pid a test gives a stranger (Holder(4242, ...), 77, ...): a worker
# that had started 242 units gave the next one pid 4242, and a stranger on its port read as orch's own
# unit (preflight passed in one fresh-clone run of the suite, by test order)
FIRST_UNIT_PID = 100_000
_pids = itertools.count(FIRST_UNIT_PID)


@dataclass
class FakeUnit:
    """One unit's scripted behaviour; mutable, so a test can change it between trials.

    fail_starts: the next N starts fail (systemctl restart exits non-zero, state failed).
    crash_loops: every start "succeeds", then the process keeps exiting (auto-restart).
    dies_after_s: the process exits this long after each start.
    ready_after_s: health answers 503 ("loading") for this long after each start.
    ready_after_probes: health answers 503 to this many probes after each start (a wait that
      does not depend on how busy the machine is: the waiter must ask again, however late it began).
    reads_as: the dialect the unit's reader really uses (None: the host's), e.g. "systemd"
      under a shell-dialect host models a unit that ignores `export` lines.
    log_lines: written to the unit's log at every start (what logs_since returns).
    drop_in: set after the env file is read at every start, as a drop-in's Environment= (or a
      later EnvironmentFile=) does under systemd: it wins over what orch wrote.
    no_main_pid: systemd knows no MainPID of it (Type=forking with GuessMainPID=no): its ids carry
      only its cgroup, /system.slice/NAME.service, where its server holds the ports.
    masked: systemctl mask'ed (only preflight's `unusable` reads it)."""

    name: str
    active: bool = False
    fail_starts: int = 0
    crash_loops: bool = False
    dies_after_s: float | None = None
    ready_after_s: float = 0.0
    ready_after_probes: int = 0
    reads_as: Dialect | None = None
    base_env: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/bin:/bin"})
    log_lines: tuple[str, ...] = ()
    no_main_pid: bool = False
    drop_in: dict[str, str] = field(default_factory=dict)
    masked: bool = False  # `systemctl mask`: what runs keeps running, a restart is refused (preflight only)
    environment_files: tuple[str, ...] | None = None  # its EnvironmentFile= lines (None: not said, as local)
    # state kept by the manager
    pid: int | None = None
    started_at: float | None = None
    failed: bool = False
    env: dict[str, str] | None = None
    starts: int = 0
    loading_answers: int = 0  # 503s answered since the last start (ready_after_probes counts these)


class FakeServiceManager:
    """The ServiceManager protocol over FakeUnits; env files are read from `transport`."""

    def __init__(
        self, transport: FakeTransport, env_file: str, dialect: Dialect, units: Sequence[FakeUnit], host: str = ""
    ) -> None:
        self.transport, self.env_file, self.dialect = transport, env_file, dialect
        self.host = host or transport.host
        self.units = {u.name: u for u in units}
        self.calls: list[Call] = []
        self.logs: dict[str, list[tuple[float, str]]] = {u.name: [] for u in units}
        self.strangers: dict[int, Holder] = {}  # port -> a foreign process listening there
        self._lock = threading.RLock()
        for unit in units:
            if unit.active:  # running before orch came: started with the file as it is
                self._start(unit, time.time(), log=False)

    # ---------------------------------------------------------------- the protocol
    def unusable(self, unit: str) -> str | None:
        if unit not in self.units:
            return "not found"
        return "is masked (systemctl unmask it first)" if self.units[unit].masked else None

    def state(self, unit: str) -> UnitState:
        u = self._unit(unit)
        with self._lock:
            alive = self._alive(u)
            if u.failed:
                return UnitState(unit, "failed", "failed", None, result="exit-code")
            if u.crash_loops and u.started_at is not None:
                return UnitState(unit, "activating", "auto-restart", None, n_restarts=1, started_at=u.started_at)
            if alive:
                return UnitState(unit, "active", "running", u.pid, started_at=u.started_at)
            return UnitState(unit, "inactive", "dead", None)

    def restart(self, unit: str) -> float:
        u = self._unit(unit)
        when = time.time()
        with self._lock:
            self.calls.append(Call("restart", unit))
            self._start(u, when)
        if u.failed:
            raise ServiceError(self.host, unit, "failed: exit-code (exit status 1)", detail=self._tail(unit))
        return when

    def restart_with_file(
        self, unit: str, transport: Any, path: str, data: bytes, *, expect: bytes | None = None
    ) -> float:
        transport.write_bytes_atomic(path, data, expect=expect)
        return self.restart(unit)

    def stop(self, unit: str) -> None:
        u = self._unit(unit)
        with self._lock:
            self.calls.append(Call("stop", unit))
            u.active, u.pid, u.started_at, u.env, u.failed = False, None, None, None, False

    def check_alive(self, unit: str, since: float) -> None:
        u = self._unit(unit)
        state = self.state(unit)
        if state.active_state == "failed":
            raise ServiceError(self.host, unit, "failed: exit-code", detail=self._tail(unit))
        if state.sub_state == "auto-restart":
            raise ServiceError(
                self.host,
                unit,
                "crash-looping: its process exited and systemd restarts it (restart #1 since orch started it)",
            )
        if not state.is_active and u.started_at is not None:
            raise ServiceError(self.host, unit, "not running (inactive/dead: it exited or was stopped)")

    def logs_since(self, unit: str, since: float, max_bytes: int = 256_000) -> str:
        self._unit(unit)
        with self._lock:
            text = "".join(line + "\n" for when, line in self.logs[unit] if when >= since)
        return text[-max_bytes:]

    def env_files(self, unit: str, path: str) -> tuple[bool, list[str]] | None:
        files = self._unit(unit).environment_files
        return None if files is None else (path in files, list(files))

    def environ(self, unit: str) -> dict[str, str] | None:
        u = self._unit(unit)
        with self._lock:
            return dict(u.env) if self._alive(u) and u.env is not None else None

    def logs_and_ids(
        self, units: Sequence[str], since: float, max_bytes: int = 256_000
    ) -> tuple[dict[str, str], dict[str, UnitId]]:
        return {u: self.logs_since(u, since, max_bytes) for u in units}, self.unit_ids(units)

    def unit_ids(self, units: Sequence[str]) -> dict[str, UnitId]:
        with self._lock:
            self.calls.append(Call("unit_ids", " ".join(units)))
            return {u: self._id(u) for u in units}

    def _id(self, unit: str) -> UnitId:
        u = self._unit(unit)
        if not self.running(unit):
            return UnitId(unit, None, str(u.starts))
        if u.no_main_pid:
            return UnitId(unit, None, str(u.starts), f"/system.slice/{unit}.service")
        return UnitId(unit, u.pid, str(u.starts))

    def port_scan(self, ports: Sequence[int], units: Sequence[str]) -> tuple[PortScan, dict[str, UnitId]]:
        """A stranger holds its port (a Holder whose inode is the port); any other port is held by
        the first running unit, or by nothing."""
        ids = self.unit_ids(units)
        mine = next((i for i in ids.values() if i.running), None)
        sockets, holders = [], []
        with self._lock:
            self.calls.append(Call("port_scan", " ".join(map(str, ports))))
            for port in ports:
                holder = self.strangers.get(port)
                if holder is None and mine is not None and mine.main_pid:
                    holder = Holder(mine.main_pid, port, 0, "fake-server", (mine.main_pid, 1))
                elif holder is None and mine is not None:  # daemonized: reparented to PID 1, in its cgroup
                    holder = Holder(9000 + port % 1000, port, 0, "fake-server", (9000 + port % 1000, 1), (mine.cgroup,))
                if holder is not None:
                    sockets.append(Socket(port, holder.uid or 0, holder.inode))
                    holders.append(holder)
        return PortScan(tuple(sockets), tuple(holders), {0: "root", 1000: "alice"}), ids

    # ---------------------------------------------------------------- for tests
    def log(self, unit: str, line: str) -> None:
        """The unit writes a line now."""
        with self._lock:
            self.logs[unit].append((time.time(), line))

    def ready(self, unit: str) -> bool:
        """Would the unit's server answer its health URL 200 right now?"""
        u = self._unit(unit)
        with self._lock:
            if not self._alive(u) or u.crash_loops or u.started_at is None:
                return False
            if time.time() < u.started_at + u.ready_after_s or u.loading_answers < u.ready_after_probes:
                u.loading_answers += 1
                return False
            return True

    def running(self, unit: str) -> bool:
        u = self._unit(unit)
        with self._lock:
            return self._alive(u) and not u.crash_loops

    def restarts(self) -> list[str]:
        with self._lock:
            return [c.target for c in self.calls if c.op == "restart"]

    # ---------------------------------------------------------------- internals
    def _unit(self, unit: str) -> FakeUnit:
        if unit not in self.units:
            raise AssertionError(f"{self.host}: unknown unit {unit!r} (known: {', '.join(self.units)})")
        return self.units[unit]

    def _alive(self, u: FakeUnit) -> bool:
        if not u.active or u.failed or u.started_at is None:
            return False
        return u.dies_after_s is None or time.time() < u.started_at + u.dies_after_s

    def _start(self, u: FakeUnit, when: float, *, log: bool = True) -> None:
        """What systemd does on (re)start: read the env file now, in the unit's dialect; a file
        its reader refuses (or a scripted start failure) leaves the unit failed."""
        u.starts += 1
        u.active, u.started_at, u.pid, u.failed = True, when, next(_pids), False
        u.loading_answers = 0
        try:
            text = self.transport.files[self.transport.resolve(self.env_file)].decode("utf-8", errors="surrogateescape")
            u.env = {**u.base_env, **read_values(text, u.reads_as or self.dialect), **u.drop_in}
        except (KeyError, EnvFileError):
            u.failed = True
        if u.fail_starts > 0:
            u.fail_starts -= 1
            u.failed = True
        if u.failed:
            u.pid, u.env = None, None
        if log:
            self.logs[u.name].append((when, f"{u.name}: started pid {u.pid}" if u.pid else f"{u.name}: failed"))
            self.logs[u.name].extend((when, line) for line in u.log_lines)

    def _tail(self, unit: str) -> str:
        return "".join(line + "\n" for _, line in self.logs[unit][-5:])


# ============================================================================ the deployment
@dataclass(frozen=True)
class Role:
    """An inventory host, as a test describes it."""

    env: str | bytes = ""
    units: Sequence[str | FakeUnit] = ()
    after: Sequence[str] = ()
    dialect: Dialect = "systemd"
    verify_env: bool = True
    health_timeout_s: float = 5.0


@dataclass
class FakeBed:
    """A Deployment of fakes plus the handles a test asserts on."""

    deployment: Deployment
    transports: dict[str, FakeTransport]
    managers: dict[str, FakeServiceManager]
    client: httpx.Client
    originals: dict[str, bytes]  # env file bytes as the bed was made

    def env_file(self, role: str) -> str:
        return self.deployment.hosts[role].host.env_file

    def file(self, role: str) -> bytes:
        return self.transports[role].files[self.env_file(role)]

    def unit(self, role: str, name: str | None = None) -> FakeUnit:
        units = self.managers[role].units
        return units[name] if name is not None else next(iter(units.values()))

    def restarts(self) -> list[str]:
        """Every restart on every host, as role:unit (order across hosts is not meaningful)."""
        return [f"{role}:{u}" for role, m in self.managers.items() for u in m.restarts()]

    def refused(self) -> list[str]:
        return [cmd for t in self.transports.values() for cmd in t.refused]

    def states(self) -> dict[str, bool]:
        """role:unit -> running, for before/after comparisons."""
        return {f"{r}:{u}": m.state(u).is_active for r, m in self.managers.items() for u in m.units}


def make_bed(roles: Mapping[str, Role], name: str = "fakebed") -> FakeBed:
    """One FakeTransport + FakeServiceManager per role, the health client, and the Deployment."""
    transports, managers, hosts = {}, {}, {}
    for index, (role, spec) in enumerate(roles.items()):
        units = [u if isinstance(u, FakeUnit) else FakeUnit(u) for u in (spec.units or [f"{role}-server"])]
        host = _host(role, spec, [u.name for u in units], 30000 + index)
        transport = FakeTransport(host.label, {host.env_file: spec.env})
        transport.allow_file_commands()
        transport.script(re.compile(r"^fake-repro\b"), stdout=REPRO_OUTPUT)  # see remote_repro()
        transport.script(gpuinfo.COMMAND, stdout=gpuinfo.NO_NVIDIA_SMI + "\n")  # provenance: no GPU here
        for u in units:
            transport.script(
                ["systemctl", "show", "-p", "ExecStart", "--value", u.name],
                stdout=f"{{ path=/usr/bin/fake-server ; argv[]=/usr/bin/fake-server --unit {u.name} ; }}\n",
            )
        transports[role] = transport
        managers[role] = FakeServiceManager(transport, host.env_file, spec.dialect, units, host.label)
        hosts[role] = HostHandle(host, transport, managers[role])
    testbed = Testbed(name, "fakes", {r: h.host for r, h in hosts.items()}, None)
    deployment = Deployment(testbed, hosts)
    originals = {r: transports[r].files[hosts[r].host.env_file] for r in roles}
    return FakeBed(deployment, transports, managers, health_client(deployment, managers), originals)


def linked_decode_bed(original: bytes, real: str = "/etc/orch/real/decode.env", *, started: bool = True) -> FakeBed:
    """A bed whose decode env file is a symlink to `real`, holding `original` (teams link env files
    into place); `started`: its unit restarted once, so it runs on the linked file."""
    bed = make_bed({"decode": Role("", [FakeUnit("decode-server", active=True)])})
    t = bed.transports["decode"]
    t.files = {real: original}
    t.links[bed.env_file("decode")] = real
    if started:
        bed.managers["decode"].restart("decode-server")
    return bed


def _host(role: str, spec: Role, units: list[str], port: int) -> Host:
    address = f"{role}.fake"
    ssh = SshSettings(address, 22, "root", None, None, False, 10.0, False)
    url = f"http://{address}:{port}"
    return Host(
        role,
        "ssh",
        ssh,
        f"/etc/orch/{role}.env",
        spec.dialect,
        tuple(UnitSpec(u) for u in units),
        url,
        url + "/health",
        spec.health_timeout_s,
        0.1,
        spec.verify_env,
        tuple(spec.after),
    )


def health_client(deployment: Deployment, managers: Mapping[str, FakeServiceManager]) -> httpx.Client:
    """An httpx client whose every request is answered from the fake units' state, no sockets."""
    by_origin = {_origin(h.host.url): role for role, h in deployment.hosts.items()}

    def handler(request: httpx.Request) -> httpx.Response:
        role = by_origin.get(_origin(str(request.url)))
        if role is None:
            raise httpx.ConnectError(f"no fake host at {request.url}", request=request)
        manager = managers[role]
        units = list(manager.units)
        if not any(manager.running(u) for u in units):
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"version": "fake-1.0", "role": role})
        if all(manager.ready(u) for u in units):
            return httpx.Response(200, text="ok")
        return httpx.Response(503, text="loading")

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)


def _origin(url: str) -> str:
    parts = httpx.URL(url)
    return f"{parts.host}:{parts.port}"


# ============================================================================ matrix and plan
REPRO_OUTPUT = "score=0.5 events=3/10\n"
PY_REPRO = "{python} -c \"print('score=0.5 events=3/10')\""  # on the controller: a real process
METRICS = {
    "score": {"regex": r"score=(?P<value>[0-9.]+)"},
    "events": {"kind": "proportion", "regex": r"events=(?P<k>\d+)/(?P<n>\d+)"},
}


def remote_repro(role: str, command: str = "fake-repro --trial {trial}") -> dict[str, Any]:
    """A repro run on `role`'s host through its FakeTransport (every bed scripts `fake-repro`
    to print REPRO_OUTPUT; script it again to change that): no process at all."""
    return {"command": command, "on": role, "timeout": 30, "metrics": METRICS}


def make_matrix(
    factors: Mapping[str, Mapping[str, Any]],
    *,
    repro: str | Mapping[str, Any] = PY_REPRO,
    replicates: int = 1,
    order: str = "sequential",
    **extra: Any,
) -> Any:
    """A Matrix from the YAML shapes orch reads (as Python data), parsed the way files are."""
    repro_shape = {"command": repro, "timeout": 30, "metrics": METRICS} if isinstance(repro, str) else dict(repro)
    data = {
        "name": "fake",
        "factors": {k: dict(v) for k, v in factors.items()},
        "replicates": replicates,
        "order": order,
        "repro": repro_shape,
        **extra,
    }
    text = yaml.safe_dump(data, sort_keys=False)
    parsed, source = parse_yaml(text, "<fake matrix>")
    return build_matrix(validate_shape(MatrixShape, parsed, source), source, text)


def make_plan(bed: FakeBed, factors: Mapping[str, Mapping[str, Any]], *, seed: int = 1, **matrix: Any) -> Plan:
    """The plan of `factors` on the bed's testbed (sequential order unless told otherwise); the
    repro runs on the first role's fake host unless `repro=` says otherwise."""
    matrix.setdefault("repro", remote_repro(next(iter(bed.deployment.hosts))))
    return _make_plan(make_matrix(factors, **matrix), bed.deployment.testbed, seed=seed)


def flag(role: str, var: str, levels: Sequence[str] = ("0", "1")) -> dict[str, Any]:
    """A one-variable factor in the matrix short form: {env: {role: VAR}, levels: [...]}."""
    return {"env": {role: var}, "levels": list(levels)}


def runner_for(bed: FakeBed, plan: Plan, run_dir: Path, **options: Any) -> Any:
    """A Runner on the bed (fast retries: the fakes need no back-off)."""

    opts = {"run_id": "fake-run", "retry_backoff_s": 0.0, **options}
    return Runner(plan, bed.deployment, run_dir, RunOptions(**opts), client=bed.client)
