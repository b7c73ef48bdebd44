"""Transports: how orch runs commands and moves bytes on a host (EDGE).

Two implementations share one small protocol: LocalTransport (the controller itself, used by the
embedded simulated deployment) and SshTransport (Fabric, one persistent connection per host).
Library errors are translated here, once, into TransportError naming the host.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

# how often a command's wait looks at its stop Event: a command run by a parallel testbed's runner
# thread, which no signal reaches, is stopped this soon after Ctrl-C/SIGTERM in the main thread
STOP_POLL_S = 0.05
# how long a stoppable command's (a repro's) output is read after it exited: what was still in the
# pipe comes within milliseconds; a process it left holding the pipe open is not waited for (the
# leftover check's to name), on either transport
EXITED_DRAIN_S = 0.5


_SCOPE_NAME = re.compile(r"[A-Za-z0-9_.:@-]+\.scope")


def scope_argv(unit: str) -> list[str]:
    """`systemd-run` running what follows it in the transient scope `unit` (unloaded once its
    processes all ended, failed or not: --collect), on either transport."""
    if unit.startswith("-") or not _SCOPE_NAME.fullmatch(unit):
        raise ValueError(f"not a scope unit name: {unit!r}")
    return ["systemd-run", "--scope", f"--unit={unit}", "--collect", "--quiet", "--"]


@dataclass(frozen=True)
class Result:
    """What a command did: exit code and (bounded) output, like Invoke's Result."""

    host: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class FileEntry:
    """What a path on a host is, in one read: its bytes and, unlike read_bytes, whether it is there
    at all and whether it is a symlink. The restore needs both to tell the env file the run began
    with from one deleted or replaced by a link meanwhile, without a round trip more per host."""

    data: bytes | None  # the bytes (through a symlink); None: nothing there (or a dangling link)
    link: str | None = None  # a symlink's target as the link holds it; None: not a symlink
    mode: int | None = None  # permission bits of the file read (through a link); None when missing
    uid: int | None = None
    gid: int | None = None
    # what the path is when it is there but not a regular file nor a symlink ("a FIFO", "a
    # directory"): data None, never opened (a FIFO blocks a reader, /dev/zero never ends)
    special: str | None = None


class Transport(Protocol):
    """Run commands and read/write files on one host."""

    host: str  # a label for messages, e.g. "decode (10.0.0.4)"

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
        """Run a command. A sequence is quoted argument by argument (never through a shell
        unquoted); a string is run by the host's shell. check=True raises CommandFailed.

        `env`: variables added to the command's environment (the repro's leftover mark,
        edges.leftovers), set for it alone: the command text stays the user's (journal, matching).

        `scope`: the command runs in a transient systemd scope of that name (`systemd-run --scope`,
        which execs it in place: same pid, process group and output), so everything it starts stays
        in one cgroup (edges.remote_scope); only where the caller found that the host can.

        `stop` (the runner's Ctrl-C/SIGTERM Event), looked at every STOP_POLL_S: once it is set the
        command and every process it started are killed on the host (TERM, KILL after a grace) and
        CommandInterrupted is raised with the output so far; set before the call, nothing runs."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def read_entry(self, path: str) -> FileEntry:
        """read_bytes that also says what the path is (FileEntry) and does not fail when nothing
        is there. A path that is itself not a regular file (a FIFO, a directory) is said so
        (FileEntry.special) without being opened; one a symlink leads to is refused as read_bytes
        refuses it."""
        ...

    def write_bytes_atomic(
        self, path: str, data: bytes, *, like: str | None = None, expect: bytes | None = None
    ) -> None:
        """Write via a temp file in the same directory, fsync, rename; keep mode and owner (a new
        file gets the umask's mode). `like`: the file this one copies (a backup of an env file that
        may hold a token): the written file takes its owner and mode, never the umask's 644, and
        0600 if it is gone. The temp file is 0600 until then. `expect`: the bytes the file must
        hold now (what orch last wrote there), compared on the host just before the rename, in the
        write's own round trip; other bytes, or no file, raise FileChanged and write nothing (an
        edit someone else made since is never destroyed)."""
        ...

    def write_then_run(
        self, path: str, data: bytes, command: str, *, timeout: float, expect: bytes | None = None
    ) -> Result:
        """write_bytes_atomic, then `command` (a shell line, bounded by `timeout`) only once the
        write went through, in one round trip where the host is remote (a trial's env file and the
        restart it needs). A failed write raises as write_bytes_atomic does and runs nothing (a
        FileChanged too: `expect` as there); the Result is the command's (never checked here: the
        caller judges it)."""
        ...

    def exists(self, path: str) -> bool: ...

    def close(self) -> None: ...
