"""Who serves a port: the listening socket's owner process, read on the host over a Transport (EDGE).

A health URL that answers proves only that SOME process answers. orch counts a trial only if
the process behind each health port is the unit it restarted (its main pid or a descendant), so
an orphaned server in someone's tmux, an old process that has not released the port, or any
stranger on the port voids the trial instead of being measured.

One `sh -c` script per host and call (one round trip), no `ss` or `lsof` dependency:
LISTEN sockets on the ports from /proc/net/tcp{,6} (awk) -> their inodes -> the processes holding
`socket:[INODE]` (GNU find over /proc/*/fd) -> each one's uid, command line and PPid chain; for
systemd hosts the units' MainPID and InvocationID come in the same round trip. What the answer
means is decided by the pure functions below, which the unit tests feed sample /proc text.
"""

from __future__ import annotations

import base64
import os
import pwd
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.edges.transport import Transport

MAX_HOLDERS = 64  # processes reported per call (a forking server shares its socket with workers)
MAX_CHAIN = 64  # PPid steps followed up from a holder
CMDLINE_BYTES = 4096

# /proc/net/tcp{,6} rows in state 0A (LISTEN) whose local port is in `want` -> sock|PORTHEX|UID|INODE.
# The kernel prints listening sockets first, so awk stops at the first other row: a busy host's
# thousands of TIME_WAIT rows are then never generated (5x faster with 3000 of them).
AWK_LISTEN = (
    'FNR > 1 && $4 != "0A" { exit } '
    '$4 == "0A" { n = split($2, a, ":"); if (index(want, " " a[n] " ")) print "sock|" a[n] "|" $8 "|" $10 }'
)
# argv: NPORTS PORTHEX... UNIT...  (PORTHEX: 4 upper-case hex digits, as /proc/net/tcp prints them)
# out:  units / systemctl show blocks / end; sock|PORTHEX|UID|INODE; user|UID|NAME (from /etc/passwd);
#       hold|PID|INODE|UID|b64(cmdline)|CHAIN.  Few forks: it runs beside every trial's repro.
_SCRIPT = r"""
n=$1; shift; ports=""; i=0
while [ "$i" -lt "$n" ]; do ports="$ports $1"; shift; i=$((i+1)); done
if [ $# -gt 0 ]; then
  echo units; systemctl show -p MainPID,InvocationID,ActiveState -- "$@" || exit 3; echo end
fi
socks=$( { awk -v want=" $ports " __AWK__ /proc/net/tcp; awk -v want=" $ports " __AWK__ /proc/net/tcp6; } 2>/dev/null)
inodes=""; uids=""
for s in $socks; do
  echo "$s"; r=${s#sock|*|}; uid=${r%%|*}; inodes="$inodes ${r#*|}"
  case " $uids " in *" $uid "*) ;; *) uids="$uids $uid";; esac
done
[ -n "$inodes" ] || exit 0
while IFS=: read -r name x id rest; do
  case " $uids " in *" $id "*) echo "user|$id|$name";; esac
done < /etc/passwd
set --
for i in $inodes; do [ $# -eq 0 ] || set -- "$@" -o; set -- "$@" -lname "socket:\\[$i\\]"; done
h=0
find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 \( "$@" \) -printf '%h|%l\n' 2>/dev/null |
while IFS='|' read -r d l && [ "$h" -lt __MAX__ ]; do
  h=$((h+1)); p=${d#/proc/}; p=${p%/fd}; i=${l#socket:[}; i=${i%]}
  u=""; c=$p; chain=""; k=0
  while [ -n "$c" ] && [ "$c" != 0 ] && [ "$k" -lt __CHAIN__ ]; do
    chain="$chain $c"; k=$((k+1)); nx=""
    while IFS=':' read -r key val; do
      case $key in PPid) set -- $val; nx=$1;; Uid) if [ -z "$u" ]; then set -- $val; u=$1; fi;; esac
    done 2>/dev/null < "/proc/$c/status" || break
    c=$nx
  done
  echo "hold|$p|$i|$u|$(head -c __CMD__ "/proc/$p/cmdline" 2>/dev/null | base64 -w0)|$chain"
done
"""
SCRIPT = (
    _SCRIPT.replace("__MAX__", str(MAX_HOLDERS))
    .replace("__CHAIN__", str(MAX_CHAIN))
    .replace("__CMD__", str(CMDLINE_BYTES))
    .replace("__AWK__", shlex.quote(AWK_LISTEN))
)


@dataclass(frozen=True)
class UnitId:
    """Which process a unit runs now: what must not change between the restart and the repro's end."""

    unit: str
    main_pid: int | None  # None: no process (the unit is not running)
    invocation_id: str = ""  # systemd's InvocationID (a new one per start); the local manager's start count

    def describe(self) -> str:
        return f"pid {self.main_pid}" if self.main_pid else "not running"


@dataclass(frozen=True)
class Socket:
    """A LISTEN socket on one of the ports asked about."""

    port: int
    uid: int
    inode: int


@dataclass(frozen=True)
class Holder:
    """A process holding a listening socket: its pid, uid, command line and PPid chain (itself first)."""

    pid: int
    inode: int
    uid: int | None
    cmdline: str
    chain: tuple[int, ...]


@dataclass(frozen=True)
class PortScan:
    """Who listens on the ports asked about, on one host."""

    sockets: tuple[Socket, ...] = ()
    holders: tuple[Holder, ...] = ()
    users: Mapping[int, str] = field(default_factory=dict)

    def user(self, uid: int | None) -> str:
        if uid is None:
            return "unknown user"
        return f"user {self.users.get(uid) or f'uid {uid}'}"


def port_hex(port: int) -> str:
    return f"{port:04X}"


def scan_argv(ports: Sequence[int], units: Sequence[str] = ()) -> list[str]:
    """The one command of a scan: ports to look at, and systemd units whose ids to read with it."""
    return ["sh", "-c", SCRIPT, "orch-identity", str(len(ports)), *(port_hex(p) for p in ports), *units]


def scan(
    transport: Transport, ports: Sequence[int], units: Sequence[str] = (), *, sudo: bool = False, timeout: float = 30
) -> tuple[PortScan, dict[str, UnitId]]:
    """One round trip: who listens on `ports`, and (systemd) the units' MainPID/InvocationID."""
    res = transport.run(scan_argv(ports, units), check=True, sudo=sudo, timeout=timeout)
    return parse_scan(res.stdout, units)


def scan_here(ports: Sequence[int], first: Sequence[int] = ()) -> PortScan:
    """What the script finds, read in this process for the local manager (no fork: it runs beside
    every trial's repro). The processes in `first` (the units' own pids) are looked at before
    the rest of /proc, so a port held by its unit costs a few syscalls."""
    want = {port_hex(p) for p in ports}
    sockets = [s for path in ("/proc/net/tcp", "/proc/net/tcp6") for s in _listening(path, want)]
    if not sockets:
        return PortScan()
    targets = {f"socket:[{s.inode}]": s.inode for s in sockets}
    found = _holders(first, targets)
    if {inode for _, inode in found} != set(targets.values()):
        found = _holders(_all_pids(), targets)
    holders = tuple(_holder(pid, inode) for pid, inode in found[:MAX_HOLDERS])
    uids = {s.uid for s in sockets} | {h.uid for h in holders if h.uid is not None}
    return PortScan(tuple(sockets), holders, _user_names(uids))


def _listening(path: str, want: set[str]) -> list[Socket]:
    """LISTEN rows on the wanted ports; stops at the first other row (listeners come first)."""
    got: list[Socket] = []
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) < 10 or fields[3] != "0A":
                    break
                port = fields[1].rsplit(":", 1)[-1]
                if port in want and fields[7].isdigit() and fields[9].isdigit():
                    got.append(Socket(int(port, 16), int(fields[7]), int(fields[9])))
    except OSError:
        pass
    return got


def _all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def _holders(pids: Sequence[int], targets: Mapping[str, int]) -> list[tuple[int, int]]:
    """(pid, inode) of each wanted socket each process holds."""
    found: list[tuple[int, int]] = []
    for pid in pids:
        try:
            fds = os.scandir(f"/proc/{pid}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    inode = targets.get(os.readlink(fd.path))
                except OSError:
                    continue
                if inode is not None and (pid, inode) not in found:
                    found.append((pid, inode))
    return found


def _holder(pid: int, inode: int) -> Holder:
    chain: list[int] = []
    uid: int | None = None
    current = pid
    while current > 0 and len(chain) < MAX_CHAIN:
        chain.append(current)
        try:
            status = Path(f"/proc/{current}/status").read_text(errors="replace")
        except OSError:
            break
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if uid is None and fields.get("Uid", "").split():
            uid = int(fields["Uid"].split()[0])
        parent = fields.get("PPid", "").strip()
        current = int(parent) if parent.isdigit() else 0
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:CMDLINE_BYTES]
    except OSError:
        raw = b""
    cmdline = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    return Holder(pid, inode, uid, cmdline, tuple(chain))


def _user_names(uids: set[int]) -> dict[int, str]:
    names = {}
    for uid in uids:
        try:
            names[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            continue
    return names


def parse_scan(text: str, units: Sequence[str] = ()) -> tuple[PortScan, dict[str, UnitId]]:
    """The script's output -> (PortScan, ids of `units` from their `systemctl show` blocks)."""
    sockets: list[Socket] = []
    holders: list[Holder] = []
    users: dict[int, str] = {}
    show: list[str] = []
    in_units = False
    for line in text.splitlines():
        if line == "units":
            in_units = True
        elif line == "end":
            in_units = False
        elif in_units:
            show.append(line)
        else:
            _parse_line(line, sockets, holders, users)
    return PortScan(tuple(sockets), tuple(holders), users), parse_units("\n".join(show), units)


def _parse_line(line: str, sockets: list[Socket], holders: list[Holder], users: dict[int, str]) -> None:
    f = line.split("|")
    if f[0] == "sock" and len(f) == 4 and f[2].isdigit() and f[3].isdigit():
        sockets.append(Socket(int(f[1], 16), int(f[2]), int(f[3])))
    elif f[0] == "hold" and len(f) == 6 and f[1].isdigit() and f[2].isdigit():
        raw = base64.b64decode(f[4] or b"", validate=False)
        cmdline = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
        chain = tuple(int(p) for p in f[5].split() if p.isdigit())
        holders.append(Holder(int(f[1]), int(f[2]), int(f[3]) if f[3].isdigit() else None, cmdline, chain))
    elif f[0] == "user" and len(f) == 3 and f[1].isdigit():
        users[int(f[1])] = f[2]


def parse_units(text: str, units: Sequence[str]) -> dict[str, UnitId]:
    """`systemctl show -p MainPID,InvocationID,ActiveState` blocks, in the order asked."""
    blocks = [b for b in text.strip("\n").split("\n\n") if b.strip()]
    ids: dict[str, UnitId] = {}
    for unit, block in zip(units, blocks, strict=False):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        pid = int(kv["MainPID"]) if kv.get("MainPID", "").isdigit() else 0
        alive = kv.get("ActiveState") in ("active", "reloading") and pid > 0
        ids[unit] = UnitId(unit, pid if alive else None, kv.get("InvocationID", ""))
    return ids


def foreign_holder(scan: PortScan, port: int, ids: Mapping[str, UnitId]) -> str | None:
    """Who holds `port` when it is not one of the units' processes (or their descendants), in
    words for the message: "pid 4242 (python3 -m http.server 30000, user alice)". None when a
    unit's process holds it, or nothing listens on the host (the URL is served elsewhere).

    Judged per listening socket: a port may be bound on several addresses (127.0.0.1 and the
    node's address, IPv4 and IPv6), and the health URL names one of them. The unit holding one
    socket of the port says nothing about the others, so any socket none of the units' processes
    holds is a stranger's. A socket whose holders the scan cut off (MAX_HOLDERS: a forking server's
    workers) is not called a stranger's when a unit holds another socket of the port."""
    sockets = [s for s in scan.sockets if s.port == port]
    mains = {i.main_pid for i in ids.values() if i.main_pid}
    held = {s.inode: [h for h in scan.holders if h.inode == s.inode] for s in sockets}
    units_own = {inode for inode, hs in held.items() if any(mains.intersection(h.chain) for h in hs)}
    truncated = len(scan.holders) >= MAX_HOLDERS
    for s in sockets:
        holders = held[s.inode]
        if s.inode in units_own or (not holders and truncated and units_own):
            continue
        if holders:
            h = holders[0]
            return f"pid {h.pid} ({_short(h.cmdline) or '?'}, {scan.user(h.uid)})"
        return f"a process orch cannot see ({scan.user(s.uid)}; connect as root or set sudo: true to identify it)"
    return None


def reported_pid_mismatch(scan: PortScan, port: int, ids: Mapping[str, UnitId], reported: object) -> str | None:
    """The server on `port` says which process it is (/get_server_info's "pid", where it reports
    one): that pid must be one of the port's holders or a unit's main pid. Otherwise the answer
    came through something else (a proxy, a stale process sharing the socket) and is not
    evidence about the unit. None when it agrees or says nothing usable."""
    if isinstance(reported, bool) or not isinstance(reported, int) or reported <= 0:
        return None
    inodes = {sk.inode for sk in scan.sockets if sk.port == port}
    holders = {h.pid for h in scan.holders if h.inode in inodes}
    mains = {i.main_pid for i in ids.values() if i.main_pid}
    if not holders or reported in holders | mains:
        return None
    return f"the server on port {port} reports pid {reported}, but the port is held by pid {min(holders)}"


def _short(cmdline: str, limit: int = 200) -> str:
    return cmdline if len(cmdline) <= limit else cmdline[: limit - 3] + "..."


def units_phrase(ids: Mapping[str, UnitId]) -> str:
    """ "unit sim-prefill (pid 1234)" / "units a (pid 1), b (not running)" for messages."""
    parts = [f"{u} ({i.describe()})" for u, i in ids.items()]
    return ("units " if len(parts) > 1 else "unit ") + ", ".join(parts)
