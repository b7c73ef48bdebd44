"""Who serves a port: the listening socket's owner process, read on the host over a Transport (EDGE).

A health URL that answers proves only that SOME process answers. orch counts a trial only if
the process behind each health port is the unit it restarted, so an orphaned server in someone's
tmux, an old process that has not released the port, or any stranger on the port voids the trial
instead of being measured.

"The unit's process" is judged by systemd's own bookkeeping where there is one: a process in the
unit's cgroup (ControlGroup, or below it) was started by this start of the unit, whatever its
parent is now. That covers what a main-pid rule cannot: Type=forking units whose MainPID is 0
(GuessMainPID=no), oneshot units with RemainAfterExit=yes, and wrapper scripts that daemonize the
server (it is reparented to PID 1, no descendant of MainPID). The cgroup is trusted only when
stopping the unit empties it (KillMode=control-group or mixed, systemd's default): with
KillMode=process or none a previous start's server may still sit in it. A process started
elsewhere (a shell, tmux, another unit, a docker container: dockerd puts containers in their
own docker-ID.scope) is in another cgroup. Without a cgroup (not systemd: the local process
manager; KillMode=process) the process must be the unit's main pid or one of its descendants.

One `sh -c` script per host and call (one round trip), no `ss` or `lsof` dependency:
LISTEN sockets on the ports from /proc/net/tcp{,6} (awk) -> their inodes -> the processes holding
`socket:[INODE]` (GNU find over /proc/*/fd) -> each one's uid, command line and PPid chain; for
systemd hosts the units' MainPID, InvocationID and ControlGroup come in the same round trip, and
each holder's cgroup (/proc/PID/cgroup: the unified "0::" line and cgroup v1's name=systemd).
What the answer means is decided by the pure functions below, which the unit tests feed sample
/proc text. The local process manager's hosts are this machine: scan_here reads the same facts in
process, the listeners from sock_diag netlink (edges.sockdiag; /proc/net/tcp{,6} where refused).
"""

from __future__ import annotations

import base64
import os
import pwd
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.core.words import listed
from orchestrator.edges import sockdiag
from orchestrator.edges.transport import Transport

MAX_HOLDERS = 64  # processes reported per call (a forking server shares its socket with workers)
MAX_CHAIN = 64  # PPid steps followed up from a holder
CMDLINE_BYTES = 4096
# What `systemctl show` is asked about each unit, wherever orch reads a unit's identity.
UNIT_PROPS = "MainPID,InvocationID,ActiveState,ControlGroup,KillMode"
# KillModes under which stopping a unit ends every process of its cgroup: a process found there
# after a start is that start's own (KillMode=process or none leave the rest behind).
GROUP_KILL_MODES = frozenset({"control-group", "mixed"})
# Words in a cgroup path that say a container runtime placed the process there.
CONTAINER_CGROUP_MARKS = ("docker", "libpod", "containerd", "crio", "cri-containerd", "kubepods", "lxc")

# /proc/net/tcp{,6} rows in state 0A (LISTEN) whose local port is in `want` -> sock|PORTHEX|UID|INODE.
# The kernel prints listening sockets first, so awk stops at the first other row: a busy host's
# thousands of TIME_WAIT rows are then never generated (5x faster with 3000 of them).
AWK_LISTEN = (
    'FNR > 1 && $4 != "0A" { exit } '
    '$4 == "0A" { n = split($2, a, ":"); if (index(want, " " a[n] " ")) print "sock|" a[n] "|" $8 "|" $10 }'
)
# argv: NPORTS PORTHEX... UNIT...  (PORTHEX: 4 upper-case hex digits, as /proc/net/tcp prints them)
# out:  units / systemctl show blocks / end; sock|PORTHEX|UID|INODE; user|UID|NAME (from /etc/passwd);
#       hold|PID|INODE|UID|b64(cmdline)|CHAIN, then cg|PID|LINE for the holder's /proc/PID/cgroup
#       lines that systemd tracks units by ("0::PATH", "N:name=systemd:PATH").
#       Few forks: it runs beside every trial's repro.
_SCRIPT = r"""
n=$1; shift; ports=""; i=0
while [ "$i" -lt "$n" ]; do ports="$ports $1"; shift; i=$((i+1)); done
if [ $# -gt 0 ]; then
  echo units; systemctl show -p __PROPS__ -- "$@" || exit 3; echo end
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
  while IFS= read -r l; do
    case $l in 0::*|*:name=systemd:*) echo "cg|$p|$l";; esac
  done 2>/dev/null < "/proc/$p/cgroup"
done
"""
SCRIPT = (
    _SCRIPT.replace("__MAX__", str(MAX_HOLDERS))
    .replace("__CHAIN__", str(MAX_CHAIN))
    .replace("__CMD__", str(CMDLINE_BYTES))
    .replace("__AWK__", shlex.quote(AWK_LISTEN))
    .replace("__PROPS__", UNIT_PROPS)
)


@dataclass(frozen=True)
class UnitId:
    """Which process a unit runs now: what must not change between the restart and the repro's end."""

    unit: str
    main_pid: int | None  # None: no main process (not running, or a unit systemd knows no MainPID of)
    invocation_id: str = ""  # systemd's InvocationID (a new one per start); the local manager's start count
    cgroup: str = ""  # systemd's ControlGroup while the unit is active ("" none known: not systemd, inactive)
    kill_mode: str = "control-group"  # systemd's KillMode (whether a stop empties the cgroup)

    @property
    def running(self) -> bool:
        """The unit runs: it has a main pid, or systemd holds it active with a cgroup (a forking
        unit without MainPID, a oneshot with RemainAfterExit=yes whose server is left running)."""
        return self.main_pid is not None or bool(self.cgroup)

    @property
    def own_cgroup(self) -> str:
        """The cgroup whose every process is this start's own ("" when there is none to trust)."""
        return self.cgroup if self.cgroup not in ("", "/") and self.kill_mode in GROUP_KILL_MODES else ""

    def describe(self) -> str:
        where = f"cgroup {self.cgroup}" if self.cgroup else ""
        if self.main_pid:
            return f"pid {self.main_pid}, {where}" if where else f"pid {self.main_pid}"
        return f"no main pid, {where}" if where else "not running"


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
    cgroups: tuple[str, ...] = ()  # its cgroup paths systemd tracks units by (parse_cgroup); () unknown


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
    sockets = listening_here(ports)
    if not sockets:
        return PortScan()
    targets = {f"socket:[{s.inode}]": s.inode for s in sockets}
    found = _holders(first, targets)
    if {inode for _, inode in found} != set(targets.values()):
        found = _holders(_all_pids(), targets)
    holders = tuple(_holder(pid, inode) for pid, inode in found[:MAX_HOLDERS])
    uids = {s.uid for s in sockets} | {h.uid for h in holders if h.uid is not None}
    return PortScan(tuple(sockets), holders, _user_names(uids))


def listening_here(ports: Sequence[int]) -> list[Socket]:
    """The LISTEN sockets on `ports` in this network namespace: from sock_diag (edges.sockdiag:
    only the listening table is walked), or where netlink is refused from /proc/net/tcp and tcp6
    (a file without a listener row of its family costs a walk of every connected socket)."""
    found = sockdiag.listening(set(ports))
    if found is not None:
        return once([Socket(port, uid, inode) for port, uid, inode in found])
    return listening_in_proc(ports)


def listening_in_proc(ports: Sequence[int]) -> list[Socket]:
    """The LISTEN sockets on `ports`, from /proc/net/tcp and tcp6 (listening_here's way without
    netlink)."""
    want = {port_hex(p) for p in ports}
    return once([s for path in ("/proc/net/tcp", "/proc/net/tcp6") for s in _listening(path, want)])


def once(sockets: Sequence[Socket]) -> list[Socket]:
    """Each socket once, in the order first listed. Why: neither /proc/net/tcp nor a netlink dump
    is one atomic read. The kernel fills it a buffer at a time and finds its place again by
    counting entries in the hash bucket it stopped in, so a listener opened meanwhile in that
    bucket makes it list the same socket twice (measured here: 2 to 5 in 100 reads of tcp6 while
    another thread opened and closed loopback listeners). One closed meanwhile could make it skip
    the entry after its place instead: not seen in 2,560 reads under the same churn."""
    return list(dict.fromkeys(sockets))


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
    cgroups: dict[int, list[str]] = {}
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
            _parse_line(line, sockets, holders, users, cgroups)
    placed = tuple(replace(h, cgroups=parse_cgroup("\n".join(cgroups.get(h.pid, ())))) for h in holders)
    return PortScan(tuple(once(sockets)), placed, users), parse_units("\n".join(show), units)


def _parse_line(
    line: str, sockets: list[Socket], holders: list[Holder], users: dict[int, str], cgroups: dict[int, list[str]]
) -> None:
    f = line.split("|")
    if f[0] == "cg" and len(f) >= 3 and f[1].isdigit():
        cgroups.setdefault(int(f[1]), []).append("|".join(f[2:]))
    elif f[0] == "sock" and len(f) == 4 and f[2].isdigit() and f[3].isdigit():
        sockets.append(Socket(int(f[1], 16), int(f[2]), int(f[3])))
    elif f[0] == "hold" and len(f) == 6 and f[1].isdigit() and f[2].isdigit():
        raw = base64.b64decode(f[4] or b"", validate=False)
        cmdline = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
        chain = tuple(int(p) for p in f[5].split() if p.isdigit())
        holders.append(Holder(int(f[1]), int(f[2]), int(f[3]) if f[3].isdigit() else None, cmdline, chain))
    elif f[0] == "user" and len(f) == 3 and f[1].isdigit():
        users[int(f[1])] = f[2]


def parse_cgroup(text: str) -> tuple[str, ...]:
    """/proc/PID/cgroup -> the paths systemd tracks units by: the unified hierarchy's ("0::PATH",
    cgroup v2 and hybrid hosts) first, then cgroup v1's name=systemd one (legacy hosts). The
    other v1 controllers' paths say nothing about units and are left out."""
    unified: list[str] = []
    named: list[str] = []
    for line in text.splitlines():
        hid, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep and sep2 and path.startswith("/")):
            continue
        if hid == "0" and controllers == "":
            unified.append(path)
        elif "name=systemd" in controllers.split(","):
            named.append(path)
    return tuple(dict.fromkeys(unified + named))


def in_cgroup(paths: Sequence[str], group: str) -> bool:
    """A process whose cgroup is `group` or below it (whole path components: a.service is not
    below a.servic)."""
    if group in ("", "/"):
        return False
    top = group.rstrip("/")
    return any(p == top or p.startswith(top + "/") for p in paths)


def parse_units(text: str, units: Sequence[str]) -> dict[str, UnitId]:
    """`systemctl show -p UNIT_PROPS` blocks, in the order asked. A unit that is not active has
    no process and no cgroup, whatever systemd still prints."""
    blocks = [b for b in text.strip("\n").split("\n\n") if b.strip()]
    ids: dict[str, UnitId] = {}
    for unit, block in zip(units, blocks, strict=False):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        pid = int(kv["MainPID"]) if kv.get("MainPID", "").isdigit() else 0
        active = kv.get("ActiveState") in ("active", "reloading")
        ids[unit] = UnitId(
            unit,
            pid if active and pid > 0 else None,
            kv.get("InvocationID", ""),
            kv.get("ControlGroup", "") if active else "",
            kv.get("KillMode") or "control-group",
        )
    return ids


def is_units(holder: Holder, ids: Mapping[str, UnitId]) -> bool:
    """The holder is one of the units' processes: in a unit's own cgroup (or below it), or the
    unit's main pid or one of its descendants (a child that moved to another cgroup, e.g. through
    `su`'s PAM session, is the unit's all the same)."""
    mains = {i.main_pid for i in ids.values() if i.main_pid}
    if mains.intersection(holder.chain):
        return True
    return any(in_cgroup(holder.cgroups, i.own_cgroup) for i in ids.values())


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
    held = {s.inode: [h for h in scan.holders if h.inode == s.inode] for s in sockets}
    units_own = {inode for inode, hs in held.items() if any(is_units(h, ids) for h in hs)}
    truncated = len(scan.holders) >= MAX_HOLDERS
    for s in sockets:
        holders = held[s.inode]
        if s.inode in units_own or (not holders and truncated and units_own):
            continue
        if holders:
            return _stranger(holders[0], scan, ids)
        return f"a process orch cannot see ({scan.user(s.uid)}; connect as root or set sudo: true to identify it)"
    return None


def _stranger(h: Holder, scan: PortScan, ids: Mapping[str, UnitId]) -> str:
    """A holder that is none of the units', in words; where the units' cgroups are known, its own
    cgroup too, and why a container's server does not count (a docker container is the docker
    daemon's process, not the unit's, so orch cannot tell it from any other container)."""
    said = f"pid {h.pid} ({_short(h.cmdline) or '?'}, {scan.user(h.uid)}"
    known = [i for i in ids.values() if i.cgroup]
    if not known or not h.cgroups:
        return said + ")"
    said += f", cgroup {h.cgroups[0]})"
    if any(mark in part for part in h.cgroups[0].lower().split("/") for mark in CONTAINER_CGROUP_MARKS):
        said += (
            f" - a container outside the unit's cgroup {known[0].cgroup}: orch cannot tell it was started by the "
            "unit (run the container in the unit's cgroup: podman run --cgroups=split or a Quadlet unit; or run "
            "the server without a container; see README, 'Servers in containers')"
        )
    elif not any(i.own_cgroup for i in known):
        said += (
            f" - the unit's KillMode={known[0].kill_mode} leaves old processes in its cgroup, so only its main pid "
            "and that pid's descendants count as its own"
        )
    return said


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
    return listed("unit", parts)
