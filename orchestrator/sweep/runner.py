"""One sweep's trial loop: back up, then trial after trial (from a step source, with retries,
each journaled before the next starts), fail-fast and deadline; finally restore the hosts.

The only module that sequences a sweep's effects; it receives every edge (deployment, HTTP
client, progress sink) as an argument so tests can swap them. A trial's phases live in
sweep.phases, the backup/restore guard in sweep.hosts, signal handling in sweep.signals.

Several testbeds are full copies of one deployment, each with its own runner, lock and restore
(`execute`): the runners take the plan's trials from one shared source, in plan order, and write
one shared journal (each record names its testbed). A testbed therefore stays sequential and
locked, and N testbeds give close to N times the trials per hour. One testbed is the same call:
`execute` alone decides how (the runner in this thread, or one runner thread per testbed).
Ctrl-C / SIGTERM reach the main thread only: with several testbeds it tells every runner to
stop, and each one ends its current step (a local repro is killed), restores its testbed and
returns; another Ctrl-C skips the host each runner is restoring, as in a single-testbed run.

Guarantees: a finished trial is in the journal (fsync) before the next one starts; the original
env files are saved (run dir and host) before the first edit and written back, with the units
returned to their original state, on normal end, on error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import tenacity

from orchestrator.core.hostfacts import TrialsRan
from orchestrator.core.matrix import hunt_cell
from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.core.steps import Plan, RoleEnv, Step
from orchestrator.edges.deployment import Deployment
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import Interrupted, JournalError, OrchError, SweepStopped, notes
from orchestrator.store.atomic import run_file_op
from orchestrator.store.hunthanded import handed_levels
from orchestrator.store.journal import Journal, read_journal
from orchestrator.store.liveness import not_restored_line
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.clock import now_iso
from orchestrator.sweep.hosts import HostGuard
from orchestrator.sweep.phases import Repro, Services, TrialPhases
from orchestrator.sweep.progress import Progress, QuietProgress, failure_signature
from orchestrator.sweep.signals import interrupted_by, signals_as_interrupt
from orchestrator.sweep.sources import SourceFactory, StepSource

if TYPE_CHECKING:
    from orchestrator.core.sequential import Decision


@dataclass(frozen=True)
class RunOptions:
    run_id: str
    fail_fast: bool = False
    infra_attempts: int = 2  # tries per trial for infrastructure failures (SSH, units, health)
    retry_backoff_s: float = 1.0
    break_lock: bool = False  # take over a stale lock whose owner is dead
    owner_gone: bool = False  # this run's previous controller is known gone (edges.lock.TestbedLock)
    deadline: float | None = None  # epoch seconds: start no new trial after it (overnight queues)
    backup_subdir: str = ""  # parallel testbeds: each keeps its originals in backup/<testbed>/
    stop_after_repeated_failures: int | None = None  # None: the matrix's setting (default 3); 0: never stop
    # trial -> the highest attempt its journal holds (a resume's trials run again): their attempts
    # number on past it, never reusing a journaled attempt's number (store.journal.last_attempts)
    attempts_before: Mapping[int, int] = field(default_factory=dict)
    # told (testbed, role -> facts) once a testbed's hosts are first described (what runs there:
    # core.hostfacts), so run.json records them then and a controller killed before the end keeps them
    hosts_found: Callable[[str, dict[str, dict[str, str]]], None] | None = None


@dataclass
class RunResult:
    run_dir: Path
    completed: int = 0
    failed: int = 0
    interrupted: bool = False
    deadline_reached: bool = False
    # testbed -> the trials this session ran there (for run.json's hosts_changed); their records are
    # in the journal, and kept nowhere else: a sweep's memory does not grow with its trials
    ran: dict[str, TrialsRan] = field(default_factory=dict)
    not_restored: list[str] = field(default_factory=list)  # roles whose restore did not finish
    # a resume's interrupt that came before it adopted the earlier run's originals: its restore had
    # nothing to put back, so the run stays as that run left it (sweep.api.resume raises it again)
    before_take_over: BaseException | None = None
    kept: dict[str, str] = field(default_factory=dict)  # role -> where its drifted env file was set aside
    # testbed -> role -> what its hosts run (exec_start, server_info, GPUs: core.hostfacts)
    by_testbed: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    @property
    def records(self) -> list[TrialRecord]:
        """The final record of each trial this session ran, in the order they ended: read from the
        journal when asked. The runner keeps none in memory (~12 KB each: a sweep runs thousands)."""
        ran: set[int] = set().union(*(r.trials for r in self.ran.values()))
        journal = RunDir(self.run_dir).journal
        if not ran or not journal.exists():
            return []
        last: dict[int, TrialRecord] = {}
        for r in read_journal(journal).records:
            if isinstance(r, TrialRecord) and not r.retried and r.trial in ran:
                last.pop(r.trial, None)  # a trial's last record stands, at its place in the journal
                last[r.trial] = r
        return list(last.values())


class Runner:
    """Runs a plan's trials on one deployment; restores the hosts whatever ends it."""

    def __init__(
        self,
        plan: Plan,
        deployment: Deployment,
        run_dir: Path | RunDir,
        options: RunOptions,
        *,
        progress: Progress | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.plan, self.deployment, self.options = plan, deployment, options
        self.run = RunDir.of(run_dir)
        self.run_dir = self.run.path
        self.progress = progress or QuietProgress()
        client = client or httpx.Client(timeout=2.0, trust_env=False)
        self.stopping = threading.Event()  # set by Ctrl-C / SIGTERM; seen by worker threads
        self.events = EventLog(options.run_id, self.progress)
        self.source = StepSource(plan.steps, set())
        backup = self.run.backup(options.backup_subdir)
        self.guard = HostGuard(deployment, backup, options.run_id, self.progress, self.cell_files, self.edits)
        self.services = Services(plan, deployment, self.guard, client, self.stopping)
        self.services.resume = f"orch resume {self.run_dir}"
        self.repro = Repro(plan, deployment, self.run, self.guard, client, self.stopping)
        if options.hosts_found is not None:
            self.repro.on_described = self._hosts_found
        self.phases = TrialPhases(self.services, self.repro, options.run_id)
        limit = options.stop_after_repeated_failures
        if limit is None:  # `orch restore` runs on a plan shell without a matrix: it runs no trial
            limit = plan.matrix.stop_after_repeated_failures if plan.matrix is not None else 0
        self.repeats = RepeatedFailures(limit, f"orch resume {self.run_dir}")
        self.result: RunResult | None = None  # the last execute()'s, even when it raised
        self.ran: list[RoleEnv] = []  # the env of every step this process started (a hunt's are not planned)
        # `orch restore` runs on a plan shell: the run's own plan, built only when a file must be
        # judged (sweep.drift), None when the matrix is gone or changed
        self.load_plan: Callable[[], Plan | None] = lambda: None
        self._plan_for_files: Plan | None = None
        self._plan_loaded = False

    def execute(
        self,
        done: set[int] | None = None,
        *,
        resume: bool = False,
        lock: TestbedLock | None = None,
        source: StepSource | None = None,
        journal: Journal | None = None,
    ) -> RunResult:
        """Run the trials `source` hands out (without one: every planned trial not in `done`, in plan
        order; the API passes the adaptive or hunt source); always restore the hosts afterwards.

        resume=True adopts the originals saved by the first run instead of taking new ones
        (after a kill -9 the files on the hosts still hold a cell's values)."""
        done = done or set()
        self.source = source if source is not None else StepSource(self.plan.steps, done)
        result = self.result = RunResult(self.run_dir)
        run_file_op(
            self.run_dir, "cannot create the run directory", lambda: self.run_dir.mkdir(parents=True, exist_ok=True)
        )
        if lock is None:  # the caller may have taken it already, before creating the run dir
            lock = TestbedLock.for_run(
                self.deployment, self.options.run_id, now_iso(), owner_gone=self.options.owner_gone
            )
            lock.acquire(break_stale=self.options.break_lock)
        try:
            with signals_as_interrupt(self.stopping):
                self.events.journal = journal or Journal(self.run.journal)
                self._sweep(done, resume, result)
        except SweepStopped as exc:  # repeated failures, an env file edited by someone else
            exc.result = result  # the caller still finishes the run: its report, its status
            raise
        finally:
            self.services.close()
            self.repro.close()
            result.by_testbed = {self.deployment.testbed.name: self.repro.provenance}
            if self.journal is not None and journal is None:  # a shared journal is closed by its owner
                self.journal.close()
            lock.release()
        return result

    def _sweep(self, done: set[int], resume: bool, result: RunResult) -> None:
        """Back up (or adopt the backup of a killed run), run the trials, restore: the restore
        runs whatever ends the loop (last trial, error, Ctrl-C, SIGTERM)."""
        failed_on: OrchError | None = None
        try:
            adopted = resume and self.adopt_backup()
            if adopted:  # read only: a resume refused here (exit 2) was never started nor announced
                self.guard.check_resumable()  # a host edited since, not by this run: refuse
            # before any host is touched: status.json names this controller from here on, so a run
            # killed during its backup (copies and locks left on its hosts) is shown stale by `orch
            # status`, not left out of it; the parallel path starts it before its runners too
            self.progress.start(len(self.plan.steps), len(done))
            if adopted:
                self.guard.rewrite_host_backups()  # the earlier restore may have removed them
            else:
                self.guard.backup()  # a killed run that never finished its backup edited nothing
            self.events.add("run_resumed" if resume else "run_started")
            self._run_trials(result)
        except (KeyboardInterrupt, Interrupted) as exc:
            result.interrupted = True
            if resume and not self.guard.states:  # it adopted nothing: no host of the run is its own
                result.before_take_over = exc
            for note in notes(exc):  # e.g. what the repro it cut short left running (stopped): said nowhere else
                self.progress.note(note)
            if result.before_take_over is None:
                self.progress.note(
                    "interrupted: restoring the hosts before exiting "
                    "(a second Ctrl-C or SIGTERM skips the host being restored)"
                )
            self.events.quietly("run_interrupted", interrupted_by(exc))
        except Exception as exc:
            failed_on = exc if isinstance(exc, OrchError) else None
            # a parallel sweep stops now, not once this testbed is restored (a restore can take
            # minutes): the other testbeds must start no trial after the error that ends the sweep
            self.source.close()
            raise
        finally:
            result.not_restored = self._restore_at_end(result)
            self.progress.restore_ended(result.not_restored)
            if failed_on is not None and self.guard.states and not result.not_restored:
                self.progress.note("the sweep stopped on an error; every host was restored")

    def _restore_at_end(self, result: RunResult) -> list[str]:
        """The loop's end written (status.json), then the restore. An interrupt that lands before
        the restore's own handling is in place (that write, the restore's first lines: ~10 ms)
        counts as one during the restore: the first marks the run interrupted, a later one skips
        no host (none was being restored), and the restore starts (again: a host restored already
        is left alone). Why: it went past the restore, exit 130 with a host on a cell's flags and
        status.json naming none (kill-point harness, hunt seed 502)."""
        written = False
        while True:
            try:
                if not written:
                    written = True
                    self.progress.stop()
                return self.restore(result)
            except (KeyboardInterrupt, Interrupted):
                if (mark := self._interrupted_in_restore(result)) is not None:
                    mark()

    def _run_trials(self, result: RunResult) -> None:
        while (step := self.source.next(self.plan.testbed.name)) is not None:
            if self.stopping.is_set():  # parallel testbeds: the main thread got Ctrl-C/SIGTERM
                raise Interrupted("stopping: interrupted by the user or a signal")
            if self._past_deadline(result):
                return
            record = self._run_with_retries(step)
            self._record(record, result)
            self.repeats.observe(record)
            if record.status != "completed" and self.options.fail_fast:
                self.progress.note("stopping at the first failed trial (--fail-fast)")
                self.source.close()  # other testbeds of a parallel sweep stop too
                return

    def _past_deadline(self, result: RunResult) -> bool:
        if self.options.deadline is None or time.time() < self.options.deadline:
            return False
        self.progress.note("deadline reached: no new trial starts; the run can be resumed")
        result.interrupted = result.deadline_reached = True
        self.events.add("run_interrupted", "deadline reached")
        return True

    def _record(self, record: TrialRecord, result: RunResult) -> None:
        """Journal the trial (on disk before the next one starts), then tell everyone: its line
        before the source hears of it, as an adaptive design's decision taken on this trial says
        so (a note) and must follow the line it was taken on."""
        assert self.journal is not None
        self.journal.append(record)
        result.ran.setdefault(record.testbed, TrialsRan()).add(record.trial, record.started)
        self.progress.trial_done(record)
        self.source.record(record)  # adaptive designs decide from finished trials
        if self.source.shrinks:  # cells stopped early: the bar and its ETA shrink with them
            self.progress.retotal(self.source.remaining())
        if record.status == "completed":
            result.completed += 1
        else:
            result.failed += 1
            self.services.verify_all_next = True

    def _run_with_retries(self, step: Step) -> TrialRecord:
        self.ran.append(step.env)
        before = self.options.attempts_before.get(step.trial.index, 0)
        return run_with_retries(lambda attempt: self.phases.run(step, before + attempt), self.options, self._note_retry)

    def _note_retry(self, record: TrialRecord) -> None:
        """A failed attempt that is tried again is journaled too (its own record, fsync'd): the
        report counts every failed attempt and shows each one's error, and a trial's final status
        stays its last attempt's (every reader takes a trial's last record). It is not the trial's
        end: no progress tick, no adaptive decision, no repeated-failure count."""
        assert self.journal is not None
        self.journal.append(record.model_copy(update={"retried": True}))
        self.services.verify_all_next = True
        why = record.failure.message if record.failure else "failure"
        self.progress.note(f"trial {record.trial} ({record.cell}) attempt {record.attempt} failed: {why}; retrying")

    # ------------------------------------------------------------------ the host guard
    def adopt_backup(self) -> bool:
        """Load the originals saved by an earlier (killed) process, for resume and `orch restore`.
        False when that process never completed its backup (then it never edited a file)."""
        return self.guard.adopt()

    def cell_files(self, role: str) -> set[bytes] | None:
        """Every env file this run's trials write on host `role` (a key): besides the original,
        what a resume or a restore may find there without anyone else having edited it. None when
        orch cannot tell (`orch restore` of a run whose matrix is gone or changed)."""
        plan = self.plan if self.plan.matrix is not None else self._loaded_plan()
        if plan is None:
            return None
        h = self.deployment.hosts[role]
        if h.role not in plan.matrix.mentioned:
            return set()
        envs = [*(s.env for s in plan.steps), *self.ran, *journaled_envs(plan.matrix, self.run)]
        return {self.services.cell_bytes(role, env.get(h.role)) for env in envs}

    def edits(self, role: str) -> bool:
        """May this run's trials write host `role`'s env file (a key)? True when orch cannot tell
        (`orch restore` of a run whose matrix is gone or changed)."""
        plan = self.plan if self.plan.matrix is not None else self._loaded_plan()
        return plan is None or self.deployment.hosts[role].role in plan.matrix.mentioned

    def _loaded_plan(self) -> Plan | None:
        if not self._plan_loaded:
            self._plan_for_files, self._plan_loaded = self.load_plan(), True
        return self._plan_for_files

    def _hosts_found(self, facts: dict[str, dict[str, str]]) -> None:
        """Hand this testbed's host facts to options.hosts_found; a run.json that cannot take them
        now is said (the run's end writes them again), never the trial's failure."""
        assert self.options.hosts_found is not None
        try:
            self.options.hosts_found(self.deployment.testbed.name, facts)
        except OrchError as exc:
            self.progress.note(f"the hosts' facts are not in run.json yet: {exc}")

    def discard_host_backups(self) -> None:
        """Remove the host-side copies a killed, incomplete backup may have left."""
        self.guard.discard_host_backups()

    def restore(self, result: RunResult | None = None) -> list[str]:
        """Restore every host (sweep.hosts.HostGuard.restore); the roles left are journaled. With
        the sweep's `result` not yet interrupted, a first Ctrl-C/SIGTERM during the restore marks
        it interrupted and the restore goes on (only a second one skips a host)."""
        self.guard.on_first_interrupt = self._interrupted_in_restore(result)
        try:
            left = self.guard.restore(self.run_dir)
        finally:
            self.guard.on_first_interrupt = None
        if self.guard.states:
            said = f"not restored: {', '.join(left)}" if left else "all hosts restored"
            kept = "; ".join(f"{role}: {path}" for role, path in self.guard.kept.items())
            self.events.quietly("restored", f"{said}; changed env files set aside ({kept})" if kept else said)
        if result is not None:
            result.kept.update(self.guard.kept)
        return left

    def _interrupted_in_restore(self, result: RunResult | None) -> Callable[[], None] | None:
        """Only where signals arrive (the main thread): a parallel testbed's runner thread is told
        to skip a host by _join_all, which lets the first Ctrl-C/SIGTERM only set `stopping`."""
        if result is None or result.interrupted or threading.current_thread() is not threading.main_thread():
            return None

        def mark() -> None:
            result.interrupted = True
            self.progress.note(
                "interrupted: finishing the restore first (a second Ctrl-C or SIGTERM skips the host being restored)"
            )
            self.events.quietly("run_interrupted", "interrupted by the user or a signal, during the final restore")

        return mark

    @property
    def backup_dir(self) -> Path:
        return self.guard.backup_dir.path

    @property
    def ready_waits(self) -> dict[str, deque[float]]:
        return self.services.ready_waits

    def cell_decided(self, cell: str, decision: Decision, say: Callable[[str], None] | None = None) -> None:
        """Adaptive stopping: journal why a cell runs no more trials, and say so (`say`: how a
        parallel run says it, as the whole sweep's and not this testbed's)."""
        (say or self.progress.note)(f"{cell}: {decision.reason}")
        if self.journal is not None:
            self.events.add("cell_decided", decision.reason, cell=cell, state=decision.state)

    @property
    def journal(self) -> Journal | None:
        return self.events.journal


class EventLog:
    """The run's events in its journal: started, resumed, interrupted, restored, cell_decided."""

    def __init__(self, run_id: str, progress: Progress) -> None:
        self.run_id, self.progress = run_id, progress
        self.journal: Journal | None = None

    def add(self, event: str, message: str = "", **fields: object) -> None:
        assert self.journal is not None
        self.journal.append(EventRecord(run_id=self.run_id, event=event, at=now_iso(), message=message, **fields))  # type: ignore[arg-type]

    def quietly(self, event: str, message: str = "") -> None:
        """An event on the way out (interrupted, restored): a journal that cannot take it (disk
        full) must not stop the restore or hide the error that ended the sweep."""
        if self.journal is None:
            return
        try:
            self.add(event, message)
        except JournalError as exc:
            self.progress.note(f"journal: {exc}")


class RepeatedFailure(SweepStopped):
    """Consecutive trials failed the same way: a metric regex that never matches, a level that
    always crashes its unit. Paying a restart per trial for hours would not change the answer;
    the sweep stops (hosts restored, run resumable, exit code 1) with the reason on the terminal."""

    result: RunResult | None = None  # what the runner finished before it stopped (set by Runner.execute)


class RepeatedFailures:
    """Counts consecutive trials that failed with one signature; raises RepeatedFailure at the
    limit (0: never). A completed trial or a different reason starts the count again."""

    def __init__(self, limit: int, resume: str = "orch resume RUN_DIR") -> None:
        self.limit, self.resume = limit, resume
        self.last: tuple[str, str] | None = None
        self.count = 0

    def observe(self, record: TrialRecord) -> None:
        signature = failure_signature(record)
        if signature is None or signature != self.last:
            self.last, self.count = signature, 0
        if signature is None:
            return
        self.count += 1
        if self.limit and self.count >= self.limit:
            assert record.failure is not None
            raise RepeatedFailure(
                f"stopping: {self.count} consecutive trials failed the same way: "
                f"{record.failure.error}: {record.failure.message} "
                f"(fix the cause, then continue with `{self.resume}`; "
                "matrix `stop_after_repeated_failures: 0` never stops)",
                detail=record.failure.detail,
            )


def run_with_retries(
    attempt: Callable[[int], TrialRecord], options: RunOptions, on_retry: Callable[[TrialRecord], None]
) -> TrialRecord:
    """Run a trial; an infrastructure failure (SSH, units, health) is tried again, up to
    options.infra_attempts tries with exponential back-off, but never past options.deadline
    (`--until`: no attempt starts after it, and a back-off ends at it; each attempt is a restart,
    a warm-up and a whole repro). `on_retry` gets each failed record that is tried again; the
    last record is returned either way."""
    numbers = itertools.count(1)
    deadline = options.deadline
    backoff = tenacity.wait_exponential(multiplier=options.retry_backoff_s, max=30)

    def before_sleep(rs: tenacity.RetryCallState) -> None:
        assert rs.outcome is not None  # retried on a result only: an exception is never retried
        on_retry(rs.outcome.result())

    def wait(rs: tenacity.RetryCallState) -> float:
        return backoff(rs) if deadline is None else min(backoff(rs), max(deadline - time.time(), 0.0))

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(options.infra_attempts) | _PastDeadline(deadline),
        wait=wait,
        retry=tenacity.retry_if_result(
            lambda r: r.status == "failed" and r.failure is not None and r.failure.kind == "infrastructure"
        ),
        before_sleep=before_sleep,
        retry_error_callback=_last_record,  # keep the last failed record
    )
    return retrying(lambda: attempt(next(numbers)))


class _PastDeadline(tenacity.stop.stop_base):
    """Stop retrying once the run's deadline (`--until`) has passed."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self.deadline is not None and time.time() >= self.deadline


def _last_record(rs: tenacity.RetryCallState) -> TrialRecord:
    assert rs.outcome is not None  # tenacity gives up only after an attempt
    record: TrialRecord = rs.outcome.result()
    return record


class SharedJournal(Journal):
    """One journal written by the runners of a parallel sweep: appends are serialised."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._append_lock = threading.Lock()

    def append(self, record: TrialRecord | EventRecord) -> None:
        with self._append_lock:
            super().append(record)


# ---------------------------------------------------------------------------- 1..N testbeds
def execute(
    plan: Plan,
    deployments: Sequence[Deployment],
    run_dir: Path,
    options: RunOptions,
    done: set[int],
    *,
    locks: Sequence[TestbedLock] | None = None,
    resume: bool = False,
    progress: Progress,
    source: SourceFactory,
) -> RunResult:
    """Run the plan's remaining trials on the deployments (one or several), taking them from what
    `source` makes; every testbed is restored before this returns. The one place that decides how
    N testbeds are driven."""
    if len(deployments) == 1:  # the runner in this thread: it handles Ctrl-C and SIGTERM itself
        runner = Runner(plan, deployments[0], run_dir, options, progress=progress)
        lock = locks[0] if locks else None
        try:
            return runner.execute(done, resume=resume, lock=lock, source=source(runner.cell_decided))
        except BaseException as exc:
            _note_unrestored(exc, runner.result)
            raise
    return _execute_parallel(plan, deployments, run_dir, options, done, locks, resume, progress, source)


def _note_unrestored(exc: BaseException, result: RunResult | None) -> None:
    """An error that ends the sweep carries the hosts it left unrestored and how to finish, as a
    note the CLI prints under the error. A sweep that ends with an outcome (a RepeatedFailure
    carries its result) says so in its summary instead: the line is shown once either way."""
    if result is not None and result.not_restored and not isinstance(exc, SweepStopped):
        exc.add_note(not_restored_line(result.not_restored, result.run_dir))


class _GateClosed(Exception):
    """A runner waiting at the start gate when the sweep ended before it began (another testbed's
    runner was refused, or the display could not start): it goes on to none of its hosts."""


class _StartGate:
    """A parallel run's display starts once every runner has passed its resume checks (adopt,
    check_resumable: read only; a new run has none) or has ended, and no runner goes on to its
    hosts before that; one that ended on an error closes the gate (nothing announced, no runner
    goes on). Why: a parallel resume refused on one testbed, nothing touched, printed "resuming
    r1: ..." before its error (the single-testbed path announces only after its checks), and the
    other testbeds backed up their hosts and restored them; status.json still names this
    controller before any runner backs up a host."""

    def __init__(self, runners: int) -> None:
        self.arrived = [False] * runners
        self.changed = threading.Event()  # a runner arrived or ended
        self.go = threading.Event()
        self.closed = False

    def arrive(self, index: int) -> None:
        """A runner thread whose checks passed: wait for the others."""
        self.arrived[index] = True
        self.changed.set()
        self.go.wait()
        if self.closed:
            raise _GateClosed("the sweep ended before this testbed began")

    def close(self) -> None:
        self.closed = True
        self.go.set()

    def open_when_ready(
        self, finished: Sequence[threading.Event], errors: list[BaseException], start: Callable[[], None]
    ) -> None:
        """The main thread: once every runner has arrived or ended, start the display (unless one
        ended on an error: nothing is announced then) and let them go."""
        while not self.go.is_set():
            self.changed.clear()  # before looking: an arrival after the look wakes the wait
            if all(a or f.is_set() for a, f in zip(self.arrived, finished, strict=True)):
                if errors:
                    self.close()
                    return
                start()
                self.go.set()
                return
            self.changed.wait(0.2)


class _SharedProgress:
    """One progress display for all runners: they report trials; the coordinator starts, stops and
    says which hosts the run left changed (every testbed's, once all are restored)."""

    def __init__(self, inner: Progress, testbed: str, lock: threading.Lock, gate: _StartGate, index: int) -> None:
        self.inner, self.testbed, self.lock = inner, testbed, lock
        self.gate, self.index = gate, index

    def start(self, total: int, done: int) -> None:
        self.gate.arrive(self.index)  # the coordinator starts the display once every runner is here

    def stop(self) -> None: ...

    def restore_ended(self, not_restored: Sequence[str]) -> None: ...

    def trial_done(self, record: TrialRecord) -> None:
        with self.lock:
            self.inner.trial_done(record)

    def retotal(self, left: int) -> None:
        with self.lock:
            self.inner.retotal(left)

    def note(self, message: str) -> None:
        with self.lock:
            self.inner.note(f"[{self.testbed}] {message}")


def _execute_parallel(
    plan: Plan,
    deployments: Sequence[Deployment],
    run_dir: Path,
    options: RunOptions,
    done: set[int],
    locks: Sequence[TestbedLock] | None,
    resume: bool,
    progress: Progress,
    make_source: SourceFactory,
) -> RunResult:
    """A runner thread per deployment, all fed from one step source; their results merged (every
    testbed's, however its runner ended: a failure on one must not hide another's unrestored hosts)."""
    journal = SharedJournal(RunDir(run_dir).journal)
    lock, gate = threading.Lock(), _StartGate(len(deployments))
    runners = [
        Runner(
            dataclasses.replace(plan, testbed=d.testbed),
            d,
            run_dir,
            dataclasses.replace(options, backup_subdir=d.testbed.name),
            progress=_SharedProgress(progress, d.testbed.name, lock, gate, i),
        )
        for i, d in enumerate(deployments)
    ]

    def say(message: str) -> None:  # the sweep's decision (all runners feed it): no testbed's name before it
        with lock:
            progress.note(message)

    source = make_source(lambda cell, decision: runners[0].cell_decided(cell, decision, say))
    errors: list[BaseException] = []
    finished = [threading.Event() for _ in runners]  # set by each runner thread as its last act

    def work(i: int) -> None:
        try:
            runners[i].execute(done, resume=resume, lock=locks[i] if locks else None, source=source, journal=journal)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)
            source.close()
        finally:
            finished[i].set()
            gate.changed.set()

    interrupted = False
    try:
        for i, d in enumerate(deployments):
            threading.Thread(target=work, args=(i,), name=f"testbed-{d.testbed.name}").start()
        presses = _open_gate(gate, finished, errors, runners, lambda: progress.start(len(plan.steps), len(done)))
        interrupted = _join_all(finished, runners, presses)
    finally:
        gate.go.set()  # never leave a runner waiting at the gate
        progress.stop()
        journal.close()  # only once every runner has restored its testbed and returned
    merged = _merge(run_dir, runners)
    progress.restore_ended(merged.not_restored)
    merged.interrupted = merged.interrupted or interrupted or any(_is_interrupt(e) for e in errors)
    _raise_first_failure(errors, merged)
    return merged


def _open_gate(
    gate: _StartGate,
    finished: list[threading.Event],
    errors: list[BaseException],
    runners: list[Runner],
    start: Callable[[], None],
) -> int:
    """Wait for the runners at the start gate; Ctrl-C or SIGTERM meanwhile tells them to stop and
    opens it (the display started, as for a run interrupted later), unless a runner has already
    ended on an error: then it closes, as it does without the Ctrl-C (one rule: an error before the
    gate opens means no runner goes on to its hosts). The presses, for _join_all."""
    try:
        gate.open_when_ready(finished, errors, start)
        return 0
    except (KeyboardInterrupt, Interrupted):
        for r in runners:
            r.stopping.set()
        if errors:
            gate.close()
        else:
            start()
            gate.go.set()
        return 1
    except BaseException:  # the display could not start: no runner goes on; each returns first
        gate.close()
        for done in finished:
            done.wait()
        raise


def _join_all(finished: list[threading.Event], runners: list[Runner], presses: int = 0) -> bool:
    """Wait until every runner has returned (each restores its own testbed first). Ctrl-C or
    SIGTERM, which reach only this thread, tell all runners to stop; each further one skips the
    host each runner is restoring (the single-testbed path's second Ctrl-C). Waiting goes on, so
    the journal is never closed under a runner still restoring. Returns True if interrupted.

    Why Events and not Thread.join/is_alive: on CPython 3.11 a KeyboardInterrupt inside
    Thread.join(timeout) marks the still-running thread stopped (bpo-45274), so is_alive() lies
    after an interrupt; an interrupted Event.wait leaves nothing behind, and is_set() is a flag."""
    skips = 0
    while True:
        try:
            if presses:  # (again after a press that landed mid-way: setting an Event twice is harmless)
                for r in runners:
                    r.stopping.set()
            while skips < presses - 1:  # each runner's restore() says which host it skipped
                skips += 1
                for r in runners:
                    r.guard.skip_current()
            pending = [e for e in finished if not e.is_set()]
            if not pending:
                return presses > 0
            pending[0].wait(0.2)
        except (KeyboardInterrupt, Interrupted):
            presses += 1


def _is_interrupt(exc: BaseException) -> bool:
    return isinstance(exc, (KeyboardInterrupt, Interrupted))


def _raise_first_failure(errors: list[BaseException], merged: RunResult) -> None:
    """Re-raise the first runner error that is not an interrupt, carrying every testbed's outcome:
    a RepeatedFailure gets the merged result (the caller still finishes the run with it), any other
    error a note naming the hosts left unrestored on any testbed."""
    failure = next((e for e in errors if not _is_interrupt(e) and not isinstance(e, _GateClosed)), None)
    if failure is None:
        return
    if isinstance(failure, SweepStopped):
        failure.result = merged
    _note_unrestored(failure, merged)
    raise failure


def journaled_envs(matrix: Matrix, run: RunDir) -> list[RoleEnv]:
    """The env of every hunt trial the journal holds, and of every configuration the hunt handed
    out (sweep.hunt: hunt-handed.json). Past its first wave a hunt's trials are the search's picks,
    in no plan: the restore and a resume need them to tell a trial's env file from one edited by
    someone else (sweep.drift). A trial running when the controller was killed is in no journal:
    only the handed-out list has its configuration."""
    if matrix.hunt is None:
        return []
    journal = run.journal
    records = read_journal(journal).records if journal.exists() else []
    levels = [r.levels for r in records if isinstance(r, TrialRecord)] + handed_levels(run.path)
    configs = {matrix.hunt.config_of(one) for one in levels}
    return [hunt_cell(matrix, config).env for config in sorted(c for c in configs if c is not None)]


def _merge(run_dir: Path, runners: list[Runner]) -> RunResult:
    """One result for a parallel run. Its not_restored (and kept) names each role with its testbed
    (`B/decode`): every testbed has the same roles."""
    merged = RunResult(run_dir)
    for runner in runners:
        r = runner.result
        if r is None:
            continue
        merged.completed += r.completed
        merged.failed += r.failed
        merged.interrupted = merged.interrupted or r.interrupted
        merged.deadline_reached = merged.deadline_reached or r.deadline_reached
        for testbed, ran in r.ran.items():
            merged.ran[testbed] = merged.ran.get(testbed, TrialsRan()).merged(ran)
        merged.not_restored += [f"{runner.deployment.testbed.name}/{role}" for role in r.not_restored]
        merged.kept.update({f"{runner.deployment.testbed.name}/{role}": path for role, path in r.kept.items()})
        merged.by_testbed.update(r.by_testbed)  # every testbed's (core.hostfacts)
    stopped_early = [runner.result.before_take_over for runner in runners if runner.result is not None]
    if stopped_early and all(e is not None for e in stopped_early):  # none taken over: the run is as it was
        merged.before_take_over = stopped_early[0]
    return merged
