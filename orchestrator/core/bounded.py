"""Read a user-named file without letting it hang or exhaust orch (PURE rules, one small read).

Why: a matrix, an inventory or a run file is named by the user, and any path can be given:
``/dev/zero`` (endless), a FIFO (open() blocks until a writer comes), a directory, a 10 GB
log. Reading it whole with ``read_text()`` either hangs or allocates without bound. Here the
file is opened non-blocking, refused unless it is a regular file, and at most ``cap + 1``
bytes are read, so a file over the cap is refused with its size, never loaded.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from orchestrator.errors import ConfigError

MiB = 1024 * 1024
MAX_CONFIG_BYTES = 1 * MiB  # a matrix or an inventory: a few KiB in practice


def read_bounded_bytes(path: Path, cap: int, display: str | None = None) -> bytes:
    """The bytes of a regular file of at most `cap` bytes; ConfigError (file named) otherwise."""
    shown = display or str(path)
    fd = _open_regular(path, shown)
    try:
        data = read_fd(fd, cap + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=shown) from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise ConfigError(f"file is larger than {_size(cap)}", file=shown, hint="is this the right file?")
    return data


def read_fd(fd: int, most: int) -> bytes:
    """At most `most` bytes from `fd`, read in pieces of at most 1 MiB: `os.read(fd, most)` (or a
    file's `.read(most)`) allocates all of `most` up front, 64 MiB to read a 4 KiB env file, which
    fails under an address-space limit (ulimit -v). OSError as os.read raises it."""
    chunks: list[bytes] = []
    left = most
    while left > 0:
        chunk = os.read(fd, min(left, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bounded_text(path: Path, cap: int, display: str | None = None) -> str:
    """Like read_bounded_bytes, decoded as UTF-8 (ConfigError naming the byte and its line
    otherwise: one stray byte in a long matrix is found by its line, not by counting bytes)."""
    data = read_bounded_bytes(path, cap, display)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = line_of_offset(data, exc.start)
        raise ConfigError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=display or str(path), line=line
        ) from None


LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")  # YAML's (PyYAML's scanner): CR LF is one


def line_of_offset(data: bytes, offset: int) -> int:
    """The line of byte `offset` as the YAML reader numbers lines: a CR file (old Mac) or one with
    LS/NEL breaks has its lines counted as its errors count them, not by LF alone. The bytes before
    `offset` are valid UTF-8 (the first bad byte's offset); any left are replaced, never raised."""
    return len(LINE_BREAK.findall(data[:offset].decode("utf-8", "replace"))) + 1


def bounded_or_why(path: Path, cap: int, display: str) -> bytes | str | None:
    """read_bounded_bytes for a view that lists a damaged file instead of failing on it: the bytes,
    or why not in few words ("cannot read: ...", "not a regular file (a FIFO)", "over 1 MiB");
    None: there is no such file. A stat first: a file over `cap` is never opened."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({describe_kind(st.st_mode)})"
    if st.st_size > cap:
        return f"over {cap // MiB} MiB"
    try:
        return read_bounded_bytes(path, cap, display)
    except ConfigError as exc:  # replaced or grown since the stat
        return str(exc)


def check_regular(path: Path, display: str | None = None) -> None:
    """ConfigError unless `path` is a regular file (stat, never open: a FIFO must not block)."""
    shown = display or str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError("file not found", file=shown) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=shown) from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"not a regular file ({describe_kind(mode)})", file=shown, hint="name a file")


def _open_regular(path: Path, shown: str) -> int:
    """An fd open for reading on a regular file. O_NONBLOCK: opening a FIFO returns at once
    (and is then refused by the fstat check) instead of waiting for a writer forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError("file not found", file=shown) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=shown) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ConfigError(f"not a regular file ({describe_kind(mode)})", file=shown, hint="name a file")
    return fd


def describe_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO")."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n} bytes"
