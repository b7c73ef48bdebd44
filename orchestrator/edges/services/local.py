"""LocalServiceManager: systemd-like units as child processes of orch (EDGE).

The embedded simulated deployment runs without root or systemd, so orch manages its servers
itself, imitating what matters of systemd: the env file is re-read at *every* start and parsed
in the unit's dialect (so an ``export`` line is ignored exactly as systemd would ignore it),
the process gets orch's own environment overlaid with the file's values, each unit runs in its
own session so stopping it kills its whole process group, and output is appended to one log per
unit with a marker line at each start.

A pid file per unit lets a later orch process (``orch restore`` after a crash) find and stop a
unit; the pid is trusted only if it is still the process orch started - the same start time
(``<unit>.start``, from /proc/PID/stat) and its own process group - so a recycled pid is never
killed. The start time, not /proc/PID/cmdline, because programs may retitle themselves (the real
sglang-router's cmdline reads ``sglang::router``); a pid file without one falls back to the
command line. ``stop_all`` (also registered with atexit) leaves no orphans.

logs_since() emulates ``journalctl --since``: the manager records (time, log size) checkpoints
at each start and each call it gets, and returns the log from the last checkpoint at or before
`since`. Lines are never lost; at worst a few idle lines written just before `since` come along.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shlex
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Literal, Mapping, NoReturn, Sequence

from orchestrator.core.bounded import describe_kind, read_bounded_bytes
from orchestrator.core.envfile import read_values
from orchestrator.core.noproxy import loopback_unproxied
from orchestrator.edges.identity import PortScan, UnitId, scan_here
from orchestrator.edges.interrupts import uninterrupted
from orchestrator.edges.services import LOG_CUT, UnitState
from orchestrator.edges.transport import Transport
from orchestrator.errors import ConfigError, OrchError, ServiceError

STOP_TIMEOUT_S = 5.0
ROTATE_BYTES = 64 * 1024 * 1024  # a log this large is moved to <unit>.log.1 at the next start
MAX_CHECKPOINTS = 100_000
MAX_RECORD_BYTES = 64  # a pid or a start time, in digits
TAIL_BYTES = 4000  # log tail attached to a ServiceError
STATUS_EXEC = 203  # systemd's exit status when the command cannot be executed
# exits systemd counts as clean (not "failed"): code 0 and death by SIGHUP/INT/TERM/PIPE
CLEAN_EXITS = frozenset({0, -signal.SIGHUP, -signal.SIGINT, -signal.SIGTERM, -signal.SIGPIPE})


@dataclass(frozen=True)
class LocalUnit:
    """A unit as systemd would describe it: ExecStart (argv), EnvironmentFile=, WorkingDirectory=.
    dialect "shell" stands for a unit whose wrapper script sources the file (``set -a; .``)."""

    name: str
    command: tuple[str, ...]
    env_file: Path
    dialect: Literal["systemd", "shell"] = "systemd"
    cwd: Path | None = None
    host: str = ""  # the inventory host running it ("decode (local)"), named in its errors


@dataclass
class _Runtime:
    """Mutable bookkeeping of one unit (internal to the manager)."""

    proc: subprocess.Popen[bytes] | None = None
    started_at: float | None = None
    stopped_by_us: bool = False
    start_failure: str = ""  # why the last start never ran (env file, exec)
    start_status: int | None = None  # its systemd-like exit status (1, 203)
    result: str = ""  # systemd Result= of a start failure ("resources", "exit-code")
    n_starts: int = 0
    n_restarts: int = 0
    checkpoints: list[tuple[float, int]] = field(default_factory=list)  # (epoch, log size)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def begin_start(self, when: float) -> None:
        self.proc, self.started_at, self.stopped_by_us = None, when, False
        self.start_failure, self.start_status, self.result = "", None, ""
        self.n_starts += 1

    def exit_code(self) -> int | None:
        if self.start_status is not None:
            return self.start_status
        return self.proc.returncode if self.proc is not None else None

    def offset_at(self, t: float) -> int:
        """Log size at the last checkpoint at or before t (0 before the first)."""
        offset = 0
        for when, size in self.checkpoints:
            if when > t:
                break
            offset = size
        return offset


class LocalServiceManager:
    """Implements orchestrator.edges.services.ServiceManager for local child processes."""

    def __init__(self, units: Mapping[str, LocalUnit], state_dir: Path, host: str = "local") -> None:
        self.units = dict(units)
        self.state_dir = Path(state_dir)
        self.host = host
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._rt = {name: _Runtime() for name in self.units}
        self._children: list[subprocess.Popen[bytes]] = []  # every process we started
        now = time.time()
        for name in self.units:  # offsets before this moment belong to earlier runs
            self._rt[name].checkpoints.append((now, self._log_size(name)))
        atexit.register(self.stop_all)

    # ---------------------------------------------------------------- paths
    def log_path(self, unit: str) -> Path:
        return self.state_dir / f"{unit}.log"

    def pid_path(self, unit: str) -> Path:
        return self.state_dir / f"{unit}.pid"

    def start_path(self, unit: str) -> Path:
        return self.state_dir / f"{unit}.start"

    # ---------------------------------------------------------------- protocol
    def unusable(self, unit: str) -> str | None:
        return None if unit in self.units else "not found"

    def state(self, unit: str) -> UnitState:
        rt = self._runtime(unit)
        with rt.lock:
            self._checkpoint(unit)
            pid = self._live_pid(unit)
            if pid is not None:
                return UnitState(unit, "active", "running", pid, rt.n_restarts, rt.started_at, "success")
            code = rt.exit_code()
            if code is not None and code not in CLEAN_EXITS and not rt.stopped_by_us:
                result = rt.result or _result_of(code)
                return UnitState(unit, "failed", "failed", None, rt.n_restarts, rt.started_at, result)
            return UnitState(unit, "inactive", "dead", None, rt.n_restarts, rt.started_at, "success")

    def restart(self, unit: str) -> float:
        """Stop (if running), then start with the env file as it is now; return the start time."""
        rt = self._runtime(unit)
        with rt.lock:
            was_started = rt.n_starts > 0 or self._live_pid(unit) is not None
            self._stop(unit)
            if was_started:
                rt.n_restarts += 1
            return self._start(unit)

    def stop(self, unit: str) -> None:
        rt = self._runtime(unit)
        with rt.lock:
            self._stop(unit)

    def check_alive(self, unit: str, since: float) -> None:
        """Raise ServiceError at once if the unit is not running (exit code and log tail)."""
        rt = self._runtime(unit)
        with rt.lock:
            self._checkpoint(unit)
            if self._live_pid(unit) is not None:
                return
            code = rt.exit_code()
            if rt.stopped_by_us:
                why = "is not running (stopped)"
            elif rt.start_failure:
                why = rt.start_failure
            elif code is None:
                why = "is not running (never started)"
            else:
                why = _describe_exit(code)
            raise ServiceError(self._host_of(unit), unit, why, detail=self._tail(unit))

    def logs_since(self, unit: str, since: float, max_bytes: int = 256_000) -> str:
        rt = self._runtime(unit)
        with rt.lock:
            offset = rt.offset_at(since)
            self._checkpoint(unit)
        return self._read_log(unit, offset, max_bytes)

    def env_files(self, unit: str, path: str) -> tuple[bool, list[str]] | None:
        return None  # a local unit gets its env file and nothing else

    def environ(self, unit: str) -> dict[str, str] | None:
        pid = self._live_pid(unit)
        if pid is None:
            return None
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None
        pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
        return {k.decode(errors="surrogateescape"): v.decode(errors="surrogateescape") for k, _, v in pairs}

    def restart_with_file(
        self, unit: str, transport: Transport, path: str, data: bytes, *, expect: bytes | None = None
    ) -> float:
        """The write, then the restart (no round trip to save here)."""
        transport.write_bytes_atomic(path, data, expect=expect)
        return self.restart(unit)

    def logs_and_ids(
        self, units: Sequence[str], since: float, max_bytes: int = 256_000
    ) -> tuple[dict[str, str], dict[str, UnitId]]:
        """Both read in-process (there is no round trip to save here)."""
        return {u: self.logs_since(u, since, max_bytes) for u in units}, self.unit_ids(units)

    def unit_ids(self, units: Sequence[str]) -> dict[str, UnitId]:
        """The pid each unit runs now and its start count (the invocation id), read in-process."""
        ids = {}
        for unit in units:
            rt = self._runtime(unit)
            with rt.lock:
                ids[unit] = UnitId(unit, self._live_pid(unit), str(rt.n_starts))
        return ids

    def port_scan(self, ports: Sequence[int], units: Sequence[str]) -> tuple[PortScan, dict[str, UnitId]]:
        """Who listens on `ports` on this machine, and the units' ids: read in-process, the
        units' own processes first (edges.identity.scan_here)."""
        ids = self.unit_ids(units)
        return scan_here(ports, [i.main_pid for i in ids.values() if i.main_pid]), ids

    def stop_all(self) -> None:
        """Stop every process this manager started. Takes no locks and raises nothing, so it is
        safe from a signal handler or atexit, even while another call is in progress."""
        alive = [p for p in self._children if p.poll() is None]
        for proc in alive:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in alive:  # only groups that existed a moment ago: a pid is never reused blind
            _signal_group(proc.pid, signal.SIGKILL)  # stragglers, and children of dead leaders
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)
        for name, rt in self._rt.items():
            if rt.proc is not None and rt.proc in alive:
                rt.stopped_by_us = True
                self._forget_pid(name)

    # ---------------------------------------------------------------- start / stop
    def _start(self, unit: str) -> float:
        spec, rt = self.units[unit], self._rt[unit]
        started = time.time()
        rt.begin_start(started)
        env = self._environment(unit, spec)
        self._rotate_if_large(unit)
        rt.checkpoints.append((started, self._log_size(unit)))
        try:
            log = _open_log(self.log_path(unit), append=True)
        except OSError as exc:  # (a FIFO there: _open_log)
            self._start_failed(unit, 1, "resources", f"cannot open its log {self.log_path(unit)}: {exc.strerror}", exc)
        with log:
            with uninterrupted():  # started => tracked
                try:
                    proc = subprocess.Popen(
                        spec.command,
                        env=env,
                        cwd=spec.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # own process group: stop() kills all of it
                    )
                except (OSError, ValueError) as exc:
                    # what systemd reports when ExecStart= cannot be executed
                    why = f"failed to start (status {STATUS_EXEC}/EXEC): {shlex.join(spec.command)}: {exc}"
                    self._start_failed(unit, STATUS_EXEC, "exit-code", why, exc)
                self._children.append(proc)
                rt.proc = proc
                self._write_pid(unit, proc.pid)
            stamp = datetime.fromtimestamp(started, timezone.utc).isoformat()
            # written after Popen so it can name the pid; the byte offset recorded above, not this
            # marker, is what delimits one run's output from the next
            log.write(f"-- started {unit} pid={proc.pid} at {stamp}\n".encode())
        return started

    def _write_pid(self, unit: str, pid: int) -> None:
        """The pid file, and the start time that proves a later reader is looking at our process."""
        self.pid_path(unit).write_text(f"{pid}\n")
        with contextlib.suppress(OSError):  # the process exists since Popen returned: its start time is fixed
            self.start_path(unit).write_text(f"{_start_ticks(pid)}\n")

    def _start_failed(self, unit: str, status: int, result: str, why: str, exc: Exception) -> NoReturn:
        rt = self._rt[unit]
        rt.start_status, rt.result, rt.start_failure = status, result, why
        with contextlib.suppress(OSError), _open_log(self.log_path(unit), append=True) as log:
            log.write(f"-- {why}\n".encode())
        raise ServiceError(self._host_of(unit), unit, why) from exc

    def _environment(self, unit: str, spec: LocalUnit) -> dict[str, str]:
        """orch's environment overlaid with the file's values, read now (like every start)."""
        try:
            text = spec.env_file.read_bytes().decode("utf-8", errors="surrogateescape")
            values = read_values(text, spec.dialect)
        except (OSError, OrchError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) else str(exc)
            why = f"failed to load environment file {spec.env_file}: {detail}"
            self._start_failed(unit, 1, "resources", why, exc)
        # the mark lets a later manager find this process even if its pid file was never written
        # (the controller killed -9 between fork and _write_pid): see _find_marked
        return loopback_unproxied({**os.environ, **values, UNIT_MARK: self._mark(unit)})  # core.noproxy

    def _mark(self, unit: str) -> str:
        return f"{self.state_dir.resolve()}/{unit}"

    def _stop(self, unit: str) -> None:
        rt = self._rt[unit]
        pid = self._live_pid(unit)
        if pid is not None:
            _signal_group(pid, signal.SIGTERM)
            if not self._wait_gone(rt, pid, STOP_TIMEOUT_S):
                _signal_group(pid, signal.SIGKILL)
                self._wait_gone(rt, pid, STOP_TIMEOUT_S)
            _signal_group(pid, signal.SIGKILL)  # children that outlived the leader
            rt.stopped_by_us = True
        self._forget_pid(unit)

    def _forget_pid(self, unit: str) -> None:
        for path in (self.pid_path(unit), self.start_path(unit)):
            with contextlib.suppress(OSError):
                path.unlink()

    @staticmethod
    def _wait_gone(rt: _Runtime, pid: int, timeout: float) -> bool:
        if rt.proc is not None and rt.proc.pid == pid:
            try:
                rt.proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout  # not our child (adopted): poll /proc
        while time.monotonic() < deadline:
            if not _pid_running(pid):
                return True
            time.sleep(0.01)
        return False

    # ---------------------------------------------------------------- process lookup
    def _live_pid(self, unit: str) -> int | None:
        """Our child if it runs; else a process from the pid file that is provably this unit."""
        rt = self._rt[unit]
        if rt.proc is not None:
            return rt.proc.pid if rt.proc.poll() is None else None
        try:
            pid: int | None = int(_record_text(self.pid_path(unit)))
        except ValueError:
            pid = None
        if pid is not None and self._is_unit_process(unit, pid):
            return pid
        found = self._find_marked(unit)  # started, but its pid file never written: adopt it
        if found is not None:
            self._write_pid(unit, found)
        return found

    def _find_marked(self, unit: str) -> int | None:
        """A running process group leader whose environment carries this unit's mark (set at every
        start): the unit, started by a controller that died before it could write the pid file.
        Looked for only by a manager that did not start the unit itself (a resume, a restore)."""
        mark = f"{UNIT_MARK}={self._mark(unit)}".encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                if os.getpgid(pid) != pid or mark not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    continue
            except OSError:
                continue
            if _pid_running(pid):
                return pid
        return None

    def _is_unit_process(self, unit: str, pid: int) -> bool:
        started = _record_text(self.start_path(unit))
        try:
            if started:
                same = started == str(_start_ticks(pid))
            else:  # a pid file from before start times were kept: the command line must match
                argv = tuple(a.decode(errors="surrogateescape") for a in _cmdline(pid).split(b"\0")[:-1])
                same = argv == self.units[unit].command
            return same and os.getpgid(pid) == pid and _pid_running(pid)
        except (OSError, ValueError, IndexError):
            return False

    def _host_of(self, unit: str) -> str:
        """The host a unit's error names: its inventory host, as every other message about that
        host does, where the manager's own name ("local") serves all of a testbed's local hosts."""
        spec = self.units.get(unit)
        return spec.host if spec is not None and spec.host else self.host

    # ---------------------------------------------------------------- logs
    def _runtime(self, unit: str) -> _Runtime:
        if unit not in self._rt:
            raise ServiceError(self._host_of(unit), unit, "unknown unit", detail=f"known: {', '.join(self.units)}")
        return self._rt[unit]

    def _log_size(self, unit: str) -> int:
        try:
            return self.log_path(unit).stat().st_size
        except OSError:
            return 0

    def _checkpoint(self, unit: str) -> None:
        """Remember the log size now; only sizes that changed are kept (the earliest time of a
        size is what logs_since needs)."""
        points, size = self._rt[unit].checkpoints, self._log_size(unit)
        if not points or points[-1][1] != size:
            points.append((time.time(), size))
            if len(points) > MAX_CHECKPOINTS:
                del points[: MAX_CHECKPOINTS // 2]

    def _rotate_if_large(self, unit: str) -> None:
        path = self.log_path(unit)
        if self._log_size(unit) > ROTATE_BYTES:
            os.replace(path, path.with_suffix(".log.1"))
            self._rt[unit].checkpoints = [(time.time(), 0)]

    def _read_log(self, unit: str, offset: int, max_bytes: int) -> str:
        try:
            with _open_log(self.log_path(unit), append=False) as f:
                end = f.seek(0, os.SEEK_END)
                start = max(offset, end - max_bytes) if end >= offset else 0
                f.seek(start)
                data = f.read(end - start)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            why = f"cannot read log {self.log_path(unit)}: {exc.strerror}"
            raise ServiceError(self._host_of(unit), unit, why) from exc
        text = data.decode("utf-8", errors="replace")
        if start > offset:
            text = f"{LOG_CUT}: {start - offset} earlier bytes omitted)\n{text}"
        return text

    def _tail(self, unit: str) -> str:
        rt = self._rt[unit]
        return self._read_log(unit, rt.offset_at(rt.started_at or 0.0), TAIL_BYTES)


def _open_log(path: Path, *, append: bool) -> BinaryIO:
    """A unit's log, opened to append (created if missing) or to read, never blocking: the
    state_dir is the inventory's, and a FIFO named <unit>.log there blocked open() for ever (to
    append: until a reader came; to read: until a writer did), hanging every restart and every
    log tail. O_NONBLOCK makes open() return at once (or fail with ENXIO: a FIFO nobody reads),
    anything but a regular file is refused (OSError, its strerror saying what it is), and the flag
    is cleared again on the file, whose fd a unit's process inherits as its output."""
    flags = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    flags |= os.O_WRONLY | os.O_APPEND | os.O_CREAT if append else os.O_RDONLY
    try:
        fd = os.open(path, flags, 0o666)  # as open(path, "ab"): the umask decides
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO (or a socket) without a reader
            raise OSError(errno.ENXIO, "not a regular file (a FIFO or a socket)", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"not a regular file ({describe_kind(mode)})", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab" if append else "rb")


def _cmdline(pid: int) -> bytes:
    """/proc/PID/cmdline; it reads empty for a moment while a just-spawned process is still
    inside execve(), so wait briefly for it rather than declare the pid a stranger."""
    deadline = time.monotonic() + 0.5
    while True:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if cmdline or time.monotonic() > deadline or not _pid_running(pid):
            return cmdline
        time.sleep(0.005)


UNIT_MARK = "ORCH_LOCAL_UNIT"  # in every unit's environment: state dir/unit name (LocalServiceManager._find_marked)


def _start_ticks(pid: int) -> int:
    """When the process started (clock ticks since boot: /proc/PID/stat field 22); a pid that is
    reused later belongs to a process with another start time."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _record_text(path: Path) -> str:
    """A pid or start-time file's text; "" when it is missing, not a regular file or not small.
    Bounded and non-blocking (core.bounded): the state_dir is the inventory's, and a FIFO there
    blocked read_text() for ever in every state() a restore or resume asks."""
    try:
        return read_bounded_bytes(path, MAX_RECORD_BYTES).decode("ascii", errors="replace").strip()
    except ConfigError:
        return ""


def _pid_running(pid: int) -> bool:
    """True for a live process; False for none or a zombie (dead, waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split(" ", 1)[0] != "Z"


def _result_of(code: int) -> str:
    return "signal" if code < 0 else "exit-code"


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"
