"""The overnight queue: sweeps waiting to run, kept in SQLite beside the reports (EDGE).

Why SQLite (WAL mode, busy timeout): several processes touch the queue at once - someone adding
a sweep in the evening, the timer-started `orch queue run`, a second `queue run` started by
mistake, `orch serve` reading it. WAL lets readers read while a writer writes; the busy timeout
makes writers wait for each other instead of failing.

Why a claim is one `BEGIN IMMEDIATE` transaction: it takes the database's write lock before it
reads, so two `queue run` processes can never both pick the same item. The claimer (host, pid,
process start time) is recorded with the item; an item whose claimer died (kill -9, power cut)
is taken back at the next claim: `resumable` if its run directory holds a run (the next run
resumes it and restores the hosts), otherwise `queued` again.

The loop (`run_queue`) is kept apart from how one item is run (a `SweepFn`), so its rules -
priority then age, testbed locks, the deadline, what an interruption leaves - are tested without
starting a sweep.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Literal, Protocol, TypeVar

from orchestrator.core.words import listed
from orchestrator.edges.interrupts import uninterrupted
from orchestrator.errors import Interrupted, UsageError
from orchestrator.sweep.signals import sigterm_as_interrupt
from orchestrator.team.queuestore import CLAIMABLE as CLAIMABLE
from orchestrator.team.queuestore import FINISHED as FINISHED
from orchestrator.team.queuestore import ITEM_STATES as ITEM_STATES
from orchestrator.team.queuestore import LIGHT_COLUMNS, NotAQueue, insert_values, item_from_row
from orchestrator.team.queuestore import PENDING as PENDING
from orchestrator.team.queuestore import Claimer as Claimer
from orchestrator.team.queuestore import ItemState as ItemState
from orchestrator.team.queuestore import NewItem as NewItem
from orchestrator.team.queuestore import QueueError as QueueError
from orchestrator.team.queuestore import QueueItem as QueueItem
from orchestrator.team.queuestore import QueueStore as QueueStore
from orchestrator.team.queuestore import QueueUnavailable as QueueUnavailable
from orchestrator.team.queuestore import now_iso as now_iso

DB_NAME = "queue.db"
SCHEMA_VERSION = 3
STORE_ENV = "ORCH_QUEUE_STORE"
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    matrix      TEXT NOT NULL,
    inventory   TEXT NOT NULL,
    testbed     TEXT,
    priority    INTEGER NOT NULL DEFAULT 0,
    webhooks    TEXT NOT NULL DEFAULT '[]',
    state       TEXT NOT NULL DEFAULT 'queued',
    added       TEXT NOT NULL,
    updated     TEXT NOT NULL,
    run_dir     TEXT,
    claimed_by  TEXT,
    message     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS items_order ON items (state, priority DESC, id);
"""
# version 2: the sweep's files as they were when queued, who queued it, the testbeds it meant
_V2_COLUMNS = (
    "matrix_text TEXT NOT NULL DEFAULT ''",
    "inventory_text TEXT NOT NULL DEFAULT ''",
    "queued_by TEXT NOT NULL DEFAULT ''",
    "testbeds TEXT NOT NULL DEFAULT ''",
)
# version 3: the `orch run` options an item runs with (`queue add --replicates 4`: RunChoices)
_V3_COLUMNS = ("options TEXT NOT NULL DEFAULT ''",)


class Queue:
    """An open queue database. Every method is one short transaction."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        try:
            if read_only:
                self._db = sqlite3.connect(
                    f"file:{path}?mode=ro",
                    uri=True,
                    isolation_level=None,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                    check_same_thread=False,
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not read_only:
                self._init_schema()
        except sqlite3.Error as exc:
            raise _error(path, "cannot open the queue", exc) from exc
        except OSError as exc:
            raise QueueError(f"{path}: cannot open the queue: {exc.strerror}") from exc

    @classmethod
    def in_reports(cls, reports_dir: Path, *, read_only: bool = False) -> "Queue":
        return cls(reports_dir / DB_NAME, read_only=read_only)

    # one machine: a dead controller is told apart by its pid (edges.lock), nothing more is known
    claims_prove_owner_gone = False

    @property
    def where(self) -> str:
        return str(self.path)

    def _init_schema(self) -> None:
        self._db.execute("PRAGMA journal_mode = WAL")
        with self._tx():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise QueueError(
                    f"{self.path}: queue schema version {version} is newer than this orch "
                    f"({SCHEMA_VERSION}) (upgrade orch)"
                )
            for statement in filter(str.strip, _SCHEMA.split(";")):  # not executescript: it commits
                self._db.execute(statement)
            have = {r["name"] for r in self._db.execute("PRAGMA table_info(items)")}
            for column in (*_V2_COLUMNS, *_V3_COLUMNS):  # an older queue gains them; its items run as before
                if column.split()[0] not in have:
                    self._db.execute(f"ALTER TABLE items ADD COLUMN {column}")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def items(self, states: tuple[ItemState, ...] = ITEM_STATES) -> list[QueueItem]:
        """Items in the order `queue run` takes them: priority (high first), then age."""
        marks = ",".join("?" * len(states))
        sql = f"SELECT {self._light} FROM items WHERE state IN ({marks}) ORDER BY priority DESC, id"
        return [_item(r) for r in self._query(sql, states)]

    def listing(self, finished: int | None = None) -> tuple[list[QueueItem], int]:
        """What `queue list` shows: every pending item in run order, then the `finished` most
        recently finished ones (all with None), and how many finished ones were left out."""
        pending = self.items(PENDING)
        done_marks = ",".join("?" * len(FINISHED))
        limit = -1 if finished is None else finished
        sql = f"SELECT {self._light} FROM items WHERE state IN ({done_marks}) ORDER BY updated DESC, id DESC LIMIT ?"
        done = [_item(r) for r in self._query(sql, (*FINISHED, limit))]
        total = self._query(f"SELECT count(*) AS n FROM items WHERE state IN ({done_marks})", FINISHED)[0]["n"]
        return pending + done, int(total) - len(done)

    @property
    def _light(self) -> str:
        """LIGHT_COLUMNS that this file has (an older queue read read-only lacks the newer)."""
        have = {r["name"] for r in self._query("PRAGMA table_info(items)", ())}
        newer = {c.split()[0] for c in (*_V2_COLUMNS, *_V3_COLUMNS)}
        missing = [c for c in LIGHT_COLUMNS.split(", ") if c not in have and c not in newer]
        if missing:  # another program's items table (or none): `SELECT  FROM items` was a syntax error, exit 1
            raise NotAQueue(
                f"{self.path}: cannot read the queue: its items table has no {', '.join(missing[:3])} column "
                "(is it an orch queue?)"
            )
        return ", ".join(c for c in LIGHT_COLUMNS.split(", ") if c in have)

    def get(self, item_id: int) -> QueueItem:
        rows = self._query("SELECT * FROM items WHERE id = ?", (item_id,))
        if not rows:
            raise UsageError(f"{self.path}: no queue item {item_id}", hint="see `orch queue list`")
        return _item(rows[0])

    # ------------------------------------------------------------------ writing
    def add(
        self, matrix: Path, inventory: Path, testbed: str | None, priority: int = 0, webhooks: tuple[str, ...] = ()
    ) -> QueueItem:
        return self.add_item(NewItem(matrix, inventory, testbed, priority, webhooks))

    def add_item(self, new: NewItem) -> QueueItem:
        now = now_iso()
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO items (matrix, inventory, testbed, priority, webhooks, added, updated, "
                "matrix_text, inventory_text, queued_by, testbeds, options) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                insert_values(new, now),
            )
            item_id = int(cur.lastrowid or 0)
        return self.get(item_id)

    def remove(self, item_id: int) -> QueueItem:
        """Drop an item; a running one only once its runner is gone (its run dir stays)."""
        with self._tx():
            item = self.get(item_id)
            claimer = Claimer.parse(item.claimed_by) if item.claimed_by else None
            if item.state == "running" and claimer is not None and claimer.alive():
                raise UsageError(
                    f"{item.label} is running (claimed by {item.claimed_by})",
                    hint="stop that `orch queue run` first; its run stays resumable",
                )
            self._db.execute("DELETE FROM items WHERE id = ?", (item_id,))
        return item

    def claim(self, skip: frozenset[int] = frozenset(), claimer: Claimer | None = None) -> QueueItem | None:
        """Take the next item (priority, then age) for this process, or None when none is left."""
        claimer = claimer or Claimer.current()
        with self._tx():
            self._recover_dead_claims()
            not_skipped = f"AND id NOT IN ({','.join('?' * len(skip))})" if skip else ""
            while True:
                rows = self._db.execute(
                    f"SELECT {self._light} FROM items WHERE state IN ('queued', 'resumable') {not_skipped} "
                    "ORDER BY priority DESC, id LIMIT 1",
                    tuple(skip),
                ).fetchall()
                if not rows:
                    return None
                item = _item(rows[0])
                if not item.defect:
                    break
                self._fail(item.id, f"cannot run: {item.defect}")  # and on to the next one
            self._db.execute(
                "UPDATE items SET state = 'running', claimed_by = ?, updated = ? WHERE id = ?",
                (claimer.encode(), now_iso(), item.id),
            )
        return self.get(item.id)

    def set_run_dir(self, item_id: int, run_dir: Path) -> None:
        """Recorded just before the run's testbeds are locked (the folder not made yet: a killed
        runner's next `queue run` starts that run again, taking over its lock) and again once the
        folder exists, before any trial, so a killed runner's item can still be resumed
        (team.overnight.recording)."""
        self._update(item_id, run_dir=str(run_dir.resolve()))

    def finish(self, item_id: int, state: ItemState, message: str = "") -> QueueItem:
        """Leave a claimed item in its end state (or back in line: queued / resumable)."""
        self._update(item_id, state=state, message=message, claimed_by=None)
        return self.get(item_id)

    def _recover_dead_claims(self) -> None:
        rows = self._db.execute(f"SELECT {self._light} FROM items WHERE state = 'running'").fetchall()
        for item in map(_item, rows):
            claimer = Claimer.parse(item.claimed_by) if item.claimed_by else None
            if item.claimed_by and claimer is None:  # who runs it cannot be told: never run it twice
                self._fail(
                    item.id,
                    f"its claimed_by {item.claimed_by!r} is not host:pid:start, so whether its runner lives "
                    "cannot be told (written by another tool?); re-add the item if nothing runs it",
                )
                continue
            if claimer is not None and claimer.alive():
                continue
            state = "resumable" if item.resumable_run is not None else "queued"
            self._db.execute(
                "UPDATE items SET state = ?, claimed_by = NULL, updated = ?, message = ? WHERE id = ?",
                (state, now_iso(), f"taken back: its queue runner ({item.claimed_by}) died", item.id),
            )

    def _fail(self, item_id: int, message: str) -> None:
        self._update(item_id, state="failed", claimed_by=None, message=message)

    def _update(self, item_id: int, **values: object) -> None:
        values["updated"] = now_iso()
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._tx():
            self._db.execute(f"UPDATE items SET {sets} WHERE id = ?", (*values.values(), item_id))

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction holding the database lock from its start (BEGIN IMMEDIATE)."""
        if self._db.in_transaction:  # nested: part of the caller's transaction
            yield
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _error(self.path, "cannot lock the queue", exc) from exc
        try:
            yield
        except BaseException:
            self._db.rollback()
            raise
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.rollback()
            raise _error(self.path, "cannot write the queue", exc) from exc

    def _query(self, sql: str, params: tuple[object, ...]) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, "cannot read the queue", exc) from exc


def _item(row: sqlite3.Row) -> QueueItem:
    return item_from_row(row)


NOT_A_QUEUE_CODES = (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)  # sqlite3's errors: not SQLite, damaged
NOT_A_QUEUE_WORDS = ("no such table", "no such column")  # SQLite, but not an orch queue's tables


def _error(path: Path, what: str, exc: sqlite3.Error) -> QueueError:
    """The queue's error in words: a locked database is worth a retry; a file that is no orch queue
    (garbage, damaged, another schema) is bad input (exit 2); anything else a runtime fault."""
    if "locked" in str(exc):
        return QueueUnavailable(f"{path}: {what}: {exc} (another process holds it too long; retry)")
    hint = "is it an orch queue? on a network file system, SQLite's WAL mode does not work"
    code = getattr(exc, "sqlite_errorcode", None)
    if code in NOT_A_QUEUE_CODES or any(w in str(exc) for w in NOT_A_QUEUE_WORDS):
        return NotAQueue(f"{path}: {what}: {exc} ({hint})")
    return QueueError(f"{path}: {what}: {exc} ({hint})")


def is_server_url(spec: str) -> bool:
    return spec.startswith(("postgresql://", "postgres://"))


def store_spec(given: str | None, reports_dir: Path) -> str:
    """Where the queue lives: --store, else $ORCH_QUEUE_STORE, else queue.db in the reports
    folder. A postgresql:// URL names a shared server; anything else is a SQLite file."""
    spec = given or os.environ.get(STORE_ENV, "").strip()
    return spec or str(reports_dir / DB_NAME)


def open_store(spec: str, *, read_only: bool = False) -> QueueStore:
    """The store `spec` (from store_spec) names. psycopg loads only for a server URL."""
    if is_server_url(spec):
        from orchestrator.team.queuestore_pg import PgQueue

        return PgQueue(spec, read_only=read_only)  # read-only: no DDL, no tables is an empty queue
    return Queue(Path(spec), read_only=read_only)


def folder_problem(path: Path) -> str:
    """Why a folder given (--reports) is none, in words: a file named so, or nothing there."""
    return "a file, not a folder" if path.exists() else "no such folder"


def open_existing_store(spec: str, *, read_only: bool = False) -> QueueStore | None:
    """The store `spec` names, when there is one; None for a SQLite file never made (nothing was
    ever queued there). Why not open_store: opening a SQLite file creates it, and its folder; a
    command that only reads or removes items (`queue list`, `queue remove`) must not leave a
    queue.db in a mistyped --reports folder and call it empty. A folder that does not exist is a
    UsageError (exit 2), as `orch status` says of it; a server is opened as is."""
    if not is_server_url(spec):
        path = Path(spec)
        if not path.parent.is_dir():
            raise UsageError(f"{path.parent}: {folder_problem(path.parent)}", hint="check --reports or --store")
        if not path.exists():
            return None
    return open_store(spec, read_only=read_only)


# ---------------------------------------------------------------------------- the loop
SweepStatus = Literal["completed", "failed", "interrupted", "error", "locked"]


@dataclass(frozen=True)
class SweepOutcome:
    """How running one item ended. `interrupted` leaves a resumable run; `locked` means its
    testbed was busy and nothing was touched (`unrestored`: held by a run whose controller died,
    its hosts perhaps still edited); `error` means it could not run at all."""

    status: SweepStatus
    exit_code: int
    run_dir: Path | None = None
    message: str = ""
    unrestored: bool = False


class SweepFn(Protocol):
    def __call__(
        self, item: QueueItem, deadline: float | None, record_run_dir: Callable[[Path], None]
    ) -> SweepOutcome: ...


@dataclass
class QueueRunResult:
    ran: list[tuple[QueueItem, SweepOutcome]] = field(default_factory=list)
    skipped_locked: list[int] = field(default_factory=list)
    # skipped as their testbed holds a dead run's lock (its hosts never restored): not waited for,
    # and the night fails (1): a nightly job must not report success while its sweeps cannot run
    blocked: list[int] = field(default_factory=list)
    deadline_reached: bool = False
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.blocked or any(o.status in ("failed", "error") for _, o in self.ran) else 0


BUSY_WAIT_S = 60.0  # how often a `queue run` with a deadline looks again at testbeds busy with another run
OUTAGE_FIRST_S, OUTAGE_MAX_S = 1.0, 60.0  # backoff between tries while the store cannot be reached
NO_DEADLINE_OUTAGE_S = 1800.0  # without --until, how long an unreachable store is waited for
T = TypeVar("T")


def run_queue(
    queue: QueueStore,
    sweep: SweepFn,
    *,
    deadline: float | None = None,
    on_done: Callable[[QueueItem, SweepOutcome], None] = lambda i, o: None,
    note: Callable[[str], None] = lambda m: None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] | None = None,
    busy_wait_s: float = BUSY_WAIT_S,
) -> QueueRunResult:
    """Run claimable items one after another until none is left, the deadline passes, or a
    signal stops us. Whatever happens, no item stays claimed by this process.

    With a deadline, items whose testbed is busy (a manual `orch run` holds it) are tried again
    every `busy_wait_s` until it passes: a testbed busy at 01:00 is free at 01:10, and the night
    is long. A store that cannot be reached (a database restart) is waited for, between items,
    up to the deadline. `sleep` defaults to time.sleep with the real clock; with a clock of a
    test's own, to not sleeping (that clock moves by itself)."""
    wait = sleep or (time.sleep if clock is time.time else _no_sleep)
    patient = _Patience(note, clock, wait, deadline)
    result = QueueRunResult()
    skip: set[int] = set()
    told: set[int] = set()  # items already said to wait for their testbed (once each, not every minute)
    with sigterm_as_interrupt():  # systemd stops a `queue run` with SIGTERM: claims are released
        while True:
            if deadline is not None and clock() >= deadline:
                result.deadline_reached = True
                note("deadline reached: no new sweep starts")
                break
            item = patient(lambda: _claim(queue, frozenset(skip)), "claim the next item")
            if item is None:
                if _wait_for_busy(result, skip, told, deadline, busy_wait_s, note, clock, wait):
                    continue
                _say_gone(result, skip, told, note)
                break
            outcome = _run_one(queue, sweep, item, deadline, patient)
            if outcome.status == "locked":
                _skip_locked(result, skip, item, outcome, note)
                continue
            if outcome.status == "error":
                skip.add(item.id)  # if it stays resumable, not retried in this pass
            result.ran.append((item, outcome))
            on_done(patient(partial(queue.get, item.id), f"read {item.label}"), outcome)
            if outcome.status == "interrupted":
                if deadline is not None and clock() >= deadline:
                    result.deadline_reached = True
                    note("deadline reached during a sweep: it is left resumable")
                else:
                    result.interrupted = True
                break
    return result


def _say_gone(result: QueueRunResult, skip: set[int], told: set[int], note: Callable[[str], None]) -> None:
    """Items waited for that no claim finds any more: after "trying again every 60 s", the run
    ended without a word (another `queue run` had taken them)."""
    gone = told - skip - {item.id for item, _ in result.ran}
    if gone:
        them = "it" if len(gone) == 1 else "them"
        note(
            f"{listed('item', sorted(gone))} no longer queued (another `queue run` took {them}, or {them} "
            f"{'was' if len(gone) == 1 else 'were'} removed): nothing to wait for"
        )


def _no_sleep(_seconds: float) -> None:
    return None


def _skip_locked(
    result: QueueRunResult, skip: set[int], item: QueueItem, outcome: SweepOutcome, note: Callable[[str], None]
) -> None:
    """An item whose testbed is locked is passed over in this pass (and said so once). Busy: a
    deadline's wait tries it again. Held by a dead run: it stays locked until someone resumes or
    restores that run, so it is not waited for, and the queue run fails."""
    skip.add(item.id)
    if item.id in result.skipped_locked:
        return
    result.skipped_locked.append(item.id)
    if outcome.unrestored:
        result.blocked.append(item.id)
        note(f"{item.label}: NOT run: its testbed is held by a run whose controller died ({outcome.message})")
    else:
        note(f"{item.label}: skipped, its testbed is busy ({outcome.message})")


def _wait_for_busy(
    result: QueueRunResult,
    skip: set[int],
    told: set[int],
    deadline: float | None,
    busy_wait_s: float,
    note: Callable[[str], None],
    clock: Callable[[], float],
    wait: Callable[[float], None],
) -> bool:
    """Nothing else to claim, but items were passed over as their testbed was busy: with time
    left before the deadline, wait a while and put them back in the running (True)."""
    locked = (set(result.skipped_locked) - set(result.blocked)) & skip  # a dead run's lock frees never
    if not locked or deadline is None:
        return False
    left = deadline - clock()
    if left <= 0:
        return False
    if locked - told:
        waits = "waits" if len(locked) == 1 else "wait"
        every = f"trying again every {busy_wait_s:.0f} s until the deadline"
        note(f"{listed('item', sorted(locked))} {waits} for a busy testbed: {every}")
        told.update(locked)
    wait(min(busy_wait_s, left))
    skip.difference_update(locked)
    return True


@dataclass
class _Patience:
    """Store operations retried while the store cannot be reached (QueueUnavailable), with a bounded
    backoff, until the deadline (or NO_DEADLINE_OUTAGE_S without one). Why: a database restart
    of a few minutes must not end a night with hours left, nor lose a finished item's result.
    One line when an outage starts and one when it ends, not one per try."""

    note: Callable[[str], None]
    clock: Callable[[], float]
    wait: Callable[[float], None]
    deadline: float | None

    def __call__(self, op: Callable[[], T], what: str) -> T:
        give_up = self.deadline if self.deadline is not None else self.clock() + NO_DEADLINE_OUTAGE_S
        delay, outage = OUTAGE_FIRST_S, False
        while True:
            try:
                value = op()
            except QueueUnavailable as exc:
                left = give_up - self.clock()
                if left <= 0:
                    raise QueueError(
                        f"{exc}; gave up trying to {what} at the deadline (an item this run drove "
                        "stays claimed until the next `queue run` takes it back, resumable)"
                    ) from exc
                if not outage:
                    self.note(f"cannot {what}: {exc}; trying again until the deadline")
                    outage = True
                self.wait(min(delay, left))
                delay = min(delay * 2, OUTAGE_MAX_S)
                continue
            if outage:
                self.note(f"the queue answers again ({what})")
            return value


def _claim(queue: QueueStore, skip: frozenset[int]) -> QueueItem | None:
    """queue.claim, and the item put back if an interrupt lands once the claim has committed (in
    its commit's return, the item's read-back, or before it reaches the loop): a runner that
    exits on a signal must not leave an item claimed, shown running or stale until the next run."""
    claimed: list[QueueItem | None] = []
    try:
        with uninterrupted():  # the claim's result is kept: the interrupt waits for the assignment
            claimed.append(queue.claim(skip))
        return claimed[0]
    except BaseException:
        if claimed and claimed[0] is not None:
            item = claimed[0]
            _record_now(queue, item.id, (_back_in_line(item), item.message))
        raise


def _run_one(
    queue: QueueStore, sweep: SweepFn, item: QueueItem, deadline: float | None, patient: _Patience
) -> SweepOutcome:
    """Run one claimed item and record how it ended (waiting out a store outage: the result of a
    finished sweep is never dropped); an interruption outside the runner (Ctrl-C, SIGTERM) still
    puts the item back in line before it propagates, and one landing once the sweep has ended, in
    the record itself, still records how it ended."""
    outcome: list[SweepOutcome] = []
    try:
        outcome.append(sweep(item, deadline, lambda d: queue.set_run_dir(item.id, d)))
        patient(
            lambda: queue.finish(item.id, *item_state_after(queue.get(item.id), outcome[0])),  # with its run dir
            f"record how {item.label} ended",
        )
    except BaseException as exc:
        if outcome and not isinstance(exc, (KeyboardInterrupt, Interrupted)):
            raise  # the store gave up (an outage past the deadline): the next run takes the item back
        stored = queue.get(item.id)
        if outcome:  # the sweep ended: its end is what the item records, not "interrupted"
            _record_now(queue, item.id, item_state_after(stored, outcome[0]))
        else:
            _record_now(queue, item.id, (_back_in_line(stored), "interrupted before it finished"))
        raise
    return outcome[0]


def _back_in_line(item: QueueItem) -> ItemState:
    """The state of an item put back unfinished: resumable once it names its run, else queued."""
    return "resumable" if item.resumable_run is not None else "queued"


def _record_now(queue: QueueStore, item_id: int, end: tuple[ItemState, str]) -> None:
    """One short write a second signal (Ctrl-C twice) cannot cut: the item's state as it goes."""
    with uninterrupted():
        queue.finish(item_id, *end)


def item_state_after(item: QueueItem, outcome: SweepOutcome) -> tuple[ItemState, str]:
    """The item's state once its sweep ended (pure)."""
    if outcome.status == "locked":  # back in line, untouched
        return ("resumable" if item.resumable_run is not None else "queued"), item.message
    if outcome.status == "interrupted":
        return "resumable", outcome.message or "cut short; the next `queue run` resumes it"
    if outcome.status == "error":
        return ("resumable" if item.resumable_run is not None else "failed"), outcome.message
    return outcome.status, outcome.message


# ---------------------------------------------------------------------------- deadlines
def parse_until(text: str, now: datetime) -> datetime:
    """`07:00`, `07:00:30` (the next such local time after `now`) or an ISO date-time (pure but
    for the system's time zone rules, see `in_zone_of`).

    `now` must be timezone-aware (local time); the result is aware too, with the UTC offset in
    force at the deadline (07:00 stays 07:00 on the night the clocks change)."""
    text = text.strip()
    try:
        clock = datetime.strptime(text, "%H:%M:%S" if text.count(":") == 2 else "%H:%M")
    except ValueError:
        clock = None
    if clock is not None and len(text) <= 8:
        wall = now.replace(tzinfo=None, hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0)
        at = in_zone_of(now, wall)
        return at if at > now else in_zone_of(now, wall + timedelta(days=1))
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--until {text!r}: not a time", hint="write HH:MM (next such local time), HH:MM:SS or an ISO date-time"
        ) from None
    return at if at.tzinfo else in_zone_of(now, at)  # a local date-time: the offset of that date


def in_zone_of(now: datetime, wall: datetime) -> datetime:
    """The naive wall-clock time `wall` in the time zone of `now`, with the UTC offset in force
    at `wall` rather than at `now`.

    Why: `datetime.now().astimezone()` - what the CLI passes - carries a fixed offset, the one in
    force now; `.replace(hour=7)` keeps it, so a deadline past a change of the clocks landed an
    hour off. Such a fixed offset named as the system names its zone (time.tzname: CET, CEST) is
    taken as the system's zone, whose rules give the offset at `wall`. A zone with rules of its
    own (zoneinfo) keeps them; any other fixed offset (UTC+02:00) never changes.

    A wall time the clocks skip that night (02:30 in Berlin on the spring-forward night) is the
    end of the gap (03:00 CEST), that same night: read as an hour back, it landed before `now`
    and a deadline moved to the next day. A wall time the clocks show twice (02:30 on the autumn
    night) is its first occurrence, the earlier deadline."""
    zone = now.tzinfo
    if isinstance(zone, timezone) and zone.tzname(None) in time.tzname:
        return _existing(wall, lambda w: w.astimezone())  # a naive datetime is read as the system's local time
    if isinstance(zone, timezone) or zone is None:
        return wall.replace(tzinfo=zone)
    return _existing(wall, lambda w: w.replace(tzinfo=zone))


def _existing(wall: datetime, aware: Callable[[datetime], datetime]) -> datetime:
    """`wall` made aware by `aware` (a zone's rules): the first of two occurrences, or the end of
    the gap for a time that does not occur (both readings of it fail the round trip)."""
    first, second = aware(wall.replace(fold=0)), aware(wall.replace(fold=1))
    for at in sorted((first, second), key=lambda a: a.timestamp()):
        if _wall_of(at) == wall:
            return at.replace(fold=0)
    return _gap_end(min(first, second, key=datetime.timestamp), max(first, second, key=datetime.timestamp))


def _wall_of(at: datetime) -> datetime:
    """The wall clock the zone shows at instant `at` (a round trip through UTC)."""
    zone = at.tzinfo
    back = at.astimezone(timezone.utc)
    shown = back.astimezone() if isinstance(zone, timezone) else back.astimezone(zone)
    return shown.replace(tzinfo=None, fold=0)


def _gap_end(before: datetime, after: datetime) -> datetime:
    """The instant the clocks jump, between the two readings of a skipped wall time (bisection to
    the second: the earliest instant whose offset is the later one)."""
    lo, hi = int(before.timestamp()), int(after.timestamp())
    later = _offset_at(hi, after)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _offset_at(mid, after) == later else (mid, hi)
    return _at(hi, after)


def _at(epoch: int, like: datetime) -> datetime:
    zone = like.tzinfo
    utc = datetime.fromtimestamp(epoch, timezone.utc)
    return utc.astimezone() if isinstance(zone, timezone) else utc.astimezone(zone)


def _offset_at(epoch: int, like: datetime) -> timedelta | None:
    return _at(epoch, like).utcoffset()


def time_of_day(text: str, what: str) -> tuple[int, int, int]:
    """`HH:MM` or `HH:MM:SS` as (h, m, s); anything else is a usage error naming `what`."""
    text = text.strip()
    try:
        at = datetime.strptime(text, "%H:%M:%S" if text.count(":") == 2 else "%H:%M")
    except ValueError:
        raise UsageError(f"{what} {text!r}: not a time of day", hint="write HH:MM or HH:MM:SS") from None
    return at.hour, at.minute, at.second


@dataclass(frozen=True)
class Window:
    """A scheduled run's window: from its scheduled start to its deadline (pure)."""

    start: datetime
    deadline: datetime

    def missed(self, now: datetime) -> bool:
        return now >= self.deadline


def scheduled_window(until: str, scheduled: str, now: datetime) -> Window:
    """The window of the run a timer scheduled at `scheduled` (time of day) that starts at `now`:
    its start is the latest such time at or before `now`; its deadline the first `until` after
    that start - never more than a day after it. A timer that catches up a missed night hours late
    (Persistent=true) thus finds its window over, instead of running sweeps through the next day."""
    h, m, s = time_of_day(scheduled, "--scheduled")
    wall = now.replace(tzinfo=None, hour=h, minute=m, second=s, microsecond=0)
    if in_zone_of(now, wall) > now:
        wall -= timedelta(days=1)
    start = in_zone_of(now, wall)
    deadline = parse_until(until, start)
    # an ISO --until far away: the window still ends by the same time the next day (25 hours on
    # the night the clocks go back, 23 on the night they go forward)
    if deadline > in_zone_of(now, wall + timedelta(days=1)):
        raise UsageError(
            f"--until {until!r} is more than a day after the scheduled start {start.isoformat(timespec='minutes')}",
            hint="a scheduled run's deadline is a time of day (HH:MM)",
        )
    return Window(start, deadline)
