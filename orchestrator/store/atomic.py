"""The one way orch replaces a file: all or nothing.

Why one writer: run.json, plan.json, status.json, the reports, the journal's status index and the
backup's units.json are all read by other processes (resume, `orch serve`, a browser) while the
sweep may be killed at any instant. A reader must see the old file or the whole new one, never
half of one; five private copies of this dance had drifted apart (mode, fsync, cleanup, errors).

How: a temp file in the same folder (a rename never crosses file systems), written in full,
fsync'd, renamed over the target, then the folder fsync'd so the new name survives a crash. On
any failure the temp file is removed and one JournalError says where and what to do.

A user's `-o` goes through the same writer (user_path=True), so it must respect what the name already is: `-` is
stdout; a symlink is followed and the real file is replaced (the link stays a link); an existing
FIFO or device (/dev/stdout, a pipe a reader waits on) is opened and written, never renamed over
(os.replace there swapped /dev/stdout for a regular file machine-wide); a folder is refused.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pydantic

from orchestrator.errors import JournalError

STDOUT = Path("-")  # a user's `-o -`: the data goes to standard output

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
    path: Path,
    data: bytes,
    *,
    fsync: bool = True,
    mode: int = 0o644,
    what: str = "cannot write file",
    user_path: bool = False,
) -> Path:
    """Replace `path` with `data`, all or nothing. fsync=False skips both fsyncs (the rename is
    still atomic; only durability across a power cut is given up). `mode` is the file's mode
    from its creation on (0o600 keeps a secret unreadable by others even briefly). user_path: a
    name the user gave (`-o`): `-`, a symlink, a FIFO or a device are written as the module doc
    says. orch's own files are always replaced by name: a link or FIFO planted in a run folder
    is never followed out of it nor waited on. Returns the path written."""
    return write_chunks_atomic(path, (data,), fsync=fsync, mode=mode, what=what, user_path=user_path)


def write_chunks_atomic(
    path: Path,
    chunks: Iterable[bytes],
    *,
    fsync: bool = True,
    mode: int = 0o644,
    what: str = "cannot write file",
    user_path: bool = False,
) -> Path:
    """write_bytes_atomic for data made a chunk at a time (an export of 100,000 trials is never
    held whole). A file is still all or nothing: an error while the chunks are made (raised by
    the iterator) removes the temp file and leaves the old file. Stdout, a FIFO or a device
    cannot be taken back: they keep what was written before the error."""
    if not user_path:
        _replace(path, chunks, fsync=fsync, mode=mode, what=what)
        return path
    if is_stdout(path):
        _write_stdout(path, chunks, what)
        return path
    try:
        target = _replaceable(path)
    except OSError as exc:
        raise run_file_error(path, what, exc) from exc
    if target is None:
        _write_in_place(path, chunks, what)
        return path
    _replace(target, chunks, fsync=fsync, mode=mode, what=what)
    return path


def is_stdout(path: Path) -> bool:
    """`-`, or a name for this process's own stdout (/dev/stdout, /dev/fd/1, a tty or pipe it is):
    written through the open stream, so a shell's `>>` still appends and the order of output holds."""
    if path == STDOUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(1))
    except OSError:
        return False


def _replaceable(path: Path) -> Path | None:
    """The regular file to replace for `path` (a symlink's real file), or None when `path` is an
    existing FIFO, device or socket to write in place. A folder raises EISDIR."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Path(os.path.realpath(path))  # new, or a dangling link: create its target
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(st.st_mode):
        return None
    real = Path(os.path.realpath(path))
    try:
        same = os.path.samestat(st, os.stat(real))
    except OSError:
        same = False
    # a /proc magic link (/dev/stdout -> /proc/self/fd/1 -> a deleted file) has no name to rename over
    return real if same else None


def _replace(path: Path, data: Iterable[bytes], *, fsync: bool, mode: int, what: str) -> None:
    """The temp file beside the real file, renamed over it."""
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


def _write_in_place(path: Path, data: Iterable[bytes], what: str) -> None:
    """An existing FIFO or device: opened (a FIFO waits for its reader, as a shell's `>` does) and
    written; no temp file, no rename, no create (it must still be what it was)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, 0)  # a magic link to a deleted file: no name, but still a file
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise run_file_error(path, what, exc) from exc


def _write_stdout(path: Path, data: Iterable[bytes], what: str) -> None:
    try:
        sys.stdout.flush()  # whatever was printed before comes first
        for chunk in data:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except BrokenPipeError:  # the reader went away (`| head`): cli.main ends quietly with 141
        raise
    except OSError as exc:  # a full disk behind `> file`
        raise run_file_error(path, what, exc) from exc


def write_text_atomic(
    path: Path,
    text: str,
    *,
    fsync: bool = True,
    mode: int = 0o644,
    what: str = "cannot write file",
    user_path: bool = False,
) -> Path:
    """write_bytes_atomic for UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync, mode=mode, what=what, user_path=user_path)


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


def _write_all(fd: int, data: Iterable[bytes]) -> None:
    for chunk in data:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
