"""The sweep API's typed values: the requests a caller hands `sweep.api` and the outcomes it
gets back.

A module of its own, below `sweep.api`, so that code which only builds requests or shows
outcomes (the CLI's argument and output helpers, the overnight queue) does not import the
machinery that runs a sweep: they stay a short chain of imports above the core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.core.bounds import MAX_REPLICATES, MAX_RETRIES
from orchestrator.core.huntconfig import HuntSpec
from orchestrator.core.inventory import Inventory, Testbed
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Plan, Step
from orchestrator.errors import UsageError
from orchestrator.sweep.progress import Progress

TestbedSelection = tuple[str, ...] | Literal["all"] | None
"""None: the inventory's first testbed; names: those (several run in parallel); "all": every one."""

SweepStatus = Literal["completed", "failed", "interrupted"]
Warn = Callable[[str], None]
GATE_FAILED = 3  # exit code: the sweep ran, a gate of the matrix failed (CI systems fail the job)


# ---------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class SweepRequest:
    """What to run and how; the defaults are `orch run`'s."""

    matrix: Path
    inventory: Path
    testbeds: TestbedSelection = None
    replicates: int | None = None  # None: the matrix's
    seed: int | None = None  # None: the matrix's, or random
    reports_dir: Path = Path("reports")
    run_id: str | None = None  # None: <utc time>-<matrix name>
    fail_fast: bool = False
    retries: int = 1  # extra attempts for infrastructure failures
    break_lock: bool = False
    deadline: float | None = None  # epoch seconds: start no new trial after it
    skip_preflight: bool = False
    # called with the run's folder once the testbeds are locked, just before the folder is made
    # (atomically) and long before the run is announced (the runs index, ~0.4 s): `queue run`
    # records it with its item, so a controller killed once the folder exists leaves an item the
    # next `queue run` resumes, not one it starts anew into this run's stale lock
    on_created: Callable[[Path], None] | None = field(default=None, compare=False)
    # called with the run's folder (not made yet) once the testbeds are found free, just before
    # they are locked: `queue run` records it with its item, so a controller killed between the
    # lock and the folder leaves an item naming the run its stale lock names; the next `queue run`
    # starts that run again under the same id, which takes over its own dead start's lock
    on_locking: Callable[[Path], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.replicates is not None and self.replicates < 1:
            raise UsageError(f"replicates: {self.replicates} is not >= 1")
        if self.replicates is not None and self.replicates > MAX_REPLICATES:
            raise UsageError(f"--replicates {self.replicates}: more than {MAX_REPLICATES:,}", hint="fewer replicates")
        if self.retries < 0:
            raise UsageError(f"retries: {self.retries} is not >= 0")
        if self.retries > MAX_RETRIES:
            raise UsageError(f"--retries {self.retries}: more than {MAX_RETRIES}", hint="a few retries are enough")


@dataclass(frozen=True)
class ResumeRequest:
    run_dir: Path
    fail_fast: bool = False
    retries: int | None = None  # None: the run's own --retries (run.json), else the default
    break_lock: bool = False
    deadline: float | None = None
    # the run's previous controller is known gone, also when it ran on another machine (a shared
    # PostgreSQL queue held the item's lock): the run's own testbed locks are taken over
    owner_gone: bool = False


@dataclass(frozen=True)
class RestoreRequest:
    run_dir: Path
    break_lock: bool = False


@dataclass(frozen=True)
class HostRestoreRequest:
    """Restore a testbed from the copies a run left on its hosts (its run folder gone)."""

    inventory: Path
    testbed: str | None
    run_id: str | None = None  # None: the run the testbed's lock (or its hosts' copies) names
    break_lock: bool = False


def testbeds_from_spec(spec: str | None) -> TestbedSelection:
    """`-t NAME`, `-t A,B` (parallel testbeds) or `-t all`, as typed (and stored by the queue)."""
    if spec is None:
        return None
    if spec == "all":
        return "all"
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise UsageError(f"-t {spec!r}: no testbed named", hint="write -t NAME, -t A,B or -t all")
    if len(set(names)) != len(names):
        raise UsageError(f"testbed listed twice in -t {spec}")
    return names


# ---------------------------------------------------------------------------- prepared
@dataclass(frozen=True)
class PreparedSweep:
    """A checked sweep before any host is touched: what validate, plan and --dry-run show."""

    plan: Plan
    inventory: Inventory
    testbeds: tuple[Testbed, ...]
    warnings: tuple[str, ...]


def named_no_culprit(ended: tuple[str, str] | None) -> bool:
    """A hunt whose search ended (state, why) without naming a culprit set: not failing, or its
    budget spent; the one rule a run's, a resume's and a dry run's exit codes (1) rest on."""
    return ended is not None and ended[0] != "found"


@dataclass(frozen=True)
class ResumePreview:
    """What `orch resume --dry-run` shows: the run as a resume would take it up, read from its
    folder alone (no host, no lock, the journal not repaired)."""

    run_id: str
    testbeds: tuple[str, ...]
    plan: Plan  # a hunt's: its first wave only (the search decides the rest)
    done: frozenset[int]  # trials finished (completed or failed): a resume skips them
    left: tuple[Step, ...]  # the others, in run order, with the restarts the resume makes (core.plan.resumed_steps)
    restarts_unknown: bool  # the stopped run's backup is taken up: its first trial restarts every edited host
    ended: tuple[str, str] | None = None  # a hunt whose search has ended: its state and why (core.hunt)
    failed: int = 0  # finished trials that failed (counted only when nothing is left to run)

    @property
    def nothing_left(self) -> bool:
        """A resume would run no trial: the hunt has ended, or every planned trial is done."""
        return self.ended is not None or (self.plan.matrix.hunt is None and not self.left)

    @property
    def unanswered(self) -> bool:
        """A hunt that has ended without naming a culprit set (not failing, budget)."""
        return named_no_culprit(self.ended)

    @property
    def exit_code(self) -> int:
        """What the resume would exit with when it runs nothing (SweepOutcome.exit_code's rule: 1
        on failed trials or a hunt that named no culprit set); 0 while trials are left (the dry
        run shows them). Why: the dry run of an ended hunt exited 0 where the resume exits as the
        run ended."""
        return 1 if self.nothing_left and (self.failed or self.unanswered) else 0


# ---------------------------------------------------------------------------- outcomes
@dataclass(frozen=True)
class Started:
    """A run about to execute trials: given to the caller's progress factory."""

    run_id: str
    run_dir: Path
    testbeds: tuple[str, ...]
    trials: int  # planned
    left: int  # still to run (all of them, unless resumed)
    resumed: bool = False
    torn_tail_dropped: bool = False  # resume found (and dropped) a half-written last journal line
    hunt: HuntSpec | None = None  # a hunt: `trials` counts those done, the rest is decided as it goes
    adaptive: bool = False  # the matrix stops cells once decided: `trials` is the most the run takes

    @property
    def open_ended(self) -> bool:
        return self.hunt is not None

    def cell_name(self, record: TrialRecord) -> str:
        """How progress lines name a trial's cell: a hunt's configuration by the flags that set it
        apart (its id lists every suspect flag), any other cell by its id."""
        config = None if self.hunt is None else self.hunt.config_of(record.levels)
        return record.cell if config is None or self.hunt is None else self.hunt.in_words(config)


ProgressFor = Callable[[Started], Progress]


@dataclass(frozen=True)
class SweepOutcome:
    """How a run or resume ended; `completed` and `failed` count trials by their last record."""

    run_dir: Path
    run_id: str
    status: SweepStatus
    completed: int
    failed: int
    planned: int | None  # None for a hunt: its search decides its trials as it goes
    interrupted: bool = False
    deadline_reached: bool = False
    not_restored: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()  # (role, path): an env file changed not by orch, set aside by the restore
    report: Path | None = None
    report_error: str | None = None  # why the report was not written (the run itself is fine)
    stopped: str | None = None  # why the sweep stopped early (repeated identical failures)
    gates_failed: tuple[str, ...] = ()  # `gate @ cell: why` for each failed gate check (matrix `gates:`)
    hunt_ended: tuple[str, str] | None = None  # a hunt whose search ended here: its state and why (core.hunt)
    adaptive: bool = False  # the matrix stops cells once decided: `planned` is the most it could run

    @property
    def unanswered(self) -> str | None:
        """A hunt that ended without naming a culprit set (its failing configuration did not fail,
        or its budget ran out first), in words; None otherwise. Why: such a hunt exited 0, as one
        that named its culprits, and a script could not tell "here they are" from "no answer"."""
        if self.hunt_ended is None or not named_no_culprit(self.hunt_ended):
            return None
        state, reason = self.hunt_ended
        return f"the hunt named no culprit set ({state}: {reason})"

    @property
    def exit_code(self) -> int:
        """130 interrupted, 1 failed trials / hosts not restored / stopped early / a hunt that
        named no culprit set, 3 a gate failed."""
        if self.interrupted:
            return 130
        if self.failed or self.not_restored or self.stopped or self.unanswered:
            return 1
        return GATE_FAILED if self.gates_failed else 0


@dataclass(frozen=True)
class TestbedRestore:
    testbed: str
    hosts: tuple[str, ...]
    backed_up: bool  # False: the run stopped before its first edit, nothing needed restoring
    not_restored: tuple[str, ...] = ()
    error: str | None = None  # a parallel run: why none of its hosts was restored (down, lock held)
    untouched: tuple[str, ...] = ()  # restored before and edited since: left as they are
    already: tuple[str, ...] = ()  # restored before and still original: nothing was done
    # one line per host restored before ("HOST: restored already; nothing to do", or not touched
    # and why), in restore order: shown with the summary, on its stream, before it
    host_lines: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()  # (role, path): restored, its changed env file set aside there
    # (role, unit) left running by a restore without the run's folder (sweep.hostrestore): whether
    # each ran before the run is not known, so one the run started is still running
    left_running: tuple[tuple[str, str], ...] = ()
    # (role, unit) stopped by such a restore: running, and not before the run (the host's record says)
    stopped: tuple[tuple[str, str], ...] = ()
    interrupted: bool = False  # a Ctrl-C or SIGTERM reached its restore (a host skipped, or restored again)


@dataclass(frozen=True)
class RestoreOutcome:
    run_dir: Path | None  # None: restored from the hosts' own copies (sweep.hostrestore)
    run_id: str
    testbeds: tuple[TestbedRestore, ...]
    again: str = ""  # the command that finishes a restore left incomplete, when not `orch restore RUN_DIR`

    @property
    def exit_code(self) -> int:
        """130 once a Ctrl-C or SIGTERM reached a restore, as for every interrupted command (it
        went on, or skipped the host it was restoring: what is left is said), else 1 with a host
        left changed. Why: an `orch restore` interrupted twice exited 1 (kill-point harness,
        --kill-way-back restore, seed 423), a script could not tell it from a host that failed."""
        if any(t.interrupted for t in self.testbeds):
            return 130
        return 1 if any(t.not_restored for t in self.testbeds) else 0
