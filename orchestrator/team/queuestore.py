"""The queue's store, as one interface: what `run_queue` and `orch queue` need from wherever
the items live (SQLite beside the reports, or a PostgreSQL server several controllers share).

Why an interface and two stores rather than one: SQLite needs nothing installed and is right for
one controller; several controllers on several machines need a server that arbitrates claims
and testbeds across machines, and keeps doing so when a controller dies. The loop, the CLI and
the sweeps do not care which one answers.

The values here (an item, its states, who claimed it) are shared by both stores.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from orchestrator.core import jsontext
from orchestrator.errors import OrchError
from orchestrator.store.processes import process_alive
from orchestrator.store.processes import process_start as process_start
from orchestrator.store.rundir import RunDir

ItemState = Literal["queued", "running", "resumable", "completed", "failed"]
ITEM_STATES: tuple[ItemState, ...] = get_args(ItemState)
CLAIMABLE = ("queued", "resumable")
PENDING: tuple[ItemState, ...] = ("running", "resumable", "queued")
FINISHED: tuple[ItemState, ...] = ("completed", "failed")


def now_iso() -> str:
    """UTC, milliseconds: the runner's format (the queue does not import the runner)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def who() -> str:
    """user@host of this process: recorded with every item it queues."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


class QueueError(OrchError):
    """The queue database could not be read or written."""


class NotAQueue(QueueError):
    """The queue's file is no orch queue (not SQLite, damaged, another program's tables): bad
    input, exit 2 as a bad matrix is, where it was a runtime fault."""

    exit_code = 2


class QueueUnavailable(QueueError):
    """The queue's store cannot be reached for now (a server restarting, a database another
    process holds locked): worth trying again later, unlike a queue that is not one."""


@dataclass(frozen=True)
class Claimer:
    """Who runs an item: enough to tell, later, whether that process is still alive."""

    host: str
    pid: int
    start: int  # process start time in clock ticks since boot (guards against pid reuse)

    @classmethod
    def current(cls) -> "Claimer":
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()) or 0)

    def encode(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}"

    @classmethod
    def decode(cls, text: str) -> "Claimer":
        """`host:pid:start` as a Claimer; anything else is a QueueError naming the value."""
        claimer = cls.parse(text)
        if claimer is None:
            raise QueueError(f"claimed_by {text!r} is not host:pid:start (written by another tool, or by hand)")
        return claimer

    @classmethod
    def parse(cls, text: str) -> "Claimer | None":
        """`host:pid:start` as a Claimer, None for anything else. Why not raise: one stored value
        written by another tool must not stop every claim of the queue."""
        try:
            host, pid, start = text.rsplit(":", 2)
            return cls(host, int(pid), int(start))
        except ValueError:
            return None

    def alive(self) -> bool:
        """False only when we can tell: same host, and that process is gone (or another one)."""
        return process_alive(self.host, self.pid, self.start)


@dataclass(frozen=True)
class RunChoices:
    """`orch run`'s options a queued sweep runs with (`orch queue add --replicates 4 --seed 7`),
    stored with its item: what was validated is what runs. The defaults are `orch run`'s."""

    replicates: int | None = None  # None: the matrix's
    seed: int | None = None  # None: the matrix's, or random
    retries: int = 1
    fail_fast: bool = False

    def encode(self) -> str:
        """The stored value: a JSON object of what differs from the defaults ("" for none)."""
        given = {k: v for k, v in vars(self).items() if v != getattr(DEFAULT_CHOICES, k)}
        return json.dumps(given, sort_keys=True) if given else ""

    @classmethod
    def decode(cls, stored: object) -> "tuple[RunChoices, str]":
        """The stored value as choices and "", or the defaults and why it cannot be read (that
        item fails at its claim, as one with unreadable webhooks does; never `queue list`)."""
        text = "" if stored is None else str(stored)
        if not text:
            return DEFAULT_CHOICES, ""
        try:
            value = jsontext.loads(text)
        except (ValueError, RecursionError):
            value = None
        types = {"replicates": int, "seed": int, "retries": int, "fail_fast": bool}
        if isinstance(value, dict) and all(
            k in types and isinstance(v, types[k]) and (k == "fail_fast" or not isinstance(v, bool))
            for k, v in value.items()
        ):
            return cls(**value), ""
        shown = text if len(text) <= 60 else text[:57] + "..."
        return DEFAULT_CHOICES, f"its stored options {shown!r} are not orch run's options (re-add the item)"

    def shown(self) -> str:
        """As `orch queue add` was given them: `--replicates 4 --seed 7 --fail-fast` ("" for none)."""
        words = [f"--replicates {self.replicates}"] if self.replicates is not None else []
        words += [f"--seed {self.seed}"] if self.seed is not None else []
        words += [f"--retries {self.retries}"] if self.retries != DEFAULT_CHOICES.retries else []
        return " ".join(words + (["--fail-fast"] if self.fail_fast else []))


DEFAULT_CHOICES = RunChoices()


@dataclass(frozen=True)
class QueueItem:
    id: int
    matrix: str  # absolute path (where it was queued from; the sweep runs from matrix_text)
    inventory: str  # absolute path (relative paths in it are taken from its folder)
    testbed: str | None  # as typed: -t NAME, A,B, all or None (the first)
    priority: int
    webhooks: tuple[str, ...]
    state: ItemState
    added: str
    updated: str
    run_dir: str | None
    claimed_by: str | None
    message: str
    matrix_text: str = ""  # the matrix as it was when queued ("" for items queued by older orch)
    inventory_text: str = ""
    queued_by: str = ""  # user@host
    testbeds: tuple[str, ...] = ()  # the testbed names `testbed` meant when queued
    defect: str = ""  # why a stored value could not be read (the item cannot run; a claim fails it)
    choices: RunChoices = DEFAULT_CHOICES  # orch run's options it runs with

    @property
    def label(self) -> str:
        return f"item {self.id} ({Path(self.matrix).name})"

    @property
    def testbed_shown(self) -> str:
        """The testbeds the views name: those `-t` meant when queued (what `queue add` said), else
        as typed, or "(first)" for an item an older orch queued without -t."""
        return ",".join(self.testbeds) or self.testbed or "(first)"

    @property
    def shown_state(self) -> str:
        """The state the views show (`queue list`, `orch status`, /api/status): `stale` for an item
        still marked running whose runner is gone (kill -9; the next `queue run` takes it back),
        as its run is shown (store.liveness), never `running`."""
        claimer = Claimer.parse(self.claimed_by) if self.state == "running" and self.claimed_by else None
        return "stale" if claimer is not None and not claimer.alive() else self.state

    @property
    def resumable_run(self) -> Path | None:
        """The run this item started earlier and can resume (its run dir holds a run.json)."""
        if self.run_dir and RunDir(Path(self.run_dir)).is_run():
            return Path(self.run_dir)
        return None


@dataclass(frozen=True)
class NewItem:
    """What `add` records: the sweep's files (paths and the text they held) and who asked."""

    matrix: Path
    inventory: Path
    testbed: str | None = None
    priority: int = 0
    webhooks: tuple[str, ...] = ()
    matrix_text: str = ""
    inventory_text: str = ""
    queued_by: str = ""
    testbeds: tuple[str, ...] = ()
    choices: RunChoices = DEFAULT_CHOICES


def insert_values(new: NewItem, now: str) -> tuple[object, ...]:
    """(matrix, inventory, testbed, priority, webhooks, added, updated, matrix_text, inventory_text,
    queued_by, testbeds, options): the INSERT's order in both stores."""
    return (
        str(new.matrix),
        str(new.inventory),
        new.testbed,
        new.priority,
        json.dumps(list(new.webhooks)),
        now,
        now,
        new.matrix_text,
        new.inventory_text,
        new.queued_by or who(),
        ",".join(new.testbeds),
        new.choices.encode(),
    )


def item_from_row(row: Any) -> QueueItem:
    """A row of either store (sqlite3.Row or psycopg's dict_row) as a QueueItem. A version-1
    SQLite queue read without upgrading it (read-only, by `orch status`) lacks the newer columns."""
    have = set(row.keys())

    def newer(name: str) -> str:
        return str(row[name]) if name in have else ""

    webhooks, defect = _webhooks(row["webhooks"])
    choices, unread = RunChoices.decode(row["options"] if "options" in have else None)
    return QueueItem(
        id=int(row["id"]),
        matrix=str(row["matrix"]),
        inventory=str(row["inventory"]),
        testbed=row["testbed"],
        priority=int(row["priority"]),
        webhooks=webhooks,
        state=row["state"],
        added=str(row["added"]),
        updated=str(row["updated"]),
        run_dir=row["run_dir"],
        claimed_by=row["claimed_by"],
        message=str(row["message"]),
        matrix_text=newer("matrix_text"),
        inventory_text=newer("inventory_text"),
        queued_by=newer("queued_by"),
        testbeds=tuple(n for n in newer("testbeds").split(",") if n),
        defect="; ".join(d for d in (defect, unread) if d),
        choices=choices,
    )


def _webhooks(stored: object) -> tuple[tuple[str, ...], str]:
    """The stored webhooks column (a JSON list of URLs) and "", or () and why it is not one. Why
    not raise: a value another tool (or a hand edit) wrote must fail its own item, not every
    claim and `queue list` of the queue."""
    text = str(stored)
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested a few thousand deep (no ValueError)
        value = None
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return tuple(value), ""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (), f"its stored webhooks value {shown!r} is not a JSON list of URLs (re-add the item)"


# what `queue list`, `orch status` and a claim's candidates read: never the texts of the sweep's
# files, which may be large and are read only for the item a claim takes
LIGHT_COLUMNS = (
    "id, matrix, inventory, testbed, priority, webhooks, state, added, updated, run_dir, claimed_by, "
    "message, queued_by, testbeds, options"
)


class QueueStore(Protocol):
    """One open queue. Every method is one short transaction; `claim` is atomic across every
    process (and, for PostgreSQL, every machine) sharing the store."""

    @property
    def where(self) -> str: ...  # for messages: a file path or a URL without its password

    # True when a claim itself proves the item's earlier controller is gone (a lock that dies with
    # it): a resumed run may then take over its own testbed locks even from another machine
    claims_prove_owner_gone: bool

    def items(self, states: tuple[ItemState, ...] = ITEM_STATES) -> list[QueueItem]: ...

    def listing(self, finished: int | None = None) -> tuple[list[QueueItem], int]: ...

    def get(self, item_id: int) -> QueueItem: ...

    def add_item(self, new: NewItem) -> QueueItem: ...

    def remove(self, item_id: int) -> QueueItem: ...

    def claim(self, skip: frozenset[int] = frozenset(), claimer: Claimer | None = None) -> QueueItem | None: ...

    def set_run_dir(self, item_id: int, run_dir: Path) -> None: ...

    def finish(self, item_id: int, state: ItemState, message: str = "") -> QueueItem: ...

    def close(self) -> None: ...

    def __enter__(self) -> "QueueStore": ...

    def __exit__(self, *exc: object) -> None: ...
