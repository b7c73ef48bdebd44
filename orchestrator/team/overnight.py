"""One queue item as a sweep: the `SweepFn` that `orch queue run` hands to `run_queue`.

A new item runs through `sweep.api.run`, one cut short before through `sweep.api.resume` -
exactly what `orch run` / `orch resume` call - with the status.json sink added, so `orch
status` and `orch serve` see it. How lines are shown stays the caller's (the CLI): this module
gets its display as callables and prints nothing itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.errors import LockError, OrchError, StaleLockError
from orchestrator.store.liveness import not_restored_line
from orchestrator.store.manifest import new_run_id
from orchestrator.sweep.apitypes import (
    PreparedSweep,
    ProgressFor,
    ResumeRequest,
    Started,
    SweepOutcome,
    SweepRequest,
    Warn,
    testbeds_from_spec,
)
from orchestrator.sweep.progress import Progress, Tee
from orchestrator.team.livestatus import LiveStatus
from orchestrator.team.queue import QueueItem
from orchestrator.team.queue import SweepOutcome as ItemOutcome


class SweepApi(Protocol):
    """The part of `orchestrator.sweep.api` the queue calls: the CLI passes the module itself,
    tests a stub. Given, not imported, so the queue sits beside the sweep machinery, not on it."""

    def prepare(self, request: SweepRequest, *, warn: Warn | None = None) -> PreparedSweep: ...

    def run(
        self, request: SweepRequest, progress: ProgressFor, *, warn: Warn, prepared: PreparedSweep | None = None
    ) -> SweepOutcome: ...

    def resume(self, request: ResumeRequest, progress: ProgressFor, *, warn: Warn) -> SweepOutcome: ...


@dataclass(frozen=True)
class QueueSweep:
    """Runs one claimed item (new or resumable) and says how it ended, as the queue records it."""

    reports: Path
    terminal: ProgressFor  # the caller's display of a starting run (announce it, show a bar)
    show: Callable[[SweepOutcome], None]  # the caller's display of a finished one
    note: Callable[[str], None]  # the queue's own lines, e.g. "queue: item 1 (x.yaml): starting"
    error: Callable[[QueueItem, str], None]  # an item that could not run, and why
    warn: Warn
    sweeps: SweepApi  # `orchestrator.sweep.api`
    owner_gone: bool = False  # the store's claims prove a resumable item's earlier controller gone

    def __call__(self, item: QueueItem, deadline: float | None, record_run_dir: Callable[[Path], None]) -> ItemOutcome:
        recorded = [item.resumable_run] if item.resumable_run else []

        def record(run_dir: Path) -> None:
            run_dir = run_dir.resolve()  # the next night's `queue run` may start from another cwd
            recorded.append(run_dir)
            record_run_dir(run_dir)

        try:
            outcome = self._start_or_resume(item, deadline, record, lambda d: record_run_dir(d.resolve()))
        except LockError as exc:  # busy; or held by a dead run, which never frees it by itself
            return ItemOutcome("locked", exc.exit_code, None, str(exc), unrestored=isinstance(exc, StaleLockError))
        except OrchError as exc:
            self.error(item, str(exc))
            return ItemOutcome("error", exc.exit_code, recorded[-1] if recorded else None, str(exc))
        self.show(outcome)
        return item_outcome(outcome, deadline)

    def _start_or_resume(
        self,
        item: QueueItem,
        deadline: float | None,
        record_run_dir: Callable[[Path], None],
        record_intended: Callable[[Path], None],
    ) -> SweepOutcome:
        """`record_intended`: the new run's folder as its testbeds are locked, before it exists
        (not an outcome's folder: the sweep may still be refused before making it)."""
        resumable = item.resumable_run
        progress = self._progress_for(item)
        if resumable is not None:
            # the run's manifest names the queue's copies beside the run (its reports folder, as
            # this controller mounts it): written again, so a folder cleaned of them still resumes
            sweep_files(item, resumable.parent)
            # --retries: the run's own (run.json); --fail-fast is not kept there: the item's
            again = ResumeRequest(
                resumable, fail_fast=item.choices.fail_fast, deadline=deadline, owner_gone=self.owner_gone
            )
            return self.sweeps.resume(again, progress, warn=self.warn)
        for line in changed_since_queued(item):
            self.note(f"queue: {item.label}: {line}")
        matrix, inventory = sweep_files(item, self.reports)
        request = SweepRequest(
            matrix,
            inventory,
            testbeds_from_spec(item.testbed),  # `-t a,b` / `-t all`: as `orch run` does
            replicates=item.choices.replicates,
            seed=item.choices.seed,
            reports_dir=self.reports,
            fail_fast=item.choices.fail_fast,
            retries=item.choices.retries,
            deadline=deadline,
        )
        prepared = self.sweeps.prepare(request, warn=self.warn)
        unborn = unborn_run(item, self.reports)
        # two runners never collide; a start that died before its folder was made starts again
        # under its own id (the sweep takes over that start's stale lock, and says so)
        run_id = unborn.name if unborn else new_run_id(f"{prepared.plan.matrix.name}-q{item.id}", self.reports)
        request = dataclasses.replace(request, run_id=run_id, on_created=record_run_dir, on_locking=record_intended)
        return self.sweeps.run(request, recording(progress, record_run_dir), warn=self.warn, prepared=prepared)

    def _progress_for(self, item: QueueItem) -> ProgressFor:
        """The sweep's display, announced with the queue's own line once the sweep has started: an
        item whose testbed turns out busy (or that cannot start) never says "starting"."""

        def progress(started: Started) -> Progress:
            # "resuming" only when trials ran before: an earlier attempt that found the testbed
            # busy leaves a run folder, but nothing of the item has run yet
            done = started.trials if started.open_ended else started.trials - started.left
            resuming = started.resumed and done > 0
            self.note(f"queue: {item.label}: " + ("resuming" if resuming else "starting"))
            return Tee(self.terminal(started), LiveStatus(started.run_dir, cell_name=started.cell_name))

        return progress


def unborn_run(item: QueueItem, reports: Path) -> Path | None:
    """The run folder the item recorded as it locked its testbeds, if that folder was never made:
    its controller died between the lock and the folder (no host was edited then; the sweep checks
    the hosts too). Only a folder of this reports folder: one of another controller's (a shared
    queue) is not seen from here, which says nothing of whether it exists."""
    if not item.run_dir:
        return None
    recorded = Path(item.run_dir)
    if recorded.parent != reports.resolve() or recorded.exists() or recorded.is_symlink():
        return None
    return recorded


def recording(progress: ProgressFor, record_run_dir: Callable[[Path], None]) -> ProgressFor:
    """`progress` that first records the new run's folder with the item. Why there: the sweep
    calls it once the folder exists and the testbeds are locked, before any host is touched (the
    real sweep has recorded it already, through the request's on_created, as the folder was
    made: a kill while the run is announced must not leave an item naming no run). A
    sweep refused earlier (a testbed locked by another run) records nothing, so the item keeps
    naming the run it may have started before - the one to resume. Only a sweep that found its
    testbeds free records its folder before making it (on_locking, see unborn_run)."""

    def on_start(run: Started) -> Progress:
        record_run_dir(run.run_dir)
        return progress(run)

    return on_start


COPIES = ".queued-"  # files in the reports folder (not a folder: the folders there are runs)
_BASE_DIR = re.compile(r"^base_dir\s*:", re.MULTILINE)


def sweep_files(item: QueueItem, reports: Path) -> tuple[Path, Path]:
    """The matrix and inventory a queued item's sweep reads: the copies the queue kept, written
    as reports/.queued-<digest>.{matrix,inventory}.yaml (they stay: a resumed run reads them again,
    and a shared reports folder lets another controller resume it); an item queued by an older
    orch, without copies, runs from its paths as before.

    Why copies: a matrix edited or deleted between the evening's `queue add` and the night must
    not change what runs. The inventory copy names its original folder as `base_dir`, so its
    relative env_file/state_dir paths mean what they meant when it was queued."""
    if not item.matrix_text or not item.inventory_text:
        return Path(item.matrix), Path(item.inventory)
    inventory_text = item.inventory_text
    if not _BASE_DIR.search(inventory_text):
        base = json.dumps(str(Path(item.inventory).parent))  # a JSON string is a YAML string
        inventory_text = inventory_text.rstrip("\n") + f"\nbase_dir: {base}\n"
    digest = hashlib.sha256(f"{item.matrix_text}\0{inventory_text}".encode()).hexdigest()[:20]
    matrix = _write_once(reports / f"{COPIES}{digest}.matrix.yaml", item.matrix_text)
    inventory = _write_once(reports / f"{COPIES}{digest}.inventory.yaml", inventory_text)
    return matrix, inventory


MAX_COMPARED_BYTES = 1 << 20  # a matrix or inventory is a few KB; past this it differs from any copy


def changed_since_queued(item: QueueItem) -> list[str]:
    """What to say of an item whose matrix or inventory file changed or went since `queue add`
    (none for an item without copies: it runs from the files). Why: the night runs the copies, as
    it should, but someone who fixed the file in the evening would read the morning's report as
    the fixed one unless told."""
    if not item.matrix_text or not item.inventory_text:
        return []
    drifted = [
        f"{path} {why}"
        for path, text in ((item.matrix, item.matrix_text), (item.inventory, item.inventory_text))
        if (why := _drift(Path(path), text))
    ]
    if not drifted:
        return []
    return [
        f"{'; '.join(drifted)}: the sweep runs the copy kept at `queue add` ({item.added}); "
        f"to run the file as it is now: `orch queue remove {item.id}` and add it again"
    ]


def _drift(path: Path, queued: str) -> str:
    if not path.exists():
        return "is gone"
    try:
        now = read_bounded_bytes(path, MAX_COMPARED_BYTES)
    except OrchError:
        return "cannot be read now"
    return "" if now.decode("utf-8", errors="replace") == queued else "changed since it was queued"


def _write_once(path: Path, text: str) -> Path:
    """Write `text` unless the file already holds it (atomic: another controller may read it)."""
    if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def item_outcome(outcome: SweepOutcome, deadline: float | None, clock: Callable[[], float] = time.time) -> ItemOutcome:
    """How the queue records a sweep that ran (pure but for the clock). Hosts left unrestored are
    named with the way back however the sweep ended: the queue's note is what the team reads in
    the morning, and a testbed left on a cell's flags skews every later run on it."""
    finished = outcome.completed + outcome.failed
    of = "" if outcome.planned is None else f"/{outcome.planned}"  # a hunt has no planned total
    counts = f"{finished}{of} trials, {outcome.failed} failed"
    code, run_dir = outcome.exit_code, outcome.run_dir
    left = ""
    if outcome.not_restored:
        left = f"; {not_restored_line(outcome.not_restored, run_dir)}"
    if outcome.status == "completed" and outcome.unanswered is not None and not outcome.not_restored:
        # a hunt that ran to its end and named no culprit: exit 1 as `orch hunt`, but the item ran
        # as it should (the night does not fail on it), and the note says why rather than "see the log"
        return ItemOutcome("completed", code, run_dir, f"{counts}; {outcome.unanswered}")
    if outcome.status == "completed" and code != 0:  # e.g. a host could not be restored
        why = left or f"; exit code {code}: see the log"
        return ItemOutcome("failed", code, run_dir, f"{counts}{why}")
    if outcome.status in ("completed", "failed"):
        return ItemOutcome(outcome.status, code, run_dir, f"{counts}{left}")
    why = "deadline reached" if deadline is not None and clock() >= deadline else "interrupted"
    return ItemOutcome("interrupted", code, run_dir, f"{why} after {counts}; resumable{left}")
