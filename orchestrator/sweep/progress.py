"""Progress in the terminal (rich): trials done/total, elapsed, ETA and the last result.

On a terminal a live bar; elsewhere (CI logs, pipes) one plain line per trial, so a long
overnight sweep's log still tells how far it got. Also the Progress protocol the runner reports
to, and QuietProgress for tests and library use.
"""

from __future__ import annotations

import re
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichBar

from orchestrator.core.records import TrialRecord


class Progress(Protocol):
    """Where the runner reports progress (rich in the terminal, nothing in tests)."""

    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None:
        """At most `left` more trials will run (an adaptive sweep stopped some cells)."""

    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...


class QuietProgress:
    """Progress that shows nothing (tests, library use)."""

    def start(self, total: int, done: int) -> None: ...
    def trial_done(self, record: TrialRecord) -> None: ...
    def retotal(self, left: int) -> None: ...
    def note(self, message: str) -> None: ...
    def stop(self) -> None: ...


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
            out.append(f"... and {len(ranked) - limit} other reason(s): see the report's Failures")
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
    head = f"  last {len(lines)} line(s) of " + (f"the output ({where}):" if where else "its log or output:")
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


def summarize(record: TrialRecord) -> str:
    """`cell: corruption 6/40 (15%), wall 2.1 s` or `cell: FAILED (HealthTimeout): decode not
    ready after 600 s ...`: the reason orch has, not only its class (issue 12); a failed repro's
    line names the file with its whole output."""
    if record.status != "completed":
        if record.failure is None:
            return f"{record.cell}: FAILED ({record.status})"
        where = output_file(record)
        line = f"{record.cell}: FAILED ({record.failure.error}): {_cut(' '.join(record.failure.message.split()))}"
        return line + (f" [output: {where}]" if where else "")
    parts = []
    for name, m in list(record.metrics.items())[:3]:
        if m.kind == "proportion":
            pct = 100 * (m.k or 0) / m.n if m.n else 0.0
            parts.append(f"{name} {m.k}/{m.n} ({pct:.0f}%)")
        else:
            parts.append(f"{name} {m.value:g}{(' ' + m.unit) if m.unit else ''}")
    return f"{record.cell}: " + ", ".join(parts)


class RichProgress:
    """`open_ended` (a hunt): trials done, no total and no ETA (the search decides as it goes;
    a guessed total would go negative or lie)."""

    def __init__(self, console: Console | None = None, *, open_ended: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.open_ended = open_ended
        self.bar: RichBar | None = None
        self.task: TaskID | None = None
        self.done = 0
        self.total = 0
        self.failures = FailureTally()

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        if self.console.is_terminal:
            counts = (TextColumn("{task.completed} done"),) if self.open_ended else (MofNCompleteColumn(),)
            eta = () if self.open_ended else (TextColumn("ETA"), TimeRemainingColumn())
            self.bar = RichBar(
                TextColumn("[bold]trials"),
                BarColumn(),
                *counts,
                TimeElapsedColumn(),
                *eta,
                TextColumn("{task.fields[last]}"),
                console=self.console,
            )
            self.bar.start()
            self.task = self.bar.add_task("trials", total=None if self.open_ended else total, completed=done, last="")

    def trial_done(self, record: TrialRecord) -> None:
        self.done += 1
        self.failures.add(record)
        line = summarize(record)
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, advance=1, last=escape(f"last: {line}"))
        else:
            count = f"{self.done} done" if self.open_ended else f"{self.done}/{self.total}"
            self.console.print(f"[{count}] {line}", markup=False, highlight=False, soft_wrap=True)

    def retotal(self, left: int) -> None:
        if self.open_ended:
            return
        self.total = self.done + left
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, total=self.total)

    def note(self, message: str) -> None:
        self.console.print(f"[yellow]{escape(message)}[/yellow]", highlight=False, soft_wrap=True)

    def stop(self) -> None:
        """Stop the bar; then the failed trials' reasons, grouped (printed once)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        for line in self.failures.lines():
            self.console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)
        self.failures = FailureTally()
