"""The queue on a PostgreSQL server, shared by several controllers on several machines (EDGE).

Why the server and not files: claims must be atomic across machines, and so must "who drives
testbed X now". Three mechanisms, each the server's own:
- a claim is one transaction that reads candidates with `SELECT ... FOR UPDATE SKIP LOCKED`, so
  two controllers never pick the same item and never wait on each other's rows;
- a controller holds session-level advisory locks while it runs an item: one on the item and one
  per testbed the item drives (a 64-bit hash of its name). A second controller cannot take an
  item whose testbed is driven, so two controllers never drive one testbed;
- those locks belong to the controller's connection: when a controller dies (kill -9, power cut,
  network gone), its session ends and the locks vanish. The next claim by anyone finds a
  `running` item whose item lock it can take: its claimer is gone, and the item goes back in
  line (`resumable` if its run directory holds a run, which the next claim resumes through the
  sweep API's resume).

A controller whose own connection drops (a server restart, `pg_terminate_backend`, a network
blip) reconnects and takes its locks back, if nobody took the item meanwhile; if it cannot, it
stops driving the testbed at once (`on_lost`: by default an interrupt, so the sweep restores the
hosts and leaves its run resumable) and never writes over another controller's claim.
"""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, TypeVar
from urllib.parse import urlsplit, urlunsplit

from orchestrator.core.endpoints import host_port
from orchestrator.core.words import listed
from orchestrator.errors import UsageError
from orchestrator.team.queuestore import (
    CLAIMABLE,
    DEFAULT_CHOICES,
    FINISHED,
    ITEM_STATES,
    LIGHT_COLUMNS,
    PENDING,
    Claimer,
    ItemState,
    NewItem,
    QueueError,
    QueueItem,
    QueueUnavailable,
    insert_values,
    item_from_row,
    now_iso,
)

if TYPE_CHECKING:
    import psycopg

TABLE = "orch_queue_items"
META = "orch_queue_meta"
SCHEMA_VERSION = 2  # 2: the `orch run` options an item runs with (`options`, RunChoices)
OPTIONS_COLUMN = "options TEXT NOT NULL DEFAULT ''"
HEARTBEAT_S = 5.0  # how often a controller driving an item checks its connection
RECONNECT_S = 60.0  # how long it tries to get it back before it gives the item up
PAGE = 500  # candidate rows one query of a claim reads (light columns; a claim walks every page)
# A row skipped because another controller's claim held it at that instant may still be ours to
# take (that claim can pass it over for a busy testbed and end): the claim looks again, this
# often and for at most this long, before it says the queue has nothing left. Without it, two
# controllers each skipped the row the other held, both ended, and the item never ran.
CONTENDED_PAUSE_S = 0.05
CONTENDED_RETRY_S = 10.0
T = TypeVar("T")

_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        id             BIGSERIAL PRIMARY KEY,
        matrix         TEXT NOT NULL,
        inventory      TEXT NOT NULL,
        testbed        TEXT,
        priority       BIGINT NOT NULL DEFAULT 0,
        webhooks       TEXT NOT NULL DEFAULT '[]',
        state          TEXT NOT NULL DEFAULT 'queued',
        added          TEXT NOT NULL,
        updated        TEXT NOT NULL,
        run_dir        TEXT,
        claimed_by     TEXT,
        message        TEXT NOT NULL DEFAULT '',
        matrix_text    TEXT NOT NULL DEFAULT '',
        inventory_text TEXT NOT NULL DEFAULT '',
        queued_by      TEXT NOT NULL DEFAULT '',
        testbeds       TEXT NOT NULL DEFAULT '',
        {OPTIONS_COLUMN}
    )""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_order ON {TABLE} (state, priority DESC, id)",
    f"CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"INSERT INTO {META} VALUES ('schema_version', '{SCHEMA_VERSION}') ON CONFLICT (key) DO NOTHING",
)


def lock_key(kind: str, name: str) -> int:
    """A signed 64-bit advisory-lock key for `kind:name`, the same on every machine."""
    digest = hashlib.sha256(f"orch-queue:{kind}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


SCHEMA_LOCK = lock_key("schema", TABLE)


def testbed_keys(row: Mapping[str, Any]) -> tuple[int, ...]:
    """The advisory locks an item's sweep needs, from its row (testbeds, inventory, testbed: a
    claim reads no more of a candidate): one per testbed it drives. An item queued without
    resolved names (by an older orch) locks what its spec can name."""
    names = [n for n in str(row["testbeds"] or "").split(",") if n]
    if names:
        return tuple(lock_key("testbed", n) for n in names)
    return (lock_key("inventory", f"{row['inventory']}#{row['testbed'] or ''}"),)


def shown_url(url: str) -> str:
    """The URL without its password, for messages and logs. A URL that cannot be taken apart (a
    port out of range or not a number, an unclosed IPv6 bracket) is a usage error, said without
    its user part: it may hold the password."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(
            f"--store {_masked(url)}: not a PostgreSQL URL: {exc}",
            hint="write postgresql://USER:PASSWORD@HOST[:PORT]/DB, a port 1-65535, an IPv6 host in [brackets]",
        ) from None
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host_port(host, port or None)}"  # an IPv6 host in brackets
    return urlunsplit(parts._replace(netloc=netloc))


def _masked(url: str) -> str:
    """`url` with everything before its host (user, password) and its query (which may name a
    password too) replaced by ***: for a URL too broken to parse."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***"
    _user, at, after = rest.rpartition("@")
    host_and_path, query, _ = after.partition("?")
    return f"{scheme}://" + ("***@" if at else "") + host_and_path + ("?***" if query else "")


def _interrupt_main(_why: str) -> None:
    """The sweep stops as on Ctrl-C: hosts restored, run left resumable. A real SIGINT aimed at
    the main thread, so a blocking wait there (a sleep, a subprocess) is cut short too."""
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


class PgQueue:
    """An open queue on a PostgreSQL server (one connection: the session holding our locks)."""

    # A claim holds the item's advisory lock, which dies with its controller's session: a claimed
    # resumable item's earlier controller is gone, wherever it ran (its testbed locks may be taken).
    claims_prove_owner_gone = True

    def __init__(
        self,
        url: str,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        reconnect_s: float = RECONNECT_S,
        on_lost: Callable[[str], None] = _interrupt_main,
        read_only: bool = False,
    ) -> None:
        self.url, self.where = url, shown_url(url)
        self.heartbeat_s, self.reconnect_s, self.on_lost = heartbeat_s, reconnect_s, on_lost
        self.lost: str | None = None  # why this controller gave an item up, if it did
        self._mutex = threading.RLock()  # one user of the connection at a time (heartbeat included)
        self._held: dict[int, tuple[str, tuple[int, ...]]] = {}  # item id -> (claimed_by, locks held)
        # item id -> claimed_by of every item claimed and not yet finished, its locks held or lost:
        # a finish after an outage still writes its result if nobody took the item meanwhile
        self._tokens: dict[int, str] = {}
        self.read_only = read_only
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._conn = self._connect()
        try:
            self._check_schema() if read_only else self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    # ------------------------------------------------------------------ connection
    def _connect(self) -> "psycopg.Connection[dict[str, Any]]":
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict, make_conninfo
            from psycopg.rows import dict_row
        except ImportError as exc:
            raise QueueError(f"{self.where}: a PostgreSQL queue needs psycopg (pip install 'orch[postgres]')") from exc
        try:
            given = conninfo_to_dict(self.url)
        except psycopg.Error as exc:
            raise UsageError(f"--store {self.where}: not a PostgreSQL URL: {_line(exc)}") from exc
        defaults: dict[str, str | int] = {
            "connect_timeout": 10,
            "application_name": f"orch queue {Claimer.current().encode()}",
            "keepalives": 1,  # a controller cut off by the network is noticed by the server
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
            "tcp_user_timeout": 30_000,  # ms: a query on a dead link fails instead of hanging for minutes
        }
        extra = {k: v for k, v in defaults.items() if k not in given}
        try:
            return psycopg.connect(make_conninfo(self.url, **extra), autocommit=True, row_factory=dict_row)
        except psycopg.Error as exc:
            raise QueueUnavailable(
                f"{self.where}: cannot connect to the queue: {_line(exc)} "
                "(is the server up? check the URL's host, port, user, password and database)"
            ) from exc

    def _init_schema(self) -> None:
        def create(conn: "psycopg.Connection[dict[str, Any]]") -> None:
            with conn.transaction():
                if not _schema_exists(conn):  # DDL only then: a controller's role may own no table
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))  # two first controllers
                    for statement in _SCHEMA:
                        conn.execute(statement)
                row = conn.execute(f"SELECT value FROM {META} WHERE key = 'schema_version'").fetchone()
            version = int(row["value"]) if row else SCHEMA_VERSION
            if version > SCHEMA_VERSION:
                raise QueueError(
                    f"{self.where}: queue schema version {version} is newer than this orch ({SCHEMA_VERSION}) "
                    "(upgrade orch)"
                )
            if version < SCHEMA_VERSION:
                _upgrade(conn)
            self.columns = _columns(conn)

        self._run(create, "cannot create the queue")

    def _check_schema(self) -> None:
        """Read-only (`orch status`): no DDL; a server without the queue's tables has no queue yet."""

        def check(conn: "psycopg.Connection[dict[str, Any]]") -> bool:
            there = _schema_exists(conn)
            self.columns = _columns(conn) if there else frozenset()
            return there

        self.missing = not self._run(check, "cannot read the queue")

    missing = False  # read-only, and the server has no queue tables yet: every read is empty
    columns: frozenset[str] = frozenset()  # the items table's, as this session found it

    @property
    def _light(self) -> str:
        """LIGHT_COLUMNS the table has: a version-1 table its owner has not upgraded lacks `options`."""
        return ", ".join(c for c in LIGHT_COLUMNS.split(", ") if c in self.columns)

    def _run(self, op: Callable[["psycopg.Connection[dict[str, Any]]"], T], what: str) -> T:
        """op on the connection; a dropped connection is made again (our locks taken back) and op
        retried once. Server errors become QueueErrors."""
        import psycopg

        with self._mutex:
            try:
                return op(self._conn)
            except psycopg.Error as exc:
                if not self._conn.closed and not self._conn.broken:
                    raise QueueError(f"{self.where}: {what}: {_line(exc)}") from exc
            try:
                self._reconnect()
                return op(self._conn)
            except psycopg.Error as exc:
                gone = self._conn.closed or self._conn.broken  # dropped again: still unreachable
                raise (QueueUnavailable if gone else QueueError)(f"{self.where}: {what}: {_line(exc)}") from exc

    def _reconnect(self) -> None:
        """A new session; the items we drive are ours again only if we get their locks back and
        nobody took them meanwhile. Items we lost are dropped from ours (and reported)."""
        self._conn.close()
        give_up = time.monotonic() + self.reconnect_s
        while True:
            try:
                self._conn = self._connect()
                break
            except QueueError:
                if time.monotonic() >= give_up:
                    lost = list(self._held)
                    self._held.clear()
                    self._lose(lost, "cannot reconnect to the queue")
                    raise
                time.sleep(min(2.0, max(0.1, self.reconnect_s / 20)))
        lost = [i for i, (token, keys) in list(self._held.items()) if not self._retake(i, token, keys)]
        self._lose(lost, "its queue session ended and another controller may have taken it")

    def _retake(self, item_id: int, token: str, keys: tuple[int, ...]) -> bool:
        """Our locks back, and the item still ours. Why the item lock decides, not the row: a claim
        needs that lock, so while we hold it nobody else can claim the item. A row another
        controller set back in line (it saw our session gone) and nobody claimed since is ours
        again, marked running once more (even while that take-back is still being committed:
        `finish` then writes over its back-in-line state, never over anyone's claim)."""
        if not _lock_all(self._conn, keys):
            return False
        row = self._conn.execute(f"SELECT state, claimed_by FROM {TABLE} WHERE id = %s", (item_id,)).fetchone()
        if row and row["state"] == "running" and row["claimed_by"] == token:
            return True
        if row and row["state"] in CLAIMABLE and row["claimed_by"] is None:
            self._conn.execute(
                f"UPDATE {TABLE} SET state = 'running', claimed_by = %s, updated = %s "
                "WHERE id = %s AND claimed_by IS NULL AND state IN ('queued', 'resumable')",
                (token, now_iso(), item_id),
            )
            return True
        _unlock_all(self._conn, keys)
        return False

    def _lose(self, items: list[int], why: str) -> None:
        for item_id in items:
            self._held.pop(item_id, None)
        if items:
            self.lost = f"{self.where}: gave up {listed('item', items)}: {why}"

    def _heartbeat(self) -> None:
        """While we drive an item: check the connection; a dropped one is made again at once, so
        our locks are back before another controller's next claim is likely to look."""
        import psycopg

        while not self._stop.wait(self.heartbeat_s):
            with self._mutex:
                if not self._held:
                    continue
                before = self.lost
                try:
                    self._conn.execute("SELECT 1")
                except psycopg.Error:
                    try:
                        self._reconnect()
                    except (QueueError, psycopg.Error):
                        pass  # given up (lost is set) or dropped again: the next beat tries again
                why = self.lost if self.lost != before else None
            if why:
                self.on_lost(why)

    def _start_heartbeat(self) -> None:
        if self._beat is None and self.heartbeat_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, name="orch-queue-heartbeat", daemon=True)
            self._beat.start()

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=self.heartbeat_s + 5)
        with self._mutex:
            self._conn.close()  # our session's locks go with it

    def __enter__(self) -> "PgQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def items(self, states: tuple[ItemState, ...] = ITEM_STATES) -> list[QueueItem]:
        """Items in the order `queue run` takes them: priority (high first), then age (without the
        texts of their files: see LIGHT_COLUMNS)."""
        if self.missing:
            return []
        sql = f"SELECT {self._light} FROM {TABLE} WHERE state = ANY(%s) ORDER BY priority DESC, id"
        return self._run(lambda c: [item_from_row(r) for r in c.execute(sql, (list(states),))], "cannot read the queue")

    def listing(self, finished: int | None = None) -> tuple[list[QueueItem], int]:
        """What `queue list` shows: every pending item in run order, then the `finished` most
        recently finished ones (all with None), and how many finished ones were left out."""
        if self.missing:
            return [], 0
        pending = self.items(PENDING)
        sql = f"SELECT {self._light} FROM {TABLE} WHERE state = ANY(%s) ORDER BY updated DESC, id DESC LIMIT %s"

        def op(conn: "psycopg.Connection[dict[str, Any]]") -> tuple[list[QueueItem], int]:
            done = [item_from_row(r) for r in conn.execute(sql, (list(FINISHED), finished))]
            row = conn.execute(f"SELECT count(*) AS n FROM {TABLE} WHERE state = ANY(%s)", (list(FINISHED),))
            total = int((row.fetchone() or {"n": 0})["n"])
            return done, total - len(done)

        done, left_out = self._run(op, "cannot read the queue")
        return pending + done, left_out

    def get(self, item_id: int) -> QueueItem:
        rows = self._run(
            lambda c: c.execute(f"SELECT * FROM {TABLE} WHERE id = %s", (item_id,)).fetchall(),
            "cannot read the queue",
        )
        if not rows:
            raise UsageError(f"{self.where}: no queue item {item_id}", hint="see `orch queue list`")
        return item_from_row(rows[0])

    # ------------------------------------------------------------------ writing
    def add_item(self, new: NewItem) -> QueueItem:
        values = insert_values(new, now_iso())
        if "options" not in self.columns:  # a version-1 table this role could not upgrade
            if new.choices != DEFAULT_CHOICES:
                raise QueueError(
                    f"{self.where}: this queue's tables predate queued options ({new.choices.shown()}) and "
                    f"this role cannot add their column: queue without them, or have the tables' owner run "
                    f'"ALTER TABLE {TABLE} ADD COLUMN {OPTIONS_COLUMN}; '
                    f"UPDATE {META} SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version'\""
                )
            values = values[:-1]
        names = "matrix, inventory, testbed, priority, webhooks, added, updated, matrix_text, inventory_text, "
        names += "queued_by, testbeds" + (", options" if len(values) == 12 else "")
        marks = ", ".join(["%s"] * len(values))
        sql = f"INSERT INTO {TABLE} ({names}) VALUES ({marks}) RETURNING *"
        row = self._run(lambda c: c.execute(sql, values).fetchone(), "cannot add to the queue")
        return item_from_row(row)

    def remove(self, item_id: int) -> QueueItem:
        """Drop an item; a running one only once its controller's session is gone."""

        def op(conn: "psycopg.Connection[dict[str, Any]]") -> QueueItem | None:
            with conn.transaction():
                row = conn.execute(f"SELECT * FROM {TABLE} WHERE id = %s FOR UPDATE", (item_id,)).fetchone()
                if row is None:
                    return None
                item = item_from_row(row)
                if item.state == "running" and not self._claimer_gone(conn, item):
                    raise UsageError(
                        f"{item.label} is running (claimed by {item.claimed_by})",
                        hint="stop that `orch queue run` first; its run stays resumable",
                    )
                conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (item_id,))
                return item

        item = self._run(op, "cannot remove from the queue")
        if item is None:
            raise UsageError(f"{self.where}: no queue item {item_id}", hint="see `orch queue list`")
        return item

    def claim(self, skip: frozenset[int] = frozenset(), claimer: Claimer | None = None) -> QueueItem | None:
        """Take the next item (priority, then age) whose testbeds no other controller drives,
        and hold its locks until `finish`; None when no such item is left."""
        token = (claimer or Claimer.current()).encode()
        deadline = time.monotonic() + CONTENDED_RETRY_S
        contended: list[int] = []  # rows another claim held when this one looked (see CONTENDED_PAUSE_S)
        while True:
            contended.clear()
            item = self._run(lambda c: self._claim(c, skip, token, contended), "cannot claim from the queue")
            if item is not None or not contended or time.monotonic() > deadline:
                break
            time.sleep(CONTENDED_PAUSE_S)  # another controller's claim holds a row we skipped: look again
        if item is not None:
            self._tokens[item.id] = token
            self._start_heartbeat()
        return item

    def _claim(
        self, conn: "psycopg.Connection[dict[str, Any]]", skip: frozenset[int], token: str, contended: list[int]
    ) -> QueueItem | None:
        """Walk the claimable rows by (priority, id), a page of light columns at a time, to the
        first whose locks we get; None only when no row is left. A testbed found busy once is
        passed over for every later row at no query, so 10,000 items waiting for one busy
        testbed cost a few pages, not a query each. Only the row taken is locked (FOR UPDATE SKIP
        LOCKED): a controller claiming at the same moment finds the others, never an empty queue."""
        busy = {k for _, keys in self._held.values() for k in keys}  # ours: the lock would not refuse us
        taken: tuple[int, tuple[int, ...]] | None = None
        try:
            with conn.transaction():
                self._take_back_dead(conn)
                for row in _candidates(conn, skip):
                    keys = (lock_key("item", str(row["id"])), *testbed_keys(row))
                    if busy & set(keys[1:]):
                        continue  # its testbed is driven by another controller (or by us)
                    if not _row_lock(conn, int(row["id"])):
                        if _claimable(conn, int(row["id"])):  # locked by a claim in flight, not taken
                            contended.append(int(row["id"]))
                        continue
                    if not _lock_all(conn, keys):
                        busy.update(k for k in keys[1:] if not _free(conn, k))
                        continue
                    taken = (int(row["id"]), keys)
                    updated = self._take(conn, int(row["id"]), token)
                    if updated is None:  # a stored value it cannot be run with: failed, and on
                        _unlock_all(conn, keys)
                        taken = None
                        continue
                    self._held[updated.id] = (token, keys)
                    return updated
                return None
        except BaseException:
            if taken is not None:
                self._held.pop(taken[0], None)
                if not conn.closed and not conn.broken:
                    _unlock_all(conn, taken[1])
            raise

    def _take(self, conn: "psycopg.Connection[dict[str, Any]]", item_id: int, token: str) -> QueueItem | None:
        """Mark the locked row ours (running); a row whose stored values cannot be read is marked
        failed, naming the value, and None says so."""
        row = conn.execute(
            f"UPDATE {TABLE} SET state = 'running', claimed_by = %s, updated = %s WHERE id = %s RETURNING *",
            (token, now_iso(), item_id),
        ).fetchone()
        item = item_from_row(row)
        if not item.defect:
            return item
        conn.execute(
            f"UPDATE {TABLE} SET state = 'failed', claimed_by = NULL, updated = %s, message = %s WHERE id = %s",
            (now_iso(), f"cannot run: {item.defect}", item_id),
        )
        return None

    def _take_back_dead(self, conn: "psycopg.Connection[dict[str, Any]]") -> None:
        """Running items whose controller's session is gone go back in line (inside a claim)."""
        rows = conn.execute(
            f"SELECT {self._light} FROM {TABLE} WHERE state = 'running' FOR UPDATE SKIP LOCKED"
        ).fetchall()
        for item in map(item_from_row, rows):
            if not self._claimer_gone(conn, item):
                continue
            state = "resumable" if item.resumable_run is not None else "queued"
            conn.execute(
                f"UPDATE {TABLE} SET state = %s, claimed_by = NULL, updated = %s, message = %s WHERE id = %s",
                (state, now_iso(), f"taken back: its controller ({item.claimed_by}) lost its queue session", item.id),
            )

    def _claimer_gone(self, conn: "psycopg.Connection[dict[str, Any]]", item: QueueItem) -> bool:
        """True when no session holds the item's lock (we can take it: its holder is gone)."""
        if item.id in self._held:
            return False
        key = lock_key("item", str(item.id))
        if not _lock_all(conn, (key,)):
            return False
        _unlock_all(conn, (key,))
        return True

    def set_run_dir(self, item_id: int, run_dir: Path) -> None:
        """Recorded once the run's folder exists, before any trial, so a dead controller's item can
        still be resumed (team.overnight.recording)."""
        token = self._tokens.get(item_id, "")
        self._run(
            lambda c: c.execute(
                f"UPDATE {TABLE} SET run_dir = %s, updated = %s WHERE id = %s AND claimed_by = %s",
                (str(run_dir.resolve()), now_iso(), item_id, token),
            ),
            "cannot write the queue",
        )

    def finish(self, item_id: int, state: ItemState, message: str = "") -> QueueItem:
        """Leave our claimed item in its end state (or back in line) and let its testbeds go.
        An item another controller claimed meanwhile is left as it is. While we hold its item
        lock nobody else can have claimed it, so a row set back in line by a take-back that
        raced our reconnect (see _retake) takes our result too; once the lock is lost (an outage),
        only a row still claimed by us does."""
        token = self._tokens.get(item_id, "")

        def op(conn: "psycopg.Connection[dict[str, Any]]") -> None:
            held = self._held.get(item_id)
            back_in_line = "OR (claimed_by IS NULL AND state IN ('queued', 'resumable'))" if held else ""
            conn.execute(
                f"UPDATE {TABLE} SET state = %s, message = %s, claimed_by = NULL, updated = %s "
                f"WHERE id = %s AND (claimed_by = %s {back_in_line})",
                (state, message, now_iso(), item_id, token),
            )
            if self._held.pop(item_id, None) is not None and held is not None:
                _unlock_all(conn, held[1])
            self._tokens.pop(item_id, None)

        self._run(op, "cannot write the queue")
        return self.get(item_id)


def _schema_exists(conn: "psycopg.Connection[dict[str, Any]]") -> bool:
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AS ok", (TABLE, META)
    ).fetchone()
    return bool(row and row["ok"])


def _upgrade(conn: "psycopg.Connection[dict[str, Any]]") -> None:
    """A version-1 queue gains the `options` column (its items run with orch run's defaults, as
    they did). A role that owns no table cannot: the queue stays at version 1, which older orch
    controllers sharing it still run, and only options are refused (PgQueue.add_item)."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {OPTIONS_COLUMN}")
            conn.execute(f"UPDATE {META} SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    except psycopg.errors.InsufficientPrivilege:
        return


def _columns(conn: "psycopg.Connection[dict[str, Any]]") -> frozenset[str]:
    """The items table's columns (none read: LIMIT 0)."""
    cursor = conn.execute(f"SELECT * FROM {TABLE} LIMIT 0")
    return frozenset(d.name for d in cursor.description or ())


def _candidates(conn: "psycopg.Connection[dict[str, Any]]", skip: frozenset[int]) -> Iterator[dict[str, Any]]:
    """Claimable rows in claim order (priority high first, then age), light columns, a page at a
    time from the last row's position: no cap, no growing list of rows passed over."""
    after: tuple[int, int] | None = None
    while True:
        where = "" if after is None else "AND (priority < %s OR (priority = %s AND id > %s))"
        params: tuple[object, ...] = () if after is None else (after[0], after[0], after[1])
        rows = conn.execute(
            f"SELECT id, priority, inventory, testbed, testbeds FROM {TABLE} "
            f"WHERE state IN ('queued', 'resumable') {where} ORDER BY priority DESC, id LIMIT {PAGE}",
            params,
        ).fetchall()
        for row in rows:
            if int(row["id"]) not in skip:
                yield row
        if len(rows) < PAGE:
            return
        after = (int(rows[-1]["priority"]), int(rows[-1]["id"]))


def _row_lock(conn: "psycopg.Connection[dict[str, Any]]", item_id: int) -> bool:
    """The row, locked for this claim if it is still claimable and nobody else holds it."""
    row = conn.execute(
        f"SELECT id FROM {TABLE} WHERE id = %s AND state IN ('queued', 'resumable') FOR UPDATE SKIP LOCKED",
        (item_id,),
    ).fetchone()
    return row is not None


def _claimable(conn: "psycopg.Connection[dict[str, Any]]", item_id: int) -> bool:
    """The row is still waiting (queued or resumable), whoever holds its row lock right now."""
    row = conn.execute(f"SELECT id FROM {TABLE} WHERE id = %s AND state IN ('queued', 'resumable')", (item_id,))
    return row.fetchone() is not None


def _free(conn: "psycopg.Connection[dict[str, Any]]", key: int) -> bool:
    """Whether nobody holds advisory lock `key` (tried and let go at once: only to learn which
    of an item's testbeds refused it, so the rows after it waiting for that one are passed over)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,)).fetchone()
    if row and row["ok"]:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return True
    return False


def _lock_all(conn: "psycopg.Connection[dict[str, Any]]", keys: tuple[int, ...]) -> bool:
    """Every lock or none (session-level: held until unlocked or the session ends)."""
    got: list[int] = []
    for key in keys:
        row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,)).fetchone()
        if not (row and row["ok"]):
            _unlock_all(conn, tuple(got))
            return False
        got.append(key)
    return True


def _unlock_all(conn: "psycopg.Connection[dict[str, Any]]", keys: tuple[int, ...]) -> None:
    for key in keys:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
