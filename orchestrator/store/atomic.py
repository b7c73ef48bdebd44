"""The one way orch replaces a file: all or nothing.

Why one writer: run.json, plan.json, status.json, the reports, the journal's status index and the
backup's units.json are all read by other processes (resume, `orch serve`, a browser) while the
sweep may be killed at any instant. A reader must see the old file or the whole new one, never
half of one; five private copies of this dance had drifted apart (mode, fsync, cleanup, errors).

How: a temp file in the same folder (a rename never crosses file systems), written in full,
fsync'd, renamed over the target, then the folder fsync'd so the new name survives a crash. On
any failure the temp file is removed and one JournalError says where and what to do.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pydantic

from orchestrator.errors import JournalError

# errno -> what the user can do about it (shared by every run-directory write)
RUN_FILE_HINTS: dict[int, str] = {
    errno.ENOSPC: "the disk is full: free space, then `orch resume` the run",
    errno.EDQUOT: "the disk quota is exhausted: free space, then `orch resume` the run",
    errno.EACCES: "check the permissions of the run directory",
    errno.EPERM: "check the permissions of the run directory",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.ENOTDIR: "a parent of this path is a file, not a directory",
    errno.ENOENT: "the directory does not exist",
    errno.EISDIR: "this path is a directory",
    errno.EIO: "the disk reported an I/O error",
}


def run_file_error(path: Path, what: str, exc: OSError) -> JournalError:
    """`<path>: <what>: <reason> (<hint>)` for a failed file operation in a run directory."""
    hint = RUN_FILE_HINTS.get(exc.errno or 0)
    return JournalError(f"{path}: {what}: {exc.strerror or exc}" + (f" ({hint})" if hint else ""))


def run_file_op(path: Path, what: str, op: Callable[[], object]) -> None:
    """Run a file operation in a run folder (mkdir, a plain write); an OSError (disk full,
    read-only, a file where a folder should be) becomes one JournalError that stops the sweep."""
    try:
        op()
    except OSError as exc:
        raise run_file_error(path, what, exc) from exc


def write_bytes_atomic(
    path: Path, data: bytes, *, fsync: bool = True, mode: int = 0o644, what: str = "cannot write file"
) -> Path:
    """Replace `path` with `data`, all or nothing. fsync=False skips both fsyncs (the rename is
    still atomic; only durability across a power cut is given up). `mode` is the file's mode
    from its creation on (0o600 keeps a secret unreadable by others even briefly)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)  # the umask must not loosen or tighten what was asked
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise run_file_error(path, what, exc) from exc
    except BaseException:
        _unlink_quietly(tmp)  # Ctrl-C mid-write leaves no stray temp file
        raise
    return path


def write_text_atomic(
    path: Path, text: str, *, fsync: bool = True, mode: int = 0o644, what: str = "cannot write file"
) -> Path:
    """write_bytes_atomic for UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync, mode=mode, what=what)


def write_json_atomic(
    path: Path, value: pydantic.BaseModel | dict | list, *, fsync: bool = True, indent: int = 2
) -> Path:
    """A pydantic model (its JSON form) or plain JSON data, pretty-printed with a final newline."""
    if isinstance(value, pydantic.BaseModel):
        text = value.model_dump_json(indent=indent)
    else:
        text = json.dumps(value, indent=indent)
    return write_bytes_atomic(path, (text + "\n").encode("utf-8"), fsync=fsync)


def fsync_dir(directory: Path) -> None:
    """Make a folder's entries (a new or renamed file) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
