"""SshTransport: one persistent, host-key-verified SSH connection per host (EDGE).

Fabric owns the connection (config, paramiko client, open/close); commands run on plain
paramiko session channels of that one connection, because orch needs binary stdout (file
reads), stdin data (file writes) and real remote timeouts, none of which Invoke's runner gives
cheaply: its stdin pump sends one byte per 10 ms poll, and on timeout it only closes the
channel, leaving the remote command running. Measured on the testbed: ~10 ms per command on
the open connection, once TCP_NODELAY is set (without it Nagle + delayed ACK add ~40 ms).

Why each choice:
- Host keys are verified by default (RejectPolicy); the user's ~/.ssh/config is NOT read, so
  the inventory alone says where and how orch connects.
- A sequence argv is quoted argument by argument; a string goes to the login shell as is.
  Timeouts are enforced ON THE HOST with coreutils `timeout` (closing a channel does not kill
  the remote process), with a local backstop in case the host stops answering.
- Files are read with `cat` and written by a short POSIX sh script fed through stdin: a temp
  file in the same directory, owner and mode copied from the original, fsync (`sync FILE`),
  rename. This works the same with `sudo -n`, which SFTP cannot do.
- Every paramiko / socket error is translated here, once, into a one-line TransportError
  named ``<host> (<address>:<port>)``.
- A command run with a `stop` Event (the remote repro) can be cancelled: closing its channel
  leaves it running (measured on OpenSSH 9.2: the remote `sleep` lived on); an RFC 4254 "signal"
  request (paramiko has no API for it) was ignored by that sshd, and would signal as the login
  user, not through sudo; a pty (its close sends SIGHUP) would merge stderr into stdout. So the
  command prints its pid first (`orch-pid N`, taken out of stdout) and execs `timeout`, which
  makes that pid the leader of its own process group; a second exec on the same connection then
  sends TERM to the group and KILL to what is left after the grace (`kill -- -N`, with sudo when
  the command had it). Everything the command started is in that group unless it left it itself.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import re
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Mapping, NoReturn, Sequence

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import (
    AuthenticationException,
    BadAuthenticationType,
    BadHostKeyException,
    NoValidConnectionsError,
    PartialAuthentication,
    PasswordRequiredException,
    SSHException,
)

from orchestrator.core.endpoints import host_port
from orchestrator.edges.transport import EXITED_DRAIN_S, STOP_POLL_S, FileEntry, Result, scope_argv
from orchestrator.edges.transport.tunnel import Tunnel
from orchestrator.errors import (
    STOPPING,
    CommandFailed,
    CommandInterrupted,
    CommandTimedOut,
    ConfigError,
    ConnectError,
    FileChanged,
    Interrupted,
    TransportError,
)

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # run() keeps the tail beyond this (a runaway log cat)
QUIET_CHECK_BYTES = 4096  # of a noisy login shell's words kept to name them
KILL_GRACE_S = 2.0  # `timeout -k`: SIGKILL this long after SIGTERM
BACKSTOP_S = 5.0  # local deadline = timeout + grace + this, if the host stops answering
TIMED_OUT_CODES = (124, 137)  # coreutils timeout: TERM worked / had to KILL
FILE_OP_TIMEOUT_S = 120.0  # read/write/exists give up on a host that stopped answering
# OpenSSH refuses a session past MaxSessions (10 by default) on one connection, and a busy host may
# be slow to open one. orch runs several commands on a host at once (the checks beside the repro,
# log collection, port scans): at most this many, and a session that cannot be opened on a live
# connection is tried again on it. Before, that failure closed the connection, and with it every
# command still running there ("connection lost while running ...").
MAX_CHANNELS = 8
REOPEN_WAIT_S = 0.2

# A stoppable command: the first line of its stdout is its pid, then it execs `timeout` (which calls
# setpgid(0, 0): the pid leads its own process group, and what it starts stays in it).
_ANNOUNCE = 'echo "orch-pid $$"; exec "$@"'
_PID_LINE = re.compile(rb"(?:^|\n)(orch-pid ([0-9]+)\n)")
PID_SCAN_BYTES = 4096  # the pid line comes first (after anything a login script printed)
PID_WAIT_S = 1.0  # a stop before the pid line arrived: how long to wait for it
# Its cancel, a second exec. $1 = the pid (and pgid), $2 = the grace in 50 ms steps. TERM goes to the
# pid too: for the moment between `echo` and `exec timeout` it is not a group leader yet. KILL goes
# to the group only (the pid alone may be reused once the group is gone). Exit 1: it outlived KILL.
_KILL_SCRIPT = r"""
kill -s TERM -- "-$1" "$1" 2>/dev/null
n=0
while kill -s 0 -- "-$1" 2>/dev/null; do
  if [ "$n" -ge "$2" ]; then kill -s KILL -- "-$1" 2>/dev/null; break; fi
  sleep 0.05; n=$((n + 1))
done
n=0
while kill -s 0 -- "-$1" 2>/dev/null; do
  if [ "$n" -ge 20 ]; then echo "process group $1 is still alive after SIGKILL" >&2; exit 1; fi
  sleep 0.05; n=$((n + 1))
done
"""

# The remote half of write_bytes_atomic. $1 = target path, $2 = its length; data arrives on stdin.
# $x (set first, from the argument each script names) = the sha256 the file must have now, '' for
# any file: write_bytes_atomic's `expect`.
# A symlinked env file is written through (readlink -f) so the link survives. The length is
# checked before the rename: a controller killed mid-send closes stdin early, and `cat` would
# then end without an error on a part of the file. The temp file is mktemp's 0600 until it
# takes its final owner and mode (_KEEP_MODE, or _COPY_MODE for a copy of another file).
_WRITE_HEAD = r"""
set -u
fail() { echo "orch-write: $*" >&2; exit 1; }
p=$(readlink -f -- "$1") || fail "cannot resolve $1"
d=${p%/*}; d=${d:-/}; b=${p##*/}
t=$(mktemp -- "$d/.$b.orch-XXXXXX") || fail "cannot create a temp file in $d"
trap 'rm -f -- "$t"' EXIT
cat > "$t" || fail "cannot write $t"
n=$(wc -c < "$t") || fail "cannot read back $t"
[ $((n)) -eq "$2" ] || fail "received $((n)) of $2 bytes; $p is unchanged"
"""
_KEEP_MODE = r"""
if [ -e "$p" ]; then
  chown --reference="$p" -- "$t" || fail "cannot keep the owner of $p"
  chmod --reference="$p" -- "$t" || fail "cannot keep the mode of $p"
else
  chmod "$(printf '%o' $(( 0666 & ~0$(umask) )))" -- "$t" || fail "cannot set the mode of $t"
fi
"""
# $3 = the file this one copies (write_bytes_atomic's `like`): its owner and mode, else 0600
_COPY_MODE = r"""
if [ -e "$3" ]; then
  chown --reference="$3" -- "$t" || fail "cannot give $p the owner of $3"
  chmod --reference="$3" -- "$t" || fail "cannot give $p the mode of $3"
else
  chmod 600 -- "$t" || fail "cannot set the mode of $t"
fi
"""
# The file is compared with $x last, just before the rename: an edit made meanwhile can still be
# lost only in the few milliseconds of the comparison and the mv, not during the whole transfer.
_WRITE_TAIL = r"""
sync -- "$t" 2>/dev/null || true
if [ -n "$x" ]; then
  h=
  if [ -f "$p" ]; then h=$( { sha256sum < "$p"; } 2>/dev/null ) || h=; fi
  [ "${h%% *}" = "$x" ] || { echo "orch-write: changed" >&2; exit 5; }
fi
mv -f -- "$t" "$p" || fail "cannot rename into $p"
trap - EXIT
sync -- "$d" 2>/dev/null || true
"""
_WRITE_SCRIPT = "x=${3-}" + _WRITE_HEAD + _KEEP_MODE + _WRITE_TAIL  # argv: PATH LENGTH [EXPECT]
_WRITE_LIKE_SCRIPT = "x=" + _WRITE_HEAD + _COPY_MODE + _WRITE_TAIL  # argv: PATH LENGTH LIKE
# write_then_run: the write above, then (written: a marker line first) the command, bounded on the host.
# argv: PATH LENGTH KILL_GRACE TIMEOUT COMMAND [EXPECT]
WRITTEN = "orch-written"
_WRITE_THEN_RUN_SCRIPT = (
    "x=${6-}" + _WRITE_HEAD + _KEEP_MODE + _WRITE_TAIL + f'echo {WRITTEN}\nexec timeout -k "$3" "$4" /bin/sh -c "$5"\n'
)
CHANGED = b"orch-write: changed"  # the write script's line when the file is not what `expect` says

# The remote half of read_bytes: $1 = path, $2 = the most bytes to send. A path that exists but
# is not a regular file (a FIFO would block `cat`, /dev/zero would never end) exits 3.
_READ_SCRIPT = (
    'if [ -e "$1" ] && [ ! -f "$1" ]; then echo "orch-read: not a regular file" >&2; exit 3; fi\n'
    'exec head -c "$2" -- "$1"'
)
MAX_READ_BYTES = 64 << 20  # an env file or a lock file: a few KiB

# The remote half of read_entry, read_bytes that also says what the path is: a first line
# `orch-link TARGET` for a symlink, then `orch-missing`, or `orch-file MODE UID GID` and the bytes
# (through the link). A path that is itself neither a symlink nor a regular file: `orch-special
# KIND` (stat's %F: fifo, directory...), never opened. One a link leads to: exit 3, as _READ_SCRIPT.
_ENTRY_SCRIPT = (
    'if [ -L "$1" ]; then printf "orch-link %s\\n" "$(readlink -- "$1")"; fi\n'
    'if [ ! -e "$1" ]; then echo orch-missing; exit 0; fi\n'
    'if [ ! -L "$1" ] && [ ! -f "$1" ]; then printf "orch-special %s\\n" "$(stat -c %F -- "$1")"; exit 0; fi\n'
    'if [ ! -f "$1" ]; then echo "orch-read: not a regular file" >&2; exit 3; fi\n'
    'stat -L -c "orch-file %a %u %g" -- "$1" || exit 4\n'
    'exec head -c "$2" -- "$1"'
)
_HEADER_ROOM = 8192  # read_entry's header lines, kept ahead of a file as big as MAX_READ_BYTES

# Short reasons for the errors a user can act on, matched in a tool's stderr.
_REASONS = (
    ("Permission denied", "permission denied"),
    ("Operation not permitted", "operation not permitted (immutable or append-only file? see lsattr)"),
    ("No such file or directory", "no such file or directory"),
    ("Read-only file system", "read-only file system"),
    ("No space left on device", "no space left on device"),
    ("Is a directory", "is a directory"),
    ("Not a directory", "a parent is not a directory"),
)


@dataclass(frozen=True)
class _Raw:
    """What one remote exec returned, bytes untouched."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float


class _Deadline(Exception):
    """The local backstop deadline passed: the host stopped answering."""


class _UnknownHostKey(SSHException):
    """The server's key is not in known_hosts (raised by _RejectUnknown)."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"{hostname} not found in known_hosts")
        self.hostname, self.key = hostname, key


class _RejectUnknown(paramiko.RejectPolicy):
    """RejectPolicy, but with a typed exception we can translate without parsing text."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname, key)


class SshTransport:
    """Implements orchestrator.edges.transport.Transport over one persistent SSH connection."""

    def __init__(
        self,
        host: str,
        hostname: str,
        *,
        port: int = 22,
        user: str = "root",
        key_filename: str | None = None,
        known_hosts: str | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout: float = 10.0,
        keepalive_s: int = 15,
        use_sudo: bool = False,
    ) -> None:
        _check_operand("ssh.host", hostname)
        _check_operand("ssh.user", user)
        self.host = host
        self.hostname, self.port, self.user = hostname, port, user
        self.key_filename, self.known_hosts = key_filename, known_hosts
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout, self.keepalive_s, self.use_sudo = connect_timeout, keepalive_s, use_sudo
        # The `host` of every error raised here. A caller's label that already names the
        # address (config's Host.label, "decode (10.0.0.4:22)") is used as it is.
        self.label = host if hostname in host else f"{host} ({host_port(hostname, port)})"
        self.connects = 0  # successful connects: 1 for a whole sweep unless the link dropped
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._channels = threading.BoundedSemaphore(MAX_CHANNELS)
        self._tunnels: list[Tunnel] = []

    # ---------------------------------------------------------------- Transport protocol
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
        """Run a command; a timeout kills it on the host and raises CommandTimedOut (with the output so far).
        `stop` set (or Ctrl-C/SIGTERM in the main thread while it runs) kills its process group on the
        host and raises CommandInterrupted (with the output so far); set before the call, nothing runs.
        `env` is set by `env` on the host, inside sudo (whose env_reset would drop it); `scope`: in
        that transient systemd scope (systemd-run, inside sudo and the pid line, so the pid it
        prints is still the one whose process group a stop kills)."""
        shown = command if isinstance(command, str) else shlex.join(command)
        as_root = sudo or self.use_sudo
        if stop is not None and stop.is_set():
            raise CommandInterrupted(Result(self.host, shown, -1, "", "", 0.0), host=self.label)
        line = command_line(command, sudo=as_root, timeout=timeout, stoppable=stop is not None, env=env, scope=scope)
        raw = self._exec(line, timeout=timeout, shown=shown, max_output=MAX_OUTPUT_BYTES, stop=stop, sudo=as_root)
        self._raise_if_sudo_refused(raw, as_root)
        result = Result(
            host=self.host,
            command=shown,
            exit_code=raw.exit_code,
            stdout=raw.stdout.decode("utf-8", "replace"),
            stderr=raw.stderr.decode("utf-8", "replace"),
            duration_s=raw.duration_s,
        )
        if check and not result.ok:
            raise CommandFailed(self.label, shown, result.exit_code, result.stdout, result.stderr)
        return result

    def read_bytes(self, path: str) -> bytes:
        argv = ["sh", "-c", _READ_SCRIPT, "orch-read", path, str(MAX_READ_BYTES + 1)]
        line = command_line(argv, sudo=self.use_sudo, timeout=None)
        raw = self._exec(line, timeout=FILE_OP_TIMEOUT_S, shown=f"cat {path}", max_output=MAX_READ_BYTES + 1)
        self._raise_if_sudo_refused(raw, self.use_sudo)
        if raw.exit_code == 3 and b"orch-read: not a regular file" in raw.stderr:
            raise ConfigError("not a regular file", file=f"{self.label}:{path}", hint="an env file is a plain file")
        if raw.exit_code == 0 and len(raw.stdout) > MAX_READ_BYTES:
            raise ConfigError(f"larger than {MAX_READ_BYTES >> 20} MiB", file=f"{self.label}:{path}")
        if raw.exit_code != 0:
            raise TransportError(self.label, f"cannot read {path}: {_reason(raw.stderr)}{self._hint(raw.stderr)}")
        return raw.stdout

    def read_entry(self, path: str) -> FileEntry:
        argv = ["sh", "-c", _ENTRY_SCRIPT, "orch-read", path, str(MAX_READ_BYTES + 1)]
        line = command_line(argv, sudo=self.use_sudo, timeout=None)
        cap = MAX_READ_BYTES + 1 + _HEADER_ROOM
        raw = self._exec(line, timeout=FILE_OP_TIMEOUT_S, shown=f"cat {path}", max_output=cap)
        self._raise_if_sudo_refused(raw, self.use_sudo)
        if raw.exit_code == 3 and b"orch-read: not a regular file" in raw.stderr:
            raise ConfigError("not a regular file", file=f"{self.label}:{path}", hint="an env file is a plain file")
        if raw.exit_code != 0:
            raise TransportError(self.label, f"cannot read {path}: {_reason(raw.stderr)}{self._hint(raw.stderr)}")
        entry = parse_entry(raw.stdout)
        if entry is None:
            raise TransportError(self.label, f"cannot read {path}: unexpected answer {raw.stdout[:80]!r}")
        if entry.data is not None and len(entry.data) > MAX_READ_BYTES:
            raise ConfigError(f"larger than {MAX_READ_BYTES >> 20} MiB", file=f"{self.label}:{path}")
        return entry

    def write_bytes_atomic(
        self, path: str, data: bytes, *, like: str | None = None, expect: bytes | None = None
    ) -> None:
        """Temp file in the same directory, owner+mode of the original (or of `like`), fsync, rename;
        with `expect`, only if the file still holds those bytes (compared on the host, by sha256)."""
        argv = ["sh", "-c", _WRITE_SCRIPT, "orch-write", path, str(len(data)), _digest(expect)]
        if like is not None:
            argv = ["sh", "-c", _WRITE_LIKE_SCRIPT, "orch-write", path, str(len(data)), like]
        line = command_line(argv, sudo=self.use_sudo, timeout=None)
        raw = self._exec(line, stdin=data, timeout=FILE_OP_TIMEOUT_S, shown=f"write {path}")
        self._raise_if_sudo_refused(raw, self.use_sudo)
        self._raise_if_changed(raw, path)
        if raw.exit_code != 0:
            raise TransportError(self.label, f"cannot write {path}: {_reason(raw.stderr)}{self._hint(raw.stderr)}")

    def write_then_run(
        self, path: str, data: bytes, command: str, *, timeout: float, expect: bytes | None = None
    ) -> Result:
        """The write script, then `command` under `timeout` on the host, in one exec: the line
        `orch-written` between them tells a failed write (nothing ran) from a failed command."""
        argv = [
            "sh",
            "-c",
            _WRITE_THEN_RUN_SCRIPT,
            "orch-write",
            path,
            str(len(data)),
            f"{KILL_GRACE_S:g}",
            f"{timeout:.3f}",
            command,
            _digest(expect),
        ]
        line = command_line(argv, sudo=self.use_sudo, timeout=None)
        raw = self._exec(line, stdin=data, timeout=FILE_OP_TIMEOUT_S + timeout, shown=f"write {path}; {command}")
        self._raise_if_sudo_refused(raw, self.use_sudo)
        head, sep, rest = raw.stdout.partition(f"{WRITTEN}\n".encode())
        if head or not sep:
            self._raise_if_changed(raw, path)
            raise TransportError(self.label, f"cannot write {path}: {_reason(raw.stderr)}{self._hint(raw.stderr)}")
        out, err = rest.decode("utf-8", "replace"), raw.stderr.decode("utf-8", "replace")
        result = Result(self.host, command, raw.exit_code, out, err, raw.duration_s)
        if raw.exit_code in TIMED_OUT_CODES and raw.duration_s >= timeout:  # as run() says it
            raise CommandTimedOut(result, timeout, host=self.label)
        return result

    def exists(self, path: str) -> bool:
        line = command_line(["test", "-e", path], sudo=self.use_sudo, timeout=None)
        raw = self._exec(line, timeout=FILE_OP_TIMEOUT_S, shown=f"test -e {path}")
        self._raise_if_sudo_refused(raw, self.use_sudo)
        if raw.exit_code not in (0, 1):
            raise TransportError(self.label, f"cannot check {path}: {_reason(raw.stderr)}")
        return raw.exit_code == 0

    def close(self) -> None:
        for tunnel in self._tunnels:
            tunnel.close()
        self._tunnels.clear()
        with self._lock:
            self._discard()

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- tunnels
    def open_tunnel(self, remote_host: str, remote_port: int) -> "Tunnel":
        """A local port forwarded through this connection to remote_host:remote_port as the
        host sees it (for firewalled health ports). Close it with `.close()`."""
        tunnel = Tunnel(self.label, self._open_channel, (remote_host, remote_port))
        self._tunnels.append(tunnel)
        return tunnel

    def _open_channel(self, remote: tuple[str, int]) -> paramiko.Channel:
        transport = self._connection().transport
        if transport is None:
            raise TransportError(self.label, "no SSH transport for a tunnel")
        try:
            return transport.open_channel("direct-tcpip", remote, ("127.0.0.1", 0), timeout=self.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(self.label, f"tunnel to {remote[0]}:{remote[1]} refused: {_one_line(exc)}") from exc

    # ---------------------------------------------------------------- connection
    def _connection(self) -> Connection:
        """The open connection; (re)connects if there is none or it dropped."""
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            self._discard()
            self._conn = self._open()
            return self._conn

    def _open(self) -> Connection:
        self._check_files()
        conn = Connection(
            self.hostname,
            user=self.user,
            port=self.port,
            # An explicit, empty SSHConfig: Fabric then reads no ssh_config files.
            config=Config(ssh_config=paramiko.SSHConfig(), lazy=True),
            connect_kwargs=self._connect_kwargs(),
        )
        self._load_host_keys(conn.client)
        policy = paramiko.AutoAddPolicy() if self.accept_new_host_keys else _RejectUnknown()
        conn.client.set_missing_host_key_policy(policy)
        try:
            conn.open()
        except Exception as exc:  # noqa: BLE001 - every library error is translated here
            conn.close()
            raise self._connect_error(exc) from exc
        self._tune(conn)
        try:
            self._check_quiet_login(conn)
        except BaseException:
            conn.close()
            raise
        self.connects += 1
        return conn

    def _check_quiet_login(self, conn: Connection) -> None:
        """Refuse a login shell that prints on its own (a ~/.bashrc `echo`, which bash also runs
        for an SSH command): its words come before every command's output, where orch reads a
        file's bytes and the answers it parses, so they would be taken for the file's first line
        (rsync asks "is your shell clean?" for the same reason). One `true` per connection."""
        try:
            chan = conn.client.get_transport().open_session(timeout=self.connect_timeout)
            with chan:
                chan.exec_command("true")
                deadline = time.monotonic() + self.connect_timeout
                out, err = _drain(chan, deadline, QUIET_CHECK_BYTES)
                status = _exit_status(chan, deadline)
        except (SSHException, EOFError, OSError, AttributeError, _Deadline) as exc:
            raise self._connect_error(exc) from exc
        if status > 0:  # an account whose shell is nologin or false: every command "fails" the same way
            said = (out + err).decode("utf-8", "replace").strip().splitlines()
            words = f", saying {said[0][:80]!r}" if said else ""
            raise ConnectError(
                self.label,
                f"the login shell of {self.user} runs no command (`true` exited {status}{words}): its shell is "
                f"nologin or false? (`getent passwd {self.user}` there): give it a shell such as /bin/bash "
                f"(`chsh -s /bin/bash {self.user}`) or connect as another user",
            )
        if out:
            said = out.decode("utf-8", "replace").strip().splitlines() or [""]
            shown = said[0][:80] + (" ..." if len(said) > 1 or len(said[0]) > 80 else "")
            raise ConnectError(
                self.label,
                f"its login shell prints {shown!r} before every command's output (`true` said so; from "
                f"~/.bashrc, ~/.profile or /etc/bash.bashrc?): orch would read it as part of files and "
                f'answers; make it print only in interactive shells (`[ -z "$PS1" ] && return` above it)',
            )

    def _connect_kwargs(self) -> dict[str, object]:
        """A given key is the only identity used (like IdentitiesOnly); else agent + ~/.ssh."""
        t = self.connect_timeout
        kwargs: dict[str, object] = {"timeout": t, "banner_timeout": t, "auth_timeout": t}
        if self.key_filename:
            kwargs.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=False)
        return kwargs

    def _check_files(self) -> None:
        if self.key_filename and not os.path.isfile(self.key_filename):
            raise TransportError(self.label, f"key file {self.key_filename} not found (check `key:`)")
        if self.known_hosts and not os.path.isfile(self.known_hosts):
            raise TransportError(self.label, f"known_hosts file {self.known_hosts} not found (check `known_hosts:`)")

    def _load_host_keys(self, client: paramiko.SSHClient) -> None:
        """Load as *system* keys: an accepted new key then stays in memory, never written."""
        path = self.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if not os.path.isfile(path):
            return
        try:
            client.load_system_host_keys(path)
        except (OSError, SSHException) as exc:
            raise TransportError(self.label, f"cannot read known_hosts {path}: {_one_line(exc)}") from exc

    def _tune(self, conn: Connection) -> None:
        transport = conn.client.get_transport()
        assert transport is not None  # connect() succeeded
        transport.set_keepalive(self.keepalive_s)
        sock = transport.sock
        if isinstance(sock, socket.socket):  # small request/response packets: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _discard(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may raise anything
                pass
            self._conn = None

    # ---------------------------------------------------------------- exec
    def _exec(
        self,
        line: str,
        *,
        stdin: bytes = b"",
        timeout: float | None = None,
        shown: str,
        max_output: int | None = None,
        stop: threading.Event | None = None,
        sudo: bool = False,
        reserved: bool = False,
    ) -> _Raw:
        """Run one command line. If the connection turns out dead before the command could
        start, reconnect once and retry; a drop after it started is an error (it may have run).
        With `stop`, `line` is a stoppable one (command_line(stoppable=True)); `sudo`: it runs as root.
        `reserved`: the kill of a stopped command, which may not wait for a channel slot (the
        commands holding them may be the ones waiting for that kill)."""
        with contextlib.nullcontext() if reserved else self._channels:
            reconnected, patient_until = False, time.monotonic() + self.connect_timeout
            while True:
                conn = self._connection()
                try:
                    # paramiko is untyped (Any): get_transport() may be None, caught below as AttributeError
                    chan = conn.client.get_transport().open_session(timeout=self.connect_timeout)
                except (SSHException, EOFError, OSError, AttributeError) as exc:
                    live = self._after_refused_session(conn)
                    if live and time.monotonic() < patient_until:
                        continue  # sshd's MaxSessions: a session of the others ends soon
                    if not live and not reconnected:
                        reconnected = True
                        continue
                    raise TransportError(self.label, self._refused_session(exc, live)) from exc
                with chan:
                    return self._drive(chan, line, stdin, timeout, shown, max_output, stop, sudo)

    def _after_refused_session(self, conn: Connection) -> bool:
        """A session could not be opened: drop the connection only if it is dead (False: the retry
        reconnects); on a live one (True), other commands still run, so wait a moment and ask again."""
        with self._lock:
            if self._conn is conn and not _alive(conn):
                self._discard()
                return False
        time.sleep(REOPEN_WAIT_S)
        return True

    def _refused_session(self, exc: BaseException, live: bool) -> str:
        if not live:
            return f"connection lost: {_one_line(exc)}"
        return (
            f"the host refused every new session on a live connection for {self.connect_timeout:g} s "
            f"({_one_line(exc)}): sshd's MaxSessions is below the {MAX_CHANNELS} commands orch may run at "
            f"once on a host? (`sshd -T | grep -i maxsessions` there; {MAX_CHANNELS} or more lets orch run)"
        )

    def _drive(
        self,
        chan: paramiko.Channel,
        line: str,
        stdin: bytes,
        timeout: float | None,
        shown: str,
        max_output: int | None,
        stop: threading.Event | None = None,
        sudo: bool = False,
    ) -> _Raw:
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout + KILL_GRACE_S + BACKSTOP_S
        output = _Output(chan, max_output, pid_line=stop is not None)
        try:
            chan.exec_command(line)
            _send(chan, stdin)
            stopped_by = _read_or_stop(output, deadline, stop)
            if stopped_by is not None:
                self._cancel(output, shown, started, sudo, stopped_by)
            out, err = bytes(output.out), bytes(output.err)
            code = _exit_status(chan, deadline)
        except _Deadline:
            raise TransportError(self.label, f"no answer within {timeout:g} s: {_short(shown)} (host hung?)") from None
        except (SSHException, EOFError, OSError) as exc:
            raise TransportError(
                self.label, f"connection lost while running `{_short(shown)}` ({_one_line(exc)})"
            ) from exc
        elapsed = time.monotonic() - started
        if code < 0:
            raise TransportError(
                self.label, f"connection lost while running `{_short(shown)}` (it may have run partly)"
            )
        if timeout is not None and code in TIMED_OUT_CODES and elapsed >= timeout:
            decoded = Result(
                self.host, shown, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), elapsed
            )
            raise CommandTimedOut(decoded, timeout, host=self.label)
        return _Raw(code, out, err, elapsed)

    def _cancel(self, output: _Output, shown: str, started: float, sudo: bool, cause: BaseException) -> NoReturn:
        """Kill a stoppable command's process group on the host, read what it printed until its
        channel closes, and raise CommandInterrupted with that output. A kill that could not be
        made is a note on the error (the command may still run there)."""
        problem = ""
        try:
            if output.pid is None and not output.finished:  # stopped within a few ms of its start
                output.read(time.monotonic() + PID_WAIT_S, until_pid=True)
            if output.pid is not None:
                problem = self._kill_group(output.pid, sudo)
            elif not output.finished:
                problem = "it did not say its pid in time, so it could not be killed and may still run there"
            output.read(time.monotonic() + KILL_GRACE_S + BACKSTOP_S)
        except (_Deadline, SSHException, EOFError, OSError):
            pass  # what arrived so far is kept; a link that dropped now cannot say more
        chan = output.chan
        code = chan.recv_exit_status() if chan.status_event.wait(0.2) else -1
        out, err = output.out.decode("utf-8", "replace"), output.err.decode("utf-8", "replace")
        exc = CommandInterrupted(Result(self.host, shown, code, out, err, time.monotonic() - started), host=self.label)
        if problem:
            exc.add_note(f"{self.label}: the stopped command `{_short(shown)}`: {problem}")
        raise exc from (None if isinstance(cause, _Stopped) else cause)

    def _kill_group(self, pid: int, sudo: bool) -> str:
        """TERM to the process group `pid`, KILL after KILL_GRACE_S: '' once it is gone, else why not."""
        steps = str(max(1, round(KILL_GRACE_S / 0.05)))
        line = command_line(["sh", "-c", _KILL_SCRIPT, "orch-kill", str(pid), steps], sudo=sudo, timeout=None)
        try:
            raw = self._exec(line, timeout=KILL_GRACE_S + 1.0, shown=f"kill process group {pid}", reserved=True)
        except TransportError as exc:
            return f"could not kill its process group {pid}: {exc}"
        if raw.exit_code != 0:
            return f"could not kill its process group {pid}: {_reason(raw.stderr)}"
        return ""

    # ---------------------------------------------------------------- errors
    def _connect_error(self, exc: BaseException) -> ConnectError:
        about = "key" if isinstance(exc, (AuthenticationException, PasswordRequiredException)) else "host"
        return ConnectError(self.label, connect_error_message(exc, self), about=about)

    def _hint(self, stderr: bytes) -> str:
        """Another user or sudo, for a refusal only root would pass; none when root refused it already
        (an immutable or append-only file, a read-only mount: the reason says so)."""
        if self.use_sudo or self.user == "root":
            return ""
        if b"Permission denied" in stderr or b"Operation not permitted" in stderr:
            return f" (connected as {self.user}: use a user who may do this, or set `sudo: true`)"
        return ""

    def _raise_if_changed(self, raw: _Raw, path: str) -> None:
        """The write script found the file other than `expect` said (exit 5): nothing written."""
        if raw.exit_code == 5 and CHANGED in raw.stderr:
            raise FileChanged(self.label, path)

    def _raise_if_sudo_refused(self, raw: _Raw, sudo: bool) -> None:
        reason = sudo_refusal(raw.stderr, raw.exit_code) if sudo else None
        if reason is not None:
            raise ConnectError(
                self.label,
                f"sudo -n refused: {reason} (orch runs commands through `sudo -n`, with no password and no "
                f"terminal: allow {self.user} NOPASSWD and no requiretty in sudoers, or connect as root)",
                about="sudo",
            )


# -------------------------------------------------------------------- pure helpers
SUDO_WARNINGS = ("unable to resolve host",)  # sudo says these and goes on: never its refusal
SUDO_LINES_READ = 20  # of stderr's end: sudo's refusal is its last word, after any login noise


def sudo_refusal(stderr: bytes, exit_code: int) -> str | None:
    """Why `sudo -n` refused to run a command, or None when it ran it (or the reason is not
    sudo's). sudo exits 1 and ends with its reason ("sudo: a password is required", "sudo: sorry,
    you must have a tty to run sudo"); lines before it may be the login's ("Could not chdir to
    home directory") or sudo's own warnings ("sudo: unable to resolve host decode"), which the
    first line alone took for the reason, or passed over (a real host printed both)."""
    if exit_code != 1:
        return None
    lines = stderr[-4096:].decode("utf-8", "replace").strip().splitlines()[-SUDO_LINES_READ:]
    said = [line[6:] for line in lines if line.startswith("sudo: ")]
    reasons = [r for r in said if not r.startswith(SUDO_WARNINGS)]
    return reasons[-1] if reasons else None


def _digest(expect: bytes | None) -> str:
    """The write scripts' EXPECT argument: the sha256 the file must have, '' for any file."""
    return "" if expect is None else hashlib.sha256(expect).hexdigest()


def parse_entry(out: bytes) -> FileEntry | None:
    """_ENTRY_SCRIPT's answer as a FileEntry (None: not one of its answers)."""
    link = None
    if out.startswith(b"orch-link "):
        first, _, out = out.partition(b"\n")
        link = first[len(b"orch-link ") :].decode("utf-8", "surrogateescape")
    head, _, data = out.partition(b"\n")
    if head == b"orch-missing":
        return FileEntry(None, link)
    if head.startswith(b"orch-special ") and link is None:
        return FileEntry(None, special=_special_kind(head[len(b"orch-special ") :]))
    fields = head.split(b" ")
    if len(fields) != 4 or fields[0] != b"orch-file" or not all(f.isdigit() for f in fields[1:]):
        return None
    return FileEntry(data, link, int(fields[1], 8), int(fields[2]), int(fields[3]))


def _special_kind(stat_type: bytes) -> str:
    """stat's %F of a path that is not a regular file, in core.bounded.describe_kind's words."""
    words = {b"fifo": "a FIFO", b"directory": "a directory", b"socket": "a socket"}
    return words.get(stat_type.strip(), "a device" if b"special file" in stat_type else "not a file")


def _check_operand(key: str, value: str) -> None:
    """A host or user goes into connections and into the commands a hint shows (ssh-keyscan,
    ssh-keygen): never one that reads as an option or holds whitespace or shell syntax. The
    inventory refuses them first (config); this is the edge's own guard for other callers."""
    if not value or value.startswith("-") or any(c.isspace() or c in "\x00;&|`$<>()'\"\\*?!{}" for c in value):
        raise ConfigError(f"{key}: {value!r} is not a host or user name", hint="letters, digits, . - _ : not first -")


def _alive(conn: Connection) -> bool:
    """Is the connection's SSH transport still up (paramiko is untyped: Any)?"""
    transport = conn.client.get_transport() if conn.client is not None else None
    return bool(transport is not None and transport.is_active())


def command_line(
    command: str | Sequence[str],
    *,
    sudo: bool,
    timeout: float | None,
    stoppable: bool = False,
    env: Mapping[str, str] | None = None,
    scope: str | None = None,
) -> str:
    """The exact line sent to the host. A sequence is quoted word by word; a string is kept
    for the login shell, or handed to "$SHELL" -c (quoted) when sudo, timeout or env wrap it.
    sudo is outermost so that `timeout` (running as root) can also kill a root command.
    stoppable: the line prints `orch-pid PID` first and runs under `timeout` (0: none) even
    without a timeout, so that PID leads the process group SshTransport's cancel kills.
    env: `env NAME=VALUE...` innermost, so that sudo's env_reset cannot drop it.
    scope: `systemd-run --scope --unit=SCOPE ...` right after the pid line (as root: inside sudo),
    before `timeout`: systemd-run moves itself into the scope and execs `timeout` in place, so the
    announced pid becomes the leader of the process group a stop kills, as without it, and
    `timeout` and all it starts are in the scope."""
    if not isinstance(command, str) and not command:
        raise ValueError("empty command")
    prefix: list[str] = []
    if sudo:
        prefix += ["sudo", "-n", "--"]
    if stoppable:
        prefix += ["sh", "-c", _ANNOUNCE, "orch-run"]
    if scope:
        prefix += scope_argv(scope)
    if timeout is not None or stoppable:
        duration = "0" if timeout is None else f"{max(timeout, 0.001):.3f}"  # coreutils: 0 is no timeout
        prefix += ["timeout", "-k", f"{KILL_GRACE_S:g}", duration]
    if env:
        prefix += ["env", *(_assignment(name, value) for name, value in env.items())]
    if not isinstance(command, str):
        return shlex.join([*prefix, *command])
    if not prefix:
        return command
    return f'{shlex.join(prefix)} "${{SHELL:-/bin/sh}}" -c {shlex.quote(command)}'


def _assignment(name: str, value: str) -> str:
    """`NAME=VALUE` for env(1): a name env would read as a command or an option is refused."""
    if not _ENV_NAME.fullmatch(name) or "\0" in value:
        raise ValueError(f"not an environment variable: {name!r}")
    return f"{name}={value}"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def connect_error_message(exc: BaseException, t: SshTransport) -> str:
    """One line a user can act on, for each way connecting can fail."""
    if isinstance(exc, _UnknownHostKey):
        kh = t.known_hosts or "~/.ssh/known_hosts"
        return (
            f"host key not in known_hosts {kh}: server offers {_fingerprint(exc.key)} (add it with "
            f"`ssh-keyscan -p {t.port} {t.hostname} >> {kh}`, or set accept_new_host_keys: true)"
        )
    if isinstance(exc, BadHostKeyException):
        kh = shlex.quote(t.known_hosts) if t.known_hosts else "~/.ssh/known_hosts"
        entry = t.hostname if t.port == 22 else f"[{t.hostname}]:{t.port}"  # how known_hosts names it
        return (
            f"host key CHANGED: known_hosts has {_fingerprint(exc.expected_key)}, server offers "
            f"{_fingerprint(exc.key)} (possible man-in-the-middle; if the host was reinstalled, "
            f"remove the old key with `ssh-keygen -R {shlex.quote(entry)} -f {kh}`)"
        )
    if isinstance(exc, PasswordRequiredException):
        return f"key {t.key_filename} is passphrase-protected (load it into ssh-agent and drop `key:`)"
    if isinstance(exc, BadAuthenticationType):
        return f"authentication failed for {t.user}: server allows only {', '.join(exc.allowed_types)} (use a key)"
    if isinstance(exc, PartialAuthentication):
        return (
            f"authentication failed for {t.user}: the key was accepted but the server also requires "
            f"{', '.join(exc.allowed_types)} (orch logs in with a key only: relax AuthenticationMethods for this user)"
        )
    if isinstance(exc, AuthenticationException):
        return _auth_failure(str(exc), t)
    if isinstance(exc, NoValidConnectionsError):
        codes = {e.errno for e in exc.errors.values() if isinstance(e, OSError)}
        return "cannot connect: " + _errno_text(next(iter(codes), None), t)
    if isinstance(exc, socket.gaierror):
        return f"cannot connect: cannot resolve host name {t.hostname} (check `ssh.host`)"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return (
            f"cannot connect: timed out after {t.connect_timeout:g} s (host down, or a firewall drops port {t.port}?)"
        )
    if isinstance(exc, OSError):
        return "cannot connect: " + _errno_text(exc.errno, t, exc)
    if isinstance(exc, (SSHException, EOFError)):
        return f"SSH handshake failed: {_one_line(exc) or type(exc).__name__} (is port {t.port} an SSH server?)"
    return f"cannot connect: {type(exc).__name__}: {_one_line(exc)}"


def _auth_failure(text: str, t: SshTransport) -> str:
    """paramiko says "transport shut down or saw EOF" when the server hangs up in the middle of
    authentication: sshd does that after accepting the key when PAM's account check refuses the
    account (locked, expired), which no `key:` change fixes. Without PAM, sshd refuses such an
    account exactly as it refuses a wrong key (measured: `usermod -L`, `usermod -e 1`), so that
    message names both."""
    if "transport shut down or saw EOF" in text:
        return (
            f"login refused for {t.user}: the server closed the connection during authentication (the account "
            f"may be locked or expired, or sshd/PAM refuses it: see `passwd -S {t.user}`, `chage -l {t.user}` "
            "and sshd's log on the host)"
        )
    if "timeout" in text.lower():
        return (
            f"authentication failed for {t.user}: no answer within {t.connect_timeout:g} s "
            "(slow PAM or DNS on the host? raise `connect_timeout:`)"
        )
    # no key offered was accepted: sshd without PAM answers a locked or expired account exactly so
    what = "`key:`" if t.key_filename else "`key:` or your ssh-agent"
    return f"authentication failed for {t.user} (check {what}; or the account is locked or expired: see sshd's log)"


def _errno_text(code: int | None, t: SshTransport, exc: OSError | None = None) -> str:
    if code == errno.ECONNREFUSED:
        return f"connection refused (is sshd running and listening on port {t.port}?)"
    if code == errno.EHOSTUNREACH:
        return "no route to host (host down or wrong address?)"
    if code == errno.ENETUNREACH:
        return "network unreachable (wrong address?)"
    if code == errno.ETIMEDOUT:
        return "timed out (host down, or a firewall drops the port?)"
    if code == errno.ECONNRESET:
        return "connection reset by the server (sshd MaxStartups or a firewall?)"
    return _one_line(exc) if exc is not None else (os.strerror(code) if code else "unknown error")


def _reason(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    for needle, reason in _REASONS:
        if needle in text:
            return reason
    return _one_line(text.strip().splitlines()[-1] if text.strip() else "unknown error")


def _fingerprint(key: paramiko.PKey) -> str:
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def _one_line(x: object) -> str:
    text = " ".join(str(x).split())
    return text[:300]


def _short(command: str) -> str:
    return command if len(command) <= 120 else command[:117] + "..."


def _send(chan: paramiko.Channel, data: bytes) -> None:
    """Feed stdin, then EOF. A command that fails early stops reading and its channel closes:
    that is not a connection problem, its exit status (read next) says what went wrong."""
    try:
        if data:
            chan.sendall(data)
        chan.shutdown_write()
    except (OSError, EOFError, SSHException):
        pass


class _Stopped(Exception):
    """The stop Event was set while a stoppable command ran."""


class _Output:
    """A command's stdout and stderr as they arrive, each keeping its tail beyond max_output.
    With pid_line (a stoppable command: the repro), the `orch-pid N` line is taken out of stdout as
    it comes, and the output ends EXITED_DRAIN_S after the command's exit status arrived even if
    the channel stays open: sshd sends EOF only once every process holding the command's stdout
    or stderr closed it, so a child it left running with them (`setsid loadgen &`, measured on the
    testbed: exit status after 11 ms, EOF when the child died) held orch until the timeout and its
    backstop, to fail as a hung host. That child is found and stopped by the leftover check that
    follows the repro (edges.remote_leftovers)."""

    def __init__(self, chan: paramiko.Channel, max_output: int | None, *, pid_line: bool = False) -> None:
        self.chan, self.max_output = chan, max_output
        self.out, self.err = bytearray(), bytearray()
        self.pid: int | None = None
        self._want_pid = pid_line
        self._exited_at: float | None = None if pid_line else float("inf")  # inf: wait for EOF

    @property
    def finished(self) -> bool:
        return bool(self.chan.closed or self.chan.eof_received) or self._drained()

    def _drained(self) -> bool:
        """Has the command's exit status been here EXITED_DRAIN_S (its output is all in by then)?"""
        if self._exited_at is None and self.chan.exit_status_ready():
            self._exited_at = time.monotonic()
        return self._exited_at is not None and time.monotonic() - self._exited_at >= EXITED_DRAIN_S

    def read(self, deadline: float | None, stop: threading.Event | None = None, *, until_pid: bool = False) -> bool:
        """Read until EOF/close (True); False as soon as `stop` is set, or (until_pid) the pid
        is known. select() on the channel wakes on data for either stream and on EOF/close;
        _Deadline once `deadline` passes."""
        chan = self.chan
        while True:
            # EOF or close is read BEFORE the buffers: paramiko's reader thread queues the last data
            # and then the EOF/close, so once either is seen, one more read finds everything. The
            # other order (read, then look) lost output that landed in between: `cat` of a lock file
            # came back empty and a released lock stayed behind.
            finished = self.finished
            while chan.recv_ready():
                _append(self.out, chan.recv(65536), self.max_output)
            while chan.recv_stderr_ready():
                _append(self.err, chan.recv_stderr(65536), self.max_output)
            if self._want_pid:
                self._take_pid(finished)
            if finished:
                return True
            if (stop is not None and stop.is_set()) or (until_pid and self.pid is not None):
                return False
            wait = 1.0 if deadline is None else deadline - time.monotonic()
            if wait <= 0:
                raise _Deadline
            select.select([chan], [], [], min(wait, 1.0 if stop is None and not until_pid else STOP_POLL_S))

    def _take_pid(self, finished: bool) -> None:
        head = bytes(self.out[:PID_SCAN_BYTES])
        match = _PID_LINE.search(head)
        if match is not None:
            self.pid = int(match.group(2))
            del self.out[match.start(1) : match.end(1)]
        if match is not None or finished or len(head) >= PID_SCAN_BYTES:
            self._want_pid = False


def _drain(chan: paramiko.Channel, deadline: float | None, max_output: int | None) -> tuple[bytes, bytes]:
    """Read stdout and stderr until EOF; keep the tail of each beyond max_output bytes."""
    output = _Output(chan, max_output)
    output.read(deadline)
    return bytes(output.out), bytes(output.err)


def _read_or_stop(output: _Output, deadline: float | None, stop: threading.Event | None) -> BaseException | None:
    """Read the command's output to its end (None). With `stop`: what stopped the wait instead,
    the Event (_Stopped) or Ctrl-C/SIGTERM landing in the main thread while it waited."""
    if stop is None:
        output.read(deadline)
        return None
    try:
        return None if output.read(deadline, stop) else _Stopped(STOPPING)
    except (KeyboardInterrupt, Interrupted) as exc:
        return exc


def _exit_status(chan: paramiko.Channel, deadline: float | None) -> int:
    """The exit code, or -1 if the channel closed without one (connection lost)."""
    while not chan.status_event.wait(0.5):
        if deadline is not None and time.monotonic() > deadline:
            raise _Deadline
    return chan.recv_exit_status()


def _append(buf: bytearray, data: bytes, cap: int | None) -> None:
    buf += data
    if cap is not None and len(buf) > cap:
        del buf[: len(buf) - cap]
