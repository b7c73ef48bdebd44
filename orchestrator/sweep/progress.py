"""Progress in the terminal (rich): trials done/total, elapsed, ETA and the last result.

On a terminal a live bar; elsewhere (CI logs, pipes) one plain line per trial, so a long
overnight sweep's log still tells how far it got. Also the Progress protocol the runner reports
to, and QuietProgress for tests and library use.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task, TaskID, TextColumn
from rich.progress import Progress as RichBar
from rich.table import Column
from rich.text import Text

from orchestrator.core.records import TrialRecord
from orchestrator.core.words import counted


class Progress(Protocol):
    """Where the runner reports progress (rich in the terminal, nothing in tests)."""

    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None:
        """At most `left` more trials will run (an adaptive sweep stopped some cells)."""

    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...
    def restore_ended(self, not_restored: Sequence[str]) -> None:
        """The run's hosts were restored, save `not_restored` (roles; `TESTBED/role` for several
        testbeds), which the run leaves changed. Told once per restore, after stop(): by the runner
        (the coordinator, for several testbeds) and by `orch restore`. Why a call of its own: the
        terminal says it once, from the outcome or the error's note, but a status file must keep
        it (team.livestatus), or a run that left a testbed changed reads as one that finished."""


class QuietProgress:
    """Progress that shows nothing (tests, library use)."""

    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None: ...
    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...
    def restore_ended(self, not_restored: Sequence[str]) -> None: ...


class Tee:
    """Several progress sinks as one (the terminal bar and the status file)."""

    def __init__(self, *sinks: Progress) -> None:
        self.sinks = sinks

    def start(self, total: int, done: int) -> None:
        for s in self.sinks:
            s.start(total, done)

    def trial_done(self, record: TrialRecord) -> None:
        for s in self.sinks:
            s.trial_done(record)

    def retotal(self, left: int) -> None:
        for s in self.sinks:
            s.retotal(left)

    def note(self, message: str) -> None:
        for s in self.sinks:
            s.note(message)

    def stop(self) -> None:
        for s in self.sinks:
            s.stop()

    def restore_ended(self, not_restored: Sequence[str]) -> None:
        for s in self.sinks:
            s.restore_ended(not_restored)


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")


def failure_signature(record: TrialRecord) -> tuple[str, str] | None:
    """(error class, message with numbers, pids, durations and addresses blanked), or None for a
    trial that did not fail. Two failures with one signature are "the same reason"."""
    if record.status != "failed" or record.failure is None:
        return None
    return record.failure.error, _VOLATILE.sub("#", record.failure.message)


class FailureTally:
    """Failed trials grouped by reason, for the lines printed when the sweep ends: with a
    progress bar the per-trial lines are gone, and "5 failed" alone names no cause. Under each
    reason, the end of its first trial's output (bounded): the terminal shows what the HTML
    report shows below a failure, so "check ... the output" has something to check against."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], tuple[int, str]] = {}  # signature -> (count, first message)
        self.tails: dict[tuple[str, str], list[str]] = {}  # signature -> its first trial's tail lines

    def add(self, record: TrialRecord) -> None:
        signature = failure_signature(record)
        if signature is not None and record.failure is not None:
            count, first = self.groups.get(signature, (0, f"{record.failure.error}: {record.failure.message}"))
            self.groups[signature] = (count + 1, first)
            self.tails.setdefault(signature, failure_tail(record))

    def lines(self, limit: int = 3) -> list[str]:
        ranked = sorted(self.groups.items(), key=lambda group: -group[1][0])
        out = []
        for signature, (count, first) in ranked[:limit]:
            out.append(f"{count} failed: {_cut(' '.join(first.split()))}")
            out.extend(self.tails.get(signature, []))
        if len(ranked) > limit:
            out.append(f"... and {counted(len(ranked) - limit, 'other reason')}: see the report's Failures")
        return out


TAIL_LINES = 10  # of a failure's detail under its reason when the sweep ends
TAIL_LINE_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # a repro's colours or cursor moves: not ours to send


def failure_tail(record: TrialRecord) -> list[str]:
    """The last TAIL_LINES lines of the failure's detail (the output tail orch kept), indented,
    each cut and stripped of control characters; headed by the file holding the whole output."""
    if record.failure is None or not record.failure.detail.strip():
        return []
    lines = [line for line in record.failure.detail.splitlines() if line.strip()][-TAIL_LINES:]
    where = output_file(record)
    head = f"  last {counted(len(lines), 'line')} of " + (f"the output ({where}):" if where else "its log or output:")
    return [head, *(f"  | {_cut_line(_CONTROL.sub('?', line))}" for line in lines)]


def _cut_line(text: str) -> str:
    return text if len(text) <= TAIL_LINE_CHARS else text[: TAIL_LINE_CHARS - 3] + "..."


def output_file(record: TrialRecord) -> str:
    """Where a failed repro's whole output is: `trials/0003/repro.out in the run folder`, or ""."""
    if record.failure is None or record.failure.kind != "workload" or record.repro is None:
        return ""
    return f"{record.repro.stdout_path} in the run folder" if record.repro.stdout_path else ""


def _cut(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


REASON_CHARS = 300  # of a failure's message on a progress line (the journal keeps it whole)


def summarize(record: TrialRecord, cell: str | None = None) -> str:
    """`cell: corruption 6/40 (15%), wall 2.1 s` or `cell: FAILED (HealthTimeout): decode not
    ready after 600 s ...`: the reason orch has, not only its class (issue 12); a failed repro's
    line names the file with its whole output. `cell`: the cell's name (default its id)."""
    cell = record.cell if cell is None else cell
    if record.status != "completed":
        if record.failure is None:
            return f"{cell}: FAILED ({record.status})"
        where = output_file(record)
        line = f"{cell}: FAILED ({record.failure.error}): {_cut(' '.join(record.failure.message.split()))}"
        return line + (f" [output: {where}]" if where else "")
    parts = []
    shown = [(name, m) for name, m in record.metrics.items() if m.kind == "proportion" or m.value is not None]
    for name, m in shown[:3]:  # a lost scrape's mark (no value) is in the record, not on this line
        if m.kind == "proportion":
            pct = 100 * (m.k or 0) / m.n if m.n else 0.0
            parts.append(f"{name} {m.k}/{m.n} ({pct:.0f}%)")
        else:
            parts.append(f"{name} {m.value:g}{(' ' + m.unit) if m.unit else ''}")
    return f"{cell}: " + ", ".join(parts)


def clock_text(seconds: float | None) -> str:
    """`2:41`, `1:02:03`; `-:--` when not known yet."""
    if seconds is None:
        return "-:--"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_s(elapsed: float, finished: int, left: int) -> float | None:
    """Seconds left at this process's mean time per trial so far (None before its first trial).

    Not rich's own estimate: that one averages over a 30 s window, and a trial (restarts, health
    waits, the repro) takes minutes, so its window never held two samples and it showed -:--:--."""
    if finished <= 0:
        return None
    return max(0, left) * elapsed / finished


class _Clock(ProgressColumn):
    """The task's elapsed time, or the ETA kept in its fields, at a width that never shrinks."""

    def __init__(self, field: str, label: str = "") -> None:
        self.field, self.label = field, label
        super().__init__(table_column=Column(no_wrap=True, min_width=len(label) + 7))

    def render(self, task: Task) -> Text:
        value = task.elapsed if self.field == "elapsed" else task.fields.get(self.field)
        return Text(f"{self.label}{clock_text(value)}", style="progress.elapsed", no_wrap=True)


BAR_WIDTH = 24  # columns of the bar itself: the rest of the line goes to the last result


class RichProgress:
    """`open_ended` (a hunt): trials done, no total and no ETA (the search decides as it goes;
    a guessed total would go negative or lie).

    On a terminal the bar, the count, elapsed and ETA keep their width and the last result gets
    what is left, cut with an ellipsis (a hunt's cell name runs to 300 characters). Elsewhere one
    line per trial with the same times: `[34/64] 2:41 elapsed, ETA 1:50 — cell: ...`.
    `clock` gives seconds (tests pass a fake one)."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        open_ended: bool = False,
        clock: Callable[[], float] = time.monotonic,
        cell_name: Callable[[TrialRecord], str] = lambda record: record.cell,
    ) -> None:
        self.console = console or Console(stderr=True, emoji=False)
        self.open_ended = open_ended
        self.cell_name = cell_name
        self.clock = clock
        self.bar: RichBar | None = None
        self.task: TaskID | None = None
        self.done = 0
        self.total = 0
        self.finished = 0  # trials done by this process: what the ETA's pace rests on (not a resume's)
        self.failures = FailureTally()

    def start(self, total: int, done: int) -> None:
        self.total, self.done, self.finished = total, done, 0
        # built off a terminal too (never started there): the plain lines read its clock
        self.bar = RichBar(*self._columns(), console=self.console, get_time=self.clock, expand=True)
        if self.console.is_terminal:
            self.bar.start()
        total_shown = None if self.open_ended else total
        self.task = self.bar.add_task("trials", total=total_shown, completed=done, last="", eta=None)

    def _columns(self) -> list[ProgressColumn]:
        fixed = Column(no_wrap=True)
        counts: ProgressColumn = (
            TextColumn("{task.completed} done", table_column=fixed)
            if self.open_ended
            else MofNCompleteColumn(table_column=fixed)
        )
        eta: list[ProgressColumn] = [] if self.open_ended else [_Clock("eta", "ETA ")]
        return [
            TextColumn("[bold]trials", table_column=fixed),
            BarColumn(bar_width=BAR_WIDTH, table_column=Column(no_wrap=True, width=BAR_WIDTH)),
            counts,
            _Clock("elapsed"),
            *eta,
            TextColumn("{task.fields[last]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
        ]

    def trial_done(self, record: TrialRecord) -> None:
        self.done += 1
        self.finished += 1
        self.failures.add(record)
        line = summarize(record, self.cell_name(record))
        if self.bar is None or self.task is None:  # told before start(): the line alone
            self.console.print(f"[{self._count()}] {line}", markup=False, highlight=False, soft_wrap=True)
            return
        elapsed = self._elapsed()
        eta = None if self.open_ended else eta_s(elapsed, self.finished, self.total - self.done)
        self.bar.update(self.task, advance=1, last=escape(f"last: {line}"), eta=eta)
        if not self.console.is_terminal:
            times = f"{clock_text(elapsed)} elapsed, " + (
                "no ETA (a hunt decides its trials as it goes)" if self.open_ended else f"ETA {clock_text(eta)}"
            )
            self.console.print(f"[{self._count()}] {times} — {line}", markup=False, highlight=False, soft_wrap=True)

    def _count(self) -> str:
        return f"{self.done} done" if self.open_ended else f"{self.done}/{self.total}"

    def _elapsed(self) -> float:
        return (self.bar.tasks[0].elapsed or 0.0) if self.bar is not None and self.bar.tasks else 0.0

    def retotal(self, left: int) -> None:
        if self.open_ended:
            return
        self.total = self.done + left
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, total=self.total, eta=eta_s(self._elapsed(), self.finished, left))

    def note(self, message: str) -> None:
        self.console.print(f"[yellow]{escape(message)}[/yellow]", highlight=False, soft_wrap=True)

    def stop(self) -> None:
        """Stop the bar; then the failed trials' reasons, grouped (printed once)."""
        if self.bar is not None:
            if self.console.is_terminal:
                self.bar.stop()
            self.bar, self.task = None, None
        for line in self.failures.lines():
            self.console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)
        self.failures = FailureTally()

    def restore_ended(self, not_restored: Sequence[str]) -> None:
        """Nothing: the CLI prints the hosts left changed once, from the outcome or the error's note."""
