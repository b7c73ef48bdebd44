"""SystemdManager: systemctl and journalctl on one host, through a Transport (EDGE).

Every operation is one remote command (a round trip is ~5-10 ms on an open SSH connection,
so this is what keeps orch's per-trial overhead small); what the answers mean is decided by
the pure functions at the bottom, which the tests exercise without a host.

Facts this relies on (checked on systemd 252 in the testbed):
- `systemctl show -p A,B UNIT...` prints one key=value block per unit, in argument order, and
  exits 0 even for a unit that does not exist (LoadState=not-found).
- `systemctl restart` of a Type=exec unit returns once the binary is exec'd; a Type=notify
  unit blocks until READY=1, which may take minutes, so the client is bounded with `timeout`
  (the job itself keeps going; the health wait and check_alive take over).
- The default start limit (5 starts in 10 s) trips on fast sweeps (Result=start-limit-hit,
  the unit stays down). `systemctl reset-failed` clears it and the failed state.
- All "since" times are the HOST's clock (`date +%s.%N` there), because journalctl filters
  on it and the controller's clock may differ.
"""

from __future__ import annotations

import base64
import secrets
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from orchestrator.edges.identity import UNIT_PROPS, PortScan, UnitId, parse_units, scan
from orchestrator.edges.services import LOG_CUT, UnitState
from orchestrator.edges.transport import Result, Transport
from orchestrator.errors import CommandFailed, ServiceError

SHOW_PROPS = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "MainPID",
    "NRestarts",
    "ExecMainStartTimestamp",
    "ExecMainStatus",
    "Result",
)
# Processes that stay alive as the unit's MainPID while the real server runs as their child.
# (A wrapper that `exec`s leaves no trace: MainPID is then the server itself.)
WRAPPERS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "busybox",
        "sudo",
        "su",
        "runuser",
        "timeout",
        "tini",
        "dumb-init",
        "catatonit",
    }
)
MAX_PROCS = 64  # environ(): how many processes of a unit's tree to look at, at most

# environ(): MainPID, then the unit's process tree breadth-first, one line per process:
# proc|PID|base64(comm)|base64(environ)|CHILD CHILD ...|base64(exe)   (noaccess|PID when unreadable)
# exe (the executable's path): a script run through its shebang has the script's name as comm
# ("start-decode") but its interpreter as exe (/usr/bin/bash), and is a wrapper all the same.
# A unit systemd knows no MainPID of (Type=forking with GuessMainPID=no, a oneshot that left its
# server running) stands for its oldest process: the lowest pid of its cgroup (cgroup.procs,
# under the v2, hybrid or v1 name=systemd mount).
_TREE_SCRIPT = r"""
u=$1; lim=$2; m=0; g=""
s=$(systemctl show -p MainPID,ControlGroup -- "$u") || exit 3
while IFS='=' read -r k v; do case $k in MainPID) m=$v;; ControlGroup) g=$v;; esac; done <<EOF
$s
EOF
if [ "${m:-0}" = 0 ] && [ -n "$g" ] && [ "$g" != / ]; then
  for f in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
    [ -r "$f$g/cgroup.procs" ] || continue
    while read -r p; do if [ "$m" = 0 ] || [ "$p" -lt "$m" ]; then m=$p; fi; done < "$f$g/cgroup.procs"
    break
  done
fi
echo "main|$m"
[ "${m:-0}" -gt 0 ] 2>/dev/null || exit 0
q=$m; n=0
while [ "$n" -lt "$lim" ]; do
  set -- $q; [ $# -gt 0 ] || break; p=$1; shift; q=$*; n=$((n+1))
  [ -e "/proc/$p" ] || continue
  # unreadable: denied, or the process exited since (a unit crash-looping): only the first is said
  if ! e=$(base64 -w0 < "/proc/$p/environ" 2>/dev/null); then [ ! -e "/proc/$p" ] || echo "noaccess|$p"; continue; fi
  c=$(base64 -w0 < "/proc/$p/comm" 2>/dev/null) || continue
  k=$(cat /proc/$p/task/*/children 2>/dev/null | tr -s ' \n' '  ')
  x=$(readlink "/proc/$p/exe" 2>/dev/null | base64 -w0)
  echo "proc|$p|$c|$e|$k|$x"
  q="$q $k"
done
"""


@dataclass(frozen=True)
class ShowInfo:
    """One unit's `systemctl show` block: UnitState plus what only this module needs."""

    state: UnitState
    load_state: str
    exec_main_status: int | None


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    environ: bytes
    children: tuple[int, ...]
    exe: str = ""  # the executable's path ("" unknown)

    @property
    def is_wrapper(self) -> bool:
        return self.comm in WRAPPERS or self.exe.rsplit("/", 1)[-1] in WRAPPERS


class SystemdManager:
    """Implements orchestrator.edges.services.ServiceManager with systemctl/journalctl."""

    def __init__(
        self,
        transport: Transport,
        host: str,
        *,
        sudo: bool = False,
        restart_timeout_s: float = 90.0,
        command_timeout_s: float = 30.0,
    ) -> None:
        self.transport, self.host, self.sudo = transport, host, sudo
        self.restart_timeout_s, self.command_timeout_s = restart_timeout_s, command_timeout_s
        self._timestamp_flag = True  # until an old systemctl rejects --timestamp=

    # ---------------------------------------------------------------- queries
    def unusable(self, unit: str) -> str | None:
        info = self.show([unit])[0]
        return "not found" if info.load_state == "not-found" else _load_problem(info)

    def state(self, unit: str) -> UnitState:
        return self.show([unit])[0].state

    def show(self, units: Sequence[str]) -> list[ShowInfo]:
        """All units' state in ONE systemctl call. Timestamps come in UTC with microseconds
        (--timestamp=us+utc, systemd >= 247); older systemd prints local time, which we do not
        guess at: started_at is then None."""
        props = ["-p", ",".join(SHOW_PROPS), "--", *units]
        if self._timestamp_flag:
            res = self._run(["systemctl", "show", "--timestamp=us+utc", *props], check=False)
            if res.exit_code == 0:
                return self._parse_show(res.stdout, units)
            if "timestamp" not in res.stderr:
                raise CommandFailed(self.host, res.command, res.exit_code, res.stdout, res.stderr)
            self._timestamp_flag = False
        return self._parse_show(self._run(["systemctl", "show", *props], check=True).stdout, units)

    def _parse_show(self, text: str, units: Sequence[str]) -> list[ShowInfo]:
        try:
            return parse_show(text, units)
        except ValueError as exc:
            raise ServiceError(self.host, ", ".join(units), f"unexpected `systemctl show` output: {exc}") from exc

    def now(self) -> float:
        """The host's clock (epoch seconds); journal filters use it."""
        return float(self._run(["date", "+%s.%N"], check=True).stdout.strip())

    # ---------------------------------------------------------------- actions
    def restart(self, unit: str) -> float:
        """(Re)start so the unit re-reads its env file; return the host time just before."""
        return self.restart_many([unit])

    def restart_with_file(
        self, unit: str, transport: Transport, path: str, data: bytes, *, expect: bytes | None = None
    ) -> float:
        """Write the unit's env file, then restart it: ONE round trip when the file is on this
        manager's own host connection (a trial that changes one file saves a round trip; the
        restart runs only once the write went through), else the write, then restart()."""
        if transport is not self.transport:
            transport.write_bytes_atomic(path, data, expect=expect)
            return self.restart(unit)
        return self.restart_many([unit], write=(path, data), expect=expect)

    def restart_many(
        self, units: Sequence[str], write: tuple[str, bytes] | None = None, *, expect: bytes | None = None
    ) -> float:
        """Restart independent units in ONE round trip (systemd runs the jobs in parallel).

        `systemctl reset-failed` goes first, always: it clears a failed state and a
        start-limit-hit (so a fast sweep never trips the start limit with its own restarts)
        and it zeroes NRestarts, which a plain restart does NOT do (checked on systemd 252: a
        unit restarted while in auto-restart keeps counting). check_alive relies on that.
        `write` (path, bytes): that file is written atomically first, in the same round trip (only
        if it holds `expect`, when given: Transport.write_bytes_atomic)."""
        since, code, out = self._restart_call(units, write, expect)
        if code == 0:
            return since
        infos = self.show(units)
        self._require_loaded(infos)
        if code != 124:
            raise self._restart_failed(infos, out, since)
        # The client was bounded but the job runs on (e.g. a Type=notify unit warming up).
        for info in infos:
            problem = liveness_problem(info)
            if problem is not None:
                raise ServiceError(self.host, info.state.unit, problem, detail=self._tail(info.state.unit, since))
        return since

    def stop(self, unit: str) -> None:
        res = self._run(["systemctl", "stop", "--", unit], check=False, timeout=self.restart_timeout_s)
        if res.exit_code != 0:
            raise ServiceError(self.host, unit, f"cannot stop: {_last_line(res.stderr or res.stdout)}")

    def reset_failed(self, unit: str) -> None:
        self._run(["systemctl", "reset-failed", "--", unit], check=False)

    # ---------------------------------------------------------------- liveness and logs
    def check_alive(self, unit: str, since: float) -> None:
        """Raise ServiceError (with the journal tail) if the unit failed, crash-loops, hit the
        start limit, or is not running any more; cheap enough to call between health polls."""
        info = self.show([unit])[0]
        problem = liveness_problem(info)
        if problem is not None:
            raise ServiceError(self.host, unit, problem, detail=self._tail(unit, since))

    def logs_since(self, unit: str, since: float, max_bytes: int = 256_000) -> str:
        """The unit's journal lines since `since` (host epoch), the last max_bytes of them."""
        return _whole_lines(self._run(_journal_command(unit, since, max_bytes), check=True).stdout, max_bytes)

    def logs_and_ids(
        self, units: Sequence[str], since: float, max_bytes: int = 256_000
    ) -> tuple[dict[str, str], dict[str, UnitId]]:
        """Each unit's journal and the units' ids (`systemctl show`) in ONE command: the post-repro
        identity check rides on the log collection's round trip. The journals are read in a
        background subshell while systemctl answers (the command takes the longer of the two, not
        their sum); each is followed by a line with a fresh random marker, which no log line can
        guess, and the ids come last."""
        marker = f"--orch-{secrets.token_hex(16)}--"
        journals = "; ".join(f"{_journal_command(unit, since, max_bytes)}; echo {marker}" for unit in units)
        q = " ".join(shlex.quote(u) for u in units)
        show = f"s=$(systemctl show -p {UNIT_PROPS} -- {q}) || {{ wait; exit 3; }}"
        out = self._run(f"( {journals} ) & {show}; wait; printf '%s\\n' \"$s\"", check=True).stdout
        *logs, ids = out.split(f"{marker}\n")
        if len(logs) != len(units):
            got = f"{len(logs)} parts, not {len(units)}"
            raise ServiceError(self.host, ", ".join(units), f"unexpected output of the journal command ({got})")
        return {u: _whole_lines(text, max_bytes) for u, text in zip(units, logs, strict=True)}, parse_units(ids, units)

    def env_files(self, unit: str, path: str) -> tuple[bool, list[str]] | None:
        res = self._run(["sh", "-c", _ENV_FILES_SCRIPT, "orch-env-files", unit, path], check=True)
        lines = res.stdout.splitlines()
        return any(line.startswith("same ") for line in lines), [line[5:] for line in lines if line[4:5] == " "]

    def environ(self, unit: str) -> dict[str, str] | None:
        """The live server's environment, from /proc/PID/environ. MainPID (without one: the
        unit's oldest process in its cgroup) is followed down through wrapper processes that
        stay alive (a shell that does not `exec`, sudo, timeout, tini...) to its deepest wrapped
        child, the first child at each level: that is the process that got what the wrapper
        sourced. None if the unit has no process."""
        res = self._run(["sh", "-c", _TREE_SCRIPT, "orch-environ", unit, str(MAX_PROCS)], check=True)
        main, procs, denied = parse_tree(res.stdout)
        if main is None or main <= 0:
            return None
        chosen = pick_server(procs, main)
        if chosen is None:
            if denied:
                raise ServiceError(
                    self.host,
                    unit,
                    f"cannot read /proc/{denied[0]}/environ: permission denied (connect as root or set sudo: true)",
                )
            return None
        return parse_environ(chosen.environ)

    # ---------------------------------------------------------------- identity
    def unit_ids(self, units: Sequence[str]) -> dict[str, UnitId]:
        """MainPID, InvocationID (new at every start) and cgroup of each unit, in one `systemctl show`."""
        res = self._run(["systemctl", "show", "-p", UNIT_PROPS, "--", *units], check=True)
        return parse_units(res.stdout, units)

    def port_scan(self, ports: Sequence[int], units: Sequence[str]) -> tuple[PortScan, dict[str, UnitId]]:
        """Who listens on `ports`, and the units' ids, in one round trip (edges.identity)."""
        return scan(self.transport, ports, units, sudo=self.sudo, timeout=self.command_timeout_s)

    # ---------------------------------------------------------------- internals
    def _run(self, command: str | Sequence[str], *, check: bool, timeout: float | None = None) -> Result:
        return self.transport.run(command, check=check, sudo=self.sudo, timeout=timeout or self.command_timeout_s)

    def _restart_call(
        self, units: Sequence[str], write: tuple[str, bytes] | None = None, expect: bytes | None = None
    ) -> tuple[float, int, str]:
        """(write;) reset-failed; host time; bounded restart -> (host time, exit code, output)."""
        q = " ".join(shlex.quote(u) for u in units)
        t = f"{self.restart_timeout_s:g}"
        cmd = f"systemctl reset-failed -- {q} 2>/dev/null; date +%s.%N && timeout {t} systemctl restart -- {q} 2>&1"
        if write is None:
            res = self._run(cmd, check=False, timeout=self.restart_timeout_s + 15)
        else:
            res = self.transport.write_then_run(
                write[0], write[1], cmd, timeout=self.restart_timeout_s + 15, expect=expect
            )
        first, _, rest = res.stdout.partition("\n")
        try:
            since = float(first)
        except ValueError:
            raise ServiceError(
                self.host, " ".join(units), f"cannot restart: {_last_line(res.stderr or res.stdout)}"
            ) from None
        return since, res.exit_code, rest

    def _require_loaded(self, infos: Sequence[ShowInfo]) -> None:
        for i in infos:
            if i.load_state == "not-found":
                raise ServiceError(
                    self.host, i.state.unit, "not found on the host (check `units:`; `systemctl list-unit-files` there)"
                )
            problem = _load_problem(i)
            if problem is not None:
                raise ServiceError(self.host, i.state.unit, problem)

    def _restart_failed(self, infos: Sequence[ShowInfo], out: str, since: float) -> ServiceError:
        bad = next((i for i in infos if liveness_problem(i) is not None), infos[0])
        why = liveness_problem(bad) or f"restart failed: {_last_line(out)}"
        return ServiceError(self.host, bad.state.unit, why, detail=self._tail(bad.state.unit, since))

    def _tail(self, unit: str, since: float, lines: int = 40) -> str:
        try:
            text = self.logs_since(unit, since, max_bytes=16_000)
        except Exception as exc:  # noqa: BLE001 - the tail is a courtesy; keep the real error
            return f"(journal unavailable: {exc})"
        return "\n".join(text.splitlines()[-lines:])


# -------------------------------------------------------------------- pure helpers
# The unit's EnvironmentFile= files ($1), each `same PATH` when it is the inventory's env file ($2)
# or a link to that file (-ef: the same inode), else `othr PATH`. systemctl shows one
# `PATH (ignore_errors=yes|no)` line each; a `-` prefix is shown as ignore_errors=yes.
_ENV_FILES_SCRIPT = r"""
systemctl show -p EnvironmentFiles --value -- "$1" | while IFS= read -r l; do
  f=${l% (ignore_errors=*)}
  [ -n "$f" ] || continue
  if [ "$f" = "$2" ] || [ "$f" -ef "$2" ]; then echo "same $f"; else echo "othr $f"; fi
done
"""


def _load_problem(info: ShowInfo) -> str | None:
    """Why systemd would refuse to start a unit it found: masked (a running one keeps running, but
    `systemctl restart` is refused), or a unit file it cannot load."""
    if info.load_state == "masked":
        return "is masked (systemctl unmask it first)"
    if info.load_state not in ("loaded", "", "not-found"):
        return f"cannot be loaded (LoadState={info.load_state}; see systemctl status)"
    return None


def _journal_command(unit: str, since: float, max_bytes: int) -> str:
    return (
        f"journalctl -q --unit={shlex.quote(unit)} --since @{since:.6f} --no-pager -o short-iso"
        f" | tail -c {int(max_bytes)}"
    )


def _whole_lines(text: str, max_bytes: int) -> str:
    """A journal tail without the first line when `tail -c` cut it, saying so in a first line of
    its own (as the local service manager does: a collector must know it counts only the end)."""
    if len(text.encode()) >= max_bytes and "\n" in text:
        return f"{LOG_CUT}: earlier lines omitted)\n" + text.split("\n", 1)[1]
    return text


def parse_show(text: str, units: Sequence[str]) -> list[ShowInfo]:
    """Blocks of key=value, one per unit, in the order asked (systemctl keeps it)."""
    blocks = [b for b in text.strip("\n").split("\n\n") if b.strip()] if text.strip() else []
    if len(blocks) != len(units):
        raise ValueError(f"expected {len(units)} blocks from systemctl show, got {len(blocks)}")
    return [_show_info(unit, _kv(block)) for unit, block in zip(units, blocks, strict=True)]


def _kv(block: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in block.splitlines() if "=" in line)


def _show_info(unit: str, kv: dict[str, str]) -> ShowInfo:
    state = UnitState(
        unit=unit,
        active_state=kv.get("ActiveState", ""),
        sub_state=kv.get("SubState", ""),
        main_pid=_int(kv.get("MainPID")) or None,
        n_restarts=_int(kv.get("NRestarts")) or 0,
        started_at=parse_timestamp(kv.get("ExecMainStartTimestamp", "")),
        result=kv.get("Result", ""),
    )
    return ShowInfo(state, kv.get("LoadState", ""), _int(kv.get("ExecMainStatus")))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "", "[not set]") else None
    except ValueError:
        return None


def parse_timestamp(value: str) -> float | None:
    """`Mon 2026-11-30 05:01:08.123456 UTC` (--timestamp=us+utc) -> epoch seconds."""
    parts = value.split()
    if len(parts) != 4 or parts[3] != "UTC":
        return None
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in parts[2] else "%Y-%m-%d %H:%M:%S"
    try:
        dt = datetime.strptime(f"{parts[1]} {parts[2]}", fmt).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return dt.timestamp()


def liveness_problem(info: ShowInfo) -> str | None:
    """Why a unit that orch just (re)started is not on its way up, or None if it is."""
    s = info.state
    status = f" (exit status {info.exec_main_status})" if info.exec_main_status else ""
    if info.load_state == "not-found":
        return "not found on the host (check `units:`)"
    if s.result == "start-limit-hit":
        return (
            "stopped by systemd's start limit (start-limit-hit): it crash-looped or was restarted "
            "too often (orch runs `systemctl reset-failed` before its next restart)"
        )
    if s.active_state == "failed":
        return f"failed: {s.result or 'unknown reason'}{status}"
    if s.sub_state == "auto-restart" or s.n_restarts > 0:
        # one wording, seen mid-restart or running again: one crash loop is one reason in the
        # sweep's failure lines (they group by the words, numbers aside); the journal tail under
        # it says how the process exited
        restart = s.n_restarts + (s.sub_state == "auto-restart")
        return f"crash-looping: its process exited and systemd restarts it (restart #{restart} since orch started it)"
    if s.active_state in ("inactive", "deactivating"):
        return f"not running ({s.active_state}/{s.sub_state}: it exited{status} or was stopped)"
    return None


def parse_tree(text: str) -> tuple[int | None, dict[int, ProcInfo], list[int]]:
    """Output of _TREE_SCRIPT -> (MainPID, processes by pid, pids whose environ was denied)."""
    main: int | None = None
    procs: dict[int, ProcInfo] = {}
    denied: list[int] = []
    for line in text.splitlines():
        f = line.split("|")
        if f[0] == "main" and len(f) == 2:
            main = _int(f[1])
        elif f[0] == "noaccess" and len(f) == 2 and f[1].isdigit():
            denied.append(int(f[1]))
        elif f[0] == "proc" and len(f) in (5, 6):
            kids = tuple(int(k) for k in f[4].split() if k.isdigit())
            comm = base64.b64decode(f[2]).decode("utf-8", "replace").strip()
            exe = base64.b64decode(f[5]).decode("utf-8", "replace").strip() if len(f) == 6 else ""
            procs[int(f[1])] = ProcInfo(int(f[1]), comm, base64.b64decode(f[3]), kids, exe)
    return main, procs, denied


def pick_server(procs: dict[int, ProcInfo], main: int) -> ProcInfo | None:
    """Follow MainPID down through live wrappers to the process that serves."""
    current = procs.get(main)
    seen: set[int] = set()
    while current is not None and current.is_wrapper and current.pid not in seen:
        seen.add(current.pid)
        child = next((procs[c] for c in current.children if c in procs), None)
        if child is None:
            break
        current = child
    return current


def parse_environ(data: bytes) -> dict[str, str]:
    """/proc/PID/environ: NUL-separated KEY=VALUE; the first duplicate wins, as in getenv()
    and Python's os.environ."""
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            key, _, value = item.partition(b"=")
            env.setdefault(key.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
