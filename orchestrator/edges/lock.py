"""One sweep per testbed at a time: a lock file beside every env file the sweep edits (EDGE).

The lock is created atomically on each host, so two controllers racing for the same testbed cannot
both win, whichever machine they run on: its text is written to a temp file first, which is then
hard-linked to the lock's name (link() fails if the name exists, like an O_EXCL create). Why not
the shell's noclobber ``>``: it creates the file before writing it, so a full disk left an empty
lock that blocked the testbed for good, named "run unknown". Now a lock appears whole or not at
all, and a write the host refuses leaves nothing behind and says so. It holds who took it: run
id, testbed, user, pid, controller host, start time. A lock whose owner is dead (same controller
host, pid gone) is *stale*: it is reported, and broken only when the user says so. A resumed run
takes over the lock of its own run id (and testbed). A lock file that names no holder (empty,
from an older orch's failed write, or not orch's JSON) is reported as what it is, and
--break-lock takes it.

Taking a lock over is a compare-and-swap on the host (TAKE_OVER): the lock file is renamed aside,
which only one controller can do, and replaced only if the renamed file still names the holder that
controller read. Why: a read followed by an overwrite (or a remove and a create) let two controllers
that started together (two `orch resume` of one killed run, two `--break-lock`) both win.

Every lock command has a timeout, and a lock path that exists but is not a regular file (a FIFO, a
device, a link to one, a link that leads nowhere) is refused, never opened: a FIFO would block a
write (no reader) and a plain `cat` (no writer), and a link to /dev/zero would never end. The lock
file is read with a bounded `head -c`.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.core import jsontext
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.transport import Result
from orchestrator.errors import LockError, OrchError, StaleLockError

LOCK_TIMEOUT_S = 30.0  # a create, a read, a rename: instant on a healthy host, even over SSH
MAX_LOCK_BYTES = 64 * 1024  # a lock is one JSON line of a few hundred bytes
NOT_REGULAR = 6  # READ's exit code when the lock path exists but is not a regular file
NOT_WRITTEN = 7  # CREATE's and TAKE_OVER's: the host refused to write the holder (disk full?)


def _write_temp(holder: str) -> str:
    """Shell: t = a new temp file beside the lock ($2) holding `holder` ("$1", "$3") and a newline,
    or exit NOT_WRITTEN having removed it. `env printf`: the shell's printf says only "I/O error"
    when the disk is full, coreutils' says why. The umask's mode, as a `>` would have made it
    (not mktemp's 0600): a controller logging in as another user must still read who holds it."""
    return (
        f't=$(mktemp -- "$2.new-XXXXXX") || exit {NOT_WRITTEN}; '
        f'{{ env printf "%s\\n" {holder} > "$t" && chmod "$(printf %o $((0666 & ~0$(umask))))" -- "$t"; }} '
        f'|| {{ rm -f -- "$t"; exit {NOT_WRITTEN}; }}; '
    )


# $1: the holder, $2: the lock. Anything already at $2 (a regular file or not) fails the create
# without opening it: READ then says who holds it, or that it is not a lock file at all. The lock
# appears whole, by a hard link of the written temp file (ln fails if $2 exists).
CREATE = (
    '{ [ -e "$2" ] || [ -L "$2" ]; } && { echo "$2: File exists" >&2; exit 1; }; '
    + _write_temp('"$1"')
    + 'ln -- "$t" "$2"; rc=$?; rm -f -- "$t"; exit $rc'
)
# $1: the lock, $2: at most this many bytes. Exit 0: its text; 1: no lock (or unreadable);
# 6 (NOT_REGULAR): something that is not a regular file is there. `[ -f ]` follows links.
READ = (
    'if [ -f "$1" ]; then exec head -c "$2" -- "$1"; fi; '
    'if [ -e "$1" ] || [ -L "$1" ]; then exit 6; fi; echo "$1: No such file or directory" >&2; exit 1'
)
# $1: the holder as read (its text without the final newline), $2: the lock, $3: the new holder.
# Exit 0: taken over; 3: the lock is gone (someone took it first); 4: it names another holder now
# (put back as it was); 5: someone created a new lock between the rename and the create;
# 7 (NOT_WRITTEN): the new holder could not be written (nothing was touched).
TAKE_OVER = (
    _write_temp('"$3"') + 'aside="$2.orch-stale.$$"; mv -f "$2" "$aside" 2>/dev/null || { rm -f -- "$t"; exit 3; }; '
    'if [ ! -f "$aside" ] || [ "$(cat "$aside")" != "$1" ]; then '
    'ln "$aside" "$2" 2>/dev/null; rm -f "$aside" "$t"; exit 4; fi; '
    'rm -f "$aside"; ln -- "$t" "$2" 2>/dev/null; rc=$?; rm -f -- "$t"; [ "$rc" -eq 0 ] || exit 5'
)


@dataclass(frozen=True)
class LockInfo:
    run_id: str
    user: str
    pid: int
    controller: str
    started: str
    testbed: str = ""  # "" in locks written before orch recorded it
    run_dir: str = ""  # the holder's run directory ("" in older locks and a resume's own lock)

    def same_testbed(self, other: "LockInfo") -> bool:
        return not self.testbed or not other.testbed or self.testbed == other.testbed

    def describe(self) -> str:
        return f"run {self.run_id} by {self.user} (pid {self.pid} on {self.controller}, since {self.started})"

    def is_me(self) -> bool:
        return self.pid == os.getpid() and self.controller == socket.gethostname()

    def is_stale(self) -> bool:
        """Dead owner: only decidable when the owner ran on this controller host."""
        if self.controller != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return _is_zombie(self.pid)  # killed, but its parent never reaped it


EMPTY_LOCK = "an empty lock file, left by a write that failed; no run holds it"
FOREIGN_LOCK = "not a lock orch wrote (no run, user or pid can be read from it); no run holds it"


@dataclass(frozen=True)
class NoHolder(LockInfo):
    """A lock file that names no holder: empty (an older orch's noclobber create whose write the
    host refused) or not the JSON orch writes. Nothing is known of a holder, so it is neither
    "run unknown on another controller" (which sent users to remove it by hand) nor anyone's:
    --break-lock takes it, as it takes a dead run's lock."""

    why: str = EMPTY_LOCK

    def describe(self) -> str:
        return self.why

    def is_me(self) -> bool:
        return False

    def is_stale(self) -> bool:
        return True


def host_restore_command(testbed: str, run_id: str, inventory: str = "") -> str:
    """The `orch restore` that puts a testbed back from its hosts' own copies of their env files
    (sweep.hostrestore): the way back once the run's folder is gone."""
    shown = shlex.quote(inventory) if inventory else "INVENTORY"
    return f"orch restore --testbed {shlex.quote(testbed)} --run-id {shlex.quote(run_id)} -i {shown}"


def lock_holders(deployment: Deployment) -> dict[str, LockInfo]:
    """Who holds the lock on each host that has one (host key -> holder); reads only."""
    found = {key: TestbedLock._read(h, lock_path(h, deployment.testbed.name)) for key, h in deployment.hosts.items()}
    return {key: holder for key, holder in found.items() if holder is not None}


def lock_path(handle: HostHandle, testbed: str) -> str:
    return f"{handle.host.env_file}.orch-lock"


class TestbedLock:
    __test__ = False  # not a pytest test class

    def __init__(
        self, deployment: Deployment, info: LockInfo, *, owner_gone: bool = False, inventory: str = ""
    ) -> None:
        self.deployment, self.info = deployment, info
        self.inventory = inventory  # the inventory naming the testbed: the advice names it (if known)
        # The caller knows this run's previous controller is gone even when it ran on another
        # machine (a shared queue's lock on the item said so): the run's own locks may be taken.
        # Never another run's lock.
        self.owner_gone = owner_gone
        self.held: list[HostHandle] = []
        self.taken_over: list[tuple[str, LockInfo]] = []  # (host label, holder): a dead holder's lock taken

    @classmethod
    def for_run(
        cls,
        deployment: Deployment,
        run_id: str,
        started: str,
        *,
        owner_gone: bool = False,
        run_dir: Path | None = None,
        inventory: Path | None = None,
    ) -> "TestbedLock":
        """`run_dir` is recorded in the lock, so a run that finds it stale can name the folder to
        `orch resume` or `orch restore`; `inventory` (this run's) is named in that advice."""
        where = str(run_dir) if run_dir is not None else ""
        user, pid, host = getpass.getuser(), os.getpid(), socket.gethostname()
        info = LockInfo(run_id, user, pid, host, started, deployment.testbed.name, where)
        return cls(deployment, info, owner_gone=owner_gone, inventory=str(inventory) if inventory else "")

    def _ours(self, holder: LockInfo) -> bool:
        """The lock is this run's on this testbed, left by its earlier controller (dead) or held by
        this process. Another testbed of the same run holding it means both name one env file."""
        if holder.run_id != self.info.run_id or not holder.same_testbed(self.info):
            return False
        return holder.is_stale() or holder.is_me() or self.owner_gone

    def acquire(self, *, break_stale: bool = False) -> None:
        """Lock every host or none; LockError names the holder. A host is counted held before its
        lock command runs: an interrupt (Ctrl-C, SIGTERM) that lands once the command wrote the
        lock, before it returned, left that lock behind. release() removes only a lock this one
        wrote, so a host whose lock is another's is left as it is."""
        try:
            for handle in self.deployment.hosts.values():
                self.held.append(handle)
                self._acquire_one(handle, break_stale)
        except BaseException:
            self.release()
            raise

    def check(self, *, break_stale: bool = False) -> None:
        """Refuse at once, writing nothing, when another run holds the lock: called before
        preflight, so a testbed in use is reported as locked, not as the other run's restarting
        units or its cell's env (which preflight would find first). acquire() still decides."""
        for handle in self.deployment.hosts.values():
            holder = self._read(handle, lock_path(handle, self.deployment.testbed.name))
            if holder is None or self._ours(holder):
                continue
            if not (break_stale and holder.is_stale()):
                raise self._refusal(handle, holder)

    def release(self) -> None:
        for handle in reversed(self.held):
            try:
                path = lock_path(handle, self.deployment.testbed.name)
                holder = self._read(handle, path)
                if holder is not None and self._held_by_me(holder):
                    _run(handle, ["rm", "-f", path])
            except OrchError:
                pass  # a lock left behind is reported as stale next time, never silently broken
        self.held.clear()

    def _acquire_one(self, handle: HostHandle, break_stale: bool) -> None:
        path = lock_path(handle, self.deployment.testbed.name)
        payload = json.dumps(asdict(self.info))
        for _ in range(2):
            res = _run(handle, ["sh", "-c", CREATE, "orch-lock", payload, path])
            if res.ok:
                return
            _refused_write(handle, path, res)
            read = self._read_text(handle, path)
            if read is None:
                raise LockError(f"{handle.host.label}: cannot create lock {path}: {res.stderr.strip()}")
            text, holder = read
            # our own run, resumed or restored after its controller died; or a dead owner's, when told
            if not (self._ours(holder) or (break_stale and holder.is_stale())):
                raise self._refusal(handle, holder)
            swap = _run(handle, ["sh", "-c", TAKE_OVER, "orch-lock", text.rstrip("\n"), path, payload])
            if swap.ok:
                if not holder.is_me():
                    self.taken_over.append((handle.host.label, holder))
                return
            _refused_write(handle, path, swap)
        raise LockError(f"{handle.host.label}: lost the race for {path} to another controller; try again")

    def _held_by_me(self, holder: LockInfo) -> bool:
        """The lock this very lock object took: this run, this process, this testbed."""
        same = (holder.run_id, holder.pid) == (self.info.run_id, self.info.pid)
        return same and holder.same_testbed(self.info)

    def _refusal(self, handle: HostHandle, holder: LockInfo) -> LockError:
        """Why this run cannot have the lock; a StaleLockError when a dead run holds it."""
        message = self._held_message(handle, holder)
        return StaleLockError(message) if holder.is_stale() else LockError(message)

    def _held_message(self, handle: HostHandle, holder: LockInfo) -> str:
        if isinstance(holder, NoHolder):
            return (
                f"testbed {self.deployment.testbed.name!r} cannot be locked on {handle.host.label}: "
                f"{lock_path(handle, self.deployment.testbed.name)} is {holder.describe()} "
                "(rerun with --break-lock to replace it, or remove it by hand)"
            )
        base = f"testbed {self.deployment.testbed.name!r} is locked on {handle.host.label} by {holder.describe()}"
        if holder.run_id == self.info.run_id and holder.is_me() and not holder.same_testbed(self.info):
            return (
                f"testbeds {holder.testbed!r} and {self.deployment.testbed.name!r} of this run both lock "
                f"{lock_path(handle, holder.testbed)} on {handle.host.label}: they name the same env file "
                "(parallel testbeds need hosts of their own)"
            )
        if holder.is_stale():
            return base + self._stale_advice(holder)
        if holder.controller != socket.gethostname():
            return (
                base + f" (it runs on another controller; if that process is gone, remove "
                f"{lock_path(handle, self.deployment.testbed.name)} on {handle.host.label} by hand)"
            )
        if holder.run_id == self.info.run_id:
            return base + f" (that run is still running: stop it first; `kill -TERM {holder.pid}` restores its hosts)"
        # a live owner: --break-lock cannot take its lock (a dead one's is the stale advice above),
        # and `queue run` has no such flag
        return base + f" (wait for it to finish, or stop it: `kill -TERM {holder.pid}` restores its hosts)"

    def _stale_advice(self, holder: LockInfo) -> str:
        """A dead run's lock: that run is resumed or restored first (its hosts may still hold a
        cell, its servers still hold the ports); --break-lock alone leaves its changes in place."""
        run_dir = self._holder_run_dir(holder)
        where = run_dir if run_dir is not None else f"RUN_DIR (the run directory of run {holder.run_id})"
        advice = (
            " — that process is gone (stale lock); rerun with --break-lock to take it only as a last resort "
            f"(it leaves run {holder.run_id}'s changes in place): first `orch resume {where}` continues "
            f"that run, or `orch restore {where}` puts its hosts back"
        )
        if run_dir is not None and (Path(run_dir) / "run.json").is_file():
            return advice
        seen = f"no run folder is at {run_dir} (seen from {Path.cwd()})" if run_dir else "its folder is not known here"
        command = host_restore_command(self.deployment.testbed.name, holder.run_id, self.inventory)
        return (
            f"{advice}; but {seen}: if it was deleted, `{command}` puts the hosts back from the copies of "
            f"their env files the run left beside them (<env file>.orch-backup-{holder.run_id})"
        )

    def _holder_run_dir(self, holder: LockInfo) -> str | None:
        """The run directory the lock records, else the holder's run id beside this run's own
        directory when a run is there (a lock taken by a resume, or by an older orch)."""
        if holder.run_dir:
            return holder.run_dir
        if not self.info.run_dir:
            return None
        guess = Path(self.info.run_dir).parent / holder.run_id
        return str(guess) if (guess / "run.json").is_file() else None

    @classmethod
    def _read(cls, handle: HostHandle, path: str) -> LockInfo | None:
        read = cls._read_text(handle, path)
        return None if read is None else read[1]

    @staticmethod
    def _read_text(handle: HostHandle, path: str) -> tuple[str, LockInfo] | None:
        """The lock file's text (what a takeover compares) and its holder; None: no lock."""
        res = _run(handle, ["sh", "-c", READ, "orch-lock", path, str(MAX_LOCK_BYTES)])
        if res.exit_code == NOT_REGULAR:
            raise LockError(
                f"{handle.host.label}: lock path {path} exists but is not a regular file, so orch will not "
                "open it (a FIFO, a device or a dangling link? remove it by hand)"
            )
        if not res.ok:
            return None
        return res.stdout, _holder(res.stdout)


def _holder(text: str) -> LockInfo:
    """Who a lock file names; NoHolder when it is empty or not the JSON orch writes."""
    if not text.strip():
        return NoHolder("", "", 0, "", "")
    try:
        info = LockInfo(**jsontext.loads(text))
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested deep, which is no ValueError
        return NoHolder("", "", 0, "", "", why=FOREIGN_LOCK)
    texts = (info.run_id, info.user, info.controller, info.started, info.testbed, info.run_dir)
    if type(info.pid) is not int or not all(isinstance(t, str) for t in texts):
        return NoHolder("", "", 0, "", "", why=FOREIGN_LOCK)
    return info


def _refused_write(handle: HostHandle, path: str, res: Result) -> None:
    """A lock command that could not write the holder (NOT_WRITTEN) left nothing behind: say that
    the host refused the write, and why, instead of looking for a holder."""
    if res.exit_code != NOT_WRITTEN:
        return
    why = (res.stderr.strip().splitlines() or ["no reason given"])[-1]
    raise LockError(
        f"{handle.host.label}: cannot write lock {path}: the host refused the write ({why}); nothing was "
        "left behind (free space there, or make the folder writable, then run again)"
    )


def _run(handle: HostHandle, argv: list[str]) -> Result:
    """One lock command, never without a timeout: a host that stopped answering (or a lock path
    that blocks despite READ's checks) fails the sweep before it starts instead of hanging it."""
    return handle.transport.run(argv, check=False, sudo=_sudo(handle), timeout=LOCK_TIMEOUT_S)


def _sudo(handle: HostHandle) -> bool:
    return bool(handle.host.ssh and handle.host.ssh.sudo)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
