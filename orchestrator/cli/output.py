"""How the CLI shows a sweep: the lines `orch run`, `orch resume`, `orch restore` and `orch queue
run` print around the API's calls (the API itself never prints). Tests assert these lines."""

from __future__ import annotations

from rich.markup import escape

from orchestrator.cli.console import err, out
from orchestrator.core.clip import clip
from orchestrator.core.words import counted
from orchestrator.store.liveness import not_restored_line
from orchestrator.sweep.apitypes import RestoreOutcome, Started, SweepOutcome, TestbedRestore
from orchestrator.sweep.progress import Progress, RichProgress

# failed gate checks `orch run` names at its end: one gate over 4,096 cells (or 1,000 gates) printed
# a line each; the report's Gates section lists every check
GATES_SHOWN = 20
GATE_LINE_CHARS = 1000  # a gate's name, a cell's label (its levels) and why


def announce(started: Started) -> None:
    """The first lines of a run: where it goes, or how much of a resumed one is left."""
    names = started.testbeds
    where = f"on {names[0]}" if len(names) == 1 else f"across {len(names)} testbeds ({', '.join(names)})"
    if started.open_ended:  # a hunt: how many trials is decided as it goes, never guessed here
        done = f"resuming {started.run_id}: {counted(started.trials, 'trial')} done"
        head = done if started.resumed else f"run {started.run_id}"
        err.print(f"{head}; hunt {where} -> {started.run_dir} (its total is decided as it goes)", markup=False)
        return
    most = " at most" if started.adaptive else ""  # the plan's count is the most an adaptive run takes
    if not started.resumed:
        err.print(
            f"run {started.run_id}: {counted(started.trials, 'trial')}{most} {where} -> {started.run_dir}", markup=False
        )
        return
    if started.torn_tail_dropped:
        err.print("journal: dropped a torn last line (the controller died while writing it)", markup=False)
    if started.left == 0:
        out.print(f"{started.run_dir}: all {counted(started.trials, 'trial')} are already done", markup=False)
        return  # "resuming r1: 0 of 4 trials left" beside it said the same again
    left = f"{started.left} of {counted(started.trials, 'trial')} left{most}"
    err.print(f"resuming {started.run_id}: {left}", markup=False)


def terminal(started: Started) -> Progress:
    """The terminal's progress bar (or plain lines in a log), which announces the run as it starts."""
    return _Announcing(started)


class _Announcing(RichProgress):
    """Announces the run when the runner starts it, not when the API names it: a resume checks its
    testbed's lock and its hosts' env files first (sweep.runner: adopt, check_resumable), and one
    refused there, nothing touched, printed "resuming h1: ..." and then its error."""

    def __init__(self, started: Started) -> None:
        super().__init__(err, open_ended=started.open_ended, cell_name=started.cell_name)
        self.started = started

    def start(self, total: int, done: int) -> None:
        announce(self.started)
        super().start(total, done)


def show_outcome(outcome: SweepOutcome) -> None:
    if outcome.report_error is not None:
        err.print(f"[yellow]report not written:[/yellow] {escape(outcome.report_error)}")
    cut = " (interrupted)" if outcome.interrupted else ""
    ran = outcome.completed + outcome.failed
    if not cut and outcome.adaptive and outcome.planned is not None and ran < outcome.planned:
        cut = f" (of at most {outcome.planned}: a cell stops once decided)"  # it announced the most
    out.print(f"{counted(outcome.completed, 'trial')} completed, {outcome.failed} failed{cut}", markup=False)
    if outcome.not_restored:
        out.print(not_restored_line(outcome.not_restored, outcome.run_dir), markup=False)
    show_kept(outcome.kept)
    if outcome.stopped is not None:
        err.print(f"[red]error:[/red] {escape(outcome.stopped)}")
    if outcome.interrupted:
        out.print(f"resume with: orch resume {outcome.run_dir}", markup=False)
    if outcome.report is not None:
        out.print(f"report: {outcome.report}", markup=False)
    for gate in outcome.gates_failed[:GATES_SHOWN]:
        err.print(f"[red]gate failed:[/red] {escape(clip(gate, GATE_LINE_CHARS))}")
    more = len(outcome.gates_failed) - GATES_SHOWN
    if more > 0:
        err.print(f"[red]gate failed:[/red] … and {more:,} more checks (the report's Gates section lists them all)")


def show_restore(outcome: RestoreOutcome) -> None:
    again = outcome.again or f"orch restore {outcome.run_dir}"
    for tb in outcome.testbeds:
        for line in () if _all_restored_already(tb) else tb.host_lines:  # hosts restored before, then the summary
            out.print(line, markup=False)
        if tb.not_restored:
            err.print(f"not restored: {', '.join(tb.not_restored)}; run `{again}` again to finish", markup=False)
        elif not tb.backed_up:
            out.print(f"nothing to restore: run {outcome.run_id} stopped before its first edit", markup=False)
        else:
            restored = [h for h in tb.hosts if h not in tb.untouched and h not in tb.already]
            if restored:
                units = "" if tb.left_running else ", units back"  # states before the run unknown: never claimed
                out.print(f"restored: {', '.join(restored)} (env files byte-identical{units})", markup=False)
            if tb.stopped:
                out.print(f"stopped, not running before run {outcome.run_id}: {_by_role(tb.stopped)}", markup=False)
            if tb.left_running:
                out.print(_left_running(tb.left_running, outcome.run_id), markup=False)
            if tb.already:
                out.print(f"restored already, nothing to do: {', '.join(tb.already)}", markup=False)
            if tb.untouched:
                out.print(
                    f"already restored, not touched: {', '.join(tb.untouched)} (their env files changed since)",
                    markup=False,
                )
        show_kept(tb.kept)


def _all_restored_already(tb: TestbedRestore) -> bool:
    """Every host put back before (a run that ended restored): the summary's one line says it all,
    where a line per host said the same first (the first new-user walk)."""
    return bool(tb.hosts) and set(tb.already) == set(tb.hosts) and not (tb.not_restored or tb.kept)


def _left_running(units: tuple[tuple[str, str], ...], run_id: str) -> str:
    """The units a restore without the run's folder left running, by host: one of them may have
    been stopped before the run (which started it), and only the user can tell."""
    return (
        f"left running, not known whether they ran before run {run_id}: {_by_role(units)} "
        "(stop any that was stopped before it: systemctl stop UNIT on its host)"
    )


def _by_role(units: tuple[tuple[str, str], ...]) -> str:
    """(role, unit) pairs as "role: unit, unit; role: unit"."""
    by_role: dict[str, list[str]] = {}
    for role, unit in units:
        by_role.setdefault(role, []).append(unit)
    return "; ".join(f"{role}: {', '.join(names)}" for role, names in by_role.items())


def show_kept(kept: tuple[tuple[str, str], ...]) -> None:
    """Env files the restore found changed by someone else and set aside before writing the
    original back (sweep.drift): said once more at the end, where a script's log keeps it."""
    for role, path in kept:
        out.print(
            f"kept aside: {role} ({path}): what its env file held, not the original nor a file orch knows it "
            "wrote; the original is back in place",
            markup=False,
        )
