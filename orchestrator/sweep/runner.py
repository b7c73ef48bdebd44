"""One sweep: back up, then per trial apply -> restart -> wait -> verify -> run -> collect ->
journal; finally restore the hosts. The only module that sequences effects; it receives every
edge (deployment, HTTP client, progress sink) as an argument so tests can swap them.

Guarantees: a finished trial is in the journal (fsync) before the next one starts; the original
env files are saved (run dir and host) before the first edit and written back, with the units
returned to their original state, on normal end, on error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

import httpx
import tenacity

from orchestrator.core import envfile
from orchestrator.core.config import CONTROLLER, Collector
from orchestrator.core.plan import Plan, Step, dependants, restart_order
from orchestrator.core.records import EventRecord, Failure, MetricValue, ReproOutcome, TrialRecord
from orchestrator.core.redact import redact_value
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.health import HealthCheck, wait_all
from orchestrator.edges.lock import TestbedLock
from orchestrator.edges.workload import extract_metrics, run_command
from orchestrator.errors import Interrupted, OrchError, VerificationError, WorkloadError
from orchestrator.store.journal import Journal, JournalError
from orchestrator.sweep.adaptive import make_source
from orchestrator.sweep.sources import StepSource

if TYPE_CHECKING:
    from orchestrator.core.sequential import Decision

LOG_LIMIT = 256_000
READY_HISTORY = 5  # restarts remembered per role to predict the next one's ready time
ALIVE_EVERY_S = 0.3  # how often health waits also ask the service manager whether units died
UNITS_JSON = "units.json"  # written last by the backup: its presence marks the backup complete
RUN_DIR_HINTS = {
    errno.ENOSPC: "the disk is full: free space, then `orch resume` the run",
    errno.EDQUOT: "the disk quota is exhausted: free space, then `orch resume` the run",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.EACCES: "check the permissions of the run directory",
    errno.ENOTDIR: "a parent of this path is a file, not a directory",
    errno.EIO: "the disk reported an I/O error",
}


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Progress(Protocol):
    """Where the runner reports progress (rich in the terminal, nothing in tests)."""

    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None:
        """At most `left` more trials will run (an adaptive sweep stopped some cells)."""

    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...


class QuietProgress:
    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None: ...
    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    run_id: str
    fail_fast: bool = False
    infra_attempts: int = 2  # tries per trial for infrastructure failures (SSH, units, health)
    retry_backoff_s: float = 1.0
    break_lock: bool = False  # take over a stale lock whose owner is dead
    deadline: float | None = None  # epoch seconds: start no new trial after it (overnight queues)
    backup_subdir: str = ""  # parallel testbeds: each keeps its originals in backup/<testbed>/


@dataclass
class RunResult:
    run_dir: Path
    completed: int = 0
    failed: int = 0
    interrupted: bool = False
    deadline_reached: bool = False
    records: list[TrialRecord] = field(default_factory=list)
    not_restored: list[str] = field(default_factory=list)  # roles whose restore did not finish
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> exec_start, server_info


@dataclass
class _HostState:
    original: bytes  # env file bytes before the run
    active: dict[str, bool]  # unit -> was it active before the run
    touched: bool = False  # did orch write the file during this run
    current: bytes | None = None  # what the file holds now, as orch last read or wrote it
    clock_offset: float = 0.0  # host clock - controller clock: journal windows use host time


class Runner:
    def __init__(
        self,
        plan: Plan,
        deployment: Deployment,
        run_dir: Path,
        options: RunOptions,
        *,
        progress: Progress | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.plan, self.deployment, self.run_dir, self.options = plan, deployment, run_dir, options
        self.progress = progress or QuietProgress()
        self.client = client or httpx.Client(timeout=2.0, trust_env=False)
        self.hosts: dict[str, _HostState] = {}
        self.started_units: set[tuple[str, str]] = set()
        self.verify_all_next = True  # first trial, and after any failure: verify every unit
        self.journal: Journal | None = None
        self.stopping = threading.Event()  # set by Ctrl-C / SIGTERM; seen by worker threads
        self.source = StepSource(plan.steps, set())
        self.provenance: dict[str, dict[str, str]] = {}  # filled once the servers first answer
        # role -> how long its last waits after a restart took: the health poller polls fast
        # around that time (a unit restarts in about the same time, trial after trial)
        self.ready_waits: dict[str, deque[float]] = {}
        self.checker: ThreadPoolExecutor | None = None  # verifies beside the repro

    # ------------------------------------------------------------------ the sweep
    def execute(
        self,
        done: set[int] | None = None,
        *,
        resume: bool = False,
        lock: TestbedLock | None = None,
        source: "StepSource | None" = None,
        journal: Journal | None = None,
        prior: "list[TrialRecord] | None" = None,
    ) -> RunResult:
        """Run every planned trial not in `done`; always restore the hosts afterwards.

        resume=True adopts the originals saved by the first run instead of taking new ones
        (after a kill -9 the files on the hosts still hold a cell's values)."""
        done = done or set()
        if source is None:
            source = make_source(self.plan.steps, done, self.plan.matrix, prior or [], self.cell_decided)
        self.source = source
        result = RunResult(self.run_dir)
        _run_dir_op(
            self.run_dir, "cannot create the run directory", lambda: self.run_dir.mkdir(parents=True, exist_ok=True)
        )
        if lock is None:  # the caller may have taken it already, before creating the run dir
            lock = TestbedLock.for_run(self.deployment, self.options.run_id, now_iso())
            lock.acquire(break_stale=self.options.break_lock)
        try:
            with _signals_as_interrupt(self.stopping):
                self.journal = journal or Journal(self.run_dir / "journal.jsonl")
                self._sweep(done, resume, result)
        finally:
            if self.checker is not None:
                self.checker.shutdown(wait=True)
                self.checker = None
            result.provenance = self.provenance
            if self.journal is not None and journal is None:  # a shared journal is closed by its owner
                self.journal.close()
            lock.release()
        return result

    def _sweep(self, done: set[int], resume: bool, result: RunResult) -> None:
        """Back up (or adopt the backup of a killed run), run the trials, restore: the restore
        runs whatever ends the loop (last trial, error, Ctrl-C, SIGTERM)."""
        failed_on: OrchError | None = None
        try:
            if not (resume and self.adopt_backup()):
                self._backup()  # a killed run that never finished its backup edited nothing
            self._event("run_resumed" if resume else "run_started")
            self.progress.start(len(self.plan.steps), len(done))
            self._run_trials(done, result)
        except (KeyboardInterrupt, Interrupted):
            result.interrupted = True
            self.progress.note(
                "interrupted: restoring the hosts before exiting (Ctrl-C again skips the host being restored)"
            )
            self._event_quietly("run_interrupted", "interrupted by the user or a signal")
        except OrchError as exc:
            failed_on = exc
            raise
        finally:
            self.progress.stop()
            result.not_restored = self.restore()
            if failed_on is not None and self.hosts and not result.not_restored:
                self.progress.note("the sweep stopped on an error; every host was restored")

    def _run_trials(self, done: set[int], result: RunResult) -> None:
        assert self.journal is not None
        while (step := self.source.next()) is not None:
            if self.stopping.is_set():  # parallel testbeds: the main thread got Ctrl-C/SIGTERM
                raise Interrupted("stopping: interrupted by the user or a signal")
            if self.options.deadline is not None and time.time() >= self.options.deadline:
                self.progress.note("deadline reached: no new trial starts; the run can be resumed")
                result.interrupted = True
                result.deadline_reached = True
                self._event("run_interrupted", "deadline reached")
                return
            record = self._run_with_retries(step)
            self.journal.append(record)  # on disk before the next trial starts
            self.source.record(record)  # adaptive designs decide from finished trials
            result.records.append(record)
            self.progress.trial_done(record)
            if self.source.shrinks:  # cells stopped early: the bar and its ETA shrink with them
                self.progress.retotal(self.source.remaining())
            if record.status == "completed":
                result.completed += 1
                continue
            result.failed += 1
            self.verify_all_next = True
            if self.options.fail_fast:
                self.progress.note("stopping at the first failed trial (--fail-fast)")
                self.source.close()  # other testbeds of a parallel sweep stop too
                return

    # ------------------------------------------------------------------ backup and restore
    def _backup(self) -> None:
        """Save each env file (run dir and host) and each unit's state before the first edit.

        units.json is written last and atomically: it marks the backup complete. A run killed
        before it exists edited nothing, so resume takes a fresh backup and restore has nothing
        to put back."""
        backup_dir = self.backup_dir
        _run_dir_op(
            backup_dir, "cannot create the backup folder", lambda: backup_dir.mkdir(parents=True, exist_ok=True)
        )
        for role, h in self.deployment.hosts.items():
            _test_pause("BACKUP")
            original = h.transport.read_bytes(h.host.env_file)
            _write_run_file(backup_dir / f"{role}.env", original)
            h.transport.write_bytes_atomic(host_backup_path(h.host.env_file, self.options.run_id), original)
            active = {u: h.services.state(u).is_active for u in h.units}
            self.hosts[role] = _HostState(original, active, clock_offset=_clock_offset(h))
        states = {role: s.active for role, s in self.hosts.items()}
        _write_run_file(backup_dir / UNITS_JSON, json.dumps(states, indent=1).encode(), atomic=True)

    def adopt_backup(self) -> bool:
        """Load the originals saved by an earlier (killed) process, for resume and `orch restore`.

        False when that process never completed its backup (then it never edited a file)."""
        backup_dir = self.backup_dir
        try:
            states = json.loads((backup_dir / UNITS_JSON).read_text())
            originals = {role: (backup_dir / f"{role}.env").read_bytes() for role in self.deployment.hosts}
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            raise JournalError(
                f"{backup_dir}: cannot read the backup of the original env files: {exc} "
                "(the run directory is damaged; restore the hosts by hand)"
            ) from None
        for role, original in originals.items():
            self.hosts[role] = _HostState(original, states.get(role, {}), touched=True)
            self.started_units.update((role, u) for u in self.deployment.hosts[role].units)
        return True

    def discard_host_backups(self) -> None:
        """Remove the host-side copies a killed, incomplete backup may have left."""
        for h in self.deployment.hosts.values():
            backup = host_backup_path(h.host.env_file, self.options.run_id)
            h.transport.run(["rm", "-f", backup], check=False, sudo=bool(h.host.ssh and h.host.ssh.sudo))

    def restore(self) -> list[str]:
        """Put every env file back byte for byte and every unit back in its original state.

        Returns the roles that could not be restored (empty when all is well). A second Ctrl-C
        (or a SIGTERM) during the restore skips only the host being restored: the others are
        still restored, and what is left is said with the command that finishes it.
        """
        left: list[str] = []
        for role in restart_order(self.deployment.testbed, set(self.hosts)):
            try:
                self._restore_host(role)
            except (KeyboardInterrupt, Interrupted):
                left.append(role)
                self.progress.note(f"restore of {role} interrupted; continuing with the other hosts")
            except OrchError as exc:
                left.append(role)
                self.progress.note(f"restore of {role} failed: {exc}")
        if left:
            self.progress.note(f"NOT restored: {', '.join(left)}; finish with: orch restore {self.run_dir}")
        if self.hosts:
            self._event_quietly("restored", f"not restored: {', '.join(left)}" if left else "all hosts restored")
        return left

    def _restore_host(self, role: str) -> None:
        _test_pause("RESTORE")
        h, state = self.deployment.hosts[role], self.hosts[role]
        if h.transport.read_bytes(h.host.env_file) != state.original:
            h.transport.write_bytes_atomic(h.host.env_file, state.original)
            state.touched = True
        for unit in h.units:
            if state.active.get(unit):
                if state.touched:
                    h.services.restart(unit)
            elif (role, unit) in self.started_units or h.services.state(unit).is_active:
                h.services.stop(unit)
        backup = host_backup_path(h.host.env_file, self.options.run_id)
        h.transport.run(["rm", "-f", backup], check=False, sudo=bool(h.host.ssh and h.host.ssh.sudo))

    # ------------------------------------------------------------------ one trial
    def _run_with_retries(self, step: Step) -> TrialRecord:
        attempts = {"n": 0}

        def once() -> TrialRecord:
            attempts["n"] += 1
            return self._run_trial(step, attempts["n"])

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.options.infra_attempts),
            wait=tenacity.wait_exponential(multiplier=self.options.retry_backoff_s, max=30),
            retry=tenacity.retry_if_result(
                lambda r: r.status == "failed" and r.failure is not None and r.failure.kind == "infrastructure"
            ),
            before_sleep=lambda rs: self._note_retry(step, rs),
            retry_error_callback=lambda rs: rs.outcome.result(),  # keep the last failed record
        )
        return retrying(once)

    def _note_retry(self, step: Step, rs: tenacity.RetryCallState) -> None:
        record = rs.outcome.result() if rs.outcome else None
        why = record.failure.message if record and record.failure else "failure"
        self.verify_all_next = True
        self.progress.note(
            f"trial {step.trial.index} ({step.trial.cell.id}) attempt {rs.attempt_number} failed: {why}; retrying"
        )

    def _run_trial(self, step: Step, attempt: int) -> TrialRecord:
        trial = step.trial
        trial_dir = self.run_dir / "trials" / f"{trial.index:04d}"
        _run_dir_op(
            trial_dir, "cannot create the trial folder", lambda: (trial_dir / "logs").mkdir(parents=True, exist_ok=True)
        )
        t0, started = time.time(), now_iso()
        ctx = _TrialContext()
        try:
            self._apply(step, ctx)
            self._restart(step, ctx)
            ctx.health = self._wait_healthy(t0, {r for r, _ in ctx.restarted})
            self._describe_hosts()
            checking = self._verify_beside_repro(step, ctx)
            ctx.repro = repro = self._run_repro(step, trial_dir)
            if checking is not None:
                checking.result()  # a VerificationError voids the repro's result
            self._judge_repro(repro)  # after ctx.repro is set: a failed repro's output is recorded
            ctx.metrics = extract_metrics(self._repro_stdout(repro), self.plan.matrix.repro.metrics)
            ctx.logs, logs_text = self._collect_logs(trial_dir, t0)
            ctx.metrics.update(self._run_collectors(logs_text, trial_dir))
            failure = None
        except (KeyboardInterrupt, Interrupted, JournalError):
            raise  # a broken run directory stops the sweep: it is not the trial's failure
        except OrchError as exc:
            failure = Failure(
                kind="workload" if exc.kind == "workload" else "infrastructure",
                error=type(exc).__name__,
                message=str(exc),
                detail=exc.detail[-4000:],
            )
            if not ctx.logs:
                ctx.logs, _ = self._collect_logs(trial_dir, t0, quiet=True)
        return TrialRecord(
            run_id=self.options.run_id,
            trial=trial.index,
            round=trial.round,
            cell=trial.cell.id,
            levels=trial.cell.as_dict(),
            is_baseline=trial.is_baseline,
            testbed=self.deployment.testbed.name,
            attempt=attempt,
            status="failed" if failure else "completed",
            failure=failure,
            started=started,
            ended=now_iso(),
            duration_s=round(time.time() - t0, 4),
            env=redact_env(step.env),
            restarted=[f"{r}:{u}" for r, u in ctx.restarted],
            health_wait_s=ctx.health,
            repro=ctx.repro,
            metrics=ctx.metrics if failure is None else {},
            logs=ctx.logs,
        )

    def _apply(self, step: Step, ctx: "_TrialContext") -> None:
        """Write each role's env file for the cell; only files whose text changes are written.

        The bytes orch last wrote are remembered, so a trial costs no read round trip; the file
        is read again on the first trial and after any failure (when anything may have moved)."""
        for role, assignments in step.env.items():
            h, state = self.deployment.hosts[role], self.hosts[role]
            old = (
                state.current
                if state.current is not None and not self.verify_all_next
                else h.transport.read_bytes(h.host.env_file)
            )
            text = old.decode("utf-8", errors="surrogateescape")
            new = envfile.edit(text, assignments, h.host.dialect).encode("utf-8", errors="surrogateescape")
            if new != old:
                h.transport.write_bytes_atomic(h.host.env_file, new)
                state.touched = True
                ctx.changed.add(role)
            state.current = new

    def _restart(self, step: Step, ctx: "_TrialContext") -> None:
        """Restart units whose env changed or that are not running, in dependency waves;
        independent units of one wave restart in parallel."""
        todo = {(role, unit) for role, h in self.deployment.hosts.items() for unit in h.units if role in ctx.changed}
        if self.verify_all_next:  # first trial, or after a failure: start whatever is not running
            down = _per_host(self.deployment, lambda h: [u for u in h.units if not h.services.state(u).is_active])
            todo |= {(role, unit) for role, units in down.items() for unit in units}
        for wave in _waves(self.deployment, {r for r, _ in todo}):
            units = [(r, u) for r in wave for u in self.deployment.hosts[r].units if (r, u) in todo]
            self._restart_units(units, ctx)

    def _restart_units(self, units: list[tuple[str, str]], ctx: "_TrialContext") -> None:
        def one(ru: tuple[str, str]) -> None:
            role, unit = ru
            self.deployment.hosts[role].services.restart(unit)

        if len(units) == 1:
            one(units[0])
        elif units:
            with ThreadPoolExecutor(max_workers=len(units)) as pool:
                list(pool.map(one, units))
        ctx.restarted.extend(units)
        self.started_units.update(units)

    def _wait_healthy(self, since: float, restarted: set[str]) -> dict[str, float]:
        """Wait on every role's health URL; a unit that dies meanwhile fails the wait at once.

        Roles that had to come back (restarted, or depending on one that was) tell the poller
        how long their earlier waits took, and their wait is remembered for the next trial."""
        affected = dependants(self.deployment.testbed, restarted) if restarted else set()
        checks, alive = [], {}
        for role, h in self.deployment.hosts.items():
            timeout = self.plan.matrix.health_timeouts.get(role, h.host.health_timeout_s)
            earlier = self.ready_waits.get(role) if role in affected else None
            expected = (min(earlier), max(earlier)) if earlier else None
            checks.append(HealthCheck(role, h.host.health, timeout, expected))
            alive[role] = _alive_checker(h, since + self._offset(role), self.stopping)
        waited = wait_all(checks, client=self.client, check_alive=alive)
        for role in affected & set(waited):
            self.ready_waits.setdefault(role, deque(maxlen=READY_HISTORY)).append(waited[role])
        return waited

    def _verify_beside_repro(self, step: Step, ctx: "_TrialContext") -> "Future[None] | None":
        """Verify the restarted units while the repro runs: off the critical path, every trial.

        /proc/PID/environ of a process that answers its health URL cannot change any more, so
        checking it during the repro proves the same as checking it before; a mismatch fails
        the trial after the repro (its result is then void). The first trial and the one after
        a failure verify before the repro, because they may restart a stale unit to fix it."""
        if self.verify_all_next:
            self._verify(step, ctx)
            self.verify_all_next = False  # here, never in the thread: a failure may set it again
            return None
        if self.checker is None:
            self.checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify")
        return self.checker.submit(self._verify, step, ctx)

    def _verify(self, step: Step, ctx: "_TrialContext") -> None:
        """Check the live processes got the cell's values (/proc/PID/environ).

        Restarted units always; every unit on the first trial and after a failure. A unit that
        was not restarted and holds stale values is restarted once and checked again.
        """
        restarted = set(ctx.restarted)
        for role, assignments in step.env.items():
            h = self.deployment.hosts[role]
            if not h.host.verify_env:
                continue
            for unit in h.units:
                if (role, unit) not in restarted and not self.verify_all_next:
                    continue
                problem = _env_mismatch(h, unit, assignments)
                if problem and (role, unit) not in restarted:
                    self._restart_units([(role, unit)], ctx)
                    ctx.health.update(self._wait_healthy(time.time(), {role}))
                    problem = _env_mismatch(h, unit, assignments)
                if problem:
                    raise VerificationError(f"{h.host.label}: unit {unit}: {problem}")

    def _run_repro(self, step: Step, trial_dir: Path) -> ReproOutcome:
        repro = self.plan.matrix.repro
        command = render_command(repro.command, self._placeholders(step, trial_dir))
        out, err = trial_dir / "repro.out", trial_dir / "repro.err"
        for path in (out, err):  # an unwritable run directory is found here, not blamed on the repro
            _write_run_file(path, b"", sync=False)
        if repro.on == CONTROLLER:
            outcome = run_command(
                command, timeout_s=repro.timeout_s, cwd=self.run_dir, env=None, stdout_path=out, stderr_path=err
            )
        else:
            outcome = self._run_remote_repro(repro.on, command, repro.timeout_s, out, err)
        return ReproOutcome(
            **{
                **outcome.model_dump(),
                "stdout_path": str(out.relative_to(self.run_dir)),
                "stderr_path": str(err.relative_to(self.run_dir)),
            }
        )

    def _judge_repro(self, rel: ReproOutcome) -> None:
        if rel.exit_code is None:
            raise WorkloadError(
                f"repro timed out after {self.plan.matrix.repro.timeout_s:g} s and was killed", detail=rel.stdout_tail
            )
        if rel.exit_code != 0:
            stderr = (self.run_dir / rel.stderr_path).read_text(errors="replace")[-2000:]
            raise WorkloadError(f"repro exited with code {rel.exit_code}", detail=stderr or rel.stdout_tail)

    def _run_remote_repro(self, role: str, command: str, timeout: float, out: Path, err: Path) -> ReproOutcome:
        h = self.deployment.hosts[role]
        t0 = time.time()
        try:
            res = h.transport.run(command, timeout=timeout, check=False)
            code: int | None = res.exit_code
            stdout, stderr = res.stdout, res.stderr
        except OrchError as exc:
            if "timed out" not in str(exc).lower():
                raise
            code, stdout, stderr = None, "", str(exc)
        _write_run_file(out, stdout.encode("utf-8", errors="replace"), sync=False)
        _write_run_file(err, stderr.encode("utf-8", errors="replace"), sync=False)
        return ReproOutcome(
            command=command, exit_code=code, duration_s=round(time.time() - t0, 4), stdout_tail=stdout[-4096:]
        )

    def _repro_stdout(self, repro: ReproOutcome) -> str:
        return (self.run_dir / repro.stdout_path).read_text(errors="replace")

    def _collect_logs(
        self, trial_dir: Path, since: float, quiet: bool = False
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Save each unit's log lines written during the trial; return paths and texts by role."""
        paths, texts = {}, {}

        def fetch(h: HostHandle) -> list[tuple[str, str]]:  # hosts in parallel, units in turn
            got = []
            for unit in h.units:
                try:
                    got.append((unit, h.services.logs_since(unit, since + self._offset(h.role), LOG_LIMIT)))
                except OrchError:
                    if not quiet:
                        raise
            return got

        fetched = _per_host(self.deployment, fetch)
        for role, h in self.deployment.hosts.items():
            chunks = []
            for unit, text in fetched[role]:
                path = trial_dir / "logs" / f"{role}-{unit}.log"
                _write_run_file(path, text.encode("utf-8", errors="replace"), sync=False)
                paths[f"{role}:{unit}"] = str(path.relative_to(self.run_dir))
                chunks.append(text)
            texts[role] = "".join(chunks)
        return paths, texts

    def _run_collectors(self, logs: dict[str, str], trial_dir: Path) -> dict[str, MetricValue]:
        out = {}
        for c in self.plan.matrix.collect:
            out[c.name] = self._collect_one(c, logs, trial_dir)
        return out

    def _collect_one(self, c: Collector, logs: dict[str, str], trial_dir: Path) -> MetricValue:
        if c.pattern is not None:
            rx = re.compile(c.pattern)
            count = sum(1 for line in logs.get(c.role, "").splitlines() if rx.search(line))
            return MetricValue(kind="number", value=float(count), unit=c.unit)
        h = self.deployment.hosts[c.role]
        command = render_command(c.command or "", self._placeholders(None, trial_dir))
        res = h.transport.run(command, timeout=60, check=False)
        number = re.search(r"-?\d+(?:\.\d+)?", res.stdout)
        if number is None:
            raise WorkloadError(
                f"collector {c.name!r} on {h.host.label} printed no number", detail=(res.stdout + res.stderr)[-1000:]
            )
        return MetricValue(kind="number", value=float(number.group()), unit=c.unit)

    def _placeholders(self, step: Step | None, trial_dir: Path) -> dict[str, str]:
        values = {
            "run_dir": str(self.run_dir),
            "trial_dir": str(trial_dir),
            "seed": str(self.plan.seed),
            "python": sys.executable,
            "testbed": self.deployment.testbed.name,
        }
        if step is not None:
            values.update(
                cell=step.trial.cell.id,
                trial=str(step.trial.index),
                round=str(step.trial.round),
                trial_seed=str((self.plan.seed * 1_000_003 + step.trial.index) % 2**31),
            )
        for role, h in self.deployment.hosts.items():
            values[f"{role}_url"] = h.host.url
        return values

    def _describe_hosts(self) -> None:
        """Once per run, after the servers first answer: what ran (ExecStart, /get_server_info)."""
        if self.provenance:
            return
        from orchestrator.edges.provenance import describe_host

        self.provenance = _per_host(self.deployment, lambda h: describe_host(h, self.client))

    def cell_decided(self, cell: str, decision: "Decision") -> None:
        """Adaptive stopping: journal why a cell runs no more trials, and say so."""
        self.progress.note(f"{cell}: {decision.reason}")
        if self.journal is not None:
            self.journal.append(
                EventRecord(
                    run_id=self.options.run_id,
                    event="cell_decided",
                    at=now_iso(),
                    message=decision.reason,
                    cell=cell,
                    state=decision.state,
                )
            )

    @property
    def backup_dir(self) -> Path:
        return (
            self.run_dir / "backup" / self.options.backup_subdir
            if self.options.backup_subdir
            else self.run_dir / "backup"
        )

    def _offset(self, role: str) -> float:
        state = self.hosts.get(role)
        return state.clock_offset if state else 0.0

    def _event(self, event: str, message: str = "") -> None:
        assert self.journal is not None
        self.journal.append(EventRecord(run_id=self.options.run_id, event=event, at=now_iso(), message=message))  # type: ignore[arg-type]

    def _event_quietly(self, event: str, message: str = "") -> None:
        """An event on the way out (interrupted, restored): a journal that cannot take it (disk
        full) must not stop the restore or hide the error that ended the sweep."""
        if self.journal is None:
            return
        try:
            self._event(event, message)
        except JournalError as exc:
            self.progress.note(f"journal: {exc}")


class SharedJournal(Journal):
    """One journal written by the runners of a parallel sweep: appends are serialised."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._append_lock = threading.Lock()

    def append(self, record: "TrialRecord | EventRecord") -> None:
        with self._append_lock:
            super().append(record)


@dataclass
class _TrialContext:
    changed: set[str] = field(default_factory=set)
    restarted: list[tuple[str, str]] = field(default_factory=list)
    health: dict[str, float] = field(default_factory=dict)
    repro: ReproOutcome | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)


def _waves(deployment: Deployment, roles: set[str]) -> list[list[str]]:
    """Group roles into waves: a role's wave comes after the waves of the roles it follows."""
    ordered = restart_order(deployment.testbed, roles)
    depth: dict[str, int] = {}
    for role in ordered:
        deps = [depth[d] for d in deployment.testbed.hosts[role].after if d in depth]
        depth[role] = 1 + max(deps, default=-1)
    waves: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for role in ordered:
        waves[depth[role]].append(role)
    return waves


def _clock_offset(h: HostHandle) -> float:
    """Host clock minus controller clock, measured once (midpoint of the round trip), so
    `journalctl --since` windows are right on hosts whose clocks are off. 0 where the
    service manager runs on the controller's clock."""
    now = getattr(h.services, "now", None)
    if now is None:
        return 0.0
    before = time.time()
    host = now()
    return host - (before + time.time()) / 2


def _alive_checker(h: HostHandle, since: float, stopping: threading.Event) -> Callable[[], None]:
    """Called by the health pollers between polls: a dead unit, or a Ctrl-C/SIGTERM received by
    the main thread, ends the wait at once (the pollers run in threads that a signal does not
    reach, and the main thread waits for them before its KeyboardInterrupt can propagate)."""
    last = [0.0]

    def check() -> None:
        if stopping.is_set():
            raise Interrupted("stopping: interrupted by the user or a signal")
        now = time.monotonic()
        if now - last[0] < ALIVE_EVERY_S:  # a round trip per poll would slow the fast polling
            return
        last[0] = now
        for unit in h.units:
            h.services.check_alive(unit, since)

    return check


T = TypeVar("T")


def _per_host(deployment: Deployment, work: Callable[[HostHandle], T]) -> dict[str, T]:
    """Run `work` on every host at once (one thread per host: their connections are separate)."""
    handles = list(deployment.hosts.values())
    if len(handles) == 1:
        return {handles[0].role: work(handles[0])}
    with ThreadPoolExecutor(max_workers=len(handles)) as pool:
        return dict(zip((h.role for h in handles), pool.map(work, handles)))


def _env_mismatch(h: HostHandle, unit: str, assignments: dict[str, str | None]) -> str | None:
    live = h.services.environ(unit)
    if live is None:
        return "no live process to verify (is the unit running?)"
    for var, want in assignments.items():
        got = live.get(var)
        if got != want:
            shown_want = "unset" if want is None else repr(_redact(var, want))
            shown_got = "unset" if got is None else repr(_redact(var, got))
            hint = ""
            if got is None and want is not None:  # the file says it, the process never got it
                hint = (
                    " (systemd ignores `export KEY=VALUE` lines in an EnvironmentFile=: write plain "
                    "KEY=VALUE lines with dialect: systemd, or source the file from a wrapper with dialect: shell)"
                )
            return f"{var} is {shown_got} in the live process, expected {shown_want}{hint}"
    return None


_redact = redact_value


def redact_env(env: dict[str, dict[str, str | None]]) -> dict[str, dict[str, str]]:
    """The cell's env for the journal: secrets masked, removals shown as <unset>."""
    return {role: {k: _redact(k, v) if v is not None else "<unset>" for k, v in a.items()} for role, a in env.items()}


def render_command(template: str, values: dict[str, str]) -> str:
    """Fill {placeholders}, shell-quoting every value (commands run through /bin/sh)."""
    return template.format_map({k: shlex.quote(v) for k, v in values.items()})


def host_backup_path(env_file: str, run_id: str) -> str:
    return f"{env_file}.orch-backup-{run_id}"


def unrestored_runs(h: HostHandle) -> list[str]:
    """Run ids whose host-side backup of this host's env file is still there: runs whose restore
    never finished on this host."""
    prefix = host_backup_path(h.host.env_file, "")
    res = h.transport.run(
        ["sh", "-c", 'for f in "$1"*; do [ -e "$f" ] && printf "%s\\n" "$f"; done; true', "orch-unrestored", prefix],
        check=False,
        sudo=bool(h.host.ssh and h.host.ssh.sudo),
    )
    return sorted({line[len(prefix) :] for line in res.stdout.splitlines() if line.startswith(prefix)})


def _test_pause(phase: str) -> None:
    """Test hook: ORCH_TEST_<PHASE>_DELAY_S makes each host's backup or restore step slow, so the
    fault tests can kill or interrupt the controller inside that phase (as a slow unit stop on a
    real host would). Unset in normal use."""
    delay = os.environ.get(f"ORCH_TEST_{phase}_DELAY_S")
    if delay:
        time.sleep(float(delay))


def _run_dir_op(path: Path, what: str, op: Callable[[], object]) -> None:
    """Run a file operation in the run directory; an OSError (disk full, read-only, a file where
    a folder should be) becomes one clear JournalError that stops the sweep."""
    try:
        op()
    except OSError as exc:
        raise JournalError(
            f"{path}: {what}: {exc.strerror or exc}"
            + (f" ({RUN_DIR_HINTS[exc.errno]})" if exc.errno in RUN_DIR_HINTS else "")
        ) from exc


def _write_run_file(path: Path, data: bytes, *, atomic: bool = False, sync: bool = True) -> None:
    """Write a run-directory file (fsync'd unless sync=False); atomic=True writes a temp file and
    renames it, so a reader sees the old file or the whole new one."""

    def write() -> None:
        target = path.with_name(f".{path.name}.{os.getpid()}.tmp") if atomic else path
        try:
            with open(target, "wb") as f:
                f.write(data)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            if atomic:
                os.replace(target, path)
        except BaseException:
            if atomic:
                target.unlink(missing_ok=True)
            raise

    _run_dir_op(path, "cannot write", write)


class _signals_as_interrupt:
    """SIGTERM behaves like Ctrl-C during a sweep, so hosts are restored either way; both also
    set `stopping`, which worker threads (health pollers) check, since signals reach only the
    main thread."""

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.previous: dict[signal.Signals, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # a background job (`orch run ... &`) keeps ignoring Ctrl-C
                self.previous[sig] = signal.signal(sig, self._handler)

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(f"received {signal.Signals(signum).name}")
