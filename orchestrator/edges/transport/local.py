"""LocalTransport: the Transport protocol on the controller itself (EDGE).

Used by the embedded simulated deployment and by tests. Commands run as subprocesses in their
own session, so a timeout can kill the whole process group (a shell's children included) and
never leave orphans behind. OS errors are translated here, once, into TransportError.

Output is read from both pipes at once (a selector) into buffers that keep the last
MAX_OUTPUT_BYTES of each stream as it arrives, as the SSH transport does: `communicate()` held all
of it until the command ended, so 1 GiB printed cost 2 GiB of memory before the cap applied.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from typing import Mapping, Sequence

from orchestrator.core.bounded import describe_kind, read_fd
from orchestrator.edges.interrupts import uninterrupted
from orchestrator.edges.transport import EXITED_DRAIN_S, STOP_POLL_S, FileEntry, Result, scope_argv
from orchestrator.errors import (
    CommandFailed,
    CommandInterrupted,
    CommandTimedOut,
    ConfigError,
    FileChanged,
    TransportError,
)

MAX_READ_BYTES = 64 << 20  # an env file or a lock file: a few KiB; /dev/zero must not fill memory

MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # per stream; a runaway command cannot exhaust memory
KILL_GRACE_S = 2.0


class LocalTransport:
    """Run commands and move bytes on this machine."""

    def __init__(self, host: str = "local") -> None:
        self.host = host

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
        """A sequence runs without a shell; a string runs through /bin/sh -c. `stop` set kills its
        process group and raises CommandInterrupted (with the output so far). `env` is added to
        orch's environment for it; `scope`: run in that transient systemd scope (systemd-run)."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        text = command if isinstance(command, str) else shlex.join(argv)
        if scope:
            argv = [*scope_argv(scope), *argv]
        if stop is not None and stop.is_set():
            raise CommandInterrupted(Result(self.host, text, -1, "", "", 0.0))
        if sudo:
            argv = self._sudo(argv if not env else ["env", *(f"{k}={v}" for k, v in env.items()), *argv])
        started = time.monotonic()
        code, out, err = self._spawn(argv, text, timeout, stop, None if env is None else {**os.environ, **env})
        result = Result(self.host, text, code, _decode(out), _decode(err), time.monotonic() - started)
        if check and not result.ok:
            raise CommandFailed(self.host, text, code, result.stdout, result.stderr)
        return result

    def _sudo(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return argv  # already root: sudo would change nothing
        if shutil.which("sudo") is None:
            raise TransportError(self.host, "sudo not supported locally (sudo is not installed)")
        return ["sudo", "-n", "--", *argv]

    def _spawn(
        self,
        argv: list[str],
        text: str,
        timeout: float | None,
        stop: threading.Event | None = None,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, bytes]:
        proc: subprocess.Popen[bytes] | None = None
        pipes: _Pipes | None = None
        started = time.monotonic()
        try:
            with uninterrupted():  # an interrupt waits until `proc` is set, so the group is killed below
                proc = self._popen(argv, text, env)
            if proc is None:  # what a shell (and an SSH host) reports for a missing program
                return 127, b"", f"{argv[0]}: command not found ({os.strerror(errno.ENOENT)})".encode()
            pipes = _Pipes(proc)
            return _finish(proc, pipes, None if timeout is None else time.monotonic() + timeout, stop)
        except _Stopped:
            assert proc is not None and pipes is not None  # only _finish sees the Event
            _kill_group(proc)
            out, err = _drain(proc, pipes)
            stopped = Result(self.host, text, proc.returncode, _decode(out), _decode(err), time.monotonic() - started)
            raise CommandInterrupted(stopped) from None
        except subprocess.TimeoutExpired:
            assert proc is not None and pipes is not None  # only _finish times out
            _kill_group(proc)
            out, err = _drain(proc, pipes)
            result = Result(self.host, text, -1, _decode(out), _decode(err), timeout or 0.0)
            raise CommandTimedOut(result, timeout or 0.0) from None
        except BaseException:
            if proc is not None:
                _kill_group(proc)  # Ctrl-C while waiting: leave nothing running
                _drain(proc, pipes)
            raise
        finally:
            if pipes is not None:
                pipes.close()

    def _popen(self, argv: list[str], text: str, env: Mapping[str, str] | None) -> subprocess.Popen[bytes] | None:
        """The started command; None when its program does not exist."""
        try:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout kills all of it
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TransportError(self.host, f"cannot run {text}: {exc.strerror}") from exc

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes. An inventory may name anything: a FIFO (opened non-blocking, so
        it cannot hang), a device or a huge file is refused as bad input (exit 2)."""
        try:
            return self._read(path)[0]
        except OSError as exc:
            raise TransportError(self.host, f"cannot read {path}: {exc.strerror}") from exc

    def read_entry(self, path: str) -> FileEntry:
        """What `path` is (missing, a symlink and where to) and its bytes, as read_bytes reads them."""
        try:
            link: str | None = os.readlink(path)
        except FileNotFoundError:
            return FileEntry(None)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: there, and not a symlink
                raise TransportError(self.host, f"cannot read {path}: {exc.strerror}") from exc
            link = None
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return FileEntry(None)
            except OSError as exc:
                raise TransportError(self.host, f"cannot read {path}: {exc.strerror}") from exc
            if not stat.S_ISREG(mode):
                return FileEntry(None, special=describe_kind(mode))
        try:
            data, st = self._read(path)
        except FileNotFoundError:
            return FileEntry(None, link)  # a dangling link
        except OSError as exc:
            raise TransportError(self.host, f"cannot read {path}: {exc.strerror}") from exc
        return FileEntry(data, link, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)

    def _read(self, path: str) -> tuple[bytes, os.stat_result]:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError("not a regular file", file=path, hint="an env file is a plain file")
            data = read_fd(f.fileno(), MAX_READ_BYTES + 1)  # never f.read(cap): that allocates the cap
        if len(data) > MAX_READ_BYTES:
            raise ConfigError(f"larger than {MAX_READ_BYTES >> 20} MiB", file=path, hint="an env file is small")
        return data, st

    def write_bytes_atomic(
        self, path: str, data: bytes, *, like: str | None = None, expect: bytes | None = None
    ) -> None:
        """Temp file in the same directory, fsync, keep mode and owner (or take `like`'s, 0600
        if it is gone), rename, fsync the dir: a crash leaves either the old or the new file,
        never a torn one. As over SSH: a symlinked file is written through (the link survives),
        and the temp file is named `.NAME.orch-XXXXXXXX` beside the target (a killed
        controller's is removed by the restore, sweep.hosts.remove_run_files). With `expect`, the
        file is compared just before the rename, and left as it is (FileChanged) unless it holds
        those bytes."""
        path = os.path.realpath(path)
        directory = os.path.dirname(path)
        source = path if like is None else like
        try:
            old = os.stat(source)
        except FileNotFoundError:
            old = None
        except OSError as exc:
            raise TransportError(self.host, f"cannot stat {source}: {exc.strerror}") from exc
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.orch-", dir=directory)
        except OSError as exc:
            raise TransportError(self.host, f"cannot write {path}: {exc.strerror}") from exc
        try:
            _fill(fd, data, old, new_mode=None if like is None else 0o600)
            if expect is not None and not self._holds(path, expect):
                os.unlink(tmp)
                raise FileChanged(self.host, path)
            os.replace(tmp, path)
            _fsync_dir(directory)
        except BaseException as exc:  # a failed write, and a Ctrl-C or SIGTERM while it ran: no temp left
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise TransportError(self.host, f"cannot write {path}: {exc.strerror}") from exc
            raise

    def write_then_run(
        self, path: str, data: bytes, command: str, *, timeout: float, expect: bytes | None = None
    ) -> Result:
        """Here there is no round trip to save: the write, then the command."""
        self.write_bytes_atomic(path, data, expect=expect)
        return self.run(command, timeout=timeout, check=False)

    def _holds(self, path: str, expect: bytes) -> bool:
        """Does the file hold exactly `expect` (a missing file does not)?"""
        try:
            return self._read(path)[0] == expect
        except (FileNotFoundError, ConfigError):  # gone, or no longer a regular file
            return False

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def close(self) -> None:
        """Nothing to release locally."""


def _fill(fd: int, data: bytes, old: os.stat_result | None, new_mode: int | None = None) -> None:
    """Write the temp file (mkstemp's 0600) and give it `old`'s mode and owner; without `old`,
    `new_mode`, or the mode open() would have created."""
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        if old is not None:
            os.fchmod(f.fileno(), old.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.fchown(f.fileno(), old.st_uid, old.st_gid)
        elif new_mode is not None:
            os.fchmod(f.fileno(), new_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)  # what open() would have created
        os.fsync(f.fileno())


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, give it a grace period, then SIGKILL the group
    (always: children may outlive the leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class _Pipes:
    """A command's stdout and stderr, read as they fill (neither can block the command while orch
    waits on the other), each keeping only its last MAX_OUTPUT_BYTES: the tail, as the SSH
    transport keeps, because the end of a runaway command's output says how it ended."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None and proc.stderr is not None  # _popen pipes both
        self.out, self.err = bytearray(), bytearray()
        self._selector = selectors.DefaultSelector()
        self._selector.register(proc.stdout.fileno(), selectors.EVENT_READ, self.out)
        self._selector.register(proc.stderr.fileno(), selectors.EVENT_READ, self.err)

    def read_until(self, deadline: float | None) -> bool:
        """Read until both pipes are at EOF (True) or the deadline passes first (False)."""
        while self._selector.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            for key, _ in self._selector.select(wait):
                chunk = os.read(key.fd, 65536)  # readable: returns at once, b"" at EOF
                if chunk:
                    _append(key.data, chunk)
                else:
                    self._selector.unregister(key.fd)
        return True

    def close(self) -> None:
        self._selector.close()


def _append(buf: bytearray, data: bytes) -> None:
    buf += data
    if len(buf) > MAX_OUTPUT_BYTES:
        del buf[: len(buf) - MAX_OUTPUT_BYTES]  # the front of a bytearray is dropped in O(1)


class _Stopped(Exception):
    """The stop Event was set while the command ran."""


def _finish(
    proc: subprocess.Popen[bytes], pipes: _Pipes, deadline: float | None, stop: threading.Event | None = None
) -> tuple[int, bytes, bytes]:
    """Exit code and output of a command that ends by `deadline` (subprocess.TimeoutExpired if
    not): its output first, then its exit, as communicate() did, within the one deadline. With
    `stop` (a repro), the reading pauses every STOP_POLL_S to look at it (_Stopped once it is set),
    and ends EXITED_DRAIN_S after the command exited even if its pipes stay open, as the SSH
    transport's does: a child it left holding them (`setsid loadgen &`) is the leftover check's,
    not a reason to wait until the timeout."""
    exited_at: float | None = None
    while True:
        if stop is not None and stop.is_set():
            raise _Stopped
        step = deadline if stop is None else min(deadline or float("inf"), time.monotonic() + STOP_POLL_S)
        if pipes.read_until(step):
            break
        if stop is not None and exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None and time.monotonic() - exited_at >= EXITED_DRAIN_S:
            break
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, 0.0)
    proc.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
    _close_pipes(proc)
    return proc.returncode, bytes(pipes.out), bytes(pipes.err)


def _drain(proc: subprocess.Popen[bytes], pipes: _Pipes | None) -> tuple[bytes, bytes]:
    """Collect what a killed command wrote; bounded, because a grandchild that escaped into its
    own session could hold the pipes open forever."""
    if pipes is not None and pipes.read_until(time.monotonic() + KILL_GRACE_S):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_S)
    if proc.returncode is None:
        proc.kill()
    _close_pipes(proc)
    proc.wait()
    return (bytes(pipes.out), bytes(pipes.err)) if pipes is not None else (b"", b"")


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _decode(data: bytes) -> str:
    if len(data) > MAX_OUTPUT_BYTES:
        data = data[-MAX_OUTPUT_BYTES:]
    return data.decode("utf-8", errors="replace")
