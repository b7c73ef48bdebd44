"""The run journal: crash-safe, append-only JSON lines, one record per line (EDGE).

Why this shape:
- A sweep runs for hours and the controller can die at any moment (Ctrl-C, OOM, power). Each
  record is written with ONE os.write of the whole line (O_APPEND) and fsync'd before append()
  returns, so a record the runner believes written is on disk, and a crash can at worst leave
  one torn LAST line. Readers drop that line and say so; resume repairs it before appending.
- A failed write (disk full, read-only file system) truncates the file back to its previous
  size, so the journal never holds a partial line in the middle.
- A record counts only once its newline is on disk: a last line without one is torn even if it
  happens to parse, because the append that wrote it did not return.
- Every line carries schema_version; a reader refuses versions it does not know instead of
  guessing.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Union

import pydantic
from pydantic import Field, TypeAdapter

from orchestrator.errors import ConfigError, OrchError
from orchestrator.records import SCHEMA_VERSION, EventRecord, TrialRecord

KNOWN_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})

JournalRecord = Annotated[Union[TrialRecord, EventRecord], Field(discriminator="type")]
_RECORD = TypeAdapter(JournalRecord)

_HINTS = {
    errno.ENOSPC: "the disk is full: free space, then resume the run",
    errno.EDQUOT: "the disk quota is exhausted: free space, then resume the run",
    errno.EACCES: "check the permissions of the run directory",
    errno.EPERM: "check the permissions of the run directory",
    errno.EROFS: "the file system is read-only: choose another output directory",
    errno.ENOTDIR: "a parent of this path is a file, not a directory",
    errno.ENOENT: "the directory does not exist",
    errno.EISDIR: "this path is a directory",
    errno.EIO: "the disk reported an I/O error",
}


class JournalError(OrchError):
    """The journal (or another run file) could not be written or read back."""


@dataclass(frozen=True)
class JournalContents:
    records: list[TrialRecord | EventRecord]
    torn_tail: bool  # a torn last line was dropped (the controller died mid-write)


class Journal:
    """An open journal file; append() returns only once the record is on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        existed = path.exists()
        try:
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _error(path, "cannot open journal", exc) from exc
        try:
            self._refuse_torn_tail()
            if not existed:
                _fsync_dir(path.parent)  # the new file's name must survive a crash too
        except OSError as exc:
            self.close()
            raise _error(path, "cannot open journal", exc) from exc
        except BaseException:
            self.close()
            raise

    def append(self, record: TrialRecord | EventRecord) -> None:
        """Write the record as one line and fsync it; on failure leave the file as it was."""
        line = (record.model_dump_json() + "\n").encode("utf-8")
        with self._lock:
            fd = self._require_open()
            try:
                size = os.fstat(fd).st_size
            except OSError as exc:
                raise _error(self.path, "cannot append to journal", exc) from exc
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
            except OSError as exc:
                _truncate_quietly(fd, size)
                raise _error(self.path, "cannot append to journal", exc) from exc

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self) -> int:
        if self._fd is None:
            raise JournalError(f"{self.path}: journal is closed (open a new Journal to append)")
        return self._fd

    def _refuse_torn_tail(self) -> None:
        """Appending after a torn line would bury it mid-file, where it is fatal to readers."""
        if not stat.S_ISREG(os.fstat(self._require_open()).st_mode):
            return  # a device or FIFO (e.g. /dev/full in tests) has no lines to check
        if _torn_tail_start(_read_bytes(self.path)) is not None:
            raise JournalError(
                f"{self.path}: journal ends with a torn line (call repair_torn_tail before appending)"
            )


def read_journal(path: Path) -> JournalContents:
    """All records in order. A torn last line is dropped and flagged, never fatal; an invalid
    line elsewhere, or a schema version this orch does not know, is a ConfigError at file:line."""
    data = _read_bytes(path)
    torn = _torn_tail_start(data)
    body = data if torn is None else data[:torn]
    records = [
        _parse_line(path, number, line)
        for number, line in enumerate(body.split(b"\n"), start=1)
        if line.strip()
    ]
    return JournalContents(records=records, torn_tail=torn is not None)


def repair_torn_tail(path: Path) -> bool:
    """Cut a torn last line off so appends start on a fresh line; True if anything was cut."""
    torn = _torn_tail_start(_read_bytes(path))
    if torn is None:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, torn)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _error(path, "cannot repair journal", exc) from exc
    return True


def write_json_atomic(path: Path, model: pydantic.BaseModel) -> None:
    """Replace `path` with the model as JSON, all or nothing: temp file in the same directory,
    fsync, rename over the target, fsync the directory. Readers see the old or the new file,
    never half of one (run.json is rewritten at the end of a run that may be interrupted)."""
    data = (model.model_dump_json(indent=2) + "\n").encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise _error(path, "cannot write file", exc) from exc


# ---------------------------------------------------------------- helpers


def _parse_line(path: Path, number: int, line: bytes) -> TrialRecord | EventRecord:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}", file=str(path), line=number,
                          hint="the journal was edited or damaged; fix or delete this line") from None
    version = obj.get("schema_version") if isinstance(obj, dict) else None
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise ConfigError(
            f"unknown journal schema_version {version!r}", file=str(path), line=number,
            hint=f"this orch reads schema_version {sorted(KNOWN_SCHEMA_VERSIONS)}; use the orch that wrote the run",
        )
    try:
        return _RECORD.validate_python(obj)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise ConfigError(f"invalid record: {where}: {first['msg']}", file=str(path), line=number,
                          hint="the journal was edited or damaged; fix or delete this line") from None


def _torn_tail_start(data: bytes) -> int | None:
    """Offset where a torn last line starts, or None if the journal ends cleanly.

    Torn: bytes after the last newline, or a last non-blank line that is not valid JSON
    (after a crash some file systems show the unwritten tail as NUL bytes)."""
    if data and not data.endswith(b"\n"):
        return data.rfind(b"\n") + 1
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start : end - 1]
        if line.strip():
            return None if _is_json(line) else start
        end = start
    return None


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no journal here", file=str(path), hint="is this a run directory?") from None
    except OSError as exc:
        raise _error(path, "cannot read journal", exc) from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _truncate_quietly(fd: int, size: int) -> None:
    """Undo a partial append. Best effort: on a device like /dev/full there is nothing to undo."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _error(path: Path, what: str, exc: OSError) -> JournalError:
    reason = exc.strerror or str(exc)
    hint = _HINTS.get(exc.errno or 0)
    return JournalError(f"{path}: {what}: {reason}" + (f" ({hint})" if hint else ""))
