"""reports/index.html: one line per run (name, date, status, headline, link to its report), and
a visible warning on a run whose data is suspect (void or failed trials, drift, overdispersion).

Why read each run's summary.json: rebuilding every report to list it would cost seconds per big
run. render.py writes summary.json beside the run's index.html; it is used when it is newer than
the run's journal and manifest, and the summary is rebuilt (not rendered) when it is missing or
stale, by the Rebuild the caller passes (render.fresh_summary): the index lists runs, the report
build is not its business, so it does not import it (report.summary). A run that cannot be read
is listed with the reason, never skipped and never fatal: the index is where one goes to find
out what happened.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pydantic
from markupsafe import Markup

from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.core.clip import clip, clip_list
from orchestrator.core.config import MAX_TITLE
from orchestrator.core.records import RunManifest
from orchestrator.core.regression import Change
from orchestrator.errors import OrchError
from orchestrator.report.page import csp, environment
from orchestrator.report.series import SeriesPoint
from orchestrator.report.summary import Rebuild, RunSummary
from orchestrator.report.trends import (
    TREND_RUNS,
    USABLE,
    GroupTrend,
    NightRun,
    change_text,
    group_trends,
    regression_check,
)
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.liveness import STALE, StatusFile, read_status, recorded_restore, state_of
from orchestrator.store.manifest import holds_run, load_manifest, manifest_or_why
from orchestrator.store.rundir import (
    HUNT_HTML,
    INDEX_HTML,
    JOURNAL,
    PLAN_JSON,
    RUN_JSON,
    STATUS_JSON,
    SUMMARY_JSON,
    ReportsDir,
    RunDir,
    listable,
)
from orchestrator.store.stamps import SETTLE_NS as SETTLE_NS
from orchestrator.store.stamps import Stamp, file_stamp, settled

# Filters for the runs table (matrix, testbed, status); allowed by hash in the page's CSP.
INDEX_SCRIPT = """
(function () {
  var selects = document.querySelectorAll('select[data-filter]');
  function apply() {
    document.querySelectorAll('#runs tbody tr[data-matrix]').forEach(function (row) {
      var show = true;
      selects.forEach(function (s) {
        if (s.value && row.getAttribute('data-' + s.getAttribute('data-filter')) !== s.value) { show = false; }
      });
      row.hidden = !show;
    });
  }
  selects.forEach(function (s) { s.addEventListener('change', apply); });
})();
"""
SUMMARY_BYTES = 4 * 1024 * 1024  # a summary with its series is at most a few hundred KB (report.series caps)
# runs the index's table lists, newest first: 2,000 run folders made a 1.8 MB page rendered on
# every `orch serve /` and after every run; the older ones are counted (/api/runs pages through all)
INDEX_ROWS = 500
# what a run folder may show of itself in the index and /api/runs: run.json, summary.json and
# status.json are read bounded (MiBs), not small (20 runs named 1 MB each made a 42 MB index)
HEADLINE_CHARS = 2000
REASON_CHARS = 600  # one suspect reason, one error
ITEMS_SHOWN = 20  # suspect reasons, roles left changed


@dataclass(frozen=True)
class RunEntry:
    directory: str
    name: str
    run_id: str
    started: str
    status: str
    completed: int
    planned: int | None  # None for a hunt (RunManifest.planned_total)
    failed: int
    headline: str
    has_report: bool
    adaptive: str = ""  # an adaptive run's sequential decisions (RunSummary.adaptive), under the result
    at_most: bool = False  # `planned` is at most: an adaptive run stops a cell once decided
    error: str = ""
    suspect: tuple[str, ...] = ()  # why the data is suspect, shown beside the result
    group: str = ""  # same matrix + inventory (render.group_key)
    testbed: str = ""
    series: tuple[SeriesPoint, ...] = ()
    page: str = "index.html"  # the run's report page (a hunt's is hunt.html: the culprits, not the cells)
    not_restored: tuple[str, ...] = ()  # hosts the run left changed (its status.json), shown first
    restore_with: str = ""  # the command that puts them back


def write_index(reports_dir: Path, rebuild: Rebuild) -> Path:
    """Write reports_dir/index.html: every run newest first (running ones too), then the trends
    and the nightly regression check of each matrix + inventory."""
    page = index_page(reports_dir, rebuild)
    return write_text_atomic(ReportsDir(reports_dir).index_html, page, what="cannot write the report")


def index_page(reports_dir: Path, rebuild: Rebuild, cache: EntryCache | None = None) -> str:
    """The index as HTML (`orch serve` renders it live, with its EntryCache; write_index stores it).
    Each run's series only where the page draws it (SeriesWindow)."""
    entries = run_entries(reports_dir, rebuild, cache, all_series=False)
    return _render_index(entries) if cache is None else cache.page(entries, _render_index)


def _render_index(entries: list[RunEntry]) -> str:
    groups = _groups(entries)  # of every run: a trend reaches back past the rows listed
    shown = entries[:INDEX_ROWS]
    return (
        environment()
        .get_template("index.html.j2")
        .render(
            runs=shown,
            total=len(entries),
            changed=[e for e in entries if e.not_restored],  # however old: its testbed is still changed
            groups=groups,
            flagged={g.checked_run: g.flagged for g in groups if g.flagged},
            change_text=change_text,
            matrices=sorted({e.name for e in shown}),
            testbeds=sorted({e.testbed for e in shown if e.testbed}),
            statuses=sorted({e.status for e in shown}),
            csp=csp(INDEX_SCRIPT),
            script=Markup(INDEX_SCRIPT),
        )
    )


def run_entries(
    reports_dir: Path, rebuild: Rebuild, cache: EntryCache | None = None, *, all_series: bool = True
) -> list[RunEntry]:
    """Every run of the folder, newest first; `cache`: an unchanged run folder is not read again
    (its entries carry series only where the index draws them, as with `all_series` False)."""
    if cache is not None:
        return cache.entries(reports_dir, rebuild)
    read = (_bounded(_entry(Path(path), rebuild).entry) for _, path, _ in _folders(reports_dir))
    if all_series:  # regression_changes: an older run is checked against its own earlier runs
        return _newest_first(read)
    window, kept = SeriesWindow(), dict[str, RunEntry]()
    for e in read:
        kept[e.directory] = e
        for out in window.admit(e):
            kept[out] = replace(kept[out], series=())
    return _newest_first(kept.values())


class SeriesWindow:
    """Which runs' series the index uses: the newest TREND_RUNS finished runs of each matrix +
    inventory group (a trend line's points; its regression check reads LOOKBACK < TREND_RUNS of
    them). Why: a run's series is ~35 KB in memory, 98% of its entry, and the index of 20,000 runs
    held all of them (761 MB) to draw 30 points a group. Fed runs in any order, it says which
    leave the window (their series are dropped), so no more than the window is held at once."""

    def __init__(self) -> None:
        self._groups: dict[str, list[tuple[str, str]]] = {}  # a min-heap of (started, directory) each

    def admit(self, e: RunEntry) -> list[str]:
        """The directories whose series are no longer needed now that `e` is seen (`e`'s own when
        it is not in the window)."""
        if not e.group or e.status not in USABLE:
            return [e.directory]
        heap = self._groups.setdefault(e.group, [])
        heapq.heappush(heap, (e.started, e.directory))  # the index's order: newest first by these
        return [heapq.heappop(heap)[1]] if len(heap) > TREND_RUNS else []

    def holds(self, e: RunEntry) -> bool:
        return (e.started, e.directory) in self._groups.get(e.group, ())


def _newest_first(entries: Iterable[RunEntry]) -> list[RunEntry]:
    return sorted(entries, key=lambda e: (e.started, e.directory), reverse=True)


def _groups(entries: Sequence[RunEntry]) -> list[GroupTrend]:
    """Matrix + inventory groups with at least two runs (a trend needs two points), by newest run."""
    by_key: dict[str, list[RunEntry]] = {}
    for e in entries:
        if e.group:
            by_key.setdefault(e.group, []).append(e)
    return [
        group_trends(key, runs[0].name, runs[0].testbed, [_night(r) for r in runs])
        for key, runs in by_key.items()
        if len(runs) >= 2
    ]


def _night(e: RunEntry) -> NightRun:
    return NightRun(e.run_id or e.directory, e.directory, e.started, e.status, e.series)


def regression_changes(run_dir: Path, rebuild: Rebuild) -> list[Change]:
    """The nightly regression check of one run against the earlier runs of its matrix + inventory
    in the same reports folder (for the webhook summary and `orch compare`). Only a finished run is
    a night, as in the index's check (trends.USABLE): an interrupted or stale run's partial rates
    were posted as `CHANGED vs earlier runs` that the index never flagged."""
    entries = run_entries(run_dir.parent, rebuild)
    me = next((e for e in entries if e.directory == run_dir.name), None)
    if me is None or not me.group or me.status not in USABLE:
        return []
    earlier = [_night(e) for e in entries if e.group == me.group and e.started < me.started]
    return regression_check(_night(me), earlier)


# the files _entry reads of a run folder (rebuild too: the journal, the plan, the status file): an
# entry is as it was while each of them is (its type, device, inode, size, mtime and ctime)
READ_FILES = (RUN_JSON, PLAN_JSON, JOURNAL, STATUS_JSON, SUMMARY_JSON, INDEX_HTML, HUNT_HTML)


class EntryCache:
    """The entries `orch serve` shows of one reports folder, kept between page views: each view
    stamps every file an entry was read from, and reads again only the run folders whose stamps
    changed, or whose controller died since (store.liveness, asked again on each view); a folder
    gone is dropped, so it never holds more entries than the folder holds runs. A view equals an
    uncached one (run_entries without it), only cheaper: 2,000 runs took seconds a view.
    One lock: concurrent views wait for one reading instead of each reading every run."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock  # nanoseconds, file times' clock (tests move it)
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}
        self._of: tuple[Path, Rebuild] | None = None
        self._page: tuple[tuple[RunEntry, ...], str] | None = None  # the last page, of these entries

    def __len__(self) -> int:
        return len(self._kept)

    def entries(self, reports_dir: Path, rebuild: Rebuild) -> list[RunEntry]:
        with self._lock:
            if self._of != (reports_dir, rebuild):  # another folder, another rebuild: nothing applies
                self._kept, self._of = {}, (reports_dir, rebuild)
            settled_before = self._clock() - SETTLE_NS
            window, now = SeriesWindow(), dict[str, _Kept]()
            for name, path, stamp in _folders(reports_dir):
                now[name] = self._current(name, path, stamp, rebuild, settled_before)
                for out in window.admit(now[name].read.entry):
                    now[out] = now[out].slimmed()
            for name, k in now.items():  # a run whose series an earlier view dropped, drawn now (a newer one gone)
                if k.slim and window.holds(k.read.entry):
                    now[name] = self._read(name, os.path.join(reports_dir, name), rebuild, settled_before)
            self._kept = {k.name: k for k in now.values() if k.keep}  # only folders listed now
        return _newest_first(k.read.entry for k in now.values())

    def page(self, entries: list[RunEntry], render: Callable[[list[RunEntry]], str]) -> str:
        """render(entries), or the page rendered last when it was of these very entries (nothing
        read again): the trends of a group of 2,000 runs cost a tenth of a second a view."""
        with self._lock:
            last = self._page
        if last is not None and _same_objects(last[0], entries):
            return last[1]
        page = render(entries)
        with self._lock:
            self._page = (tuple(entries), page)
        return page

    def _current(self, name: str, path: str, run_json: Stamp, rebuild: Rebuild, settled_before: int) -> _Kept:
        old = self._kept.get(name)
        if old is not None and old.stamps == _digest(_stamps(path, run_json)) and _same_liveness(old.read):
            return old
        return self._read(name, path, rebuild, settled_before, run_json)

    def _read(self, name: str, path: str, rebuild: Rebuild, settled_before: int, run_json: Stamp = None) -> _Kept:
        stamps = _stamps(path, run_json or file_stamp(f"{path}/{RUN_JSON}"))  # before reading: a later write shows
        read = _entry(Path(path), rebuild)
        read = replace(read, entry=_bounded(read.entry))
        return _Kept(
            name, _digest(stamps), read, keep=settled(stamps, settled_before) and not read.entry.error
        )  # an error may pass: read again


def _same_objects(a: Sequence[RunEntry], b: Sequence[RunEntry]) -> bool:
    """The very entries, in the same order (equal ones read again are another page's worth)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class _Kept:
    name: str
    stamps: bytes  # _digest of the stamps of READ_FILES: 7 tuples of 6 ints were 2 KB a run
    read: _Read
    keep: bool
    slim: bool = False  # its series dropped (not in the SeriesWindow when last seen)

    def slimmed(self) -> _Kept:
        if self.slim or not self.read.entry.series:
            return self
        return replace(self, read=replace(self.read, entry=replace(self.read.entry, series=())), slim=True)


def _stamps(path: str, run_json: Stamp) -> tuple[Stamp, ...]:
    return (run_json, *(file_stamp(f"{path}/{f}") for f in READ_FILES[1:]))


def _digest(stamps: tuple[Stamp, ...]) -> bytes:
    return hashlib.blake2b(repr(stamps).encode(), digest_size=16).digest()


def _same_liveness(read: _Read) -> bool:
    """Would store.liveness give the run the state it had when read? (A controller dies without
    writing anything: killed with -9, its status file still says running.)"""
    return read.watched is None or state_of("running", read.watched) == read.live


def _folders(reports_dir: Path) -> list[tuple[str, str, Stamp]]:
    """The run folders, whole or damaged (store.manifest.holds_run: a run.json, a journal or a
    status file), as the status views find them: a run whose run.json is gone is listed as such.
    Each with the stamp of its run.json: one stat a folder whose run.json is a file (more only for
    a damaged or foreign one)."""
    if not reports_dir.is_dir():
        return []
    found: list[tuple[str, str, Stamp]] = []
    with os.scandir(reports_dir) as it:
        for d in it:
            if not listable(d.name):
                continue
            stamp = file_stamp(f"{d.path}/{RUN_JSON}") if d.is_dir() else None
            if (stamp is not None and stat.S_ISREG(stamp[0])) or (d.is_dir() and holds_run(d.path)):
                found.append((d.name, d.path, stamp))
    return found


@dataclass(frozen=True)
class _Read:
    """A run's entry, and what of it time alone can change: `watched`, the status file naming the
    controller of a run its manifest says is running (None: nothing to watch), and `live`, the
    state store.liveness gave it when read (`stale` once that controller is gone)."""

    entry: RunEntry
    watched: StatusFile | None = None
    live: str = ""


def _entry(run_dir: Path, rebuild: Rebuild) -> _Read:
    run = RunDir(run_dir)
    try:
        manifest = load_manifest(run_dir)
    except OrchError as exc:
        return _Read(_unreadable(run_dir, exc))
    left = read_status(run_dir)  # its controller, and the hosts its restore left changed, if any
    live = state_of(manifest.status, left)  # `stale`: its controller is gone (store.liveness)
    watched = _controller(left) if left is not None and manifest.status == "running" else None
    entry = RunEntry(
        directory=run_dir.name,
        name=manifest.name,
        run_id=manifest.run_id,
        started=manifest.started,
        status=live,
        completed=0,
        planned=manifest.planned_total,
        at_most=manifest.adaptive,
        failed=0,
        headline="",
        has_report=run.index_html.is_file() or run.hunt_html.is_file(),
        page=HUNT_HTML if run.hunt_html.is_file() else "index.html",
        not_restored=left.not_restored if left else (),
        restore_with=recorded_restore(left.restore_with, run_dir) if left and left.not_restored else "",
    )
    try:
        summary = _cached_summary(run_dir, live) or rebuild(run_dir, manifest)  # rebuilt from the journal
    except OrchError as exc:
        return _Read(replace(entry, error=str(exc)), watched, live)
    except Exception as exc:  # noqa: BLE001 - one run's folder, not the index of all runs
        return _Read(replace(entry, error=_unexpected(exc)), watched, live)
    return _Read(_summarised(entry, summary, live, manifest), watched, live)


def _unreadable(run_dir: Path, exc: OrchError) -> RunEntry:
    """A run folder whose run.json (or plan) cannot be read: listed with the reason, in the status
    views' words for run.json ("run.json unreadable: missing", team.livestatus)."""
    name, why = run_dir.name, manifest_or_why(run_dir)
    error = f"run.json unreadable: {why}" if isinstance(why, str) else str(exc)  # else: its plan
    return RunEntry(name, name, "", "", "unreadable", 0, 0, 0, "", RunDir(run_dir).index_html.is_file(), error=error)


def _controller(status: StatusFile) -> StatusFile:
    """What liveness.judge reads of a status file (its controller: host, pid, start, state), the rest
    emptied: the EntryCache keeps one per running run, and a status file may hold a MiB of roles."""
    return StatusFile.model_construct(
        run_id="", name="", testbed="", started="", updated="", done=0, total=None, failed=0,
        host=status.host, pid=status.pid, pid_start=status.pid_start, state=status.state,
    )  # fmt: skip


def _summarised(entry: RunEntry, summary: RunSummary, live: str, manifest: RunManifest) -> RunEntry:
    return replace(
        entry,
        status=live if live == STALE else summary.status or manifest.status,
        completed=summary.completed,
        planned=summary.planned,
        failed=summary.failed,
        headline=summary.headline,
        adaptive=summary.adaptive,
        suspect=summary.suspect,
        group=summary.group,
        testbed=summary.testbed or manifest.testbed,
        series=tuple(summary.series),
    )


def _bounded(e: RunEntry) -> RunEntry:
    """The entry as the index and /api/runs show it: each text cut with an ellipsis, each list to
    its first items and a count of the rest (a name orch accepts is at most MAX_TITLE characters;
    one hand-edited into run.json may be MiBs). The restore command is never cut (bounded by
    recorded_restore), nor the folder name (the file system bounds it)."""
    return replace(
        e,
        name=clip(e.name, MAX_TITLE),
        run_id=clip(e.run_id, MAX_TITLE),
        started=clip(e.started, 64),
        status=clip(e.status, 40),
        testbed=clip(e.testbed, MAX_TITLE),
        headline=clip(e.headline, HEADLINE_CHARS),
        adaptive=clip(e.adaptive, HEADLINE_CHARS),
        error=clip(e.error, REASON_CHARS),
        suspect=tuple(clip_list(e.suspect, ITEMS_SHOWN, REASON_CHARS)),
        not_restored=tuple(clip_list(e.not_restored, ITEMS_SHOWN, MAX_TITLE)),
    )


def _unexpected(exc: Exception) -> str:
    """The one line the index shows for a run whose summary failed in a way orch did not foresee:
    a damaged sibling once took `orch run` and `orch report` of every other run down with it."""
    text = " ".join(str(exc).split())[:300]
    return f"cannot summarise this run: {type(exc).__name__}: {text} (a bug in orch: please report it)"


def _cached_summary(run_dir: Path, live: str = "") -> RunSummary | None:
    """The run's summary.json (written with its report), if it is newer than run.json and the
    journal; None sends the caller to rebuild the summary from the journal. Trusted, but not
    blindly: it is read with the bounded reader (a regular file of at most SUMMARY_BYTES, a FIFO
    never blocks) and its series points are validated (report.series), so a hand-edited or
    hostile file is rebuilt from the journal instead of reaching the statistics. Nor when the run
    is `live` stale and the summary was written while it ran: its headline says running."""
    run = RunDir(run_dir)
    path = run.summary_json
    if not path.is_file():
        return None
    newest_input = max((p.stat().st_mtime for p in (run.run_json, run.journal) if p.exists()), default=0.0)
    if path.stat().st_mtime < newest_input or path.stat().st_size > SUMMARY_BYTES:
        return None
    try:
        summary = RunSummary.model_validate_json(read_bounded_bytes(path, SUMMARY_BYTES))
    except (OrchError, pydantic.ValidationError):
        return None
    return None if live == STALE and summary.status != STALE else summary
