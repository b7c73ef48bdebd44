"""The run folder's layout, in one place.

Why: a run folder is read and written by the sweep, resume, the report, `orch serve`, the live
status page and the notifier; each used to spell the file names itself ("journal.jsonl" in nine
places), so renaming or adding a file meant hunting string literals. RunDir (and the TrialDir and
BackupDir it hands out) is a plain value: it names paths and never touches the disk, so any layer
may hold one and tests can build one for a tmp_path.

    <run>/run.json                 RunManifest (atomic; rewritten at the end)
    <run>/plan.json                the planned trials (atomic)
    <run>/journal.jsonl            one record a line (append-only)
    <run>/journal.jsonl.idx        status index of the journal (a cache)
    <run>/status.json              live status for `orch serve` (atomic)
    <run>/summary.json             the report index's summary of the run (atomic)
    <run>/index.html               the run's report (atomic)
    <run>/hunt.html                a hunt's report: the culprits (atomic; the index links it instead)
    <run>/hunt-handed.json         every configuration a hunt handed out, each before its trial ran (atomic)
    <run>/<run_id>.<fmt>           an export of the trials (csv, parquet, ...)
    <run>/backup[/<testbed>]/<role>.env, files.json, units.json   the hosts' originals, what each
                                   file was (a symlink? its mode, owner), units' states (units.json last)
    <run>/trials/NNNN/repro.out, repro.err, logs/<role>-<unit>.log   (NNNN-attemptK/: attempt K)
    <run>/trials/NNNN/repro.pid    `PGID START_TICKS` of a local repro while it may run (for resume/restore)
    <run>/trials/NNNN/repro.remote a repro on a host until its leftover check ran: testbed, host key, mark,
                                   scope (JSON, atomic; for resume/restore, sweep.orphans)
    <run>/controller.lock          flocked by the process running the run (store/runlock.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_JSON = "run.json"
PLAN_JSON = "plan.json"
JOURNAL = "journal.jsonl"
INDEX_SUFFIX = ".idx"  # the journal's status index: <journal>.idx
STATUS_JSON = "status.json"
SUMMARY_JSON = "summary.json"
INDEX_HTML = "index.html"
HUNT_HTML = "hunt.html"
HUNT_HANDED = "hunt-handed.json"  # the configurations a hunt handed out: the env files its trials wrote
BACKUP = "backup"
UNITS_JSON = "units.json"  # written last by the backup: its presence marks the backup complete
FILES_JSON = "files.json"  # what each original env file was besides its bytes (sweep.drift.Shape)
TRIALS = "trials"
LOGS = "logs"
REPRO_OUT = "repro.out"
REPRO_ERR = "repro.err"
REPRO_PID = "repro.pid"  # the running local repro's process group: a killed controller's is stopped by resume
REPRO_REMOTE = "repro.remote"  # a repro on a host until its leftover check ran: the same, there (sweep.orphans)
WARMUP_OUT = "warmup.out"  # repro.warmup's output (never measured)
WARMUP_ERR = "warmup.err"
CONTROLLER_LOCK = "controller.lock"


def listable(name: str) -> bool:
    """Whether a folder's name can be listed among the runs: UTF-8 text. os.scandir gives other
    bytes as surrogates, which no page, link or JSON answer can hold: one folder renamed by hand
    into such bytes made the runs index, `orch status --json` and serve's views fail with a
    traceback. Such a folder is left out of the lists (its own `orch report` still works)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class BackupDir:
    """Where a sweep keeps the hosts' original env files and unit states."""

    path: Path
    within: Path | None = None  # backup/, when `path` is one testbed's backup/<testbed>/ in it

    @property
    def folders(self) -> tuple[Path, ...]:
        """Every folder of the backup, outermost first: each holds (or leads to) the originals."""
        return (self.path,) if self.within is None else (self.within, self.path)

    @property
    def units_json(self) -> Path:
        return self.path / UNITS_JSON

    @property
    def files_json(self) -> Path:
        return self.path / FILES_JSON

    def env(self, role: str) -> Path:
        return self.path / f"{role}.env"


@dataclass(frozen=True)
class TrialDir:
    """One trial's files: the repro's output and the units' logs."""

    path: Path

    @property
    def repro_out(self) -> Path:
        return self.path / REPRO_OUT

    @property
    def repro_err(self) -> Path:
        return self.path / REPRO_ERR

    @property
    def repro_pid(self) -> Path:
        """The process group of this trial's local repro (or warm-up) while it may be running."""
        return self.path / REPRO_PID

    @property
    def repro_remote(self) -> Path:
        """Where this trial's repro (or warm-up) on a host runs, with its mark and scope, until its
        leftover check ran: a killed controller's is stopped by resume and restore there."""
        return self.path / REPRO_REMOTE

    @property
    def warmup_out(self) -> Path:
        return self.path / WARMUP_OUT

    @property
    def warmup_err(self) -> Path:
        return self.path / WARMUP_ERR

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def log(self, role: str, unit: str) -> Path:
        return self.path / LOGS / f"{role}-{unit}.log"


@dataclass(frozen=True)
class RunDir:
    """A run folder: every file name of a run, as paths below `path`."""

    path: Path

    @classmethod
    def of(cls, run_dir: "RunDir | Path | str") -> RunDir:
        """Accept a RunDir or a plain path (callers are switching over one by one)."""
        return run_dir if isinstance(run_dir, RunDir) else cls(Path(run_dir))

    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def plan_json(self) -> Path:
        return self.path / PLAN_JSON

    @property
    def journal(self) -> Path:
        return self.path / JOURNAL

    @property
    def journal_index(self) -> Path:
        return self.path / (JOURNAL + INDEX_SUFFIX)

    @property
    def controller_lock(self) -> Path:
        return self.path / CONTROLLER_LOCK

    @property
    def status_json(self) -> Path:
        return self.path / STATUS_JSON

    @property
    def summary_json(self) -> Path:
        return self.path / SUMMARY_JSON

    @property
    def index_html(self) -> Path:
        return self.path / INDEX_HTML

    @property
    def hunt_html(self) -> Path:
        return self.path / HUNT_HTML

    @property
    def hunt_handed(self) -> Path:
        return self.path / HUNT_HANDED

    @property
    def trials(self) -> Path:
        return self.path / TRIALS

    def trial(self, index: int, attempt: int = 1) -> TrialDir:
        """trials/NNNN, and trials/NNNN-attempt2, ... for a trial's later attempts: each attempt
        is journaled, and its record's links must show its own output and logs. Which number an
        attempt takes (the first whose folder is free, across sessions) is store.attempts'."""
        name = f"{index:04d}" if attempt == 1 else f"{index:04d}-attempt{attempt}"
        return TrialDir(self.path / TRIALS / name)

    def backup(self, testbed: str = "") -> BackupDir:
        """backup/, or backup/<testbed>/ for one testbed of a parallel sweep."""
        root = self.path / BACKUP
        return BackupDir(root / testbed, within=root) if testbed else BackupDir(root)

    @property
    def backup_root(self) -> Path:
        return self.path / BACKUP

    def export(self, run_id: str, fmt: str) -> Path:
        return self.path / f"{run_id}.{fmt}"

    def relative(self, path: Path) -> str:
        """A path inside the run folder as the journal records it (relative, so the folder can move)."""
        return str(path.relative_to(self.path))

    def is_run(self) -> bool:
        """Does the folder hold a run (its manifest)?"""
        return self.run_json.is_file()


@dataclass(frozen=True)
class ReportsDir:
    """The folder that holds the runs (--out) and the site's index page."""

    path: Path

    @property
    def index_html(self) -> Path:
        return self.path / INDEX_HTML

    def run(self, run_id: str) -> RunDir:
        return RunDir(self.path / run_id)

    def compare_page(self, run_a: str, run_b: str) -> Path:
        return self.path / f"compare-{run_a}-vs-{run_b}.html"
