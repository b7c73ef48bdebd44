"""The data a run leaves behind: the run manifest and the journal's trial records.

These models are the contract between the runner (which writes them), the journal (which stores
them as JSON lines), and the report (which reads them back). Bump SCHEMA_VERSION on any
incompatible change; readers refuse versions they do not know.

Layout of a run directory::

    reports/<run-id>/
      run.json          RunManifest (written atomically at start, updated at end)
      plan.json         PlanColumns: the planned trials (written once, with run.json at start)
      journal.jsonl     one TrialRecord per line (type="trial"; one per failed attempt of a
                        retried trial: its last is the trial's) plus event records
      trials/<NNNN>/    per-trial files: repro.out, repro.err, logs/<role>-<unit>.log
                        (a trial's later attempts, retried or resumed: trials/<NNNN>-attempt<K>/)
      backup/<role>.env original env files, byte for byte
      index.html        the report
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from orchestrator.core.bounds import MAX_SESSIONS, unit_problem
from orchestrator.core.gates import Gate
from orchestrator.core.redact import Redactor

SCHEMA_VERSION = 1

TrialStatus = Literal["completed", "failed", "interrupted"]
MetricKind = Literal["proportion", "number"]


def _valid_unit(unit: str) -> str:
    problem = unit_problem(unit)
    if problem is not None:
        raise ValueError(problem)
    return unit


MetricUnit = Annotated[str, AfterValidator(_valid_unit)]  # as the matrix's check (core.config) allows


# A run id names a directory under the reports folder and is part of the names of the files
# `orch export` and `orch compare` write there: no separators, no "..", nothing a shell or a
# browser could misread. Checked where a run id is given (--run-id) and where one is read back
# (run.json), since a hand-edited manifest is input too.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_HUNT_KEY = re.compile(r"^hunt\s*:", re.MULTILINE)  # a matrix's top-level `hunt:` section


def valid_run_id(run_id: str) -> str:
    """The run id unchanged; ValueError when it could leave the reports folder or is no name."""
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ValueError(f"invalid run id {run_id[:120]!r}: letters, digits, '.', '_' and '-' only, no '..'")
    return run_id


RunId = Annotated[str, AfterValidator(valid_run_id)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# A proportion's counts, bounded where every reader's arithmetic is exact (int64 sums over a
# million trials, the statistics' own check of 0 <= k <= n): a hand-edited 10**30 or -1 in a
# journal is bad input at its line, not an OverflowError in the report.
Events = Annotated[int, Field(ge=0, le=MAX_SESSIONS)]
Sessions = Annotated[int, Field(ge=0, le=MAX_SESSIONS)]  # 0: no sessions ran (k = 0), which readers skip
# A trial's replicate round: the report's metric table holds it as int64 (a hand-edited 10**400 was
# an OverflowError in `orch report` and `orch compare`, -1 no round at all).
Round = Annotated[int, Field(ge=0, le=2**63 - 1)]
# A number is finite or absent (None: a scrape that failed). The writer never writes another:
# pydantic writes inf and NaN as null, so a non-finite value in a journal was put there by hand.
FiniteValue = Annotated[float, Field(allow_inf_nan=False)]

# the metrics orch reads off the servers beside the matrix's own: Prometheus scrapes
# (core.servermetrics) and GPU readings (core.gpustat), named under these prefixes
SERVER_PREFIX = "server."
GPU_PREFIX = "gpu."


def scraped(metric: str) -> bool:
    """A server metric or GPU reading, not one of the matrix's: descriptive on the report (never
    tested, report.servertable), left out of the nightly check (report.trends) as it is."""
    return metric.startswith((SERVER_PREFIX, GPU_PREFIX))


def lost_reading(metric: str) -> bool:
    """A scrape's or GPU reading's marker of a reading lost in a trial (`server.<endpoint>.missing`,
    `gpu.<role>.missing`): no value, why in its unit field."""
    return scraped(metric) and metric.endswith(".missing")


class MetricValue(Frozen):
    """One metric of one trial. A proportion has k and n (k of n sessions); a number has value.

    Validated here, not in each reader: the journal's fast row reader (store.journal) checks the
    same bounds and falls back to this model for the error at file:line, so every reader agrees."""

    kind: MetricKind
    k: Events | None = None
    n: Sessions | None = None
    value: FiniteValue | None = None
    unit: str = ""

    @model_validator(mode="after")
    def _fits_its_kind(self) -> MetricValue:
        if self.kind == "number":
            if self.k is not None or self.n is not None:
                raise ValueError("a number metric has a value, not k and n")
        elif self.k is None or self.n is None or self.value is not None:
            raise ValueError("a proportion metric has k and n (k of n sessions), not a value")
        elif self.k > self.n:
            raise ValueError(f"k={self.k} is more than n={self.n} (a proportion counts k of n sessions)")
        return self

    @property
    def rate(self) -> float | None:
        if self.kind == "proportion" and self.n:
            return (self.k or 0) / self.n
        return self.value


class Failure(Frozen):
    kind: Literal["infrastructure", "workload", "interrupted"]
    error: str  # the error class name, e.g. "HealthTimeout"
    message: str
    detail: str = ""  # bounded log tail


class ReproOutcome(Frozen):
    command: str
    exit_code: int | None  # None: killed at its timeout
    duration_s: float
    stdout_tail: str = ""  # last ~4 KiB; the full text is in stdout_path
    stdout_path: str = ""  # relative to the run directory
    stderr_path: str = ""
    # processes it started that still ran once it ended ("pid N (command)"), stopped by orch: the
    # trial is void (edges.leftovers). Left out of the journal when empty (every trial that counts):
    # its lines stay those of orch before the field, which a teammate's older orch still reads
    left_behind: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)


# fields of a server's /get_server_info answer that change from call to call, or from start to
# start (SGLang draws a random_seed at each start when none is given; one the user sets is in the
# units' command line or the env file, digested there): never part of its digest
# (edges.provenance), never a difference between testbeds (report.servedsettings)
SERVER_INFO_VOLATILE = frozenset(
    {"pid", "uptime", "start_time", "timestamp", "now", "internal_states", "last_gen_throughput", "random_seed"}
)


class TrialProvenance(Frozen):
    """What served one trial on one host: its server (version, and the digest of what
    /get_server_info says, without SERVER_INFO_VOLATILE's fields), its units' command lines and the env file it
    ran with. Each text is stored once, in the first trial that saw its digest (then only the
    digest), so a long sweep does not repeat a server's settings on every journal line."""

    server_version: str = ""
    server_info_sha: str = ""  # sha256[:16] of server_info's text ("" when the server told nothing)
    server_info: str = ""  # the text: only in the first trial with this digest
    exec_start_sha: str = ""
    exec_start: str = ""  # the units' command lines: only in the first trial with this digest
    env_sha256: str = ""  # sha256 of the env file this trial ran with (after the cell's edit)


class ServedGroup(Frozen):
    """Trials one host ran with the same server, command lines and env file (run.json and the
    report list every trial in one group per host: the trials are labelled, each text told once)."""

    host: str
    server_version: str
    server_info_sha: str
    exec_start_sha: str
    env_sha256: str
    trials: str  # "0-3, 7, 9" (trial numbers, ranges compressed)
    count: int


class Controller(Frozen):
    """Where and how a run was started: enough to find the exact orch and the command again."""

    orch_version: str = ""
    orch_commit: str = ""  # git commit of the orch checkout ("" when installed, not a checkout)
    orch_dirty: bool = False  # the checkout had uncommitted changes
    host: str = ""
    user: str = ""
    command: str = ""  # the exact command line, secrets masked
    python: str = ""
    packages: dict[str, str] = Field(default_factory=dict)  # name -> version of the key dependencies


class TrialRecord(Frozen):
    """One trial: one cell run once, on one testbed. Written once, after the trial ends."""

    type: Literal["trial"] = "trial"
    schema_version: int = SCHEMA_VERSION
    run_id: str
    trial: int  # 0-based position in the plan
    round: Round  # replicate round (randomized blocks: one permutation per round)
    cell: str  # stable cell id, e.g. "bf16_index_k=on,overlap=on,cuda_graph=on"
    levels: dict[str, str]  # factor -> level name
    is_baseline: bool = False
    testbed: str
    attempt: int = 1
    # A failed attempt that was tried again (the runner journals each one). Not the trial's end:
    # resume counts the trial unfinished until a later record of it, so a controller killed
    # during the retry has the trial run again, as before failed attempts were journaled.
    retried: bool = False
    status: TrialStatus
    failure: Failure | None = None
    started: str  # ISO 8601 UTC
    ended: str
    duration_s: float
    env: dict[str, dict[str, str]] = Field(default_factory=dict)  # role -> VAR -> value (this cell)
    restarted: list[str] = Field(default_factory=list)  # "role:unit"
    health_wait_s: dict[str, float] = Field(default_factory=dict)  # role -> seconds to healthy
    repro: ReproOutcome | None = None
    warmup: ReproOutcome | None = None  # repro.warmup: run after ready, before the repro; never counted
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    logs: dict[str, str] = Field(default_factory=dict)  # "role:unit" -> path relative to run dir
    provenance: dict[str, TrialProvenance] = Field(default_factory=dict)  # host -> what served it (old: {})
    # checks this trial's identity checks could not make, and why ("router: started with --dp-aware ...");
    # written only when there is one, so an older orch still reads a journal that has none
    unchecked: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)


class EventRecord(Frozen):
    """Something that happened to the run as a whole: start, restore, end, interruption."""

    type: Literal["event"] = "event"
    schema_version: int = SCHEMA_VERSION
    run_id: str
    event: Literal["run_started", "run_resumed", "restored", "run_finished", "run_interrupted", "cell_decided"]
    at: str
    message: str = ""
    cell: str | None = None  # cell_decided: the cell an adaptive sweep stopped running
    state: str | None = None  # cell_decided: "different" or "no_difference"


class PlannedTrial(Frozen):
    trial: int
    round: int
    cell: str
    levels: dict[str, str]
    is_baseline: bool = False


class PlannedCell(Frozen):
    """What the trials of one cell share in plan.json."""

    cell: str
    levels: dict[str, str]
    is_baseline: bool = False


class PlanColumns(Frozen):
    """plan.json: a run's planned trials as columns (trial i is trial[i], round[i] and
    cells[cell[i]]). Columns, not one object per trial: 100,000 trials are a few lists of ints
    that load in milliseconds, where as many small models take a second to build.
    Written once, when the run directory is created; never rewritten."""

    schema_version: int = SCHEMA_VERSION
    sha256: str  # plan digest (runs.plan_digest), the same as run.json's plan_sha256
    cells: list[PlannedCell]  # distinct (cell, levels, is_baseline), in order of first use
    trial: list[int]
    round: list[int]
    cell: list[int]  # index into cells

    def pairs(self) -> list[tuple[int, str]]:
        """(trial, cell id) of every planned trial, in plan order."""
        ids = [c.cell for c in self.cells]  # a torn or hand-edited file: as many pairs as both columns hold
        return [(t, ids[c]) for t, c in zip(self.trial, self.cell, strict=False)]


class HostsChanged(Frozen):
    """A role's host facts that a later session (an `orch resume`) found other than run.json held:
    run.json's `hosts` (or `testbed_hosts`) keep the first session's, this the later one's. Why
    both: a run resumed on other GPUs or another server version named only the last ones, and its
    trials on either side of the change read as like-for-like (core.hostfacts)."""

    session: int  # which resume found them: 1 is resumed_by[0]
    testbed: str = ""  # a parallel run's testbed ("": a run on one testbed)
    role: str
    facts: dict[str, str]  # each fact that changed -> as this session found it
    trials: int = 0  # trials this session ran on that testbed
    since: str = ""  # when the first of them started ("": it ran none)


class RunManifest(Frozen):
    """What was asked for: enough to re-render, resume and audit the run."""

    schema_version: int = SCHEMA_VERSION
    run_id: RunId
    name: str
    description: str = ""
    orch_version: str
    matrix_path: str
    matrix_text: str  # secret values masked (texts_redacted); the sha256 is of the original file
    matrix_sha256: str
    inventory_path: str
    inventory_text: str
    inventory_sha256: str
    testbed: str  # the testbeds' names joined by "," (what the report and the status show)
    testbeds: list[str] = Field(default_factory=list)  # one name, or several for a parallel run
    adaptive: bool = False  # the matrix has an adaptive stopping rule
    # an `orch hunt` run: plan.json holds only its first wave, and the search journals trials
    # numbered past it (store.runtrials lets those through; any other run's must be planned); a
    # trial numbered within the wave is the plan's (sweep/hunt.py numbers repeats past the wave)
    hunt: bool = False
    # a hunt journaled by an orch that runs each first-wave configuration under its plan.json number
    # (sweep/hunt.py), so store.runtrials checks its planned trials' cells as any run's. False: a
    # hunt of an older orch, which numbered trials as it handed them out (the failing configuration
    # again as trial 1 where plan.json has the clean one): its trials are not checked against
    # plan.json's cells, or its own journal would be refused. Left out of run.json when False, so
    # every other run.json stays as an older orch writes and reads it.
    hunt_planned_numbers: bool = Field(default=False, exclude_if=lambda v: not v)
    seed: int
    order: str
    replicates: int
    retries: int | None = None  # --retries of the run, which a resume keeps (None: an older run.json)
    factors: dict[str, list[str]]  # factor -> level names, in declared order
    baseline: dict[str, str]
    metrics: dict[str, MetricKind]  # metric name -> kind (repro metrics and collectors)
    # metric name -> its declared `unit:` (e.g. "s"), only those that declare one; left out of
    # run.json when none does, so a run without units stays as an older orch writes and reads it
    metric_units: dict[str, MetricUnit] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # The planned trials. In run.json only when written before plan.json existed (or by hand);
    # runs.save_manifest keeps them in plan.json and writes [] here. runs.load_manifest fills
    # them from plan.json unless asked not to (plan=False: then [] and plan_trials says how many).
    plan: list[PlannedTrial] = Field(default_factory=list)
    plan_trials: int = 0  # how many trials the plan has
    plan_sha256: str = ""  # runs.plan_digest of the plan: what `orch resume` compares
    hosts: dict[str, dict[str, str]] = Field(default_factory=dict)  # role -> description
    # a parallel run's every testbed: testbed -> role -> description (`hosts` is the first one's);
    # left out of a one-testbed run.json, which stays as an older orch writes and reads it
    testbed_hosts: dict[str, dict[str, dict[str, str]]] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # host facts a resume found other than the first session had (core.hostfacts), in order
    hosts_changed: list[HostsChanged] = Field(default_factory=list, exclude_if=lambda v: not v)
    texts_redacted: bool = False  # matrix/inventory text had secret values masked
    secret_names: list[str] = Field(default_factory=list)  # declared secret in the matrix
    controller: Controller | None = None  # where and how the run was started (None: an older run.json)
    resumed_by: list[Controller] = Field(default_factory=list)  # each `orch resume` of the run, in order
    served: list[ServedGroup] = Field(default_factory=list)  # what served each trial, written at the run's end
    served_texts: dict[str, str] = Field(default_factory=dict)  # digest -> server info / command line
    gates: list[Gate] = Field(default_factory=list)  # the matrix's gates (core.gates), checked by the report
    started: str
    ended: str | None = None
    status: Literal["running", "completed", "failed", "interrupted"] = "running"

    @property
    def redactor(self) -> Redactor:
        """Masks the run's secrets, declared ones included, in whatever is rendered from it later
        (a report, an export), in whichever process loads the manifest."""
        return Redactor.for_names(self.secret_names)

    @property
    def planned_total(self) -> int | None:
        """How many trials the run plans, for every "N of M planned" a reader shows; None for a
        hunt, whose search decides its trials as it goes (plan.json holds only its first wave:
        "35 of 18 planned trials" was shown for a hunt of 35)."""
        return None if self.hunt else (len(self.plan) or self.plan_trials)

    @property
    def checks_planned_cells(self) -> bool:
        """Whether a planned trial's record must hold plan.json's cell (store.runtrials): every
        run's, but a hunt's only when its orch numbered the first wave by plan.json."""
        return not self.hunt or self.hunt_planned_numbers

    @model_validator(mode="after")
    def _older_run_json(self) -> RunManifest:
        """A run.json written before `testbeds`, `adaptive` and `hunt` existed states them only in its
        text: derive them once here, so no reader has to sniff strings. After validation, not
        before: a before-validator makes pydantic parse the whole file into Python objects first,
        which costs +60% time and +110 MB on a 100,000-trial run.json with its plan inline."""
        if "testbeds" not in self.model_fields_set:
            object.__setattr__(self, "testbeds", [n for n in self.testbed.split(",") if n])
        if "adaptive" not in self.model_fields_set:
            object.__setattr__(self, "adaptive", "adaptive:" in self.matrix_text)
        if "hunt" not in self.model_fields_set:
            # generous on purpose: calling a run a hunt only skips the past-the-plan check
            object.__setattr__(self, "hunt", _HUNT_KEY.search(self.matrix_text) is not None)
        return self
