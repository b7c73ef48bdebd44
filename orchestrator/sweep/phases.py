"""One trial's phases: apply the cell's env, restart in waves, wait until healthy, verify the
live env (before the repro, or beside it), run the repro (here or on a host), judge it, collect
logs and collectors; and the TrialRecord they make.

Why the tricks below (each measured; keep them): the bytes orch last wrote to an env file are
remembered, so a trial costs no read round trip (each write is told them and compares them on
the host, in its own round trip: an edit someone made meanwhile stops the sweep, never written
over); a trial that changes one file whose host restarts one unit writes it in the restart's own
round trip (written first, restarted only once written);
independent units of a restart wave restart in parallel; the health poller polls fast around each
role's learned ready time; the live-env check of restarted units runs beside the repro, off the
critical path, started once the repro's process exists (their threads never delay its spawn); the
local repro is waited on through a pidfd (edges.workload); every unit's ids are read while the
health wait runs (a unit with no process voids the trial before its repro); after the repro each
serving host's ports are scanned again (its unit ids in the same round trip, beside the log
collection), and a node holding no port sends its ids with its logs.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

import httpx

from orchestrator.core import envfile, words
from orchestrator.core.argsvar import resolve
from orchestrator.core.masking import mask_record
from orchestrator.core.matrix import client_values, expected_env, level_index
from orchestrator.core.model import CONTROLLER, CellValue, Collector
from orchestrator.core.records import Failure, MetricValue, ReproOutcome, TrialProvenance, TrialRecord
from orchestrator.core.redact import Redactor
from orchestrator.core.routerworkers import DP_COUNTS_UNCHECKED, command_workers, dp_aware
from orchestrator.core.serverconf import VerifyRule
from orchestrator.core.startorder import dependants, restart_order
from orchestrator.core.steps import Plan, Step
from orchestrator.edges import leftovers
from orchestrator.edges.deployment import (
    Deployment,
    HostHandle,
    health_ports,
    router_host,
    router_instances,
    router_workers,
)
from orchestrator.edges.health import HealthCheck, check_registered, probe_url, wait_all
from orchestrator.edges.httpread import get_json
from orchestrator.edges.identity import UnitId, foreign_holder, reported_pid_mismatch, units_phrase
from orchestrator.edges.metrics import Started, Telemetry
from orchestrator.edges.remote_leftovers import stop_marked
from orchestrator.edges.remote_scope import Scoping, probe, unit_name
from orchestrator.edges.reported import check_reported, rules_by_role
from orchestrator.edges.services import log_was_cut
from orchestrator.edges.transport import FileEntry
from orchestrator.edges.workload import (
    KILL_GRACE_S,
    SETTLE_S,
    check_metric_rules,
    check_output_rules,
    count_matching_lines,
    extract_metrics,
    output_tail,
    run_command,
)
from orchestrator.errors import (
    CommandInterrupted,
    CommandTimedOut,
    EnvFileChanged,
    FileChanged,
    GroupError,
    HealthTimeout,
    IdentityError,
    Interrupted,
    JournalError,
    LeftBehind,
    OrchError,
    ReproNotServed,
    SweepStopped,
    VerificationError,
    WarmupFailed,
    WorkloadError,
    notes,
)
from orchestrator.store import remoterepro
from orchestrator.store.atomic import run_file_op
from orchestrator.store.attempts import claim_attempt
from orchestrator.store.redacted import redact_folder
from orchestrator.store.remoterepro import RemoteRepro
from orchestrator.store.rundir import RunDir, TrialDir
from orchestrator.sweep import drift
from orchestrator.sweep.clock import now_iso
from orchestrator.sweep.commands import command_values, render_command
from orchestrator.sweep.drift import Kind
from orchestrator.sweep.pool import gather, per_host

if TYPE_CHECKING:
    from orchestrator.edges.provenance import TrialDescriber
    from orchestrator.sweep.hosts import HostGuard

LOG_LIMIT = 256_000
READY_HISTORY = 5  # restarts remembered per role to predict the next one's ready time
ALIVE_EVERY_S = 0.3  # how often health waits also ask the service manager whether units died
REPORTED_PID_TIMEOUT_S = 2.0  # the identity check's server-info request, in all (the trial waits for it)
BESIDE_WORKERS = 4  # verify, identity, provenance and log collection at once (each mostly waits on a host)

Unit = tuple[str, str]  # (role, unit name)
T = TypeVar("T")


@dataclass
class TrialContext:
    """What one attempt found out so far (kept when a later phase fails, for the record)."""

    changed: set[str] = field(default_factory=set)
    deferred: tuple[str, bytes] | None = None  # (host key, bytes): the one env file written with its restart
    found: dict[str, bytes] = field(default_factory=dict)  # host key -> what its env file must hold until written
    restarted: list[Unit] = field(default_factory=list)
    health: dict[str, float] = field(default_factory=dict)
    repro: ReproOutcome | None = None
    warmup: ReproOutcome | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    identity: dict[Unit, UnitId] = field(default_factory=dict)  # every unit's ids before the repro
    check_all: bool = False  # first trial, or after a failure: take the units as they run (verify them all)
    provenance: dict[str, TrialProvenance] = field(default_factory=dict)  # host -> what served the trial
    describing: Future[None] | None = None  # provenance, asked beside the repro
    checking: Future[None] | None = None  # the live-env check beside the repro (None: done before it, or none)
    identity_pending: Future[None] | None = None  # who serves the ports, beside the repro
    logs_pending: Future[CollectedLogs] | None = None  # collected while checks are joined


@dataclass(frozen=True)
class CollectedLogs:
    """A trial's logs, saved: paths by host:unit, texts by role (collectors count in them), and the
    unit ids read in the same round trips (hosts asked for them: the post-repro identity check)."""

    paths: dict[str, str]
    texts: dict[str, str]
    ids: dict[str, dict[str, UnitId]] = field(default_factory=dict)
    cut: set[str] = field(default_factory=set)  # roles a log of which was longer than LOG_LIMIT


class Services:
    """The service side of a trial: env files, restarts, health, live-env verification."""

    def __init__(
        self, plan: Plan, deployment: Deployment, guard: HostGuard, client: httpx.Client, stopping: threading.Event
    ) -> None:
        self.plan, self.deployment, self.guard, self.client, self.stopping = plan, deployment, guard, client, stopping
        self.verify_all_next = True  # first trial, and after any failure: verify every unit
        # role -> how long its last waits after a restart took: the health poller polls fast
        # around that time (a unit restarts in about the same time, trial after trial)
        self.ready_waits: dict[str, deque[float]] = {}
        self.checker: ThreadPoolExecutor | None = None  # verifies beside the repro
        self._cell_bytes: dict[tuple[str, frozenset[tuple[str, CellValue]]], bytes] = {}
        self._original_values: dict[str, dict[str, str]] = {}  # role -> the original file's values
        self.restart_next: set[Unit] = set()  # what the next attempt restarts whatever it finds (fresh_after)
        self.resume = "orch resume RUN_DIR"  # the command that continues the run (the runner's, with its folder)
        self._commands: dict[str, str] = {}  # router host key -> its units' command lines (dp_ranks)
        self._dp_aware: dict[str, tuple[bytes, bool]] = {}  # router host key -> (env file read, dp_ranks)
        # (host key, unit) -> its ids after the last trial's repro: a unit the next trial does not
        # restart must still run that process (read_ids)
        self.known_ids: dict[Unit, UnitId] = {}

    def apply(self, step: Step, ctx: TrialContext) -> None:
        """Write each role's env file for the cell; only files whose text changes are written.

        Every role the matrix mentions gets the ORIGINAL file edited with this cell's own
        assignments (none: the original bytes), so nothing an earlier cell wrote survives and the
        result never depends on the order. The bytes orch last wrote are remembered, so a trial
        costs no read round trip; the file is read again on the first trial and after any
        failure (when anything may have moved). When the trial changes one file whose host runs
        one unit (the usual one-factor step), that write goes with the unit's restart, in the
        same round trip (restart_units): the restart still runs only once the write went through.

        No write destroys an edit someone else made during the run: each one is told what the file
        must hold (the bytes orch last wrote or read there) and compares it on the host, in its own
        round trip; a file re-read here must be one orch knows (sweep.drift). Otherwise the sweep
        stops (EnvFileChanged) before any unit restarts: stopped, not retried."""
        news: dict[str, bytes] = {}
        for role, h in self.mentioned_hosts():  # every host of a role (host keys: roles, mostly)
            state = self.guard.states[role]
            cached = state.current is not None and not self.verify_all_next
            old = state.current if cached and state.current is not None else self._read_known(role)
            ctx.found[role] = old
            new = self.cell_bytes(role, step.env.get(h.role))
            if new != old:
                news[role] = new
            else:
                state.current = new
        if len(news) == 1 and not self.verify_all_next and self._restarts_alone(next(iter(news))):
            ctx.deferred = next(iter(news.items()))
            news = {}
        for role, new in news.items():
            self._write(role, new, ctx)
            self.guard.note_write(role, new)
            ctx.changed.add(role)
            self.guard.states[role].current = new
        if ctx.deferred is not None:  # written by its restart (a failure there re-reads it next trial)
            ctx.changed.add(ctx.deferred[0])
            self.guard.states[ctx.deferred[0]].current = ctx.deferred[1]

    def _read_known(self, role: str) -> bytes:
        """The host's env file, read (the first trial, and after a failure); one orch does not know
        it wrote there (nor the original) stops the sweep, as a refused write does."""
        h = self.deployment.hosts[role]
        entry = h.transport.read_entry(h.host.env_file)
        kind = self.guard.judge(role, entry)
        if kind not in ("original", "ours") or entry.data is None:
            raise self._edited(role, kind, entry)
        return entry.data

    def _write(self, role: str, data: bytes, ctx: TrialContext) -> None:
        """Write a host's env file for this trial, only over what apply found there."""
        h = self.deployment.hosts[role]
        try:
            h.transport.write_bytes_atomic(h.host.env_file, data, expect=ctx.found[role])
        except FileChanged:
            raise self._edited(role) from None

    def _edited(self, role: str, kind: Kind | None = None, entry: FileEntry | None = None) -> EnvFileChanged:
        """The sweep's stop when a host's env file changed during the run, not by orch: what is
        there is set aside and the original written back (HostGuard.keep_edit, as the restore
        does), and the error says where it went."""
        h = self.deployment.hosts[role]
        kind, entry, kept = self.guard.keep_edit(role, kind, entry)
        shape = self.guard.states[role].shape
        text = drift.during_run(h.host.label, h.host.env_file, kind, entry, kept, shape, self.resume)
        return EnvFileChanged(text)

    def _restarts_alone(self, key: str) -> bool:
        """A changed host whose restart is one unit on it alone (no other node of its instance):
        its write can ride on that restart's round trip."""
        h = self.deployment.hosts[key]
        return len(h.units) == 1 and not h.host.group

    def mentioned_hosts(self) -> list[tuple[str, HostHandle]]:
        """(host key, handle) of every host whose role the matrix mentions."""
        return [(key, h) for key, h in self.deployment.hosts.items() if h.role in self.plan.matrix.mentioned]

    def cell_bytes(self, role: str, assignments: Mapping[str, CellValue] | None) -> bytes:
        """A host's env file for a cell: its original edited with the cell's assignments (flag
        edits applied to its original args variables), computed once per distinct assignment set
        (a sweep repeats a few cells many times). `role` is the host's key."""
        if not assignments:
            return self.guard.states[role].original
        key = (role, frozenset(assignments.items()))
        got = self._cell_bytes.get(key)
        if got is None:
            host = self.deployment.hosts[role].host
            text = self.guard.states[role].original.decode("utf-8", errors="surrogateescape")
            values = resolve(assignments, self.original_values(role))
            got = envfile.edit(text, values, host.dialect).encode("utf-8", errors="surrogateescape")
            self._cell_bytes[key] = got
        return got

    def original_values(self, role: str) -> dict[str, str]:
        """The host's original env file as its dialect reads it (`role`: the host's key)."""
        original = self._original_values.get(role)
        if original is None:
            host, state = self.deployment.hosts[role].host, self.guard.states[role]
            text = state.original.decode("utf-8", errors="surrogateescape")
            original = self._original_values[role] = envfile.read_values(text, host.dialect)
        return original

    def expected(self, role: str, assignments: Mapping[str, CellValue] | None) -> dict[str, str | None]:
        """What the live process of a host's unit must hold for every key the matrix mentions:
        the cell's value, else what the original file gives (or unset), as the host's dialect
        reads it; an args variable, its original value with the cell's flags set."""
        mentioned = self.plan.matrix.mentioned[self.deployment.hosts[role].role]
        return expected_env(assignments or {}, mentioned, self.original_values(role))

    def restart(self, ctx: TrialContext) -> None:
        """Restart units whose env changed or that are not running, in dependency waves;
        independent units of one wave restart in parallel."""
        hosts = self.deployment.hosts
        ctx.check_all = self.verify_all_next  # then a unit's process may differ from the last trial's
        todo = {(role, unit) for role, h in hosts.items() for unit in h.units if role in ctx.changed}
        todo |= self.restart_next
        self.restart_next = set()
        if self.verify_all_next:  # first trial, or after a failure: start whatever is not running,
            down = per_host(self.deployment, lambda h: [u for u in h.units if not h.services.state(u).is_active])
            todo |= {(role, unit) for role, units in down.items() for unit in units}
            todo |= self.stale_units()  # and whatever may run on other bytes than its file holds
        todo = whole_instances(self.deployment, todo)
        for wave in waves(self.deployment, {r for r, _ in todo}):
            self.restart_units([(r, u) for r in wave for u in hosts[r].units if (r, u) in todo], ctx)

    def fresh_after(self, exc: OrchError) -> None:
        """After a health wait timed out, the next attempt restarts that role's units, as it
        restarts a unit that failed to start: one still warming up (or stuck) is active and runs on
        the file's bytes, so neither the down nor the stale rule of restart() touches it, and the
        retry would wait on the failed attempt's process, its warm-up half spent. Likewise after a
        stranger held a role's port (or the server there reported another pid): the unit runs but
        does not serve its own port (it lost or never bound it), and only a fresh start binds it
        once the stranger is gone. Only those roles: restarting every unit the attempt restarted
        would cost a retry the whole deployment's start-up (minutes a unit on real hardware).

        Not here, as restart() handles them: a unit found without a process, or dead after the
        repro, is down (its down rule); one whose process changed (restarted behind orch's back,
        or by systemd during the repro) runs the file's bytes, and the retry verifies every
        unit's env before its repro, as the first trial takes the units as they run."""
        roles = exc.roles if isinstance(exc, IdentityError) else (exc.role,) if isinstance(exc, HealthTimeout) else ()
        hosts = self.deployment.hosts
        self.restart_next |= {(role, unit) for role in roles if role in hosts for unit in hosts[role].units}

    def stale_units(self) -> set[Unit]:
        """Units of the hosts the matrix edits whose file changed since they last started: a
        failed restart wave leaves the later waves' files written and their units on the old env
        (a retry finds the files as the cell wants and would restart nothing); after a kill -9
        what each unit runs is unknown. Only the live-env check caught them, and not where it is
        off (verify_env: false)."""
        return {(key, u) for key, h in self.mentioned_hosts() for u in h.units if self.guard.states[key].runs_stale(u)}

    def restart_units(self, units: list[Unit], ctx: TrialContext) -> None:
        deferred, ctx.deferred = ctx.deferred, None
        written = deferred is not None and any(r == deferred[0] for r, _ in units)
        if deferred is not None and not written:  # (never: its unit restarts in the first wave) write first
            self._write(*deferred, ctx)
            self.guard.note_write(*deferred)

        def one(ru: Unit) -> float:
            h = self.deployment.hosts[ru[0]]
            if written and deferred is not None and ru[0] == deferred[0]:
                self.guard.note_write(*deferred)  # the file may change from now on
                expect = ctx.found[deferred[0]]
                return h.services.restart_with_file(ru[1], h.transport, h.host.env_file, deferred[1], expect=expect)
            return h.services.restart(ru[1])

        try:
            gather({f"{r}:{u}": (r, u) for r, u in units}, one, what="units")
        except OrchError as exc:
            if deferred is not None and written and file_changed(exc):  # nothing written, its unit not restarted
                raise self._edited(deferred[0]) from None
            raise
        ctx.restarted.extend(units)
        self.guard.started_units.update(units)
        for role, unit in units:
            self.guard.note_restart(role, unit)

    def wait_healthy(self, since: float, restarted: set[str]) -> dict[str, float]:
        """Wait on every role's health URL; a unit that dies meanwhile fails the wait at once.

        Roles that had to come back (restarted, or depending on one that was) tell the poller
        how long their earlier waits took, and their wait is remembered for the next trial.
        After any restart (and on the first trial, or after a failure), a router's wait ends only
        when one generate through it succeeds (health.probe_url): a router that still believes in
        a dead worker, or keeps out one that is back, must not receive the repro. A router's
        /readiness must also register every instance the inventory puts behind it (router_workers),
        and no other worker (router_instances: health.check_registered)."""
        affected = dependants(self.deployment.testbed, restarted) if restarted else set()
        probing = bool(restarted) or self.verify_all_next
        checks, alive = [], {}
        for role, h in self.deployment.hosts.items():
            if not h.serves:  # a node above rank 0: its instance's health is rank 0's (it checks this one alive)
                continue
            timeout = self.plan.matrix.health_timeouts.get(h.role, h.host.health_timeout_s)
            earlier = self.ready_waits.get(role) if role in affected else None
            expected = (min(earlier), max(earlier)) if earlier else None
            generate = probe_url(h.host.health)  # set for a router's /readiness
            probe = generate if probing else None
            workers = router_workers(self.deployment, h) if generate else ()
            instances, own = self._routers.get(role, ((), ())) if generate else ((), ())
            ranks = bool(instances) and self.dp_ranks(role)
            configured = self.configured_workers(role) if instances else 0
            check = HealthCheck(
                role, h.host.health, timeout, expected, probe, workers, instances, own, ranks, configured
            )
            checks.append(check)
            alive[role] = self.instance_alive(h, since)
        waited = wait_all(checks, client=self.client, check_alive=alive)
        for role in affected & set(waited):
            self.ready_waits.setdefault(role, deque(maxlen=READY_HISTORY)).append(waited[role])
        return waited

    def dp_ranks(self, key: str) -> bool:
        """Is this router started with --dp-aware (core.routerworkers.dp_aware): in its units'
        command lines (the inventory's, or systemd's ExecStart: asked once per run), or in its env
        file as orch last wrote or read it (a value ExecStart expands)? Then its counts are DP
        ranks: not compared with the instances, and each trial says so."""
        h, state = self.deployment.hosts[key], self.guard.states.get(key)
        command = self._command(key)
        data = b"" if state is None else state.original if state.current is None else state.current
        known = self._dp_aware.get(key)
        if known is not None and known[0] is data:  # the readiness wait and the record ask of one file
            return known[1]
        try:
            values = list(envfile.read_values(data.decode("utf-8", "surrogateescape"), h.host.dialect).values())
        except OrchError:  # a file no unit could start on says nothing of the router's flags
            values = []
        self._dp_aware[key] = (data, dp_aware([command.split()], values))
        return self._dp_aware[key][1]

    def configured_workers(self, key: str) -> int:
        """How many workers a router's units' command lines give it (core.routerworkers.
        command_workers): its readiness wait holds out until it registers as many, so the worker
        list read then names any the inventory lacks before the repro, not after it."""
        return command_workers(c.split() for c in self._command(key).split(" | "))

    def _command(self, key: str) -> str:
        """A host's units' command lines (edges.provenance.exec_start), asked once per run."""
        if key not in self._commands:
            from orchestrator.edges.provenance import exec_start  # (as describe_hosts: only when asked)

            self._commands[key] = exec_start(self.deployment.hosts[key])
        return self._commands[key]

    def unchecked(self) -> list[str]:
        """What the trial's checks left out, in the user's words, for its record: the worker counts
        of each --dp-aware router (core.routerworkers.DP_COUNTS_UNCHECKED; its list, if it gives
        one, is still checked)."""
        return [f"{key}: {DP_COUNTS_UNCHECKED}" for key in self._routers if self.dp_ranks(key)]

    @cached_property
    def _routers(self) -> dict[str, tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...]]]:
        """host key -> (the instances behind it by role, its own names) for each router that has
        instances (a serving host whose health URL is a /readiness): what the worker checks compare
        with (health.check_registered), fixed for the run."""
        out = {}
        for key, h in self.deployment.hosts.items():
            instances = tuple(router_instances(self.deployment, h).items()) if h.serves else ()
            if instances and probe_url(h.host.health) is not None:
                out[key] = (instances, router_host(h.host))
        return out

    def instance_alive(self, h: HostHandle, since: float) -> Callable[[], None]:
        """The alive check of a host's health wait: every node of its instance (itself alone,
        unless it is rank 0 of a multi-node instance)."""
        keys = h.host.group or (h.key,)
        hosts = [self.deployment.hosts[k] for k in keys]
        checks = [alive_checker(x, since + self.guard.offset(x.key), self.stopping) for x in hosts]
        if len(checks) == 1:
            return checks[0]

        def check() -> None:
            for one in checks:
                one()

        return check

    def verify_before_repro(self, step: Step, ctx: TrialContext) -> bool:
        """The first trial and the one after a failure verify every unit before the repro,
        because they may restart a stale unit to fix it; True when this one did. Any other trial
        verifies its restarted units beside the repro (verify_beside_repro)."""
        if not self.verify_all_next:
            return False
        self.verify(step, ctx)
        self.verify_all_next = False  # here, never in a thread: a failure may set it again
        return True

    def verify_beside_repro(self, step: Step, ctx: TrialContext) -> Future[None]:
        """Verify the restarted units while the repro runs: off the critical path, every trial.

        /proc/PID/environ of a process that answers its health URL cannot change any more, so
        checking it during the repro proves the same as checking it before; a mismatch fails
        the trial after the repro (its result is then void)."""
        return self.beside(self.verify, step, ctx)

    def verify(self, step: Step, ctx: TrialContext) -> None:
        """Check the live processes got the cell's values (/proc/PID/environ).

        Restarted units always; every unit on the first trial and after a failure. A unit that
        was not restarted and holds stale values is restarted once and checked again."""
        restarted = set(ctx.restarted)
        for role, h in self.mentioned_hosts():  # every host of the role (`role`: the host's key)
            if not h.host.verify_env:
                continue
            assignments = self.expected(role, step.env.get(h.role))
            for unit in h.units:
                if (role, unit) not in restarted and not self.verify_all_next:
                    continue
                problem = env_mismatch(h, unit, assignments, self.plan.matrix.redactor)
                if problem and (role, unit) not in restarted:  # a multi-node instance restarts whole
                    again = sorted(whole_instances(self.deployment, {(role, unit)}))
                    self.restart_units(again, ctx)
                    ctx.health.update(self.wait_healthy(time.time(), {r for r, _ in again}))
                    ctx.identity.update((u, i) for u, i in self._ids({r for r, _ in again}).items() if u in again)
                    problem = env_mismatch(h, unit, assignments, self.plan.matrix.redactor)
                if problem:
                    raise VerificationError(f"{h.host.label}: unit {unit}: {problem}")
        self.verify_reported(step)

    def verify_reported(self, step: Step) -> None:
        """The matrix's `verify:` rules that apply to this cell, against what each server reports
        (every trial: one GET per role, beside the repro like the env check; a mismatch raises
        ReportedMismatch, a VerificationError, so the trial is void)."""
        by_role: dict[str, list[VerifyRule]] = rules_by_role(self.plan.matrix.verify, step.trial.cell.as_dict())
        for role, rules in by_role.items():
            for key in self.deployment.testbed.roles.get(role, ()):  # every instance of the role
                h = self.deployment.hosts[key]
                if h.serves:
                    check_reported(rules, role, h.host.label, h.host.url, self.client)

    def read_ids(self, ctx: TrialContext) -> dict[Unit, UnitId]:
        """Before the repro (asked while the health wait runs, so it costs no wait of its own): the
        process every unit of every host runs, restarted by this trial or not. A unit with no
        process is not orch's own live server, whatever answers its health URL (a stranger on a
        freed port answers 200 at once, before any alive check between polls); a unit the trial did
        not restart that runs another process than after the last trial's repro was restarted
        behind orch's back (its env never verified). Either voids the trial (IdentityError)."""
        ids = self._ids(self.deployment.hosts)
        problems = [p for unit, i in ids.items() if (p := self._not_as_left(unit, i, ctx)) is not None]
        if problems:
            raise IdentityError(
                "; ".join(problems) + " (the trial is void: it was not served by the units orch checked)"
            )
        return ids

    def _ids(self, keys: Collection[str]) -> dict[Unit, UnitId]:
        """The ids of every unit of the hosts `keys`, one round trip per host, hosts at once."""
        found = gather(
            {k: k for k in keys}, lambda k: self.deployment.hosts[k].services.unit_ids(self.deployment.hosts[k].units)
        )
        return {(key, unit): i for key, ids in found.items() for unit, i in ids.items()}

    def _not_as_left(self, unit: Unit, now: UnitId, ctx: TrialContext) -> str | None:
        """Why a unit is not the process this trial may rely on (None: it is): it runs none, or
        (a unit this trial did not restart, after a trial that passed) not the one the last trial
        left. A first or retried trial takes what runs (every unit's env is verified then)."""
        label = self.deployment.hosts[unit[0]].host.label
        if not now.running:
            return f"{label}: unit {unit[1]} is not running (it died or was stopped since orch started it)"
        before = self.known_ids.get(unit)
        if ctx.check_all or unit in ctx.restarted or before is None or before == now:
            return None
        change = _change(before, now)
        return f"{label}: unit {unit[1]} changed process since the last trial ({change}) though orch did not restart it"

    def identity_beside_repro(self, ctx: TrialContext) -> Future[None] | None:
        """Check, while the repro runs, that each role's health ports are served by its own
        units; confirm_identity waits for it after the repro."""
        return self.beside(self.check_identity, ctx)

    def beside(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Run `fn` on the pool of work done beside the repro (checks, provenance, log collection):
        they wait on different round trips, so they run at once rather than one after another."""
        if self.checker is None:
            self.checker = ThreadPoolExecutor(max_workers=BESIDE_WORKERS, thread_name_prefix="beside")
        return self.checker.submit(fn, *args)

    def check_identity(self, ctx: TrialContext) -> None:
        """Each health/URL port of every role, restarted by this trial or not, is held by one of the
        role's units (its main pid or a descendant), and the pid the server reports agrees; else
        the answer came from a stranger and the trial is void. A role the trial did not restart
        serves the repro as much as one it did (an orphaned server on a port whose unit died)."""
        serving = sorted(k for k, h in self.deployment.hosts.items() if h.serves)
        found = gather({k: k for k in serving}, partial(self._port_owners, reported=True), what="hosts")
        self._raise_port_problems(found)

    def _port_owners(self, key: str, reported: bool) -> tuple[dict[str, UnitId], str | None]:
        """One scan of a serving host's health ports (it reads the units' ids too): the ids, and who
        else holds a port, or (`reported`) whose pid the server reports, in words (None: its own)."""
        h, host = self.deployment.hosts[key], self.deployment.testbed.hosts[key]
        scan, ids = h.services.port_scan(health_ports(host), h.units)
        for port in health_ports(host):
            stranger = foreign_holder(scan, port, ids)
            if stranger is not None:
                return ids, f"{host.label}: port {port} is served by {stranger}, not by {units_phrase(ids)}"
        if not reported:
            return ids, None
        url_port = health_ports(host)[-1]  # the host URL's port: where /get_server_info answers
        mismatch = reported_pid_mismatch(scan, url_port, ids, self._reported_pid(h.host.url))
        return ids, None if mismatch is None else f"{host.label}: {mismatch} ({units_phrase(ids)})"

    @staticmethod
    def _raise_port_problems(found: Mapping[str, tuple[dict[str, UnitId], str | None]]) -> None:
        problems = {key: problem for key, (_, problem) in found.items() if problem}
        if problems:
            raise IdentityError(
                "; ".join(problems.values()) + " (the trial is void: stop that process or free the port)",
                roles=tuple(problems),
            )

    def _reported_pid(self, url: str) -> object:
        """The pid the server reports about itself (the bundled simulator does; SGLang may not),
        or None when it reports none or does not answer (200, JSON, within REPORTED_PID_TIMEOUT_S
        in all and MAX_JSON_BYTES: the trial waits for this check): then the port scan alone decides."""
        try:
            _, info = get_json(self.client, url.rstrip("/") + "/get_server_info", deadline_s=REPORTED_PID_TIMEOUT_S)
        except (httpx.HTTPError, OrchError):
            return None
        return info.get("pid") if isinstance(info, dict) else None

    def confirm_identity(self, pending: Future[None] | None, ctx: TrialContext) -> None:
        """After the repro: the check beside it passed, every unit of every host still runs the
        process it ran before the repro (same main pid and invocation id: a unit that restarted
        or died during the repro served only part of it), and each role's ports are still held by
        its units (scanned again). Nodes that hold no port have their ids read with the trial's
        logs (collected after the repro ended, in the same round trips), else alone."""
        if pending is None:
            return
        pending.result()
        now = gather({k: k for k in self.deployment.hosts}, partial(self._after_repro, ctx.logs_pending))
        for (role, unit), before in ctx.identity.items():
            self._same_process(role, unit, before, now[role][0].get(unit))
        self._raise_port_problems(now)
        self.registered_after_repro()
        self.known_ids = {(role, unit): i for role, (ids, _) in now.items() for unit, i in ids.items()}

    def registered_after_repro(self) -> None:
        """Each router still registers only the inventory's instances: a worker added through its
        API while the repro ran (the readiness wait saw none) may have served part of it. Its list
        only (a router that lists none was judged by its counts before the repro)."""
        for key, (instances, own) in self._routers.items():
            health = self.deployment.hosts[key].host.health
            check = HealthCheck(key, health, 0.0, instances=instances, router_host=own)
            check_registered(check, self.client, "", when="after the repro (it may have served part of it)")

    def _after_repro(self, logs: Future[CollectedLogs] | None, key: str) -> tuple[dict[str, UnitId], str | None]:
        """A host's unit ids after the repro, and who else holds its ports (a serving host: scanned)."""
        h = self.deployment.hosts[key]
        if h.serves:
            return self._port_owners(key, reported=False)
        ids = self._ids_with_logs(logs, key)
        return (ids if ids is not None else h.services.unit_ids(h.units)), None

    def _same_process(self, role: str, unit: str, before: UnitId, after: UnitId | None) -> None:
        label = self.deployment.hosts[role].host.label
        if after is None or not after.running:
            raise IdentityError(f"{label}: unit {unit} died during the repro ({before.describe()} is gone)")
        if after.main_pid != before.main_pid or after.invocation_id != before.invocation_id:
            raise IdentityError(f"{label}: unit {unit} restarted during the repro ({_change(before, after)})")

    @staticmethod
    def _ids_with_logs(logs: Future[CollectedLogs] | None, key: str) -> dict[str, UnitId] | None:
        """A host's unit ids as the log collection read them after the repro, if it went through
        and asked that host."""
        if logs is None or logs.exception() is not None:
            return None
        return logs.result().ids.get(key)

    def id_hosts(self) -> set[str]:
        """The hosts whose unit ids the log collection reads for confirm_identity: nodes that
        hold no port (a serving host's ids come with its port scan)."""
        return {key for key, h in self.deployment.hosts.items() if not h.serves}

    def close(self) -> None:
        if self.checker is not None:
            self.checker.shutdown(wait=True)
            self.checker = None


class Repro:
    """The workload side of a trial: the repro, its verdict, metrics, logs and collectors."""

    def __init__(
        self,
        plan: Plan,
        deployment: Deployment,
        run_dir: RunDir,
        guard: HostGuard,
        client: httpx.Client,
        stopping: threading.Event | None = None,
    ) -> None:
        self.plan, self.deployment, self.run_dir, self.guard, self.client = plan, deployment, run_dir, guard, client
        # the runner's Ctrl-C/SIGTERM Event: a parallel testbed's runner thread gets no
        # KeyboardInterrupt, so a repro it runs here is stopped through this (edges.workload)
        self.stopping = stopping if stopping is not None else threading.Event()
        self.provenance: dict[str, dict[str, str]] = {}  # filled once the servers first answer
        self.on_described: Callable[[dict[str, dict[str, str]]], None] | None = None  # told `provenance` then
        self.describer: TrialDescriber | None = None  # what served each trial (edges.provenance)
        self.scoping: dict[str, Scoping] = {}  # host key -> whether its repros run in a scope, asked once
        matrix = plan.matrix  # None in restore's plan shell (sweep.api._empty_plan): no trial runs then
        self.levels = level_index(matrix) if matrix is not None else {}
        config = matrix.server_metrics if matrix is not None else None
        self.telemetry = Telemetry(config, deployment, client) if config is not None else None

    def run(
        self, step: Step, trial: TrialDir, warmup: bool = False, on_spawn: Callable[[], None] | None = None
    ) -> ReproOutcome:
        """The measured repro (or, warmup=True, repro.warmup with the same placeholders, its
        output in warmup.out/.err). `on_spawn` is called once its process runs (on a host: just
        before the command is sent). Once the runner is stopping (Ctrl-C, SIGTERM) no repro starts,
        and a running one is killed with everything it started (Interrupted, its output so far
        kept in the trial's files): on the controller its process group, on a host through the
        transport's `stop` (closing the channel would leave it running: the SSH transport kills its
        process group on the host with a second command, edges.transport.ssh)."""
        if self.stopping.is_set():
            raise Interrupted("stopping: interrupted by the user or a signal")
        repro = self.plan.matrix.repro
        template = repro.warmup if warmup and repro.warmup else repro.command
        command = render_command(template, self.placeholders(step, trial))
        out, err = (trial.warmup_out, trial.warmup_err) if warmup else (trial.repro_out, trial.repro_err)
        for path in (out, err):  # an unwritable run directory is found here, not blamed on the repro
            _write(path, "")
        stopped: list[str] = []  # what it left running, if an exception ends it (stopped already)
        try:
            if repro.on == CONTROLLER:
                outcome = run_command(
                    command,
                    timeout_s=repro.timeout_s,
                    cwd=self.run_dir.path,
                    env=None,
                    stdout_path=out,
                    stderr_path=err,
                    on_spawn=on_spawn,
                    stop=self.stopping,
                    pid_path=trial.repro_pid,
                    on_left=stopped.extend,
                )
            else:
                if on_spawn is not None:
                    on_spawn()
                outcome = self._run_remote(repro.on, command, repro.timeout_s, (out, err), trial, stopped.extend)
        except BaseException as exc:
            what = f"trial {step.trial.index}'s " + ("repro.warmup" if warmup else "repro")
            _name_stopped(exc, what, stopped, self.plan.matrix.redactor)
            raise
        paths = {"stdout_path": self.run_dir.relative(out), "stderr_path": self.run_dir.relative(err)}
        return ReproOutcome(**{**outcome.model_dump(), **paths})

    def _run_remote(
        self,
        role: str,
        command: str,
        timeout: float,
        outputs: tuple[Path, Path],
        trial: TrialDir,
        on_left: Callable[[list[str]], None],
    ) -> ReproOutcome:
        """The repro on `role`'s host, marked as one on the controller is (edges.leftovers), and in a
        transient scope of its own where the host allows one (edges.remote_scope); once it ended,
        what still carries its mark or is still in its scope there is named and stopped in one more
        round trip (edges.remote_leftovers), also after a timeout or an interrupt, so nothing it
        started outlives its trial (`on_left` gets those an exception's check stopped, to name them).
        Until that check ran, the trial folder records where it runs (store.remoterepro): a controller
        killed meanwhile leaves it to resume and restore to stop."""
        out, err = outputs
        key = self.deployment.testbed.first(role).key  # a role of several hosts: its first
        h = self.deployment.hosts[key]
        mark = leftovers.new_mark()
        scope = unit_name(mark, self.guard.run_id) if self._scoping(key).usable else None
        remoterepro.record(trial, RemoteRepro(self.deployment.testbed.name, key, mark, scope))
        t0 = time.monotonic()  # a duration: the wall clock may be stepped meanwhile (NTP)
        try:
            res = h.transport.run(
                command,
                timeout=timeout,
                check=False,
                stop=self.stopping,
                env={leftovers.MARK_VAR: mark, leftovers.RUN_VAR: self.guard.run_id},
                scope=scope,
            )
            code: int | None = res.exit_code
            stdout, stderr = res.stdout, res.stderr
        except CommandInterrupted as exc:  # Ctrl-C/SIGTERM: killed on the host, as a local repro is killed
            _write(out, exc.result.stdout)
            _write(err, exc.result.stderr)
            on_left(_stop_left_after(exc, h, mark, scope, trial))
            raise
        except CommandTimedOut as exc:  # what it printed before the kill is kept
            code, stdout = None, exc.result.stdout
            stderr = exc.result.stderr + ("\n" if exc.result.stderr.strip() else "") + f"{exc}\n"
        except (OrchError, KeyboardInterrupt, Interrupted) as exc:  # a host that stopped answering, a Ctrl-C, a SIGTERM
            on_left(_stop_left_after(exc, h, mark, scope, trial))
            raise
        duration_s = round(time.monotonic() - t0, 4)
        _write(out, stdout)
        _write(err, stderr)
        left = stop_marked(h.transport, mark, settle_s=SETTLE_S, grace_s=KILL_GRACE_S, scope=scope)
        remoterepro.forget(trial)  # not before: a host that could not be looked at keeps it
        return ReproOutcome(
            command=command, exit_code=code, duration_s=duration_s, stdout_tail=stdout[-4096:], left_behind=left
        )

    def _repro_host(self) -> str | None:
        """The host key a repro on a host runs on (None: on the controller, or no matrix)."""
        matrix = self.plan.matrix
        if matrix is None or matrix.repro.on == CONTROLLER:
            return None
        return self.deployment.testbed.first(matrix.repro.on).key

    def _scoping(self, key: str) -> Scoping:
        """Whether the repro runs in a transient scope on host `key` (edges.remote_scope): asked of
        the host once a session, before its first repro."""
        if key not in self.scoping:
            unit = unit_name(leftovers.new_mark(), self.guard.run_id)
            self.scoping[key] = probe(self.deployment.hosts[key].transport, unit)
        return self.scoping[key]

    def warm_up(self, step: Step, trial: TrialDir, on_spawn: Callable[[], None] | None = None) -> ReproOutcome | None:
        """repro.warmup, after ready and before the measured repro: its output is journaled as
        the trial's warm-up and never read for metrics; a failure voids the trial."""
        if not self.plan.matrix.repro.warmup:
            return None
        got = self.run(step, trial, warmup=True, on_spawn=on_spawn)
        if got.exit_code != 0:
            stderr = output_tail(self.run_dir.path / got.stderr_path, 2000)
            what = "timed out" if got.exit_code is None else f"exited with code {got.exit_code}"
            what += _also_left(got)
            raise WarmupFailed(f"repro.warmup {what} (the trial is void)", detail=stderr or got.stdout_tail)
        if got.left_behind:
            raise left_behind("repro.warmup", got)
        return got

    def telemetry_before(self) -> Started | None:
        """Server metrics (and GPU readings, in the background) just before the measured repro,
        one parallel round, and the sampler of gauges while it runs."""
        return self.telemetry.begin() if self.telemetry is not None else None

    def telemetry_after(self, started: Started | None) -> Future[dict[str, MetricValue]] | None:
        """The after-repro round, in the background (collect_logs runs meanwhile)."""
        if started is None or self.telemetry is None:
            return None
        return self.telemetry.finish(started)

    def judge(self, rel: ReproOutcome) -> None:
        """A repro that timed out or failed is a workload failure; one that exited 0 but left
        processes running is void (LeftBehind: retried, never data)."""
        also = _also_left(rel)
        if rel.exit_code is None:
            raise WorkloadError(
                f"repro timed out after {self.plan.matrix.repro.timeout_s:g} s (the matrix's repro.timeout) "
                f"and was killed{also}",
                detail=rel.stdout_tail,
            )
        if rel.exit_code != 0:
            stderr = output_tail(self.run_dir.path / rel.stderr_path, 2000)
            raise WorkloadError(f"repro exited with code {rel.exit_code}{also}", detail=stderr or rel.stdout_tail)
        if rel.left_behind:
            raise left_behind("repro", rel)

    def metrics(self, rel: ReproOutcome) -> dict[str, MetricValue]:
        """The trial's metrics, once its output passes the matrix's `repro.valid` rules (a broken
        rule voids the trial: InvalidOutput, an infrastructure failure, retried, never data)."""
        repro = self.plan.matrix.repro
        stdout = output_tail(self.run_dir.path / rel.stdout_path)  # bounded: the summary is at the end
        check_output_rules(stdout, repro.valid)
        values = extract_metrics(stdout, repro.metrics)
        check_metric_rules(values, repro.valid)
        return values

    def check_served(self, values: dict[str, MetricValue]) -> None:
        """A repro that reported sessions while orch's servers counted no request (their request
        counters, in the trial's server metrics: no scrape of its own) reached some other server,
        e.g. a literal URL the matrix allows; the trial is void (ReproNotServed)."""
        if self.telemetry is None:
            return
        specs = self.plan.matrix.repro.metrics
        # several proportions may count the same sessions (failures, timeouts): the largest n, not their sum
        sessions = max((values[m.name].n or 0 for m in specs if m.kind == "proportion" and m.name in values), default=0)
        if sessions and self.telemetry.requests_counted(values) == 0:
            reported = words.counted(sessions, "session")
            raise ReproNotServed(
                f"no request reached orch's servers during the repro, which reported {reported} (the "
                f"request counters of {', '.join(self.telemetry.role_endpoints)} rose by 0): another server "
                "answered it (the trial is void: point the repro at {router_url} or {<role>_url})"
            )

    def collect_logs(
        self, trial: TrialDir, since: float, quiet: bool = False, ids_of: Collection[str] = ()
    ) -> CollectedLogs:
        """Save each unit's log lines written during the trial; return paths and texts by role.
        Hosts in `ids_of` (keys) also return their units' ids, read in the same round trip."""

        def fetch(h: HostHandle) -> tuple[list[tuple[str, str]], dict[str, UnitId] | None]:  # hosts in parallel
            host_since = since + self.guard.offset(h.key)
            if h.key in ids_of and not quiet:
                logs, ids = h.services.logs_and_ids(h.units, host_since, LOG_LIMIT)
                return [(unit, logs[unit]) for unit in h.units], ids
            got = []
            for unit in h.units:  # units in turn
                try:
                    got.append((unit, h.services.logs_since(unit, host_since, LOG_LIMIT)))
                except OrchError:
                    if not quiet:
                        raise
            return got, None

        collected = CollectedLogs({}, {})
        for role, (fetched, ids) in per_host(self.deployment, fetch).items():  # role: the host's key
            for unit, text in fetched:
                path = trial.log(role, unit)
                _write(path, text)
                collected.paths[f"{role}:{unit}"] = self.run_dir.relative(path)
            by_role = self.deployment.hosts[role].role  # collectors count over every host of a role
            collected.texts[by_role] = collected.texts.get(by_role, "") + "".join(text for _, text in fetched)
            if any(log_was_cut(text) for _, text in fetched):
                collected.cut.add(by_role)
            if ids is not None:
                collected.ids[role] = ids
        return collected

    def run_collectors(
        self, logs: dict[str, str], trial: TrialDir, cut: Collection[str] = ()
    ) -> dict[str, MetricValue]:
        """Each collector's number. `cut`: roles whose log orch read only the end of (LOG_LIMIT):
        a count of their lines would be a count of that end, so a pattern collector on one fails
        the trial, as a metric the repro did not print does (a chatty decode logging ~100 MB in
        a trial was recorded as 1,148 ANOMALY lines, the last 256 KB's)."""
        return {c.name: self._collect_one(c, logs, trial, cut) for c in self.plan.matrix.collect}

    def _collect_one(self, c: Collector, logs: dict[str, str], trial: TrialDir, cut: Collection[str]) -> MetricValue:
        if c.pattern is not None:
            if c.role in cut:
                raise WorkloadError(
                    f"collector {c.name!r}: {c.role}'s log during the trial is longer than the {LOG_LIMIT // 1000} KB "
                    "orch reads of it, so a count of its lines would leave the rest out (log less during a trial, "
                    "or count on the host with a command: collector, e.g. grep -c)"
                )
            count = count_matching_lines(c.name, c.pattern, logs.get(c.role, ""))
            return MetricValue(kind="number", value=float(count), unit=c.unit)
        command = render_command(c.command or "", self.placeholders(None, trial))
        total = 0.0
        for key in self.deployment.testbed.roles[c.role]:  # a role of several hosts: the sum over them
            h = self.deployment.hosts[key]
            res = h.transport.run(command, timeout=60, check=False)
            number = re.search(r"-?\d+(?:\.\d+)?", res.stdout)
            if number is None:
                raise WorkloadError(
                    f"collector {c.name!r} on {h.host.label} printed no number",
                    detail=(res.stdout + res.stderr)[-1000:],
                )
            total += float(number.group())
        if not math.isfinite(total):  # 400 digits are a float's inf: no number a record can hold
            raise WorkloadError(f"collector {c.name!r} printed a number too large to hold ({total})")
        return MetricValue(kind="number", value=total, unit=c.unit)

    def placeholders(self, step: Step | None, trial: TrialDir) -> dict[str, str]:
        """The trial's placeholder values (`step` None: a collector's command, which has no cell)."""
        at = step.trial if step is not None else None
        client = client_values(at.cell, self.levels) if at is not None else {}
        run_dir, testbed = str(self.run_dir.path), self.deployment.testbed
        return command_values(self.plan.seed, testbed, run_dir, str(trial.path), at, client)

    def describe_hosts(self) -> None:
        """Once per run, after the servers first answer: what ran (ExecStart, /get_server_info)."""
        if self.provenance:
            return
        from orchestrator.edges.provenance import describe_host

        originals, redactor = {k: s.original for k, s in self.guard.states.items()}, self.plan.matrix.redactor
        self.provenance = gather(
            {k: k for k in self.deployment.hosts},
            lambda k: describe_host(self.deployment.hosts[k], self.client, originals.get(k), redactor),
        )
        if self.telemetry is not None:  # whether each machine has nvidia-smi: asked, and said, once
            for role, lines in self.telemetry.describe().items():
                self.provenance.setdefault(role, {}).update(lines)
        key = self._repro_host()
        if key is not None:  # how what a repro there leaves is found: asked, and said, once
            self.provenance.setdefault(key, {})["repro_check"] = self._scoping(key).fact
        if self.on_described is not None:
            self.on_described(self.provenance)

    def describe_trial(self, ctx: TrialContext) -> None:
        """What served this trial on each host: asks only hosts whose units restarted."""
        from orchestrator.edges.provenance import TrialDescriber

        if self.describer is None:
            self.describer = TrialDescriber(self.deployment, self.client, self.plan.matrix.redactor)
        env = {k: s.current if s.current is not None else s.original for k, s in self.guard.states.items()}
        ctx.provenance = self.describer.describe({k for k, _ in ctx.restarted}, env)

    def close(self) -> None:
        if self.telemetry is not None:
            self.telemetry.close()


class TrialPhases:
    """One attempt at one trial: the phases in order, and the record they make. A failed phase
    becomes the record's failure (a broken run folder or an interrupt stops the sweep instead)."""

    def __init__(self, services: Services, repro: Repro, run_id: str) -> None:
        self.services, self.repro, self.run_id = services, repro, run_id

    def run(self, step: Step, attempt: int) -> TrialRecord:
        """Attempt number `attempt` of this session, or the first after it whose folder is free:
        a resumed trial's attempts continue past those an earlier session left (store.attempts)."""
        trial, attempt = claim_attempt(self.repro.run_dir, step.trial.index, attempt)
        # t0: the hosts' logs are read from it (wall clock); the trial's duration is the monotonic
        # clock's, which no NTP step or resumed VM moves
        t0, began, started = time.time(), time.monotonic(), now_iso()
        ctx = TrialContext()
        try:
            self._phases(step, trial, ctx, t0)
            failure = None
        except (KeyboardInterrupt, Interrupted, JournalError, SweepStopped):
            raise  # a broken run directory, or an env file someone else edited, stops the sweep: no trial failure
        except OrchError as exc:
            failure = Failure(
                kind="workload" if exc.kind == "workload" else "infrastructure",
                error=type(exc).__name__,
                message="; ".join((str(exc), *notes(exc))),  # e.g. what a repro cut short left, stopped
                detail=exc.detail[-4000:],
            )
            self.services.fresh_after(exc)
            if not ctx.logs:
                ctx.logs = self._logs_after_failure(trial, ctx, t0)
        redactor = self.repro.plan.matrix.redactor  # after the metrics: they were read from the raw text
        redact_folder(trial.path, redactor.text)  # repro output and logs are linked from the report and served
        return mask_record(self._record(step, attempt, ctx, failure, began, started), redactor)

    def _phases(self, step: Step, trial: TrialDir, ctx: TrialContext, t0: float) -> None:
        services, repro = self.services, self.repro
        services.apply(step, ctx)
        services.restart(ctx)
        ids = services.beside(services.read_ids, ctx)  # every unit's process, read while the wait runs
        ctx.health = services.wait_healthy(t0, {r for r, _ in ctx.restarted})
        ctx.identity = ids.result()  # a unit not running (whatever answers its URL) voids the trial here
        repro.describe_hosts()
        verified = self._verify_before_repro(step, ctx)  # the first trial's may restart a stale unit first

        def start_beside() -> None:  # once the (warm-up or measured) repro's process runs
            self._start_beside(step, ctx, verified)

        ctx.warmup = repro.warm_up(step, trial, on_spawn=start_beside)  # never counted: only the repro gives metrics
        telemetry = repro.telemetry_before()
        try:
            ctx.repro = repro.run(step, trial, on_spawn=start_beside)
        finally:
            server = repro.telemetry_after(telemetry)  # a failed repro still stops the sampler
        start_beside()  # (started already, unless the spawn never returned)
        ids_of = services.id_hosts() if ctx.identity_pending is not None else set()
        # its round trips overlap the checks', and read the ids of the nodes confirm_identity cannot scan
        ctx.logs_pending = services.beside(partial(repro.collect_logs, trial, t0, ids_of=ids_of))
        assert ctx.describing is not None
        ctx.describing.result()
        # a VerificationError voids the repro's result, and so does a stranger on a port or a unit
        # restarted or gone; the identity is said first: a stranger that took a dead unit's port
        # explains the verification's "no live process to verify" (the check that ends first varies)
        verification = ctx.checking.exception() if ctx.checking is not None else None
        services.confirm_identity(ctx.identity_pending, ctx)
        if verification is not None:
            raise verification
        repro.judge(ctx.repro)  # after ctx.repro is set: a failed repro's output is recorded
        ctx.metrics = repro.metrics(ctx.repro)
        collected = ctx.logs_pending.result()
        ctx.logs = collected.paths
        ctx.metrics.update(repro.run_collectors(collected.texts, trial, collected.cut))
        if server is not None:
            ctx.metrics.update(server.result())
            repro.check_served(ctx.metrics)

    def _verify_before_repro(self, step: Step, ctx: TrialContext) -> bool:
        """services.verify_before_repro; when it fails, who serves the ports is asked first: a
        stranger that took a dead unit's port ('Address already in use') explains a check that found
        no live process, or one dying as its environ was read, and is what the record names."""
        try:
            return self.services.verify_before_repro(step, ctx)
        except OrchError as failed:
            try:
                self.services.check_identity(ctx)
            except IdentityError as stranger:
                raise stranger from failed
            except OrchError:  # the scan failed too (the host gone): the check's own failure is the trial's
                pass
            raise failed

    def _start_beside(self, step: Step, ctx: TrialContext, verified: bool) -> None:
        """Start the checks that run beside the repro (once): the live-env check unless it ran
        before the repro, who serves the ports, and what served the trial (provenance)."""
        if ctx.describing is not None:  # started already (the warm-up's spawn, then the repro's)
            return
        services = self.services
        ctx.checking = None if verified else services.verify_beside_repro(step, ctx)
        ctx.identity_pending = services.identity_beside_repro(ctx)
        ctx.describing = services.beside(self.repro.describe_trial, ctx)  # what serves does not change

    def _logs_after_failure(self, trial: TrialDir, ctx: TrialContext, t0: float) -> dict[str, str]:
        """A failed trial's logs: those already collected beside the checks when that went through
        (never two writers of one log file), else collected now, quietly; and its provenance, once
        asked (the record shows what served even a failed trial)."""
        for pending in (ctx.describing, ctx.logs_pending):
            if pending is not None:
                pending.exception()  # waits for it; its error (if any) is not the trial's failure
        if ctx.logs_pending is not None and ctx.logs_pending.exception() is None:
            return ctx.logs_pending.result().paths
        return self.repro.collect_logs(trial, t0, quiet=True).paths

    def _record(
        self, step: Step, attempt: int, ctx: TrialContext, failure: Failure | None, began: float, started: str
    ) -> TrialRecord:
        trial = step.trial
        return TrialRecord(
            run_id=self.run_id,
            trial=trial.index,
            round=trial.round,
            cell=trial.cell.id,
            levels=trial.cell.as_dict(),
            is_baseline=trial.is_baseline,
            testbed=self.repro.deployment.testbed.name,
            attempt=attempt,
            status="failed" if failure else "completed",
            failure=failure,
            started=started,
            ended=now_iso(),
            duration_s=round(time.monotonic() - began, 4),
            env=redact_env(step.env, self.repro.plan.matrix.redactor),
            restarted=[f"{r}:{u}" for r, u in ctx.restarted],
            health_wait_s=ctx.health,
            repro=ctx.repro,
            warmup=ctx.warmup,
            metrics=ctx.metrics if failure is None else {},
            logs=ctx.logs,
            provenance=ctx.provenance,
            unchecked=self.services.unchecked(),
        )


def file_changed(exc: OrchError) -> bool:
    """Did a write refuse to go over an env file changed since orch wrote it (alone, or among the
    failures of units restarted at once)?"""
    failures = exc.failures.values() if isinstance(exc, GroupError) else (exc,)
    return any(isinstance(e, FileChanged) for e in failures)


def waves(deployment: Deployment, roles: set[str]) -> list[list[str]]:
    """Group hosts (keys) into waves: a host's wave comes after the waves of the roles it follows
    (every host of a role in one wave: a multi-node instance's nodes restart together)."""
    testbed = deployment.testbed
    ordered = restart_order(testbed, roles)
    depth: dict[str, int] = {}
    for role in ordered:
        deps = [depth[k] for r in testbed.hosts[role].after for k in testbed.roles.get(r, ()) if k in depth]
        depth[role] = 1 + max(deps, default=-1)
    grouped: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for role in ordered:
        grouped[depth[role]].append(role)
    return grouped


def whole_instances(deployment: Deployment, units: set[Unit]) -> set[Unit]:
    """A unit to restart on a node of a multi-node instance restarts on every node of it: tensor-
    or expert-parallel ranks start together or not at all."""
    out = set(units)
    for key, unit in units:
        for other in deployment.hosts[key].host.group:
            if unit in deployment.hosts[other].units:
                out.add((other, unit))
    return out


def alive_checker(h: HostHandle, since: float, stopping: threading.Event) -> Callable[[], None]:
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


def _change(before: UnitId, after: UnitId) -> str:
    """How a unit's process changed, in words: its main pid, or (the same pid, or a unit with no
    main pid) its systemd invocation."""
    if after.main_pid != before.main_pid and (before.main_pid or after.main_pid):
        return f"pid {before.main_pid or 'none'} -> {after.main_pid or 'none'}"
    return f"invocation {before.invocation_id} -> {after.invocation_id}"


def env_mismatch(h: HostHandle, unit: str, assignments: Mapping[str, str | None], redactor: Redactor) -> str | None:
    live = h.services.environ(unit)
    if live is None:
        return "no live process to verify (is the unit running?)"
    for var, want in assignments.items():
        got = live.get(var)
        if got != want:
            shown_want = "unset" if want is None else repr(redactor.value(var, want))
            shown_got = "unset" if got is None else repr(redactor.value(var, got))
            hint = ""
            if got is None and want is not None:  # the file says it, the process never got it
                hint = (
                    " (systemd ignores `export NAME=value` lines in an EnvironmentFile=: write plain "
                    "NAME=value lines with dialect: systemd, or source the file from a wrapper with dialect: shell)"
                )
            elif _may_be_overridden(h, want):
                hint = (
                    f" (a drop-in, or another EnvironmentFile= or Environment= of the unit, may set {var} over "
                    f"{h.host.env_file}: systemctl cat {unit})"
                )
            return f"{var} is {shown_got} in the live process, expected {shown_want}{hint}"
    return None


def _may_be_overridden(h: HostHandle, want: str | None) -> bool:
    """Can the unit's own settings be why its process holds another value than the file orch wrote
    (the process has one)? Only under systemd (ssh hosts; a local unit gets the file and nothing
    else), and only where they come last: with dialect systemd a later EnvironmentFile= or
    Environment= wins over this file; with dialect shell the wrapper sources the file over them,
    so they show only for a variable the file no longer sets (`want` None)."""
    return h.host.transport == "ssh" and (h.host.dialect == "systemd" or want is None)


def redact_env(env: Mapping[str, Mapping[str, CellValue]], redactor: Redactor) -> dict[str, dict[str, str]]:
    """The cell's env for the journal: secrets masked, removals shown as <unset>, flag edits of an
    args variable as args(+--flag value -(--other))."""
    return {
        role: {k: "<unset>" if v is None else redactor.value(k, str(v)) for k, v in a.items()}
        for role, a in env.items()
    }


def _stop_left_after(exc: BaseException, h: HostHandle, mark: str, scope: str | None, trial: TrialDir) -> list[str]:
    """Stop, at once, what a remote repro that ended in `exc` (re-raised by the caller) left
    running (its mark, its scope), as a local repro's leftovers are stopped when it is interrupted;
    returns what was (for the caller to name), and drops the trial's record of it. A check that
    fails is a note on `exc`, never an error hiding it, and keeps the record (resume, restore)."""
    try:
        left = stop_marked(h.transport, mark, settle_s=0.0, grace_s=KILL_GRACE_S, scope=scope)
    except OrchError as failed:
        exc.add_note(f"{failed} (what the repro started may still run there)")
        return []
    remoterepro.forget(trial)
    return left


def _name_stopped(exc: BaseException, what: str, left: list[str], redactor: Redactor) -> None:
    """Name, on the error that cut a repro short (Ctrl-C, SIGTERM, a host that stopped answering),
    what it left running and orch stopped, in LeftBehind's words. Why: the outcome that names them
    is never made then; the note goes into the trial's failure (TrialPhases.run) or, for an
    interrupt, onto the terminal and into status.json (the runner's progress notes)."""
    if left:
        exc.add_note(redactor.text(f"{what}, cut short, left {_processes(left)} (orch stopped them)"))


MAX_LEFT_SHOWN = 5  # leftovers a failure message names (the record's repro.left_behind has them all)


def left_behind(what: str, rel: ReproOutcome) -> LeftBehind:
    """The void trial of a repro (`what`) that exited 0 but left processes running."""
    return LeftBehind(
        f"{what} exited but left {_processes(rel.left_behind)} (orch stopped them; the trial is void: they loaded the "
        f"deployment beside the {what} and would have loaded the next trials; make it wait for, or stop, "
        "what it starts)"
    )


def _also_left(rel: ReproOutcome) -> str:
    """`; it also left N processes running: ... (stopped)` for a failed repro that left some, else ''."""
    return f"; it also left {_processes(rel.left_behind)} (stopped)" if rel.left_behind else ""


def _processes(left: Sequence[str]) -> str:
    """`2 processes running: pid 1 (cmd), pid 2 (cmd)`, at most MAX_LEFT_SHOWN of them named; the
    count is of processes (leftovers.counted), not of the entries that name or count them."""
    n = leftovers.counted(left)
    entries = left[:MAX_LEFT_SHOWN]
    shown, rest = ", ".join(entries), n - leftovers.counted(entries)
    if rest > 0:
        shown += f" and {rest} more"
    return f"{words.counted(n, 'process')} running: {shown}"


def _write(path: Path, text: str) -> None:
    """A trial's output file (written once, read after the run: no fsync, no rename)."""
    run_file_op(path, "cannot write", lambda: path.write_bytes(text.encode("utf-8", errors="replace")))
