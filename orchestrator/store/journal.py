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
- Big runs (100,000 trials, a 130 MB journal) must resume in under a second and report in a few:
  validating every line into a full TrialRecord takes ~10 s and holds every record. So readers
  that need a few fields (trial_statuses for resume, read_trial_rows for the report) parse each
  line with a small pydantic-core schema of just those fields: still a complete JSON parse (a
  damaged line is still found and reported at file:line by the full parser), but no Python
  objects for env, repro output and logs. The torn-tail check reads only the end of the file.
- Resume needs only each trial's number and status: append() also notes them, with the line's
  byte span, in a small status index beside the journal (journal.jsonl.idx, 24 bytes a line, no
  fsync: a cache). trial_statuses believes it only where it chains line by line over the
  journal and the journal was not changed after it; otherwise it reads the lines (each line's
  head when orch wrote it, a JSON parse when not). Opening a Journal whose index does not cover
  it (a kill between a line and its entry) rebuilds the index from the lines once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import struct
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal, NamedTuple, Union

import pydantic
from pydantic import ConfigDict, Field, TypeAdapter
from typing_extensions import NotRequired, TypedDict

from orchestrator.core import jsontext
from orchestrator.core.bounded import read_fd
from orchestrator.core.gcpause import gc_paused
from orchestrator.core.records import (
    SCHEMA_VERSION,
    EventRecord,
    Events,
    FiniteValue,
    MetricKind,
    Round,
    Sessions,
    TrialRecord,
    TrialStatus,
)
from orchestrator.errors import ConfigError, JournalError, OrchError
from orchestrator.store.atomic import fsync_dir as _fsync_dir
from orchestrator.store.atomic import run_file_error as _error
from orchestrator.store.atomic import write_bytes_atomic
from orchestrator.store.atomic import write_json_atomic as write_json_atomic  # re-export: callers move to store.atomic
from orchestrator.store.rundir import INDEX_SUFFIX, RunDir

KNOWN_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})

JournalRecord = Annotated[Union[TrialRecord, EventRecord], Field(discriminator="type")]
_RECORD = TypeAdapter(JournalRecord)


@dataclass(frozen=True)
class JournalContents:
    records: list[TrialRecord | EventRecord]
    torn_tail: bool  # a torn last line was dropped (the controller died mid-write)


@dataclass(frozen=True)
class TrialStatuses:
    """What resume needs from a journal: which plan positions are done and which were cut off."""

    finished: frozenset[int]  # trials with a completed or failed record (any attempt)
    interrupted: frozenset[int]  # trials with an interrupted record and no finished one
    torn_tail: bool  # a torn last line was ignored (repair_torn_tail cuts it before appending)


class MetricPoint(NamedTuple):
    """One metric of one trial, as the report's tables and tests need it."""

    name: str
    kind: MetricKind
    k: int | None
    n: int | None
    value: float | None


class TrialRow(NamedTuple):
    """The fields of one trial record that summaries need (cell table, statistics, charts, and
    choosing which trials to show in full). A 100,000-trial report holds these, not records;
    a NamedTuple because it is built once per journal line (half the cost of a frozen dataclass).

    `source` says where the full record is: its byte offset in the journal (then `line` is its
    1-based line number), or its index in an in-memory list of records (then `line` is 0).
    `retried`: a failed attempt that was tried again, which ended no trial (store.runtrials)."""

    source: int
    line: int
    trial: int
    round: int
    attempt: int
    cell: str
    levels: Mapping[str, str]
    status: TrialStatus
    failure_kind: str | None
    metrics: tuple[MetricPoint, ...]
    retried: bool = False

    @classmethod
    def of(cls, record: TrialRecord, source: int, line: int = 0) -> TrialRow:
        return cls(
            source,
            line,
            record.trial,
            record.round,
            record.attempt,
            record.cell,
            record.levels,
            record.status,
            record.failure.kind if record.failure else None,
            tuple([MetricPoint(name, m.kind, m.k, m.n, m.value) for name, m in record.metrics.items()]),
            record.retried,
        )


@dataclass(frozen=True)
class TrialRows:
    rows: list[TrialRow]  # trial records in journal order
    torn_tail: bool
    # a run_interrupted event since the controller last started (run_started, run_resumed): the
    # run stopped early even where run.json could not be told so (orch compare reads it)
    stopped: bool = False
    events: list[EventRecord] = field(default_factory=list)  # the events asked for, in journal order


class Journal:
    """An open journal file; append() returns only once the record is on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._index: int | None = None  # fd of the status index, None when not kept
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
        self._index = (
            _open_index(path, os.fstat(self._fd).st_size) if stat.S_ISREG(os.fstat(self._fd).st_mode) else None
        )

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
            self._index_line(record, size, size + len(line))

    def _index_line(self, record: TrialRecord | EventRecord, start: int, end: int) -> None:
        """Note the record in the status index (a cache: no fsync; any failure drops it)."""
        if self._index is None:
            return
        head = (record.trial, resume_status(record.status, record.retried)) if isinstance(record, TrialRecord) else None
        entry = _index_entry(start, end, head)
        try:
            if os.write(self._index, entry) != len(entry):
                raise OSError(errno.ENOSPC, "short write")
        except OSError:
            self._drop_index()

    def _drop_index(self) -> None:
        if self._index is not None:
            with contextlib.suppress(OSError):
                os.close(self._index)
            self._index = None
        with contextlib.suppress(OSError):
            os.unlink(index_path(self.path))

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._index is not None:
                os.close(self._index)
                self._index = None

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
        if _torn_tail_of(self.path) is not None:
            raise JournalError(f"{self.path}: journal ends with a torn line (call repair_torn_tail before appending)")


def read_journal(path: Path) -> JournalContents:
    """All records in order. A torn last line is dropped and flagged, never fatal; an invalid
    line elsewhere, or a schema version this orch does not know, is a ConfigError at file:line."""
    with _reading(path) as handle, gc_paused():
        end, torn = _body_end(handle)
        records = [_parse_line(path, number, line) for number, _, line in _lines(path, handle, end)]
    return JournalContents(records=records, torn_tail=torn)


def load_trials(run_dir: Path) -> tuple[list[TrialRecord], bool]:
    """Trial records of a run's journal (none if the run never wrote one) and its torn-tail flag:
    what exports and comparisons read, without the report stack."""
    path = RunDir(run_dir).journal
    if not path.exists():
        return [], False
    contents = read_journal(path)
    return [r for r in contents.records if isinstance(r, TrialRecord)], contents.torn_tail


def iter_records(path: Path) -> Iterator[TrialRecord | EventRecord]:
    """read_journal's records one at a time, reading the file in blocks (memory stays bounded
    however long the run). A torn last line is skipped; check read_journal or trial_statuses
    for the flag."""
    with _reading(path) as handle:
        end, _ = _body_end(handle)
        for number, _, line in _lines(path, handle, end):
            yield _parse_line(path, number, line)


def trial_statuses(path: Path) -> TrialStatuses:
    """Which trials are finished, for resume: ~0.4 s for 100,000 trials instead of ~10 s.

    A line exactly as Journal.append writes it is read by its head: the trial number, the
    status and the closing brace, found with two anchored matches and one find (no JSON parse
    of its ~1 KB of env, metrics and paths). Damage further inside such a line is therefore not
    seen here (the status, all resume needs, is intact); read_journal and the report's reader
    refuse that line with its number. Any other line (an event, another spelling, damage near
    the head) is read as before: type, schema_version, trial and status by a JSON parse, and a
    line that cannot be read fast goes through read_journal's parser and fails the same way."""
    finished: set[int] = set()
    interrupted: set[int] = set()
    trial_start, status_at, known = _TRIAL_START.match, _TRIAL_STATUS.match, _KNOWN_VERSIONS
    with _reading(path) as handle:
        end, torn = _body_end(handle)
        covered, lines_covered = _read_index(path, end, finished, interrupted)
        for first, lines in _blocks(path, handle, end, covered, lines_covered + 1):
            for number, line in enumerate(lines, start=first):
                # inlined _head_of (two calls per line are a third of the time at 100,000 lines)
                start = trial_start(line)
                if start is not None and start[1] in known and line.endswith(b"}"):
                    status = status_at(line, line.find(b'},"is_baseline":', start.end()))
                    if status is not None:
                        unfinished = status[2] == b"interrupted" or status[1] == b"true"
                        (interrupted if unfinished else finished).add(int(start[2]))
                        continue
                head = _status_of(path, number, line)
                if head is not None:
                    (interrupted if head[1] == "interrupted" else finished).add(head[0])
    return TrialStatuses(finished=frozenset(finished), interrupted=frozenset(interrupted - finished), torn_tail=torn)


def last_attempts(path: Path, trials: Collection[int]) -> dict[int, int]:
    """The highest attempt number the journal holds for each of `trials` that has a record.

    Why: an attempt claims the first free folder number (store.attempts), so a journaled attempt
    whose folder was deleted gave its number, and its folder, to the next attempt: two records of
    one attempt number, the earlier one's links showing the later one's files. Resume asks for the
    trials it runs again that have records (trial_statuses' `interrupted`: a few) and numbers their
    attempts on past these. A line orch wrote is skipped by its head unless it is one of them;
    those and any other spelling are parsed whole (a bad line fails as read_journal does)."""
    wanted = frozenset(trials)
    found: dict[int, int] = {}
    if not wanted:
        return found
    with _reading(path) as handle:
        indexed = _indexed_lines(path, handle, wanted) if index_vouches(path) else None
        lines: Iterable[tuple[int, int, bytes]] = (
            indexed if indexed is not None else _lines(path, handle, _body_end(handle)[0])
        )
        for number, _, line in lines:
            start = _TRIAL_START.match(line)
            if (start is not None and int(start[2]) not in wanted) or _EVENT_START.match(line) is not None:
                continue
            record = _parse_line(path, number, line)
            if isinstance(record, TrialRecord) and record.trial in wanted:
                found[record.trial] = max(found.get(record.trial, 0), record.attempt)
    return found


def _indexed_lines(path: Path, handle: BinaryIO, trials: frozenset[int]) -> list[tuple[int, int, bytes]] | None:
    """(line number, offset, line) of the trial lines of `trials`, found by the status index's
    byte spans (no scan of a 130 MB journal for a few lines); None when the index cannot say."""
    data = _index_data(index_path(path), os.fstat(handle.fileno()).st_size)
    if data is None:
        return None
    out = []
    for number, (start, stop, trial, code) in enumerate(
        _INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % _INDEX_ENTRY.size]), 1
    ):
        if code != b"e" and trial in trials:
            out.append((number, start, os.pread(handle.fileno(), stop - start - 1, start)))
    return out


# The events that open a session of the controller (`orch run`, each `orch resume`). Journals
# written before store.attempts numbered attempts from 1 again in each session, so a retried
# trial's attempt numbers may repeat across sessions (never within one).
SESSION_EVENTS = frozenset({"run_started", "run_resumed"})

# Called with each trial row as it is read and the number of SESSION_EVENTS lines before it; it
# may raise (a ConfigError at the row's line) to stop the read before the rest is held.
RowCheck = Callable[[TrialRow, int], None]


def read_trial_rows(path: Path, check: RowCheck | None = None, events: Collection[str] = ()) -> TrialRows:
    """Every trial record as a compact TrialRow (what the report's numbers need), streaming.

    The fields read are exactly those read_journal would give; lines that cannot be read fast go
    through read_journal's parser (and fail the same way). Fetch full records for the few trials
    shown in detail with read_records_at. `check` sees each row as it is read (see RowCheck):
    store.runtrials' rule refuses a damaged journal at its first bad line, not after holding it.
    The event records named in `events` are kept whole (a few lines a session), in journal order:
    readers that need a run's decisions or why it stopped get them from this one pass."""
    rows: list[TrialRow] = []
    kept: list[EventRecord] = []
    shared: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    session, stopped = 0, False
    with _reading(path) as handle, gc_paused():
        end, torn = _body_end(handle)
        for number, offset, line in _lines(path, handle, end):
            row = _row_of(path, number, offset, line, shared)
            if isinstance(row, str):  # an event line
                session += row in SESSION_EVENTS
                stopped = row == "run_interrupted" or (stopped and row not in SESSION_EVENTS)
                if row in events and isinstance(event := _parse_line(path, number, line), EventRecord):
                    kept.append(event)
                continue
            if check is not None:
                check(row, session)
            rows.append(row)
    return TrialRows(rows=rows, torn_tail=torn, stopped=stopped, events=kept)


def read_records_at(path: Path, rows: Sequence[TrialRow]) -> list[TrialRecord]:
    """The full, validated records behind rows from read_trial_rows(path), in the same order."""
    return list(iter_records_at(path, rows))


def iter_records_at(path: Path, rows: Iterable[TrialRow]) -> Iterator[TrialRecord]:
    """read_records_at one record at a time, as the caller iterates: memory stays bounded however
    many rows (a resumed 100,000-trial adaptive run feeds its source so)."""
    with _reading(path) as handle:
        for row in rows:
            record = _parse_line(path, row.line, _line_at(handle, row.source))
            if not (
                isinstance(record, TrialRecord)
                and (record.trial, record.attempt, record.status) == (row.trial, row.attempt, row.status)
            ):
                raise JournalError(
                    f"{path}:{row.line}: the journal changed while it was read "
                    "(was it rewritten? render the report again)"
                )
            yield record


def repair_torn_tail(path: Path) -> bool:
    """Cut a torn last line off so appends start on a fresh line; True if anything was cut."""
    torn = _torn_tail_of(path)
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


# ---------------------------------------------------------------- helpers

# Never "delete this line": the line may be a finished trial's data, and a journal short of a trial
# reads as a run that never ran it (the report would then say less, or other, than the data did).
DAMAGED_HINT = (
    "the journal was edited or damaged; restore the run folder from a copy rather than editing or deleting "
    "lines (a line may be a finished trial's data)"
)


def _parse_line(path: Path, number: int, line: bytes) -> TrialRecord | EventRecord:
    try:
        obj = jsontext.loads(line)
    except ValueError as exc:
        raise ConfigError(
            f"invalid JSON: {exc}",
            file=str(path),
            line=number,
            hint=DAMAGED_HINT,
        ) from None
    except RecursionError:  # a small line nested thousands deep: no ValueError, no record either
        raise _too_deep(path, number) from None
    version = obj.get("schema_version") if isinstance(obj, dict) else None
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise ConfigError(
            f"unknown journal schema_version {version!r}",
            file=str(path),
            line=number,
            hint=f"this orch reads schema_version {sorted(KNOWN_SCHEMA_VERSIONS)}; use the orch that wrote the run",
        )
    try:
        return _RECORD.validate_python(obj)
    except RecursionError:
        raise _too_deep(path, number) from None
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise ConfigError(
            f"invalid record: {where}: {first['msg'].removeprefix('Value error, ')}",
            file=str(path),
            line=number,
            hint=DAMAGED_HINT,
        ) from None


def _too_deep(path: Path, number: int) -> ConfigError:
    return ConfigError(
        "JSON nested too deeply to be a record",
        file=str(path),
        line=number,
        hint=DAMAGED_HINT,
    )


# Reading: the journal is read in blocks, and the torn-tail check looks only at its end, so
# neither costs memory or time in proportion to the run's length.
_BLOCK = 1 << 20
_TAIL = 1 << 16  # first guess at how much of the end holds the last line
_MORE = -1  # _tail_verdict: the window holds no complete non-blank line; look further back
# A record holds bounded tails (repro output, logs), a few KiB to a few hundred; a longer line
# is damage or not a journal, refused at file:line before it is held in memory.
MAX_LINE_BYTES = 16 << 20


@contextmanager
def _reading(path: Path) -> Iterator[BinaryIO]:
    try:
        # O_NONBLOCK: a FIFO in the journal's place is refused below instead of blocking open()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError("no journal here", file=str(path), hint="is this a run directory?") from None
    except OSError as exc:
        raise _error(path, "cannot read journal", exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError("not a regular file", file=str(path), hint="a journal is a file written by orch")
    handle = os.fdopen(fd, "rb", buffering=0)
    handle.name = str(path)  # errors about a line name the file, not the fd
    try:
        yield handle
    except OSError as exc:
        raise _error(path, "cannot read journal", exc) from exc
    finally:
        handle.close()


def _body_end(handle: BinaryIO) -> tuple[int, bool]:
    """(bytes before the torn tail, whether there is one), from one look at the file's size."""
    size = os.fstat(handle.fileno()).st_size
    torn = _torn_tail_offset(handle, size)
    return (size, False) if torn is None else (torn, True)


def torn_line(path: Path) -> int | None:
    """The line number of a torn last line (read past by every reader), or None when the journal
    ends cleanly: for a warning that names it. Only a torn journal is read through (to count its
    lines, a block at a time)."""
    with _reading(path) as handle:
        torn = _torn_tail_offset(handle, os.fstat(handle.fileno()).st_size)
        if torn is None:
            return None
        newlines = sum(
            os.pread(handle.fileno(), min(_BLOCK, torn - at), at).count(b"\n") for at in range(0, torn, _BLOCK)
        )
    return newlines + 1


def _torn_tail_of(path: Path) -> int | None:
    with _reading(path) as handle:
        return _torn_tail_offset(handle, os.fstat(handle.fileno()).st_size)


def _torn_tail_offset(handle: BinaryIO, size: int) -> int | None:
    """Offset where a torn last line starts, or None if the journal ends cleanly.

    Torn: bytes after the last newline, or a last non-blank line that is not valid JSON
    (after a crash some file systems show the unwritten tail as NUL bytes). Reads a window at
    the end, cut at a line start, and widens it until the answer lies inside."""
    window = _TAIL
    while True:
        start = max(0, size - window)
        tail = os.pread(handle.fileno(), size - start, start)
        if start > 0:
            cut = tail.find(b"\n")
            tail = b"" if cut < 0 else tail[cut + 1 :]
            start = size - len(tail)
        verdict = _tail_verdict(tail, whole=start == 0)
        if verdict != _MORE:
            return None if verdict is None else start + verdict
        if window > MAX_LINE_BYTES:
            raise _too_long(Path(str(handle.name)), None)
        window *= 4


def _tail_verdict(tail: bytes, *, whole: bool) -> int | None:
    """_torn_tail_offset for a window that starts at a line start (`whole`: at the file's)."""
    if tail and not tail.endswith(b"\n"):
        return tail.rfind(b"\n") + 1
    end = len(tail)
    while end > 0:
        start = tail.rfind(b"\n", 0, end - 1) + 1
        line = tail[start : end - 1]
        if line.strip():
            return None if _is_json(line) else start
        end = start
    return None if whole else _MORE


def _is_json(line: bytes) -> bool:
    try:
        jsontext.loads(line)
    except ValueError:
        return False
    except RecursionError:  # whole, only too deep: not torn; the readers refuse it at its line
        return True
    return True


def _blocks(
    path: Path, handle: BinaryIO, end: int, start: int = 0, number: int = 1
) -> Iterator[tuple[int, list[bytes]]]:
    """The lines from byte `start` (a line's start, line `number`) to `end` (which ends with a
    newline: the torn tail is cut off before), a block at a time: (number of the block's
    first line, its lines, blank or not)."""
    handle.seek(start)
    pending, remaining = b"", end - start
    while remaining > 0:
        block = handle.read(min(_BLOCK, remaining))
        if not block:
            raise JournalError(f"{path}: the journal shrank while it was read (read it again)")
        remaining -= len(block)
        lines = (pending + block).split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE_BYTES or any(len(line) > MAX_LINE_BYTES for line in lines):
            raise _too_long(
                path, number + next((i for i, x in enumerate(lines) if len(x) > MAX_LINE_BYTES), len(lines))
            )
        yield number, lines
        number += len(lines)
    if pending:  # only if the file changed between the size check and the read
        yield number, [pending]


def _lines(path: Path, handle: BinaryIO, end: int) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line) of each non-blank line in the first `end` bytes."""
    offset = 0
    for first, lines in _blocks(path, handle, end):
        for number, line in enumerate(lines, start=first):
            if line.strip():
                yield number, offset, line
            offset += len(line) + 1


def _too_long(path: Path, line: int | None) -> ConfigError:
    return ConfigError(
        f"a line longer than {MAX_LINE_BYTES >> 20} MiB",
        file=str(path),
        line=line,
        hint="the journal was damaged or this is not a journal",
    )


def _line_at(handle: BinaryIO, offset: int) -> bytes:
    chunks: list[bytes] = []
    start = offset
    while True:
        if offset - start > MAX_LINE_BYTES:
            raise _too_long(Path(str(handle.name)), None)
        block = os.pread(handle.fileno(), _TAIL, offset)
        cut = block.find(b"\n")
        if cut >= 0 or not block:
            chunks.append(block if cut < 0 else block[:cut])
            return b"".join(chunks)
        chunks.append(block)
        offset += len(block)


# The fast readers: a pydantic-core schema of just the fields they use. Types and defaults are
# TrialRecord's, so a value reads the same as through the full model (lax int from "3", ...);
# schema_version stays raw because _parse_line checks the raw value.
_FailureKind = Literal["infrastructure", "workload", "interrupted"]  # Failure.kind


class _Head(TypedDict):
    type: Literal["trial", "event"]
    schema_version: Any
    trial: NotRequired[int]
    retried: NotRequired[bool]
    status: NotRequired[TrialStatus]


class _MetricFields(TypedDict):
    """MetricValue's schema: its keys and bounds (no other key); what MetricValue checks in Python
    (which fields each kind has, k <= n) _row_of checks with _counts_ok. A metric that fails
    either sends its line to _parse_line, which names the line and the field."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    kind: MetricKind
    k: NotRequired[Events | None]
    n: NotRequired[Sessions | None]
    value: NotRequired[FiniteValue | None]
    unit: NotRequired[str]


class _FailureFields(TypedDict):
    kind: _FailureKind


class _RowFields(TypedDict):
    type: Literal["trial", "event"]
    schema_version: Any
    trial: NotRequired[int]
    round: NotRequired[Round]  # bounded as TrialRecord.round: past it, the full parser names the line
    cell: NotRequired[str]
    levels: NotRequired[dict[str, str]]
    attempt: NotRequired[int]
    retried: NotRequired[bool]
    status: NotRequired[TrialStatus]
    failure: NotRequired[_FailureFields | None]
    metrics: NotRequired[dict[str, _MetricFields]]


class _EventName(TypedDict):
    event: str


_HEAD = TypeAdapter(_Head)
_EVENT = TypeAdapter(_EventName)
_ROW = TypeAdapter(_RowFields)
_REQUIRED_HEAD = frozenset({"trial", "status"})
_REQUIRED_ROW = frozenset({"trial", "round", "cell", "levels", "status"})


# The status index: one fixed-size entry per journal line, written by Journal.append right after
# the line is on disk - (start offset, end offset, trial, status code: c/f/i, e for an event).
# It is a cache for resume: trial_statuses believes the entries that chain from byte 0 without
# a gap, up to the journal's end, only if the journal was not modified after the index (a torn
# tail repaired, a kill between the two writes, a hand edit: then the journal is read), and
# reads whatever journal lines follow the last entry the usual way.
_INDEX_ENTRY = struct.Struct("<QQIc3x")


def index_path(path: Path) -> Path:
    return path.with_name(path.name + INDEX_SUFFIX)


def _open_index(path: Path, size: int) -> int | None:
    """The index fd to append to, or None (no index is kept: the resume reads the journal).
    An index that does not cover the journal (a kill between the two writes, a journal from
    before the index) is rebuilt from the journal once, here."""
    index = index_path(path)
    try:
        if size == 0:
            # O_NONBLOCK: a FIFO there fails (ENXIO) instead of waiting for a reader
            return os.open(index, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        if _index_end(index) != size:
            write_index(path)
        if _index_end(index) == size:
            return os.open(index, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, OrchError):
        pass
    with contextlib.suppress(OSError):
        os.unlink(index)
    return None


def write_index(path: Path) -> None:
    """Build the status index of a journal from its lines. A journal with blank lines or a torn
    tail gets none (entries must chain line by line); a bad line fails as read_journal does."""
    entries = bytearray()
    with _reading(path) as handle:
        end, torn = _body_end(handle)
        covered = 0
        for number, offset, line in _lines(path, handle, end):
            if offset != covered or torn:
                return
            covered = offset + len(line) + 1
            entries += _index_entry(offset, covered, _status_of(path, number, line))
    if covered == end:
        write_bytes_atomic(index_path(path), bytes(entries))


def _index_entry(start: int, end: int, head: tuple[int, TrialStatus] | None) -> bytes:
    """One index entry: a trial line's (trial, status) or, for an event line, None."""
    trial, code = (0, b"e") if head is None else (head[0], head[1][0].encode())
    return _INDEX_ENTRY.pack(start, end, trial, code)


def index_vouches(path: Path) -> bool:
    """Whether the status index speaks for every line of the journal: its entries end where the
    journal ends and it was written after the journal's last change. Then only Journal.append
    wrote the journal (a hand edit, a repaired torn tail, a kill between a line and its entry, a
    journal from before the index: none of these leaves it so), and resume may skip the damage
    rule's read of every line (sweep.api). A cache's word, not a proof against a forged mtime."""
    index = index_path(path)
    try:
        if os.stat(index).st_mtime_ns < os.stat(path).st_mtime_ns:
            return False
        return _index_end(index) == os.stat(path).st_size
    except OSError:
        return False


def _index_fd(index: Path) -> int | None:
    """The index open for reading, or None when it is not a regular file. Non-blocking: a FIFO in
    its place (the run folder is the user's) blocked open() for ever, and resume, `orch status` and
    every status page with it."""
    fd = os.open(index, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _index_end(index: Path) -> int | None:
    """The end offset of the index's last whole entry (None: no usable index)."""
    try:
        fd = _index_fd(index)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            if size < _INDEX_ENTRY.size or size % _INDEX_ENTRY.size:
                return None
            return _INDEX_ENTRY.unpack(os.pread(fd, _INDEX_ENTRY.size, size - _INDEX_ENTRY.size))[1]
        finally:
            os.close(fd)
    except (OSError, struct.error):
        return None


def _index_data(index: Path, end: int) -> bytes | None:
    """The status index's bytes, for a journal of `end` bytes: None when it is not a regular file
    or is bigger than such a journal's could be (an entry per line of at least 2 bytes)."""
    try:
        fd = _index_fd(index)
        if fd is None:
            return None
        try:
            most = (end // 2 + 1) * _INDEX_ENTRY.size
            return read_fd(fd, most) if os.fstat(fd).st_size <= most else None
        finally:
            os.close(fd)
    except OSError:
        return None


def _read_index(path: Path, end: int, finished: set[int], interrupted: set[int]) -> tuple[int, int]:
    """Fill the sets from the status index; return (bytes of the journal it covers, lines)."""
    index = index_path(path)
    try:
        if os.stat(index).st_mtime_ns < os.stat(path).st_mtime_ns:
            return 0, 0  # the journal changed after the index was last written
    except OSError:
        return 0, 0
    data = _index_data(index, end)
    if data is None:
        return 0, 0
    covered, lines = 0, 0
    for start, stop, trial, code in _INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % _INDEX_ENTRY.size]):
        if start != covered or stop > end or stop <= start:
            break
        if code == b"c" or code == b"f":
            finished.add(trial)
        elif code == b"i":
            interrupted.add(trial)
        elif code != b"e":
            break
        covered, lines = stop, lines + 1
    else:
        return covered, lines
    finished.clear()  # a broken chain: believe none of it
    interrupted.clear()
    return 0, 0


# A trial line exactly as Journal.append writes it (pydantic's compact JSON, fields in model
# order) gives its number and status away without a parse of the whole line (~1 KB of env,
# metrics, paths): a match at the start for the trial number, a find for the end of `levels`
# (a literal `},"is_baseline":` cannot occur inside a JSON string, whose quotes are escaped,
# nor inside `levels`, whose values are strings), a match there for the status. Any other
# spelling takes the JSON path.
_TRIAL_START = re.compile(
    rb'\{"type":"trial","schema_version":(\d+),"run_id":"[^"\\]*","trial":(\d+),"round":\d+,"cell":"'
)
_TRIAL_STATUS = re.compile(  # groups: retried (absent in journals from before it), status
    rb'\},"is_baseline":(?:true|false),"testbed":"[^"\\]*","attempt":\d+,(?:"retried":(true|false),)?'
    rb'"status":"(completed|failed|interrupted)"[,}]'
)
_EVENT_START = re.compile(rb'\{"type":"event","schema_version":(\d+),')
_KNOWN_VERSIONS = frozenset(str(v).encode() for v in KNOWN_SCHEMA_VERSIONS)


def _head_of(line: bytes) -> tuple[int, TrialStatus] | None | bool:
    """(trial, status) of a trial line orch wrote, None for an event line, False: parse it."""
    if not line.endswith(b"}"):
        return False
    start = _TRIAL_START.match(line)
    if start is not None and start[1] in _KNOWN_VERSIONS:
        status = _TRIAL_STATUS.match(line, line.find(b'},"is_baseline":', start.end()))
        if status is not None:
            return int(start[2]), resume_status(status[2].decode(), status[1] == b"true")  # type: ignore[arg-type]
        return False
    event = _EVENT_START.match(line)
    return None if event is not None and event[1] in _KNOWN_VERSIONS else False


def _status_of(path: Path, number: int, line: bytes) -> tuple[int, TrialStatus] | None:
    """(trial, status) of a trial line, None for an event line or a blank one."""
    quick = _head_of(line)
    if quick is not False:
        return quick  # type: ignore[return-value]
    try:
        head = _HEAD.validate_json(line)
    except pydantic.ValidationError:
        head = None
    if head is None or not _fast_ok(head, _REQUIRED_HEAD):
        if not line.strip():
            return None
        record = _parse_line(path, number, line)  # the full parser: same answer or same error
        return (record.trial, resume_status(record.status, record.retried)) if isinstance(record, TrialRecord) else None
    if head["type"] == "event":
        return None
    return head["trial"], resume_status(head["status"], head.get("retried", False))


def resume_status(status: TrialStatus, retried: bool) -> TrialStatus:
    """A record's status as resume reads it: a failed attempt that was tried again did not end
    its trial, which is as unfinished as an interrupted one until a later record of it."""
    return "interrupted" if retried else status


def _row_of(
    path: Path,
    number: int,
    offset: int,
    line: bytes,
    shared: dict[tuple[tuple[str, str], ...], Mapping[str, str]],
) -> TrialRow | str:
    """The line's TrialRow, or for an event line the event's name."""
    try:
        fields = _ROW.validate_json(line)
    except pydantic.ValidationError:
        fields = None
    if fields is None or not _fast_ok(fields, _REQUIRED_ROW) or not _counts_ok(fields):
        record = _parse_line(path, number, line)
        return TrialRow.of(record, offset, number) if isinstance(record, TrialRecord) else record.event
    if fields["type"] == "event":
        return _event_of(path, number, line)
    levels = fields["levels"]
    failure = fields.get("failure")
    metrics = fields.get("metrics")
    return TrialRow(
        offset,
        number,
        fields["trial"],
        fields["round"],
        fields.get("attempt", 1),
        fields["cell"],
        shared.setdefault(tuple(levels.items()), levels),  # 100,000 trials share a few level sets
        fields["status"],
        failure["kind"] if failure else None,
        tuple([MetricPoint(name, m["kind"], m.get("k"), m.get("n"), m.get("value")) for name, m in metrics.items()])
        if metrics
        else (),
        fields.get("retried", False),
    )


def _event_of(path: Path, number: int, line: bytes) -> str:
    """An event line's name (a second, small parse: events are a few lines a session)."""
    try:
        return _EVENT.validate_json(line)["event"]
    except pydantic.ValidationError:
        record = _parse_line(path, number, line)  # the full parser: same answer or same error
        return record.event if isinstance(record, EventRecord) else ""


def _counts_ok(fields: _RowFields) -> bool:
    """MetricValue's own rule, which the fast schema cannot say: a proportion has k <= n and no
    value, a number no k or n."""
    metrics = fields.get("metrics")
    return not metrics or all(
        _metric_ok(m.get("kind"), m.get("k"), m.get("n"), m.get("value")) for m in metrics.values()
    )


def _metric_ok(kind: MetricKind | None, k: int | None, n: int | None, value: float | None) -> bool:
    if kind == "number":
        return k is None and n is None
    return k is not None and n is not None and value is None and k <= n


def _fast_ok(fields: Mapping[str, object], required: frozenset[str]) -> bool:
    """The fast read is the answer only for a known schema version and a complete trial line;
    anything else is left to _parse_line, which raises the error read_journal would."""
    if fields.get("schema_version") not in KNOWN_SCHEMA_VERSIONS:
        return False
    return fields["type"] == "event" or fields.keys() >= required


def _truncate_quietly(fd: int, size: int) -> None:
    """Undo a partial append. Best effort: on a device like /dev/full there is nothing to undo."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass
