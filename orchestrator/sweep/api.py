"""The sweep API: typed requests in, typed outcomes out. `orch run`/`resume`/`restore` and the
overnight queue all start sweeps here, through one code path for 1..N testbeds:

    connect -> preflight -> lock -> check unrestored -> manifest -> run dir -> execute -> finish

It never prints and knows nothing of argparse, rich or the team features: it reports through
the `warn` callback and the progress sink the caller builds (`progress(Started)` is called once
the run is known, so the caller can announce it and add a status file), and returns an outcome
the caller prints. Errors are raised as OrchErrors; the caller maps them to exit codes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core.config import (
    check_replicates,
    read_inventory,
    read_matrix,
)
from orchestrator.core.hostfacts import recorded_hosts
from orchestrator.core.inventory import Inventory, Testbed
from orchestrator.core.model import Matrix
from orchestrator.core.plan import make_plan, resumed_steps
from orchestrator.core.records import RunManifest
from orchestrator.core.steps import Plan
from orchestrator.edges.deployment import Deployment
from orchestrator.edges.lock import TestbedLock
from orchestrator.edges.preflight import preflight_testbeds
from orchestrator.edges.provenance import describe_controller
from orchestrator.errors import (
    Interrupted,
    JournalError,
    LockError,
    OrchError,
    PreflightError,
    SweepStopped,
    UsageError,
)
from orchestrator.store.journal import (
    Journal,
    index_vouches,
    last_attempts,
    read_trial_rows,
    repair_torn_tail,
    trial_statuses,
)
from orchestrator.store.manifest import load_manifest, new_run_id, save_manifest
from orchestrator.store.planrecord import check_same_plan, make_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.store.runlock import run_lock
from orchestrator.store.runtrials import Finished, read_finished, read_run_rows, trial_rows
from orchestrator.sweep import session
from orchestrator.sweep.adaptive import AdaptiveSource
from orchestrator.sweep.apitypes import HostRestoreRequest as HostRestoreRequest
from orchestrator.sweep.apitypes import (
    PreparedSweep,
    ProgressFor,
    RestoreOutcome,
    RestoreRequest,
    ResumePreview,
    ResumeRequest,
    Started,
    SweepOutcome,
    SweepRequest,
    SweepStatus,
    TestbedRestore,
    Warn,
)
from orchestrator.sweep.clock import now_iso
from orchestrator.sweep.hostrestore import restore_from_hosts as restore_from_hosts  # the folder gone
from orchestrator.sweep.hunt import HuntSource, OnStop
from orchestrator.sweep.orphans import stop_orphaned_remote_repros, stop_orphaned_repros
from orchestrator.sweep.prepare import check_command_lengths, check_key_files, check_separate_testbeds, shown_path
from orchestrator.sweep.prepare import check_new_run as check_new_run  # re-exported: api.prepare & co are the API
from orchestrator.sweep.prepare import check_same_roles as check_same_roles
from orchestrator.sweep.prepare import load as load
from orchestrator.sweep.prepare import prepare as prepare
from orchestrator.sweep.prepare import select_testbeds as select_testbeds
from orchestrator.sweep.progress import Progress, Tee
from orchestrator.sweep.runner import Runner, RunOptions, RunResult, execute
from orchestrator.sweep.runrecord import HostsOnDisk, ResumeRecord, RunningMark
from orchestrator.sweep.sources import OnDecision, SourceFactory, StepSource

if TYPE_CHECKING:  # the search (numpy, scipy) loads when a hunt starts (sweep.hunt)
    from orchestrator.core.hunt import HuntResult


def _recorded_paths(request: SweepRequest, run_dir: Path) -> dict[str, str]:
    """The matrix and inventory paths run.json keeps for a resume: one that works from any working
    directory. Why: the shown path is relative to the cwd, and `orch resume RUN_DIR` (or the next
    night's `queue run`, a timer started elsewhere) may run from another one. A file in the
    reports folder (the queue's copies) is named relative to the run dir, so a reports folder
    mounted elsewhere still finds them; any other file by its absolute path."""
    return {
        "matrix_path": _from_run_dir(request.matrix, run_dir),
        "inventory_path": _from_run_dir(request.inventory, run_dir),
    }


def _from_run_dir(path: Path, run_dir: Path) -> str:
    try:
        full, home = path.resolve(), run_dir.resolve()
    except (RuntimeError, OSError):
        return str(path)
    if full.is_relative_to(home.parent):
        return os.path.relpath(full, home)
    return str(full)


def _recorded_file(recorded: str, run_dir: Path) -> Path:
    """Where run.json's path points: absolute as is; relative to the run dir (this orch), else to
    the cwd (run.json written by an older orch named the files from its cwd)."""
    path = Path(recorded)
    if path.is_absolute():
        return path
    beside = run_dir / path
    return beside if beside.exists() else path


# ---------------------------------------------------------------------------- run
def run(
    request: SweepRequest, progress: ProgressFor, *, warn: Warn, prepared: PreparedSweep | None = None
) -> SweepOutcome:
    """Start a new run. `prepared` is `prepare(request)` when the caller already made it (its
    warnings are then the caller's to show); otherwise it is made here and they go to `warn`."""
    if prepared is None:
        prepared = prepare(request, warn=warn)
    plan, reports_dir, testbeds = prepared.plan, request.reports_dir, prepared.testbeds
    check_new_run(request, prepared)
    run_id = request.run_id if request.run_id is not None else new_run_id(plan.matrix.name, reports_dir)
    run_dir = reports_dir / run_id
    check_command_lengths(plan, list(testbeds), RunDir(run_dir))  # no host touched yet
    check_key_files(testbeds, prepared.inventory)  # the controller's own files: nothing contacted yet
    options = _new_run_options(request, run_id, run_dir)
    _load_the_end(plan.matrix)  # nothing exists yet: an interrupt here just ends the command
    try:
        manifest, result, stopped, ended = _run_connected(request, prepared, run_dir, options, progress, warn)
        return _finish(run_dir, manifest, result, stopped, _hunt_end(ended))
    except (KeyboardInterrupt, Interrupted) as exc:
        _interrupted_outside(run_dir, exc)
        raise


def _run_connected(
    request: SweepRequest,
    prepared: PreparedSweep,
    run_dir: Path,
    options: RunOptions,
    progress: ProgressFor,
    warn: Warn,
) -> tuple[RunManifest, RunResult, str | None, list[HuntResult]]:
    """`run`'s part on the connected testbeds: their checks and locks, the run folder, the trials."""
    plan, testbeds, run_id = prepared.plan, prepared.testbeds, options.run_id
    with session.at_lines(testbeds, prepared.inventory.path), session.connected(testbeds) as deployments:
        locks = [
            TestbedLock.for_run(d, run_id, now_iso(), run_dir=run_dir, inventory=request.inventory) for d in deployments
        ]
        try:
            _check_hosts(deployments, locks, plan, request, run_id, warn)
            manifest = _new_manifest(prepared, request, run_id, run_dir)
            executing = False
            ended: list[HuntResult] = []  # a hunt's search, once it has ended

            def trials() -> RunResult:
                nonlocal executing
                executing = True
                return execute(plan, deployments, run_dir, options, set(), locks=locks, progress=sink, source=design)

            try:  # once the run exists, however it stops, run.json says how it ended
                if request.on_created is not None:  # before the folder appears: no instant it exists unrecorded
                    request.on_created(run_dir)
                session.create_run_dir(run_dir, manifest)
                with run_lock(run_dir):
                    _list_running(run_dir)
                    hunt, adaptive = plan.matrix.hunt, plan.matrix.adaptive is not None
                    total, names = 0 if hunt is not None else len(plan.steps), tuple(manifest.testbeds)
                    sink = progress(Started(run_id, run_dir, names, total, total, hunt=hunt, adaptive=adaptive))
                    design = _design(plan, set(), run_dir=run_dir, on_stop=ended.append)
                    result, stopped = _stoppable(trials)
            except (KeyboardInterrupt, Interrupted):
                if executing or not RunDir(run_dir).run_json.exists():
                    raise  # past the runner's own handler, or before the run existed: run() ends it
                # stopped before the runner began (announcing the run, taking the run folder's
                # lock): no trial ran and no host was edited; the run ends as interrupted
                result, stopped = RunResult(run_dir, interrupted=True), None
        finally:
            for lock in locks:
                lock.release()
    return manifest, result, stopped, ended


def _new_run_options(request: SweepRequest, run_id: str, run_dir: Path) -> RunOptions:
    """How the runner runs a new run's trials, as the request asks."""
    return RunOptions(
        run_id,
        fail_fast=request.fail_fast,
        infra_attempts=1 + request.retries,
        break_lock=request.break_lock,
        deadline=request.deadline,
        hosts_found=HostsOnDisk(run_dir),
    )


def _load_the_end(matrix: Matrix) -> None:
    """Import, before the run is touched, what the rest of the command imports: the report stack
    (pandas, numpy, scipy: the runs index, the run's end) and a hunt's search or an adaptive
    design's rule. Why: an interrupt that lands inside an import leaves the module half
    initialised, and Python cannot import it again in that process. A Ctrl-C while the runs index
    first loaded the report stack (just after the run folder was made) broke pandas, and the
    interrupted run's own report then failed ('partially initialized module pandas'): a
    traceback and exit 1, where an interrupted run exits 130 and says how to go on (kill point
    seed 8713 of bench_kill_points.py --command hunt). Here an interrupt just ends the command.
    The imports are the ones the command makes anyway, made earlier: no time is added."""
    import orchestrator.report.provenance
    import orchestrator.report.render
    import orchestrator.report.site

    if matrix.hunt is not None:
        import orchestrator.core.hunt
        import orchestrator.core.huntplan
        import orchestrator.core.huntreplay
    if matrix.adaptive is not None:
        import orchestrator.core.sequential  # noqa: F401


def _hunt_end(ended: list[HuntResult]) -> tuple[str, str] | None:
    """How a hunt's search ended in this process (its source's on_stop), or None: not a hunt, or
    stopped (interrupted, a fault) before its search ended."""
    return (ended[-1].state, ended[-1].reason) if ended else None


def _new_manifest(prepared: PreparedSweep, request: SweepRequest, run_id: str, run_dir: Path) -> RunManifest:
    """run.json of a new run: the plan, the inventory's testbeds, this controller (redacted), the
    retries and the paths the request was given."""
    plan, names = prepared.plan, tuple(tb.name for tb in prepared.testbeds)
    manifest = make_manifest(plan, prepared.inventory, run_id, now_iso(), names)
    controller = describe_controller(plan.matrix.redactor)
    paths = _recorded_paths(request, run_dir)
    return manifest.model_copy(update={"controller": controller, "retries": request.retries, **paths})


def _interrupted_outside(run_dir: Path, exc: BaseException) -> None:
    """An interrupt that got out of a run still marked running (past the runner's own handler: its
    last steps, the testbed locks' release, _finish before it records the end): run.json says the
    run was interrupted, never `running` for good, and the user is told how to go on. Why: `orch
    status` lists a running run whose controller is gone as `stale` (killed), so a run that exited
    was called killed (the kill-point harness, seed 9113: a second Ctrl-C 37 ms after the restore
    had ended). A run that recorded its end already (its report then cut short) keeps it."""
    if not RunDir(run_dir).run_json.exists():
        return  # stopped before the run existed: nothing to end
    try:
        manifest = load_manifest(run_dir, plan=False)  # as the run last wrote it (a resume: marked running)
        if manifest.status != "running":
            return  # it ended and said how
        save_manifest(run_dir, manifest.model_copy(update={"status": "interrupted", "ended": now_iso()}))
    except OrchError:
        pass  # the interrupt is what the user must see; `orch restore` marks the run later
    exc.add_note(_ways_back(run_dir))


def _ways_back(run_dir: Path) -> str:
    """The two commands that go on from a run stopped before its end."""
    return f"resume with: orch resume {run_dir} (or put the hosts back with: orch restore {run_dir})"


def _design(
    plan: Plan,
    done: set[int],
    journaled: Finished | None = None,
    run_dir: Path | None = None,
    on_stop: OnStop | None = None,
) -> SourceFactory:
    """Which trial runs next: the plan's in order, or as an adaptive design or a hunt decides
    (resumed from the trials already journaled; an adaptive design also keeps the decisions
    journaled, so a cell the journal says was decided never runs again; a hunt numbers its next
    trials after every trial the journal holds, and notes each configuration in `run_dir` before
    handing it out)."""
    matrix = plan.matrix
    decided = journaled.events if journaled else []

    def make(on_decision: OnDecision | None) -> StepSource:
        prior = journaled.records() if journaled else iter(())  # read as the source replays them
        if matrix.hunt is not None:  # `orch hunt`: the search picks each trial (sweep/hunt.py)
            return HuntSource(
                matrix, prior, journaled.next_trial if journaled else None, on_stop=on_stop, run_dir=run_dir
            )
        if matrix.adaptive is None:
            return StepSource(list(plan.steps), done, fewest_restarts=matrix.order == "min-restarts")
        return AdaptiveSource(plan.steps, done, matrix, prior, on_decision, decided)

    return make


def _stoppable(execute: Callable[[], RunResult]) -> tuple[RunResult, str | None]:
    """Run the trials; a sweep stopped on repeated identical failures, or on an env file someone
    else edited meanwhile, still ends like a run (its status, its report, the reason on the
    terminal), with every host already restored."""
    try:
        return execute(), None
    except SweepStopped as exc:
        if not isinstance(exc.result, RunResult):
            raise
        return exc.result, str(exc)


def _check_hosts(
    deployments: list[Deployment],
    locks: list[TestbedLock],
    plan: Plan,
    request: SweepRequest,
    run_id: str,
    warn: Warn,
) -> None:
    """Preflight every testbed, then lock each one and refuse hosts another run left changed.
    Locks and leftovers are looked at first (read-only): a testbed another run holds or left
    changed is reported as such, not as whatever preflight would find wrong with it."""
    try:
        for d, lock in zip(deployments, locks, strict=True):
            lock.check(break_stale=request.break_lock)
            session.check_no_unrestored_run(d, run_id, request.reports_dir, request.inventory)
    except (LockError, PreflightError):
        raise
    except OrchError:
        pass  # a host that cannot be reached: preflight says so next, as bad input (exit 2)
    if not request.skip_preflight:
        for warning in preflight_testbeds(deployments, plan, inventory=shown_path(request.inventory)):
            warn(warning)
    if request.on_locking is not None:  # before any lock is written: no instant one names an unrecorded run
        request.on_locking(request.reports_dir / run_id)
    for d, lock in zip(deployments, locks, strict=True):
        lock.acquire(break_stale=request.break_lock)
        session.check_no_unrestored_run(d, run_id, request.reports_dir, request.inventory)
        for line in taken_over_lines(lock):
            warn(line)


def taken_over_lines(lock: TestbedLock) -> list[str]:
    """What a new run says of the stale locks it took over: only its own run id's, left by an
    earlier start that died before making the run's folder (check_new_run: the folder is not
    there) and changed no host (check_no_unrestored_run: no host holds a copy of its env file).
    Said, never silent: a lock is broken only where the user can read it."""
    by_run: dict[str, list[str]] = {}
    for host, holder in lock.taken_over:
        by_run.setdefault(holder.describe(), []).append(host)
    return [
        f"testbed {lock.deployment.testbed.name!r}: took over the stale lock of {holder} on {', '.join(hosts)}: "
        "that start died before the run's folder was made and left no host changed; the run starts again as new"
        for holder, hosts in by_run.items()
    ]


# ---------------------------------------------------------------------------- resume
def resume(request: ResumeRequest, progress: ProgressFor, *, warn: Warn) -> SweepOutcome:
    """Continue an interrupted run with the same plan: finished trials are skipped, the one that
    was running when the controller died is run again."""
    run_dir = request.run_dir
    manifest, matrix, plan, inventory, testbeds = _resumable(run_dir)
    _load_the_end(matrix)  # before the run folder is touched: an interrupt here just ends the command
    record = ResumeRecord(run_dir, manifest, matrix.redactor)
    began: list[bool] = []  # set once the runner takes over: from then on its own handler speaks
    ended: list[HuntResult] = []  # a hunt's search, once it has ended
    try:
        with run_lock(run_dir):  # before the journal's torn tail is repaired: it may be a live append
            with session.at_lines(testbeds, inventory.path):
                result, stopped = _resume_locked(request, progress, record, matrix, plan, testbeds, (began, ended))
        if result.before_take_over is not None:  # stopped before it adopted any host: as if not begun
            began.clear()
            raise result.before_take_over
        return _finish(run_dir, record.manifest(), result, stopped, _hunt_end(ended))
    except (KeyboardInterrupt, Interrupted) as exc:
        if began:
            _interrupted_outside(run_dir, exc)
        else:
            exc.add_note(
                "this resume stopped before its first trial: it edited no env file, and the hosts are as the "
                f"interrupted run left them; {_ways_back(run_dir)}"
            )
        raise


def _resumable(run_dir: Path) -> tuple[RunManifest, Matrix, Plan, Inventory, list[Testbed]]:
    """The run a resume takes up, checked from its folder alone: its matrix and inventory unchanged,
    the plan they make the one it started with, and the SSH key and known_hosts files its testbeds
    name present on this machine (check_key_files, at the run's inventory's lines: the resume and
    its dry run refuse alike, before connecting). Nothing is touched."""
    manifest = load_manifest(run_dir, plan=False)  # the stored trials are not needed: their digest is
    matrix = _matrix_of(manifest, run_dir)
    inventory = _inventory_of(manifest, run_dir)
    testbeds = [inventory.testbed(name) for name in manifest.testbeds]
    check_separate_testbeds(testbeds, inventory)
    check_replicates(matrix, manifest.replicates, f"{RunDir(run_dir).run_json}: replicates")
    if matrix.hunt is not None:
        from orchestrator.core.huntplan import hunt_plan  # the search (numpy, scipy): only for a hunt

        plan = hunt_plan(matrix, testbeds[0], manifest.seed)
    else:
        plan = make_plan(matrix, testbeds[0], manifest.seed, manifest.replicates)
    check_same_plan(run_dir, manifest, plan)
    check_key_files(testbeds, inventory)
    return manifest, matrix, plan, inventory, testbeds


def preview_resume(run_dir: Path) -> ResumePreview:
    """What `orch resume RUN_DIR` would run, for its --dry-run: the checks a resume makes before it
    touches anything, and the trials its journal has finished (a torn last line is read past, as the
    resume would drop it). No host is contacted, no lock taken, nothing written. A missing SSH key
    or known_hosts file is refused (exit 2) as the resume refuses it, as `orch run --dry-run`
    refuses what the run would."""
    manifest, matrix, plan, _, _ = _resumable(run_dir)
    journal = RunDir(run_dir).journal
    ended = None
    if journal.exists() and matrix.hunt is not None:  # what the resume replays, by its rule (_take_up)
        ended = _hunt_ended(matrix, _journaled(run_dir))
    elif journal.exists():
        _check_journal(run_dir)  # what the resume would refuse, at its line, the dry run refuses
    done = frozenset(trial_statuses(journal).finished if journal.exists() else ())
    # as the resume decides (HostGuard.adopt): a complete backup is taken up, and then what the units
    # of the hosts the matrix edits run is not known; else a fresh backup finds them on the originals
    run, parallel = RunDir(run_dir), len(manifest.testbeds) > 1
    unknown = any(run.backup(name if parallel else "").units_json.exists() for name in manifest.testbeds)
    left = resumed_steps(
        plan.matrix, plan.testbed, [s for s in plan.steps if s.trial.index not in done], unknown=unknown
    )
    preview = ResumePreview(manifest.run_id, tuple(manifest.testbeds), plan, done, left, unknown, ended)
    if not preview.nothing_left:
        return preview
    return dataclasses.replace(preview, failed=_final_counts(run_dir)[1])  # the resume's exit code rests on them


def _hunt_ended(matrix: Matrix, journaled: Finished) -> tuple[str, str] | None:
    """The hunt's state and why once its search has ended (found, budget, not failing), replayed
    from the journal as the resume replays it (sweep.hunt.HuntSource), or None while it would hand
    out trials. Why: the dry run of an ended hunt said the search "decides the next trials", and the
    resume then ran none."""
    from orchestrator.core.huntreplay import stopped  # the search (numpy, scipy): only for a hunt

    hunt = stopped(matrix, journaled.records())
    return None if hunt.state == "running" else (hunt.state, hunt.reason)


def _resume_locked(
    request: ResumeRequest,
    progress: ProgressFor,
    record: ResumeRecord,
    matrix: Matrix,
    plan: Plan,
    testbeds: list[Testbed],
    notes: tuple[list[bool], list[HuntResult]],
) -> tuple[RunResult, str | None]:
    """The resume's part that needs the run folder to itself: the journal's repair and the trials
    (notes: `began` gets an entry as the runner starts, `ended` a hunt's result once its search ends)."""
    began, ended = notes
    manifest = record.before
    run_dir = request.run_dir
    orphans = stop_orphaned_repros(run_dir)  # first: the killed controller's repro must not run beside ours
    taken_up = _take_up(run_dir, matrix)
    done, journaled = taken_up.done, taken_up.journaled
    sink = Tee(RunningMark(record), progress(_resumed(manifest, run_dir, matrix, plan, taken_up)))  # marked first
    for note in orphans:
        sink.note(note)
    options = RunOptions(
        manifest.run_id,
        fail_fast=request.fail_fast,
        infra_attempts=1 + _retries(request, manifest),
        break_lock=request.break_lock,
        deadline=request.deadline,
        owner_gone=request.owner_gone,
        attempts_before=taken_up.attempts_before,
        hosts_found=HostsOnDisk(run_dir),
    )
    with session.connected(testbeds) as deployments:
        # taken here, not by the runner, so the lock records the run directory (a later run that
        # finds it stale names the folder to resume or restore)
        locks = [
            TestbedLock.for_run(d, manifest.run_id, now_iso(), owner_gone=request.owner_gone, run_dir=run_dir)
            for d in deployments
        ]
        try:
            for lock in locks:
                lock.acquire(break_stale=request.break_lock)
            for note in stop_orphaned_remote_repros(run_dir, deployments, matrix.redactor):  # its hosts are ours
                sink.note(note)
            began.append(True)
            return _stoppable(
                lambda: execute(
                    plan,
                    deployments,
                    run_dir,
                    options,
                    done,
                    locks=locks,
                    resume=True,
                    progress=sink,
                    source=_design(plan, done, journaled, run_dir, on_stop=ended.append),
                )
            )
        finally:
            for lock in locks:
                lock.release()


def _resumed(manifest: RunManifest, run_dir: Path, matrix: Matrix, plan: Plan, taken_up: _TakenUp) -> Started:
    """What the progress display is told as a resume starts: the trials done and left (a hunt has
    no total: its search decides how many trials are left), and whether a torn line was dropped."""
    done, hunting = taken_up.done, matrix.hunt is not None
    return Started(
        manifest.run_id,
        run_dir,
        tuple(manifest.testbeds),
        len(done) if hunting else len(plan.steps),
        0 if hunting else len(plan.steps) - len(done),
        resumed=True,
        torn_tail_dropped=taken_up.torn,
        hunt=matrix.hunt,
        adaptive=matrix.adaptive is not None,
    )


@dataclass(frozen=True)
class _TakenUp:
    """What a resume reads from its journal before any host is touched."""

    done: set[int]  # trials finished (completed, or failed for good): skipped
    torn: bool  # a half-written last line was cut off
    attempts_before: dict[int, int]  # trial -> its highest journaled attempt (for the trials run again)
    journaled: Finished | None  # an adaptive sweep's or a hunt's state, rebuilt


def _take_up(run_dir: Path, matrix: Matrix) -> _TakenUp:
    """The journal, repaired of a torn tail and checked as every reader checks it (refused at its
    line), read for what the resume needs."""
    journal = RunDir(run_dir).journal
    if not journal.exists():
        return _TakenUp(set(), False, {}, None)
    torn = bool(repair_torn_tail(journal))
    statuses = trial_statuses(journal)
    # the trials run again number their attempts past their journaled ones, whatever folders remain
    before = last_attempts(journal, statuses.interrupted)
    # adaptive rebuilds its counts and keeps its decisions, a hunt rebuilds its search
    journaled = _journaled(run_dir) if matrix.adaptive or matrix.hunt else None
    if journaled is None:  # an adaptive or hunt state was read by the same rule (_journaled)
        _check_journal(run_dir)
    return _TakenUp(set(statuses.finished), torn, before, journaled)


def _check_journal(run_dir: Path) -> None:
    """A plain sweep's resume refuses, at its line and before any host is touched, the journal
    every other reader refuses (store.runtrials' rule, each line parsed). Why: it reads only each
    line's head (trial_statuses), so it used to run every remaining trial on a duplicated line or a
    trial moved to another cell (skipped as done) and end with no report, or on damage deeper in
    a line run them all and then fail (exit 2, run.json still `running`). Skipped when the status
    index speaks for the whole journal (only orch's appends wrote it): resume stays ~0.5 s at
    100,000 trials; the rule's read costs ~3 s there, paid after an edit or a torn line's repair."""
    if not index_vouches(RunDir(run_dir).journal):
        read_run_rows(run_dir, load_manifest(run_dir))


def _retries(request: ResumeRequest, manifest: RunManifest) -> int:
    """A resume retries as the run did (its --retries, kept in run.json), unless told otherwise:
    an interrupted run must not fail or retry its trials differently from an uninterrupted one."""
    if request.retries is not None:
        return request.retries
    return manifest.retries if manifest.retries is not None else SweepRequest.retries


def _matrix_of(manifest: RunManifest, run_dir: Path) -> Matrix:
    path = _recorded_file(manifest.matrix_path, run_dir)
    shown = shown_path(path)  # as the user would name it from here (run.json may hold it absolute)
    if not path.exists():
        raise UsageError(f"matrix {shown} of run {manifest.run_id} not found", hint="run from the same folder")
    matrix = read_matrix(path, shown)
    if matrix.sha256 != manifest.matrix_sha256:
        raise UsageError(
            f"matrix {shown} changed since run {manifest.run_id} started",
            hint="a resumed run must use the same matrix; start a new run instead",
        )
    return matrix


def _inventory_of(manifest: RunManifest, run_dir: Path) -> Inventory:
    path = _recorded_file(manifest.inventory_path, run_dir)
    shown = shown_path(path)
    if not path.exists():
        raise UsageError(f"inventory {shown} of run {manifest.run_id} not found", hint="run from the same folder")
    inventory = read_inventory(path, shown)
    if inventory.sha256 != manifest.inventory_sha256:
        raise UsageError(
            f"inventory {shown} changed since run {manifest.run_id}",
            hint="restore with the inventory the run used (its text is in run.json)",
        )
    return inventory


def _journaled(run_dir: Path) -> Finished:
    """What the adaptive and hunt sources resume from: the record standing for each finished trial
    by store.runtrials' rule, the one the hunt's report replays too (a failed attempt that was
    tried again, `retried`, ended no trial: resume runs that trial again), the adaptive decisions
    journaled (cell_decided events), and the next free trial number. A journal the report refuses
    (a duplicated line, a trial moved to another cell) is refused here, at its line, before any
    host is touched: the search would replay whichever of its lines it met last. The sources read
    the chosen records one at a time as they replay them (Finished.records)."""
    return read_finished(run_dir, load_manifest(run_dir), ("cell_decided",))


# ---------------------------------------------------------------------------- finish
def _finish(
    run_dir: Path,
    manifest: RunManifest,
    result: RunResult,
    stopped: str | None = None,
    hunt_ended: tuple[str, str] | None = None,
) -> SweepOutcome:
    """Record the run's end in the manifest, write the report and the index."""
    finished, failed = _final_counts(run_dir)
    # a sweep stopped early (stopped: why) did not complete, even when every trial it ran passed
    status: SweepStatus = "interrupted" if result.interrupted else ("failed" if failed or stopped else "completed")
    hosts = recorded_hosts(manifest, result.by_testbed, len(manifest.resumed_by), result.ran)
    update = {"ended": now_iso(), "status": status, **hosts, **_served(run_dir, manifest)}
    save_manifest(run_dir, manifest.model_copy(update=update))
    report, report_error, gates_failed = _write_report(run_dir)
    if report_error is not None and manifest.gates:
        gates_failed = (f"gates not checked: {report_error}",)
    return SweepOutcome(
        run_dir=run_dir,
        run_id=manifest.run_id,
        status=status,
        completed=finished - failed,
        failed=failed,
        planned=manifest.planned_total,
        interrupted=result.interrupted,
        deadline_reached=result.deadline_reached,
        not_restored=tuple(result.not_restored),
        kept=tuple(result.kept.items()),
        report=report,
        report_error=report_error,
        stopped=stopped,
        gates_failed=gates_failed,
        hunt_ended=None if result.interrupted else hunt_ended,
        adaptive=manifest.adaptive,
    )


def _served(run_dir: Path, manifest: RunManifest) -> dict[str, object]:
    """What served each trial (from the journal's records), for run.json: one group per host and
    server/command/env combination, so its size follows the cells, not the trials."""
    from orchestrator.report.provenance import scan_journal, served

    journal = RunDir(run_dir).journal
    if not journal.exists():
        return {}
    found = served(scan_journal(journal), manifest.redactor)
    return {"served": found.groups, "served_texts": found.texts}


def _final_counts(run_dir: Path) -> tuple[int, int]:
    """(finished trials, failed among them), by the record standing for each trial
    (store.runtrials.trial_rows: a trial cut off during its retry is unfinished, as resume and the
    webhook count it); fast on big journals (compact rows, not full records). Not checked for
    damage: the run has ended, and its report says what is wrong at which line."""
    journal = RunDir(run_dir).journal
    if not journal.exists():  # interrupted before the runner began: no trial ran
        return 0, 0
    finished = trial_rows(read_trial_rows(journal).rows)
    return len(finished), sum(row.status == "failed" for row in finished)


def _list_running(run_dir: Path) -> None:
    """reports/index.html lists the run while it runs (the report link shows its live status in
    `orch serve`); the index is a convenience, so a failure to write it never stops the sweep. A
    SIGTERM is not such a failure, and goes on up (Interrupted is no OrchError: when it was one, a
    SIGTERM in the ~0.4 s the index takes before the first backup was swallowed here, and the
    sweep ran every trial to the end and exited 0)."""
    from orchestrator.report.render import fresh_summary  # the report stack loads only when needed
    from orchestrator.report.site import write_index

    try:
        write_index(run_dir.parent, fresh_summary)
    except OrchError:
        pass


def _write_report(run_dir: Path) -> tuple[Path | None, str | None, tuple[str, ...]]:
    """(report page, why it was not written, failed gate checks)."""
    from orchestrator.report.render import fresh_summary, write_report_and_summary  # the report stack: only when needed
    from orchestrator.report.site import write_index

    if not RunDir(run_dir).journal.exists():  # interrupted before its first trial: nothing to report
        _list_running(run_dir)  # the index still shows how the run ended
        return None, None, ()
    try:
        path, summary = write_report_and_summary(run_dir)
        write_index(run_dir.parent, fresh_summary)
        return path, None, summary.gates_failed
    except OrchError as exc:
        return None, str(exc), ()


# ---------------------------------------------------------------------------- restore
def restore(request: RestoreRequest, progress: Progress, *, warn: Warn) -> RestoreOutcome:
    """Restore the hosts of a run whose controller died (kill -9, power cut)."""
    run_dir = request.run_dir
    manifest = load_manifest(run_dir)
    inventory = _inventory_of(manifest, run_dir)
    parallel = len(manifest.testbeds) > 1  # a parallel run keeps each testbed's originals in backup/<testbed>/
    job = _RunRestore(run_dir, manifest, request, progress, inventory.path, parallel)
    restored = tuple(job.on_its_own(inventory.testbed(name)) for name in manifest.testbeds)
    # named as the run's own end names them (sweep.runner._merge): `TESTBED/role` for several testbeds
    left = [f"{tb.testbed}/{role}" if parallel else role for tb in restored for role in tb.not_restored]
    progress.restore_ended(left)  # the status file says the testbed is back, or what is still changed
    _report_restored(run_dir, warn)  # and the run's page, summary.json and reports/index.html, read from it
    return RestoreOutcome(run_dir, manifest.run_id, restored)


def _report_restored(run_dir: Path, warn: Warn) -> None:
    """Write the run's report and the runs index again as the run's end writes them (_write_report:
    a run with no trial journaled gets the index only), once status.json says what the restore
    left. Why: the page and summary.json named the hosts left changed as of their writing, and
    kept naming them after `orch restore` had put them back. The hosts are back whatever happens
    here: a report that cannot be written is a warning, never the restore's error."""
    try:
        _, error, _ = _write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the restore is done; its report is a convenience
        error = f"{type(exc).__name__}: {exc} (a bug in orch: please report it)"
    if error is not None:
        page = RunDir(run_dir).index_html
        warn(f"{page}: not written again after the restore: {error} (run `orch report {run_dir}` again)")


@dataclass(frozen=True)
class _RunRestore:
    """One `orch restore` of a run: what each of its testbeds' restores shares."""

    run_dir: Path
    manifest: RunManifest
    request: RestoreRequest
    progress: Progress
    inventory: str  # the inventory's path: errors are said at its lines
    parallel: bool  # several testbeds: each keeps its originals in backup/<testbed>/

    def on_its_own(self, testbed: Testbed) -> TestbedRestore:
        """A parallel run's testbeds are separate deployments: one that cannot be restored (its hosts
        down, its lock held) is that testbed's outcome, every role of it not restored and why, and
        the others are still put back (fabric's GroupResult). One testbed: its error is the command's."""
        try:
            return self.testbed(testbed)
        except OrchError as exc:
            if not self.parallel:
                raise
            roles = tuple(testbed.hosts)
            return TestbedRestore(testbed.name, roles, backed_up=True, not_restored=roles, error=str(exc))

    @property
    def killed(self) -> bool:
        """Its controller died (run.json still says running): the restore ends the run, resumable."""
        return self.manifest.status == "running"

    @cached_property
    def ended(self) -> dict[str, object]:
        """run.json's end for a killed run, once for all its testbeds (what served its trials is a
        pass over the journal), as the run's own end would have recorded it."""
        return {"status": "interrupted", "ended": now_iso(), **_served(self.run_dir, self.manifest)}

    def testbed(self, testbed: Testbed) -> TestbedRestore:
        """Put one testbed back from the run's backup, under its lock (a dead run's broken when asked)."""
        run_dir, manifest, progress = self.run_dir, self.manifest, self.progress
        with session.at_lines([testbed], self.inventory), session.connected([testbed]) as (deployment,):
            lock = TestbedLock.for_run(deployment, manifest.run_id, now_iso(), run_dir=run_dir)
            try:
                lock.acquire(break_stale=self.request.break_lock)
                # its controller is gone: we hold its testbed
                for note in [
                    *stop_orphaned_repros(run_dir),
                    *stop_orphaned_remote_repros(run_dir, [deployment], manifest.redactor),
                ]:
                    progress.note(note)
                runner = Runner(
                    _empty_plan(manifest, deployment),
                    deployment,
                    run_dir,
                    RunOptions(manifest.run_id, backup_subdir=testbed.name if self.parallel else ""),
                    progress=progress,
                )
                runner.load_plan = lambda: _plan_of(manifest, run_dir, testbed, progress)
                backed_up = runner.adopt_backup()
                if not backed_up:  # killed before its backup was complete: no file was edited
                    runner.discard_host_backups()
                left = self._restore_journaled(runner) if self.killed else runner.restore()
            finally:
                lock.release()
        if self.killed:
            save_manifest(run_dir, manifest.model_copy(update=self.ended))
        guard = runner.guard
        return TestbedRestore(
            testbed.name,
            tuple(deployment.hosts),
            backed_up,
            tuple(left),
            untouched=tuple(guard.untouched),
            already=tuple(r for r in deployment.hosts if r in guard.already),
            host_lines=tuple(guard.host_lines),
            kept=tuple(guard.kept.items()),
            interrupted=guard.interrupted,
        )

    def _restore_journaled(self, runner: Runner) -> list[str]:
        """A killed run's restore, its `restored` event in the run's journal as the run's own end
        writes it (the journal, its crash-safe record, ended at its last trial). A journal whose
        last line the kill tore is not appended to (the line would be buried mid-file, fatal to
        readers): a resume repairs it under its run lock; the restore goes on, unjournaled, said."""
        path = RunDir(self.run_dir).journal
        try:
            runner.events.journal = Journal(path) if path.exists() else None
        except JournalError as exc:
            self.progress.note(f"this restore is not journaled: {exc}")
        try:
            return runner.restore()
        finally:
            if runner.events.journal is not None:
                runner.events.journal.close()
                runner.events.journal = None


def _plan_of(manifest: RunManifest, run_dir: Path, testbed: Testbed, progress: Progress) -> Plan | None:
    """The run's plan, for `orch restore` to tell an env file one of its trials wrote from one edited
    by someone else (sweep.drift): built only when a host holds neither, from the run's matrix.
    None, said, when that matrix is gone or changed: every such file is then set aside."""
    try:
        matrix = _matrix_of(manifest, run_dir)
        if matrix.hunt is not None:
            from orchestrator.core.huntplan import hunt_plan  # the search (numpy, scipy): only for a hunt

            return hunt_plan(matrix, testbed, manifest.seed)
        return make_plan(matrix, testbed, manifest.seed, manifest.replicates)
    except OrchError as exc:
        progress.note(f"cannot tell the run's trials' env files from edited ones: {exc}")
        return None


def _empty_plan(manifest: RunManifest, deployment: Deployment) -> Plan:
    """Restore needs no matrix; a plan shell carries the testbed for the restart order."""
    return Plan(
        matrix=None,  # type: ignore[arg-type]
        testbed=deployment.testbed,
        seed=manifest.seed,
        replicates=manifest.replicates,
        cells=(),
        steps=(),
    )
