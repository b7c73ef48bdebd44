"""Live status of running sweeps: a progress sink writing reports/<run>/status.json (EDGE), and
the reader that `orch status` and `orch serve` share.

Why a file per run, rewritten atomically: the sweep's process is the only writer, any number of
readers (a terminal, a web page, a script) can poll it without talking to that process, and a
reader never sees half a file. Why the pid and its start time are in it: a controller killed with
-9 cannot say it stopped, so readers check whether it is still alive and call the run `stale`.

The current cell is the first planned trial not yet finished: the runner runs the plan in order,
skipping finished trials, so that is the trial running now (a retry included). A hunt has no
total and no current cell here: its search picks each trial as it goes (plan.json holds only its
first wave), so a total, a percentage or an ETA would be a guess ("14/33 (42%)" was shown for a
hunt killed after 14 trials, "35/36 (97%)" for one that had ended).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from orchestrator.core.records import TrialRecord
from orchestrator.errors import OrchError
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.journal import read_trial_rows, trial_statuses
from orchestrator.store.liveness import MAX_STATUS_BYTES as MAX_STATUS_BYTES
from orchestrator.store.liveness import (
    STALE,
    not_restored_line,
    read_status,
    restore_command,
    resume_command,
    status_or_why,
)
from orchestrator.store.liveness import LiveState as LiveState
from orchestrator.store.liveness import StatusFile as StatusFile
from orchestrator.store.liveness import judge as judge
from orchestrator.store.manifest import holds_run, load_manifest, load_plan, manifest_or_why
from orchestrator.store.rundir import RUN_JSON, STATUS_JSON, RunDir, listable
from orchestrator.store.runtrials import trial_rows
from orchestrator.store.stamps import SETTLE_NS, Stamp, file_stamp, settled
from orchestrator.sweep.progress import QuietProgress, summarize
from orchestrator.team.queue import DB_NAME, Claimer, Queue, QueueItem

if TYPE_CHECKING:
    pass


class LiveStatus:
    """A Progress sink (sweep.progress.Progress) that keeps run_dir/status.json up to date.

    Never fails a sweep: a status file that cannot be written is given up on silently (the
    journal, not this file, is the record of the run); `error` says why.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        cell_name: Callable[[TrialRecord], str] = lambda record: record.cell,
    ) -> None:
        self.run_dir, self.clock, self.cell_name = run_dir, clock, cell_name
        self._lock = threading.Lock()  # a sweep over several testbeds reports from several threads
        self.error: str = ""
        self._status: StatusFile | None = None
        self._plan: list[tuple[int, str]] = []
        self._finished: set[int] = set()
        self._t0 = 0.0
        self._done_here = 0

    def start(self, total: int, done: int) -> None:
        try:
            manifest = load_manifest(self.run_dir, plan=False)
            self._plan = load_plan(self.run_dir, manifest).pairs()  # columns: no model per trial
        except OrchError as exc:
            self.error = str(exc)
            return
        self._finished = _finished_trials(self.run_dir)
        failed = _failed_for_good(self.run_dir) if self._finished else 0  # a resumed run's earlier failures
        self._t0, self._done_here = self.clock(), 0
        self._open_ended = manifest.hunt
        if self._open_ended:
            self._plan = []  # its first wave, which the search may run in any order and repeat
        me = Claimer.current()
        self._status = StatusFile(
            run_id=manifest.run_id,
            name=manifest.name,
            testbed=manifest.testbed,
            host=me.host,
            pid=me.pid,
            pid_start=me.start,
            state="running",
            started=_iso(self._t0),
            updated=_iso(self._t0),
            done=done,
            total=None if self._open_ended else total,
            failed=failed,
        )
        self._write(**self._current())

    def trial_done(self, record: TrialRecord) -> None:
        with self._lock:
            if self._status is None:
                return
            self._finished.add(record.trial)
            self._done_here += 1
            done = self._status.done + 1
            self._write(
                done=done,
                failed=self._status.failed + (record.status != "completed"),
                last=summarize(record, self.cell_name(record)),
                **self._current(),
                **self._eta(done),
            )

    def retotal(self, left: int) -> None:
        with self._lock:
            if self._status is not None and self._status.total is not None:
                done = self._status.done
                self._write(total=done + left, **(self._eta(done) if self._done_here else {}))

    def note(self, message: str) -> None:
        with self._lock:
            if self._status is not None:
                self._write(note=message)

    def stop(self) -> None:
        with self._lock:
            if self._status is not None:
                self._write(state="finished", current_trial=None, current_cell=None, eta_s=None, eta_at=None)

    def restore_ended(self, not_restored: Sequence[str]) -> None:
        """What the restore left, in this sweep's status; before `start` (a resume stopped after
        it adopted a killed run's backup, before it took the run over: the restore still puts that
        run's hosts back), in the file as the run left it. Why: the file then kept saying nothing
        was left changed while a host was, and `orch status` named no way back (the kill-point
        harness, `--kill-way-back resume`, seed 9412: a second Ctrl-C skipped a host's restore)."""
        with self._lock:
            if self._status is None:
                RestoreStatus(self.run_dir, clock=self.clock, by="orch resume").restore_ended(not_restored)
            else:
                self._write(**left_changed(self.run_dir, not_restored))

    def _current(self) -> dict[str, object]:
        nxt = next(((t, c) for t, c in self._plan if t not in self._finished), None)
        return {"current_trial": nxt[0] if nxt else None, "current_cell": nxt[1] if nxt else None}

    def _eta(self, done: int) -> dict[str, object]:
        """Remaining trials at this process's pace so far (restarts and waits included); none
        without a total (a hunt)."""
        assert self._status is not None
        if self._status.total is None:
            return {}
        left = max(0, self._status.total - done)
        now = self.clock()
        eta = (now - self._t0) / self._done_here * left
        return {"eta_s": round(eta, 1), "eta_at": _iso(now + eta)}

    def _write(self, **changes: object) -> None:
        assert self._status is not None
        self._status = self._status.model_copy(update={**changes, "updated": _iso(self.clock())})
        if self.error:
            return
        try:
            write_json_atomic(RunDir(self.run_dir).status_json, self._status)
        except OrchError as exc:
            self.error = str(exc)


class RestoreStatus(QuietProgress):
    """A Progress sink for a restore outside a sweep (`orch restore RUN_DIR`, a resume with no
    trial left): the run's status.json, as its sweep left it, gets the restore's end. Why: the
    file said which hosts the run left changed; once they are back it must stop saying so, and a
    restore that is still incomplete must say what is left. A restore that changes none of that (a
    resume of a finished run, its hosts back long ago) leaves the file as it is, `updated` too. No
    status file: nothing is written
    (a run from before status files, or one stopped before its first trial). Never fails the
    restore (`error` says why the file was not written)."""

    def __init__(self, run_dir: Path, *, clock: Callable[[], float] = time.time, by: str = "orch restore") -> None:
        self.run_dir, self.clock, self.by = run_dir, clock, by  # by: the command whose restore it is
        self.error = ""

    def restore_ended(self, not_restored: Sequence[str]) -> None:
        status = read_status(self.run_dir)
        if status is None:
            return
        changes = left_changed(self.run_dir, not_restored)
        if status.not_restored and not not_restored:
            changes["note"] = f"restored since by {self.by}: {', '.join(status.not_restored)}"
        if status.model_copy(update=changes) == status:  # nothing to add: the file stays as the sweep ended it
            return
        try:
            write_json_atomic(
                RunDir(self.run_dir).status_json,
                status.model_copy(update={**changes, "updated": _iso(self.clock())}),
            )
        except OrchError as exc:
            self.error = str(exc)


def left_changed(run_dir: Path, not_restored: Sequence[str]) -> dict[str, object]:
    """status.json's fields for what a restore left changed: the roles, the command that finishes
    the job and the note the terminal showed (none left: the fields emptied, the note kept)."""
    if not not_restored:
        return {"not_restored": (), "restore_with": ""}
    whole = run_dir.absolute()  # read from any folder (the pages, `orch status`), not the controller's
    return {
        "not_restored": tuple(not_restored),
        "restore_with": restore_command(whole),
        "note": not_restored_line(not_restored, whole),
    }


def _finished_trials(run_dir: Path) -> set[int]:
    """The trials resume counts finished, read as resume reads them (trial_statuses: the status
    index, else each line's head; never every record in full): a failed attempt that was tried
    again ended no trial, so the trial cut off during its retry is the one running now."""
    path = RunDir(run_dir).journal
    if not path.exists():
        return set()
    try:
        return set(trial_statuses(path).finished)
    except OrchError:
        return set()


def _failed_for_good(run_dir: Path) -> int:
    """How many of the journal's finished trials failed for good (store.runtrials.trial_rows, as
    the webhook and `orch run`'s last line count them). Why at start: `done` goes on from the
    trials an earlier session finished, and `failed` must too, or a resumed run's status read
    16/16 with no failure while its webhook said 1 failed. Read only for a resume (a full pass
    over the journal's rows, as the run's end makes); unreadable: 0, a status file never fails a sweep."""
    try:
        return sum(row.status == "failed" for row in trial_rows(read_trial_rows(RunDir(run_dir).journal).rows))
    except OrchError:
        return 0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class LiveRun:
    """One run as the status views show it: its status file, judged against its manifest."""

    directory: str
    state: LiveState | Literal["unreadable"]  # unreadable: its status file or run.json cannot be read
    run_status: str  # the manifest's status: running, completed, failed, interrupted ("": run.json unreadable)
    status: StatusFile  # of an unreadable one: what is known (its manifest's names, or its status file)
    path: str = ""  # the run folder, absolute: what `orch resume` / `orch restore` take from any folder
    unreadable: str = ""  # why its unreadable_file cannot be read (status_or_why, manifest_or_why); "" when read
    unreadable_file: str = ""  # status.json or run.json ("" when both were read)

    @property
    def percent(self) -> float | None:
        """None without a total (a hunt)."""
        if self.status.total is None:
            return None
        return 100.0 * self.status.done / self.status.total if self.status.total else 100.0

    @property
    def left_changed(self) -> str:
        """`NOT restored: ROLES; finish with: orch restore RUN_DIR`, or "" when the run left no
        host changed (as far as its controller could tell: a stale run may have)."""
        if not self.status.not_restored:
            return ""
        return not_restored_line(self.status.not_restored, self.directory, self.status.restore_with)

    @property
    def way_back(self) -> str:
        """For a stale run, the commands that end it: its killed controller left the hosts on a
        cell's flags, under its lock, until one of them runs. For an interrupted one, the command
        that takes it up again (its hosts were put back as it stopped; the morning after, the
        status views are where one looks for it). Named with the run's folder (its bare name is
        refused outside the reports folder); "" for any other run."""
        where = self.path or self.directory
        if self.state == STALE:
            back = restore_command(where)
            return f"its controller is gone: {resume_command(where)} (or {back} to put its hosts back)"
        if self.state == "finished" and self.run_status == "interrupted":
            return f"interrupted: continue with {resume_command(where)}"
        return ""

    @property
    def current_cell(self) -> str:
        """The cell its trial is on while the run runs, or its hosts are left on when stale; "" once
        it ended: a dead controller's status file names a cell for ever, and `orch restore` (which
        rewrites run.json, not that file) put the hosts back."""
        return (self.status.current_cell or "") if self.state in ("running", STALE) else ""

    @property
    def unreadable_line(self) -> str:
        """`status unreadable: over 1 MiB`, `run.json unreadable: missing`: the views' word for a
        run whose status file or manifest cannot be read; "" for any other run."""
        if not self.unreadable:
            return ""
        return f"{'run.json' if self.unreadable_file == RUN_JSON else 'status'} unreadable: {self.unreadable}"

    @property
    def controller(self) -> str:
        """`host:pid` of the controller its status file names; "" when no status file was read."""
        return f"{self.status.host}:{self.status.pid}" if self.status.pid else ""

    @property
    def progress(self) -> str:
        """Trials done of the total, as `orch status` shows them ("14 done" for a hunt); for a run
        whose status file cannot be read, that (nothing tells its progress)."""
        if self.unreadable:
            return self.unreadable_line
        fails = f" ({self.status.failed} failed)" if self.status.failed else ""
        if self.percent is None:
            return f"{self.status.done} done{fails}"
        return f"{self.status.done}/{self.status.total}{fails} ({self.percent:.0f}%)"


@dataclass(frozen=True)
class QueueView:
    """A queue item for the status views: no webhook URLs (they carry secrets)."""

    id: int
    state: str
    priority: int
    matrix: str
    testbed: str
    added: str
    run: str
    message: str


# queue items a status view lists: a glance, not `orch queue list` (10,000 queued items made
# `orch status` print 10,006 lines in 6.6 s, and /status and /api/status 2 MB each)
QUEUE_SHOWN = 50


@dataclass(frozen=True)
class Snapshot:
    generated: str
    runs: tuple[LiveRun, ...]  # running and stale first, then recently finished
    queue: tuple[QueueView, ...]  # the first QUEUE_SHOWN pending items, in the order `queue run` takes them
    queue_more: int = 0  # pending items left out of `queue` (`orch queue list` lists them all)
    queue_unreadable: str = ""  # why the queue file cannot be read ("": read, or none)


def live_runs(reports_dir: Path, *, finished: int = 5, cache: StatusCache | None = None) -> list[LiveRun]:
    """Runs with a status file, and damaged runs (see _live_run): first every one that left hosts
    changed (however old: a testbed left on a cell's flags skews every later run on it), then every
    running or stale one and every one whose status file or run.json cannot be read, then the
    `finished` latest others. `cache`: the server's (a run whose files did not change is not read
    again); the answer is the same without."""
    return (cache if cache is not None else StatusCache()).shown(reports_dir, finished)  # an empty one is falsy


def _in_order(found: Sequence[LiveRun], finished: int) -> list[LiveRun]:
    """live_runs' order of `found` (the folders' order breaks ties)."""
    changed = sorted((r for r in found if r.left_changed), key=lambda r: r.status.updated, reverse=True)
    rest = [r for r in found if not r.left_changed]
    active = [r for r in rest if r.state != "finished"]
    done = sorted((r for r in rest if r.state == "finished"), key=lambda r: r.status.updated, reverse=True)
    return changed + sorted(active, key=lambda r: r.status.started) + done[:finished]


def snapshot(reports_dir: Path, cache: StatusCache | None = None) -> Snapshot:
    runs = tuple(live_runs(reports_dir, cache=cache))
    items, unreadable = read_queue(reports_dir)
    return Snapshot(_iso(time.time()), runs, *queue_shown(items), queue_unreadable=unreadable)


@dataclass(frozen=True)
class _Kept:
    """What a view knows of a run folder: the stamps its files had when read, and its run (None:
    left out) or, for a finished run no view shows (past the `finished` newest), only when it was
    updated: what tells whether it is shown (its status file is read again if it comes to be)."""

    stamps: bytes
    run: LiveRun | None
    updated: str = ""
    slim: bool = False
    keep: bool = True  # its files settled: kept for the next view

    @property
    def when(self) -> str:
        """When its run was updated (its status file says)."""
        return self.updated if self.run is None else self.run.status.updated

    def slimmed(self) -> _Kept:
        assert self.run is not None
        return _Kept(self.stamps, None, self.run.status.updated, slim=True, keep=self.keep)


class StatusCache:
    """The runs the status views show of one reports folder, kept between views: each view stamps
    every run folder's status.json and run.json (store.stamps, two stats a folder) and reads again
    only the folders whose stamps changed; what time alone changes, whether a running run's
    controller is still alive (killed with -9 it writes nothing), is asked again on every view
    (store.liveness.judge: no file read for a finished run). Why: /status refreshes every 5 s and
    read every folder's two files each time (20,000 finished runs: 2.3 s a view over HTTP, 0.15 s
    kept; bench/bench_status.py). A finished run not shown keeps only its `updated` (~0.3 KB a run, not
    ~4 KB); a folder gone is dropped; a view equals an uncached one (a new StatusCache)."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock  # nanoseconds, file times' clock (tests move it)
        self._lock = threading.Lock()  # concurrent views wait for one reading, not each read all
        self._kept: dict[str, _Kept] = {}
        self._of: Path | None = None

    def __len__(self) -> int:
        return len(self._kept)

    def shown(self, reports_dir: Path, finished: int) -> list[LiveRun]:
        """live_runs' answer: the folders read again only where their stamps changed."""
        with self._lock:
            if self._of != reports_dir:
                self._kept, self._of = {}, reports_dir
            settled_before = self._clock() - SETTLE_NS
            now: dict[str, _Kept] = {}
            for name, path, stamps in _run_folders(reports_dir):
                old = self._kept.get(name)
                if old is not None and old.stamps == stamps:
                    now[name] = old if old.slim else replace(old, run=_judged(old.run))
                else:  # stamps taken before reading: a write since shows in them
                    keep = settled(_unpacked(stamps), settled_before)
                    now[name] = _Kept(stamps, _live_run(Path(path)), keep=keep)
            self._window(reports_dir, now, finished)
            self._kept = {name: k for name, k in now.items() if k.keep}
        return _in_order([k.run for k in now.values() if k.run is not None], finished)

    @staticmethod
    def _window(reports_dir: Path, now: dict[str, _Kept], finished: int) -> None:
        """Keep whole the `finished` newest finished runs (the ones shown), read again when one was
        kept slim (a newer one gone); slim the other finished ones."""
        plain = [(name, k) for name, k in now.items() if k.slim or (k.run is not None and _plain(k.run))]
        newest = sorted(plain, key=lambda nk: nk[1].when, reverse=True)  # the folders' order breaks ties
        for name, k in newest[:finished]:
            if k.slim:
                now[name] = replace(k, run=_live_run(reports_dir / name), slim=False, updated="")
        for name, k in newest[finished:]:
            if not k.slim:
                now[name] = k.slimmed()


def _plain(run: LiveRun) -> bool:
    """A finished run that says nothing more than when it finished: shown only among the newest.
    Once finished it stays so while its files stay (a dead controller never comes back)."""
    return run.state == "finished" and not run.left_changed and not run.unreadable


def read_queue(reports_dir: Path) -> tuple[list[QueueItem], str]:
    """Items not yet done (queued, running, resumable), read-only, none if there is no queue; and
    why the queue file cannot be read ("": read, or there is none). Why said:
    a damaged queue.db listed as no queue read as "nothing queued" on every status view, while
    tonight's `queue run` would refuse it (team.queuestore.NotAQueue)."""
    if not (reports_dir / DB_NAME).is_file():
        return [], ""
    try:
        with Queue.in_reports(reports_dir, read_only=True) as q:
            return q.items(("running", "resumable", "queued")), ""
    except OrchError as exc:  # named by its file name: the served pages show no server path
        return [], str(exc).replace(str(reports_dir / DB_NAME), DB_NAME)


def queue_shown(items: Sequence[QueueItem]) -> tuple[tuple[QueueView, ...], int]:
    """The first QUEUE_SHOWN items as the status views show them, and how many are left out."""
    return tuple(item_view(i) for i in items[:QUEUE_SHOWN]), max(len(items) - QUEUE_SHOWN, 0)


STALE_ITEM = "its queue runner is gone: the next `orch queue run` takes it back"


def item_view(item: QueueItem) -> QueueView:
    """A queue item as the status shows it (any store's item)."""
    stale = item.shown_state == "stale"
    return QueueView(
        item.id,
        item.shown_state,
        item.priority,
        Path(item.matrix).name,
        item.testbed_shown,
        item.added,
        Path(item.run_dir).name if item.run_dir else "",
        STALE_ITEM if stale and not item.message else item.message,
    )


def _run_folders(reports_dir: Path) -> list[tuple[str, str, bytes]]:
    """The run folders (store.manifest.holds_run: a status.json, a run.json or a journal, whole or
    damaged), each with the stamps of its status.json and run.json (packed: 96 bytes, not two
    tuples of 6 ints, 0.6 KB), taken before either is read. What is shown of each is _live_run's
    rule: the stamps of those two files decide it (a journal only makes the folder a run's)."""
    if not reports_dir.is_dir():
        return []
    found: list[tuple[str, str, bytes]] = []
    with os.scandir(reports_dir) as it:
        for d in it:
            if not d.is_dir() or not listable(d.name):
                continue
            status, run_json = file_stamp(f"{d.path}/{STATUS_JSON}"), file_stamp(f"{d.path}/{RUN_JSON}")
            if status is not None or run_json is not None or holds_run(d.path):
                found.append((d.name, d.path, _packed(status, run_json)))
    return found


_STAMPS = struct.Struct("=4Q2q4Q2q")  # kind, device, inode, size (unsigned); mtime, ctime (ns, signed)


def _packed(status: Stamp, run_json: Stamp) -> bytes:
    return _STAMPS.pack(*(status or (0,) * 6), *(run_json or (0,) * 6))  # kind 0: no file


def _unpacked(packed: bytes) -> tuple[Stamp, Stamp]:
    values = _STAMPS.unpack(packed)
    status, run_json = values[:6], values[6:]
    return (status if status[0] else None, run_json if run_json[0] else None)


def _live_run(run_dir: Path) -> LiveRun | None:
    """The run as the status views show it, its controller judged now, or None (left out). The
    rule, for a run folder (_run_folders): shown when it has a status file (its sweep started:
    running, stale or finished), or when its run.json cannot be read (missing beside a journal or
    a status file, over its cap, torn, another schema: a damaged sweep that `orch status` showed
    nothing of); left out when it has no status file and its run.json reads (a run from before
    status files, or stopped before its first trial: the runs index lists it). A file that cannot
    be read is shown as such (`unreadable`, `unreadable_file`). The manifest is read without its
    plan: only its status and names are used, and a big plan takes a second to load."""
    status = status_or_why(run_dir)
    manifest = manifest_or_why(run_dir)
    if isinstance(manifest, str):
        return _unreadable_manifest(run_dir, manifest, status)
    if status is None:  # a run without a status file (or removed since the folder was listed)
        return None
    where = str(run_dir.resolve())
    if isinstance(status, StatusFile):
        return LiveRun(run_dir.name, judge(status, manifest.status), manifest.status, status, where)
    known = _names_only(manifest.run_id, manifest.name, manifest.testbed)
    return LiveRun(
        run_dir.name, "unreadable", manifest.status, known, where, unreadable=status, unreadable_file=STATUS_JSON
    )


def _unreadable_manifest(run_dir: Path, why: str, status: StatusFile | str | None) -> LiveRun:
    """A run whose run.json cannot be read: what its status file says (its names, progress and
    controller) when that reads, else its folder's name; its state `unreadable` (whether it runs
    is the manifest's to say, and a controller alive may be finishing)."""
    if isinstance(status, str):
        why = f"{why}; status.json too: {status}"
    shown = status if isinstance(status, StatusFile) else _names_only(run_dir.name, run_dir.name, "")
    where = str(run_dir.resolve())
    return LiveRun(run_dir.name, "unreadable", "", shown, where, unreadable=why, unreadable_file=RUN_JSON)


def _names_only(run_id: str, name: str, testbed: str) -> StatusFile:
    """The status shown of a run whose status file cannot be read: its names, no controller, no
    progress (its `unreadable` word says why)."""
    return StatusFile(
        run_id=run_id, name=name, testbed=testbed, host="", pid=0, pid_start=0,
        state="finished", started="", updated="", done=0, total=None, failed=0,
    )  # fmt: skip


def _judged(run: LiveRun | None) -> LiveRun | None:
    """The run kept, its controller judged again (alive then, dead now: stale), the very object
    when nothing changed."""
    if run is None or run.unreadable:
        return run
    state = judge(run.status, run.run_status)
    return run if state == run.state else replace(run, state=state)
