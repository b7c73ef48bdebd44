"""The records of a run: which journal record stands for each trial, and what is damage.

One rule, in one place, for every reader of a run's trials (the report and the index's
summaries, `orch export`, `orch compare`, the webhook summary, the hunt's report, and resume's
hunt and adaptive sources, which replay the run), so they agree on what a trial's record is.
Before it they did not: the report took each trial's highest-attempt completed record, export the
last record that was not `interrupted`, and compare counted every completed record, so a line
duplicated by hand (or by a faulty copy) counted twice there.

What a trial may legitimately hold, in journal order: failed attempts before a retry (attempt 1,
2, ..., each marked `retried` since orch journals them), then a completed or failed one; a record
`interrupted` when the controller stopped mid-trial; after `orch resume` (a new session of the
controller, opened by a run_resumed event) the trial's attempts go on past the numbers its folders
hold (store.attempts), while journals written before that numbered each session's attempts from 1
again: both read the same here.

Which record stands for a trial:
- its completed record is the trial's data (completed_rows). There is at most one: a second
  finished record after it is damage (below), so "the highest-attempt completed record" the
  report always took and "the last completed record" are the same record;
- without one, its last failed record that ended it stands for it (trial_rows: export's one row
  per trial, the webhook's counts, the records a replay feeds the search: read_finished): a failed
  attempt marked `retried` ended nothing, the runner went on to try again;
- a trial with only interrupted or `retried` records has none: it is unfinished, as resume reads
  it (store.journal.resume_status), and `orch resume` runs it again. A controller killed during a
  retry leaves such a trial. The report lists those attempts among its failed attempts, and no
  reader counts the trial as finished, failed or data.

What is damage, a ConfigError at journal.jsonl:<line> (exit 2): the journal was edited, damaged or
belongs to another run, and no reader guesses which of its lines to believe:
- a trial number outside the plan: below 0, or past the plan's last trial in a run that is not a
  hunt (a hunt journals trials past its first wave, which is all plan.json holds);
- a planned trial whose cell or levels are not the plan's for that trial (a hunt too: its step
  source runs each first-wave configuration under its planned number, sweep/hunt.py). Except in a
  hunt journaled by an older orch (run.json without `hunt_planned_numbers`), which numbered trials
  as it handed them out: the failing configuration again as trial 1 where plan.json has the clean
  one, or N testbeds taking the wave in their own order; its own journal is not damage;
- the same (trial, attempt) finished (completed or failed) twice in one session;
- a finished record after the trial's completed one (a finished trial is never run again).
A manifest without a plan (a hand-made run.json: plan_trials 0) skips the two plan checks.

The rule checks compact rows (store.journal.TrialRow) as read_trial_rows streams them, so a
journal of a million duplicated lines is refused at its first duplicate, before it is held.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.records import EventRecord, PlannedTrial, RunManifest, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.store.journal import TrialRow, TrialRows, iter_records_at, read_trial_rows
from orchestrator.store.rundir import RunDir

# Never "delete this line": the line may be a trial's data (an orch that numbered a hunt's trials
# in another configuration's planned place wrote such journals itself), and deleting it loses it.
_HINT = (
    "the journal or plan.json was edited, damaged or belongs to another run; restore the run folder from a copy "
    "rather than deleting lines (if orch wrote it so, that is a bug in orch: please report it)"
)


def read_run_rows(run_dir: Path, manifest: RunManifest, events: Collection[str] = ()) -> TrialRows:
    """The run's trial rows (none if it never wrote a journal), checked by the rule as they are
    read, and its events named in `events` (read_trial_rows). `manifest` must hold the plan
    (store.manifest.load_manifest's default), unless it is an older orch's hunt (not checked against
    it: RunManifest.checks_planned_cells)."""
    path = RunDir(run_dir).journal
    if not path.exists():
        return TrialRows(rows=[], torn_tail=False)
    return read_trial_rows(path, TrialCheck(manifest, path), events)


@dataclass(frozen=True)
class Finished:
    """What a replay of a run starts from (read_finished)."""

    journal: Path
    # the row standing for each finished trial (trial_rows), in journal order: the order the live
    # search or design was fed them (a hunt's trial numbers are not its order: sweep/hunt.py)
    rows: list[TrialRow]
    events: list[EventRecord]  # the events asked for, in journal order
    next_trial: int  # one past the highest trial number in the journal, unfinished trials included

    def records(self) -> Iterator[TrialRecord]:
        """The rows' full records, read one at a time as they are iterated: a replay of a
        100,000-trial run never holds them all."""
        return iter_records_at(self.journal, self.rows) if self.rows else iter(())


def read_finished(run_dir: Path, manifest: RunManifest, events: Collection[str] = ()) -> Finished:
    """Each finished trial's standing record, by the rule, for the readers that replay a run: the
    hunt's report and resume's hunt and adaptive sources replay the same records as the live
    search saw (retried attempts are no trial's end) and refuse the damage the report refuses."""
    scan = read_run_rows(run_dir, manifest, events)
    last = max((row.trial for row in scan.rows), default=-1)
    standing = sorted(trial_rows(scan.rows), key=lambda row: row.source)  # journal order (byte offsets)
    return Finished(RunDir(run_dir).journal, standing, scan.events, last + 1)


class TrialCheck:
    """The damage rule over a run's rows, fed one row at a time in journal order with its
    session (store.journal.RowCheck); raises ConfigError at the first damaged line."""

    def __init__(self, manifest: RunManifest, path: Path) -> None:
        checked = manifest.checks_planned_cells
        if manifest.plan_trials and not manifest.plan and checked:
            raise ValueError("TrialCheck needs the manifest's plan (load_manifest(run_dir, plan=True))")
        self._path = path
        # an older orch's hunt numbered its trials as it handed them out, so its trial i need not
        # be plan.json's trial i (RunManifest.hunt_planned_numbers)
        self._plan: Mapping[int, PlannedTrial] = {p.trial: p for p in manifest.plan} if checked else {}
        self._planned = len(manifest.plan)
        self._bounded = bool(self._planned) and not manifest.hunt  # trials past the plan are damage
        # (trial, attempt) finished in the current session -> its line (int keys, trial << 20 |
        # attempt, where they fit: a hunt may hold a million rows); cleared when a session opens,
        # as journals written before store.attempts numbered attempts from 1 again in each
        self._finished: dict[object, int] = {}
        self._completed: dict[int, int] = {}  # trial -> the line of its completed record
        self._session = -1

    def __call__(self, row: TrialRow, session: int) -> None:
        if session != self._session:
            self._session = session
            self._finished.clear()
        trial = row.trial
        planned = self._plan.get(trial)
        if trial < 0 or (self._bounded and planned is None):
            self._damage(row, f"trial {trial} is not in the plan (it has {self._planned:,} trials, from 0)")
        if planned is not None and (row.cell != planned.cell or row.levels != planned.levels):
            self._damage(
                row,
                f"trial {trial} is cell {_quoted(row.cell)} with levels {_levels(row.levels)} here, "
                f"but cell {_quoted(planned.cell)} with levels {_levels(planned.levels)} in the plan",
            )
        if row.status == "interrupted":
            return
        key = _key(trial, row.attempt)
        earlier = self._finished.get(key)
        if earlier is not None:  # a duplicated line, most often
            self._damage(row, f"trial {trial} attempt {row.attempt} finished twice (also line {earlier})")
        completed = self._completed.get(trial)
        if completed is not None:
            self._damage(row, f"trial {trial} has a {row.status} record after its completed one (line {completed})")
        self._finished[key] = row.line
        if row.status == "completed":
            self._completed[trial] = row.line

    def _damage(self, row: TrialRow, message: str) -> None:
        raise ConfigError(message, file=str(self._path), line=row.line or None, hint=_HINT)


def completed_rows(rows: Iterable[TrialRow]) -> list[TrialRow]:
    """Each trial's completed record, in trial order: the run's data. In a journal the rule has
    checked there is one per trial; for unchecked rows (records built in memory) the highest
    attempt wins, then the later record."""
    chosen = _completed_by_trial(rows)
    return [chosen[i] for i in sorted(chosen)]


def _completed_by_trial(rows: Iterable[TrialRow], failed: dict[int, TrialRow] | None = None) -> dict[int, TrialRow]:
    """trial -> its completed record (the highest attempt, then the later record); each trial's
    last failed record that ended it (not `retried`) goes into `failed` when given."""
    chosen: dict[int, TrialRow] = {}
    for row in rows:
        if row.status == "completed":
            held = chosen.get(row.trial)
            if held is None or row.attempt >= held.attempt:
                chosen[row.trial] = row
        elif row.status == "failed" and not row.retried and failed is not None:
            failed[row.trial] = row
    return chosen


def trial_rows(rows: Iterable[TrialRow]) -> list[TrialRow]:
    """The record that stands for each finished trial, in trial order: its completed one (as
    completed_rows), else its last failed one that ended it; an unfinished trial (only
    interrupted or `retried` records) has none."""
    failed: dict[int, TrialRow] = {}
    completed = _completed_by_trial(rows, failed)
    chosen = failed | completed
    return [chosen[i] for i in sorted(chosen)]


def _key(trial: int, attempt: int) -> object:
    return trial << 20 | attempt if 0 < attempt < 1 << 20 else (trial, attempt)


def _quoted(text: str, limit: int = 80) -> str:
    """A name as an error quotes it: whole when short, else its start and its length (a line
    may hold megabytes of it)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def _levels(levels: Mapping[str, str]) -> str:
    text = ",".join(f"{k}={v}" for k, v in levels.items())
    return _quoted(text)
