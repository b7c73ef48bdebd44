"""Team commands: `orch queue`, `orch schedule`, `orch serve`, `orch status`, `orch notify`.

cli.py registers them (register(sub)); errors are OrchErrors, mapped to messages and exit codes
by cli.main like every other command. Modules are imported inside the commands (rich and the
consoles too), so `orch --help` stays fast. A sweep from the queue is run by team.overnight
through sweep.api.run / resume, exactly as `orch run` / `orch resume` run theirs; this module
only parses and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from orchestrator.cli.args import (
    DEFAULT_REPORTS,
    command,
    matrix_args,
    run_choice_args,
    sweep_request,
)
from orchestrator.cli.argtypes import bounded_int, bounded_seconds, reports_folder

SQLITE_INT = 2**63 - 1  # the largest integer the queue database holds
LOG_WIDTH = 200

if TYPE_CHECKING:
    from rich.table import Table

    from orchestrator.team.livestatus import Snapshot
    from orchestrator.team.overnight import QueueSweep
    from orchestrator.team.queue import NewItem, QueueItem, SweepOutcome
    from orchestrator.team.queuestore import QueueStore


def register(sub: argparse._SubParsersAction) -> None:
    _queue_commands(sub)
    _schedule_commands(sub)
    srv = command(sub, "serve", "serve the reports, a live status page and JSON (read-only)", cmd_serve)
    _reports_arg(srv)
    srv.add_argument(
        "--port", type=bounded_int(0, 65535), default=8765, help="TCP port (default 8765; 0 picks a free one)"
    )
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "address to bind (default 127.0.0.1; 0.0.0.0 shares it with the network: it has no login and no "
            "TLS, so anyone who reaches the port reads every report, masked as on disk; put it behind a proxy "
            "that authenticates)"
        ),
    )
    st = command(sub, "status", "show running sweeps and the queue", cmd_status)
    _reports_arg(st)
    _store_arg(st)
    st.add_argument("--json", action="store_true", help="print the same JSON as /api/status")
    nt = command(sub, "notify", "send a run's summary to webhooks (e.g. after `orch run`)", cmd_notify)
    nt.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the run's folder (orch run printed it), e.g. reports/<run-id>"
    )
    _webhook_arg(nt)


def _queue_commands(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser(
        "queue",
        help="queue sweeps and run them one after another (overnight)",
        description="queue sweeps and run them one after another (overnight)",
    )
    qs = q.add_subparsers(metavar="ACTION")
    q.set_defaults(func=lambda a: (q.print_help(), 2)[1])
    add = command(qs, "add", "validate a sweep and queue it", cmd_queue_add)
    matrix_args(add)  # as `orch run` reads them (sweep_request): the inventory beside the matrix, -t A,B or all
    add.add_argument(
        "--priority",
        type=bounded_int(-SQLITE_INT, SQLITE_INT),
        default=0,
        help="higher runs first (default 0); ties: oldest first",
    )
    run_choice_args(add)  # kept with the item: `queue run` runs it with them
    _webhook_arg(add)
    _reports_arg(add)
    _store_arg(add)
    ls = command(qs, "list", "list queued, running and finished items", cmd_queue_list)
    ls.add_argument(
        "--all",
        action="store_true",
        help=f"every finished item too (default: pending items and the last {LIST_FINISHED} finished)",
    )
    _reports_arg(ls)
    _store_arg(ls)
    rm = command(qs, "remove", "remove an item (its run directory, if any, stays)", cmd_queue_remove)
    rm.add_argument("item_id", type=bounded_int(1, SQLITE_INT), metavar="ID", help="the item's id (orch queue list)")
    _reports_arg(rm)
    _store_arg(rm)
    run = command(qs, "run", "run queued sweeps (priority, then age) until none is left or the deadline", cmd_queue_run)
    run.add_argument(
        "--until",
        metavar="HH:MM",
        help="start no new trial after this local time (or ISO date-time); cut sweeps stay resumable. A time "
        "the clocks skip that night means the end of the gap, a time shown twice its first occurrence "
        "(default: none, it runs until the queue is empty)",
    )
    run.add_argument(
        "--scheduled",
        metavar="HH:MM",
        help="(set by `orch schedule`) the time of day this run was scheduled at: --until counts from the "
        "latest such time, and a run started after its window starts nothing",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="list the items it would run, in order; claim and run nothing"
    )
    _webhook_arg(run)
    _reports_arg(run)
    _store_arg(run)


def _schedule_commands(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "schedule",
        help="run the queue from a systemd timer",
        description="run the queue from a systemd timer (orch-NAME.timer + orch-NAME.service)",
    )
    ss = s.add_subparsers(metavar="ACTION")
    s.set_defaults(func=lambda a: (s.print_help(), 2)[1])
    ins = command(ss, "install", "write and enable orch-NAME.timer and orch-NAME.service", cmd_schedule_install)
    ins.add_argument("name", metavar="NAME", help="the schedule's name: its units are orch-NAME.timer and .service")
    when = ins.add_mutually_exclusive_group(required=True)
    when.add_argument("--on-calendar", metavar="SPEC", help="systemd calendar spec, e.g. '*-*-* 01:00'")
    when.add_argument(
        "--on-active", type=bounded_seconds(366 * 86400.0), metavar="SECONDS", help="once, this many seconds from now"
    )
    ins.add_argument(
        "--until",
        metavar="HH:MM",
        help="the night's deadline, counted from the scheduled start (a late catch-up never runs into the day); "
        "a time the clocks skip that night means the end of the gap, a time shown twice its first occurrence "
        "(default: none, each run goes on until the queue is empty)",
    )
    _webhook_arg(ins)
    _reports_arg(ins)
    _store_arg(ins)
    ins.add_argument(
        "--system",
        dest="scope",
        action="store_const",
        const="system",
        help="the system manager, /etc/systemd/system (default for root)",
    )
    ins.add_argument(
        "--user",
        dest="run_user",
        nargs="?",
        const="",
        metavar="NAME",
        help="alone: the user's systemd manager (default when not root); with NAME: a system unit run as "
        "NAME (User=NAME; root must name one, or --user root to mean it)",
    )
    ins.add_argument("--dry-run", action="store_true", help="print the units and the commands; install nothing")
    ins.add_argument("--unit-dir", type=Path, help=argparse.SUPPRESS)  # tests, packaging
    ls = command(ss, "list", "list orch schedules and what systemd says about them", cmd_schedule_list)
    _scope_args(ls)
    rm = command(ss, "remove", "disable and delete a schedule", cmd_schedule_remove)
    rm.add_argument("name", metavar="NAME", help="the schedule's name (orch schedule list)")
    _scope_args(rm)


def _reports_arg(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--reports",
        "--out",  # the name `orch run` writes it by: one folder, either name
        type=reports_folder,
        default=DEFAULT_REPORTS,
        metavar="DIR",
        help="reports folder (the queue is its queue.db; default: reports/)",
    )


def _store_arg(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--store",
        metavar="URL",
        help="where the queue lives: a SQLite file, or postgresql://USER@HOST/DB shared by several "
        "controllers (default: $ORCH_QUEUE_STORE, else queue.db in the reports folder)",
    )


def _open_queue(args: argparse.Namespace) -> "QueueStore":
    from orchestrator.team.queue import open_store, store_spec

    return open_store(store_spec(args.store, args.reports))


def _existing_queue(args: argparse.Namespace, *, read_only: bool = False) -> "QueueStore | None":
    """The queue --reports / --store name, never created (team.queue.open_existing_store)."""
    from orchestrator.team.queue import open_existing_store, store_spec

    return open_existing_store(store_spec(args.store, args.reports), read_only=read_only)


def _webhook_arg(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--webhook",
        action="append",
        default=[],
        metavar="URL",
        help="POST a JSON summary here when a sweep ends (repeatable; slack+https://... for "
        "Slack; also $ORCH_WEBHOOKS)",
    )


def _scope_args(cmd: argparse.ArgumentParser) -> None:
    scope = cmd.add_mutually_exclusive_group()
    scope.add_argument(
        "--user",
        dest="scope",
        action="store_const",
        const="user",
        help="the user's systemd manager (default when not root)",
    )
    scope.add_argument(
        "--system",
        dest="scope",
        action="store_const",
        const="system",
        help="the system manager, /etc/systemd/system (default for root)",
    )
    cmd.add_argument("--unit-dir", type=Path, help=argparse.SUPPRESS)  # tests, packaging


# ---------------------------------------------------------------------------- queue
def cmd_queue_add(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import out, warn
    from orchestrator.core.words import counted, listed
    from orchestrator.sweep.prepare import prepare  # validated now, run later: not the run machinery
    from orchestrator.team.queue import NewItem, is_server_url, store_spec
    from orchestrator.team.queuestore import RunChoices

    hooks = _checked_hooks(args.webhook)
    choices = RunChoices(args.replicates, args.seed, args.retries, args.fail_fast)
    prepared = prepare(sweep_request(args, replicates=choices.replicates, seed=choices.seed), warn=warn)
    plan = prepared.plan
    new = NewItem(
        args.matrix.resolve(),
        args.inventory.resolve(),
        args.testbed,
        args.priority,
        hooks,
        matrix_text=plan.matrix.text,  # what was validated is what runs, whatever happens to the files
        inventory_text=prepared.inventory.text,
        testbeds=tuple(tb.name for tb in prepared.testbeds),
        choices=choices,
    )
    spec = store_spec(args.store, args.reports)
    fresh = not is_server_url(spec) and not Path(spec).exists()
    with _open_queue(args) as q:
        item = q.add_item(new)
        twins = _same_sweeps(q, item.id, new)
    # a hunt's plan is its first wave: the search decides the rest as it goes (never a total here)
    trials = "a hunt" if plan.matrix.hunt is not None else counted(len(plan.steps), "trial")
    trials += " at most" if plan.matrix.adaptive and plan.matrix.hunt is None else ""  # cells stop once decided
    where = f"on testbed {plan.testbed.name!r}, priority {item.priority}"
    where += f", {choices.shown()}" if choices.shown() else ""
    out.print(escape(f"queued item {item.id}: {plan.matrix.name} ({trials} {where})"))
    if twins:  # allowed (a second night's run of it), but most often a command run twice
        one = len(twins) == 1
        out.print(
            escape(
                f"note: {listed('item', twins)} not yet finished {'queues' if one else 'queue'} the same sweep (the "
                f"same matrix, inventory and testbeds): {'both' if one else 'all'} will run; "
                f"`orch queue remove {item.id}` if one is enough"
            )
        )
    if fresh:  # a mistyped --reports made a queue no `queue run` of the usual folder sees
        out.print(escape(f"a new queue: {spec} (queue run, list and status see it with the same --reports or --store)"))
    return 0


def _checked_hooks(texts: list[str], *, sent_from_env: bool = False) -> tuple[str, ...]:
    """The --webhook URLs, checked (bad input exits 2), a plain-http one to another machine said;
    with `sent_from_env` (queue run, which reads ORCH_WEBHOOKS at each item's end) those too, once
    (a bad one there is said at each item's end instead: "webhooks not sent: ...", as before)."""
    from orchestrator.cli.console import warn
    from orchestrator.errors import OrchError
    from orchestrator.team.notify import Webhook, configured, plain_http

    said = [Webhook.parse(t) for t in texts]  # each parsed whole before any is said
    if sent_from_env:
        with contextlib.suppress(OrchError):
            said = configured(texts)
    for line in plain_http(said):
        warn(line)
    return tuple(texts)


def _same_sweeps(q: "QueueStore", added: int, new: "NewItem") -> list[int]:
    """Unfinished items, but `added`, that run the sweep `new` queues: the same files (paths, and
    the texts they held when queued: read only for items alike so far) on the same testbeds, with
    the same options (`--replicates 8` after `--replicates 2` is a second sweep, not a repeat)."""
    where = (str(new.matrix), str(new.inventory), new.testbed, new.testbeds, new.choices)
    alike = [
        i.id
        for i in q.items(("queued", "running", "resumable"))
        if i.id != added and (i.matrix, i.inventory, i.testbed, i.testbeds, i.choices) == where
    ]
    texts = (new.matrix_text, new.inventory_text)
    return [i for i in alike if ((full := q.get(i)).matrix_text, full.inventory_text) == texts]


LIST_FINISHED = 20  # finished items `queue list` shows without --all (the newest)
# beyond, plain tab-separated lines (rich measures every cell first: 10^4 rows took 57 s); the
# figure planview.RICH_ROWS uses, not imported: planview loads the statistics (scipy) a list never needs
LIST_RICH_ROWS = 500
LIST_COLUMNS = ("id", "state", "prio", "matrix", "testbed", "added", "by", "run", "webhooks", "note")


def cmd_queue_list(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import out
    from orchestrator.core.words import counted
    from orchestrator.team.queue import store_spec

    store = _existing_queue(args, read_only=True)
    if store is None:
        out.print(f"no queue in {store_spec(args.store, args.reports)}: nothing was ever queued there", markup=False)
        return 0
    with store as q:
        (items, left_out), where = q.listing(None if args.all else LIST_FINISHED), q.where
    if not items and not left_out:
        out.print(f"the queue in {where} is empty", markup=False)
        return 0
    rows = [_list_row(i) for i in items]
    if len(rows) <= LIST_RICH_ROWS:
        table = Table(*LIST_COLUMNS)
        for row in rows:
            table.add_row(*(escape(v) for v in row))
        _print_table(table)
    else:
        _plain_rows(rows)
    if left_out:
        out.print(f"{counted(left_out, 'older finished item')} not shown (--all shows them)", markup=False)
    return 0


def _plain_rows(rows: list[list[str]]) -> None:
    """`queue list`'s rows as tab-separated lines under their header (they grep and cut)."""
    from orchestrator.cli.console import out

    out.file.write("\t".join(LIST_COLUMNS) + "\n")
    out.file.writelines("\t".join(v.replace("\t", " ").replace("\n", "; ") for v in r) + "\n" for r in rows)
    out.file.flush()


def _list_row(i: "QueueItem") -> list[str]:
    from orchestrator.team.notify import shown

    return [
        str(i.id),
        i.shown_state,
        str(i.priority),
        " ".join(w for w in (Path(i.matrix).name, i.choices.shown()) if w),  # as queued: m.yaml --replicates 4
        i.testbed_shown,
        i.added[:19],
        i.queued_by,
        Path(i.run_dir).name if i.run_dir else "",
        ", ".join(shown(w) for w in i.webhooks),
        i.message if i.message or not i.defect else f"cannot run: {i.defect}",
    ]


def cmd_queue_remove(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import out
    from orchestrator.errors import UsageError
    from orchestrator.team.queue import store_spec

    store = _existing_queue(args)
    if store is None:
        where = store_spec(args.store, args.reports)
        raise UsageError(
            f"no queue item {args.item_id}: there is no queue in {where}", hint="check --reports or --store"
        )
    with store as q:
        item = q.remove(args.item_id)
    kept = f"; its run stays in {item.run_dir}" if item.run_dir else ""
    out.print(escape(f"removed {item.label} ({item.state}){kept}"))
    return 0


def cmd_queue_run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import err, out
    from orchestrator.core.words import listed
    from orchestrator.team.queue import run_queue

    hooks = _checked_hooks(args.webhook, sent_from_env=True)
    deadline = _deadline(args)
    if deadline == "missed":
        return 0
    if deadline is not None:
        err.print(
            f"deadline: {datetime.fromtimestamp(deadline).astimezone().isoformat(timespec='seconds')}", markup=False
        )
    if args.dry_run:
        return _queue_dry_run(args)
    with _open_queue(args) as q:
        result = run_queue(
            q,
            _queue_sweep(args.reports, owner_gone=q.claims_prove_owner_gone),
            deadline=deadline,
            on_done=_notifier(hooks),
            note=lambda m: err.print(f"[yellow]queue:[/yellow] {escape(m)}"),
        )
        _print_outcomes(result.ran)
        lost = getattr(q, "lost", None)  # a shared store's controller that had to give an item up
        if lost:
            err.print(f"[red]queue:[/red] {escape(lost)}")
    if result.blocked:
        err.print(
            f"[red]queue:[/red] {listed('item', result.blocked)} not run: a testbed holds a run whose controller "
            "died and whose hosts were never restored (see above: resume or restore that run); exit code 1",
        )
    if not result.ran and not result.skipped_locked and not result.deadline_reached:
        out.print("nothing to run: the queue has no queued or resumable item", markup=False)
    return result.exit_code


def _queue_dry_run(args: argparse.Namespace) -> int:
    """What `queue run` would take, in its order (priority, then age: the order its claims follow;
    a stale item's dead claim is given back first), as `queue list` shows items. Read-only: the
    queue is opened read-only (never created), nothing claimed, no testbed touched."""
    from orchestrator.cli.console import out
    from orchestrator.core.words import counted
    from orchestrator.team.overnight import changed_since_queued
    from orchestrator.team.queue import store_spec
    from orchestrator.team.queuestore import PENDING

    store = _existing_queue(args, read_only=True)
    todo, changed = [], []
    if store is not None:
        with store as q:
            todo = [i for i in q.items(PENDING) if i.shown_state in ("queued", "resumable", "stale")]
            # the light rows carry no copies: each new item whole (a resumed run reads its own copies)
            fresh = [q.get(i.id) for i in todo if i.resumable_run is None]
            changed = [f"{i.label}: {line}" for i in fresh for line in changed_since_queued(i)]
    if todo:
        out.print(
            f"queue run would take {counted(len(todo), 'item')}, in this order (a deadline may stop it sooner):",
            markup=False,
        )
        _plain_rows([_list_row(i) for i in todo])
        for line in changed:
            out.print(line, markup=False, soft_wrap=True)
    else:
        out.print(
            f"nothing to run: no queued or resumable item in {store_spec(args.store, args.reports)}", markup=False
        )
    out.print("dry run: nothing was claimed or run", markup=False)
    return 0


def _deadline(args: argparse.Namespace) -> float | None | Literal["missed"]:
    """--until as epoch seconds; with --scheduled, counted from the scheduled start, and
    "missed" (said here) when this run started after its window ended."""
    from orchestrator.cli.console import err
    from orchestrator.errors import UsageError
    from orchestrator.team.queue import parse_until, scheduled_window

    until = _until(args.until)
    now = datetime.now().astimezone()
    if args.scheduled is None:
        return _future(until, parse_until(until, now), now) if until is not None else None
    if until is None:
        raise UsageError("--scheduled needs --until", hint="it says when the window that --until ends began")
    window = scheduled_window(until, args.scheduled, now)
    if window.missed(now):
        err.print(
            f"[yellow]queue:[/yellow] the run scheduled at {window.start.isoformat(timespec='minutes')} had until "
            f"{window.deadline.isoformat(timespec='minutes')}; it is {now.isoformat(timespec='minutes')}: nothing "
            "starts (a missed night does not run into the day; the queue waits for the next window)"
        )
        return "missed"
    return window.deadline.timestamp()


def _future(until: str, at: datetime, now: datetime) -> float:
    """A deadline already past is a mistyped date (HH:MM is always the next such time): the queue
    said only "deadline reached" and exited 0, and its --dry-run listed items it would never start."""
    from orchestrator.errors import UsageError

    if at <= now:
        raise UsageError(
            f"--until {until!r} is past (it is {now.isoformat(timespec='minutes')})",
            hint="give a later date-time, or HH:MM for the next such local time",
        )
    return at.timestamp()


def _until(given: str | None) -> str | None:
    """--until as given, None when not given. An empty one is refused: `--until "$UNTIL"` with the
    variable unset would otherwise run the queue with no deadline at all, into the day."""
    from orchestrator.errors import UsageError

    if given is not None and not given.strip():
        raise UsageError(
            "--until is empty",
            hint="give a time (HH:MM, HH:MM:SS or an ISO date-time), or leave --until out for no deadline; "
            "is the shell variable it names unset?",
        )
    return given


def _queue_sweep(reports: Path, *, owner_gone: bool = False) -> "QueueSweep":
    """A queue item's sweep (team.overnight), shown as `orch run` / `orch resume` show theirs."""
    from rich.markup import escape

    from orchestrator.cli import output
    from orchestrator.cli.console import err, warn
    from orchestrator.sweep import api
    from orchestrator.team.overnight import QueueSweep

    return QueueSweep(
        reports,
        terminal=output.terminal,
        show=output.show_outcome,
        note=lambda m: err.print(escape(m)),
        error=lambda item, m: err.print(f"[red]queue: {escape(item.label)}:[/red] {escape(m)}"),
        warn=warn,
        sweeps=api,
        owner_gone=owner_gone,
    )


def _notifier(cli_hooks: tuple[str, ...]) -> Callable[["QueueItem", "SweepOutcome"], None]:
    from rich.markup import escape

    from orchestrator.cli.console import err

    def notify(item: "QueueItem", outcome: "SweepOutcome") -> None:
        from orchestrator.errors import OrchError
        from orchestrator.store.rundir import RunDir
        from orchestrator.team.notify import SWEEP_UNAFFECTED, configured, error_summary, send, summarize_run

        try:
            hooks = configured(item.webhooks, cli_hooks)
        except OrchError as exc:
            err.print(f"[yellow]webhooks not sent:[/yellow] {escape(str(exc))}")
            return
        if not hooks:
            return
        summary = error_summary(Path(item.matrix).stem, outcome.message)
        if outcome.run_dir is not None and RunDir(outcome.run_dir).is_run():
            try:
                summary = summarize_run(outcome.run_dir)
            except OrchError as exc:
                summary = error_summary(Path(item.matrix).stem, f"{outcome.message} (summary: {exc})")
        send(summary, hooks, warn=lambda m: err.print(f"[yellow]{escape(m)}[/yellow] {SWEEP_UNAFFECTED}"))

    return notify


def _print_outcomes(ran: list[tuple["QueueItem", "SweepOutcome"]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not ran:
        return
    table = Table("item", "matrix", "result", "run", "note", title="queue run")
    for item, o in ran:
        table.add_row(
            str(item.id),
            escape(Path(item.matrix).name),
            o.status,
            escape(str(o.run_dir) if o.run_dir else ""),
            escape(o.message),
        )
    _print_table(table)


def _print_table(table: Table) -> None:
    """Full width in logs and pipes (a timer's journal, CI), the terminal's width on a terminal."""
    from rich.console import Console

    from orchestrator.cli.console import out

    if out.is_terminal:
        out.print(table)
        return
    wide = Console(width=LOG_WIDTH, file=io.StringIO(), color_system=None, highlight=False, emoji=False)
    wide.print(table)
    out.print(wide.file.getvalue().rstrip("\n"), markup=False, highlight=False)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- schedule
def _scope(args: argparse.Namespace) -> str:
    return args.scope or ("system" if os.geteuid() == 0 else "user")


def cmd_schedule_install(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import out
    from orchestrator.team.notify import shown
    from orchestrator.team.queue import STORE_ENV
    from orchestrator.team.schedule import (
        Schedule,
        check_account,
        check_calendar,
        check_name,
        current_user,
        decide_run_as,
        default_unit_dir,
        dry_run,
        install,
        package_root,
        this_python,
        until_args,
    )

    name = check_name(args.name)
    if args.on_calendar is not None:
        check_calendar(args.on_calendar)
    elif args.on_active <= 0:
        from orchestrator.errors import UsageError

        raise UsageError("--on-active must be > 0 seconds")
    scope, run_as = decide_run_as(args.scope, args.run_user, os.geteuid(), current_user())
    if run_as is not None:
        check_account(run_as)
    until = until_args(_until(args.until), args.on_calendar, args.on_active, datetime.now().astimezone())
    queue_args = ["--reports", str(args.reports.resolve()), *until]
    store = args.store or os.environ.get(STORE_ENV, "").strip() or None
    sched = Schedule(
        name,
        this_python(),
        str(Path.cwd()),
        tuple(queue_args),
        args.on_calendar,
        args.on_active,
        package_root(),
        _checked_hooks(args.webhook),
        run_as,
        store,
    )
    unit_dir = args.unit_dir or default_unit_dir(scope)
    if args.dry_run:
        out.print(dry_run(sched, scope, unit_dir, shown), markup=False, highlight=False, end="")
        out.print("dry run: nothing was written or enabled", markup=False)
        return 0
    paths = install(sched, scope, unit_dir)
    out.print(escape(f"installed {sched.timer} ({scope}): " + ", ".join(str(p) for p in paths)))
    hooks = f" (webhooks: {len(sched.webhooks)}, in {sched.env_name}, mode 0600)" if sched.webhooks else ""
    who = f" as {run_as}" if run_as else ""
    out.print(f"it runs `orch queue run {' '.join(queue_args)}` in {Path.cwd()}{who}{hooks}", markup=False)
    return 0


def cmd_schedule_list(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import out
    from orchestrator.team.schedule import default_unit_dir, describe, installed

    scope = _scope(args)
    unit_dir = args.unit_dir or default_unit_dir(scope)  # type: ignore[arg-type]
    names = installed(unit_dir)
    if not names:
        out.print(f"no orch schedules in {unit_dir}", markup=False)
        return 0
    table = Table("name", "trigger", "timer", "next", "last", "last result")
    for n in names:
        info = describe(n, scope, unit_dir)  # type: ignore[arg-type]
        table.add_row(
            escape(info.name), escape(info.trigger), info.active, info.next_run, info.last_run, escape(info.last_result)
        )
    _print_table(table)
    return 0


def cmd_schedule_remove(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import out
    from orchestrator.team.schedule import check_name, default_unit_dir, remove

    scope = _scope(args)
    unit_dir = args.unit_dir or default_unit_dir(scope)  # type: ignore[arg-type]
    removed = remove(check_name(args.name), scope, unit_dir)  # type: ignore[arg-type]
    out.print(escape("removed " + ", ".join(str(p) for p in removed)))
    return 0


# ---------------------------------------------------------------------------- serve, status, notify
def cmd_serve(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out
    from orchestrator.core.endpoints import host_port
    from orchestrator.sweep.signals import sigterm_as_interrupt
    from orchestrator.team.serve import make_server

    server = make_server(args.reports, args.host, args.port)
    address, port = server.server_address[:2]
    host = address.decode() if isinstance(address, bytes) else str(address)  # bytes only for AF_UNIX
    out.print(
        f"serving {args.reports.resolve()} on http://{host_port(host, port)}/ "
        f"(status: /status, JSON: /api/status, /api/runs); Ctrl-C stops",
        markup=False,
    )
    try:
        with sigterm_as_interrupt() as stopping:  # its own handler: the loop also checks `stopping`
            server.stopping = stopping
            server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out
    from orchestrator.errors import UsageError
    from orchestrator.team.livestatus import snapshot
    from orchestrator.team.queue import folder_problem
    from orchestrator.team.serve import status_json

    missing = not Path(args.reports).is_dir()
    if missing and not _queue_elsewhere(args):  # a mistyped --reports must not read like an idle machine
        raise UsageError(f"{args.reports}: {folder_problem(Path(args.reports))}", hint="check --reports")
    snap = _with_shared_queue(snapshot(args.reports), args)
    if args.json:
        out.print_json(json.dumps(status_json(snap)))
        return 0
    _print_runs(snap, args.reports, missing)
    _print_queue(snap)
    return 0


def _print_runs(snap: "Snapshot", reports: Path, missing: bool) -> None:
    """The runs: first each one's way back or why it cannot be read, then the table."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import out

    for r in snap.runs:  # before any table: a run that left a testbed changed is the first thing to see
        if r.left_changed:
            out.print(f"[bold red]{escape(r.directory)}: {escape(r.left_changed)}[/bold red]", soft_wrap=True)
        elif r.way_back:  # stale: its hosts hold its edits and lock until it is resumed or restored
            out.print(f"[bold]{escape(r.directory)}[/bold]: {escape(r.way_back)}", soft_wrap=True)
        elif r.unreadable:  # listed, not left out: nothing else tells whether it runs
            out.print(f"[bold]{escape(r.directory)}[/bold]: {escape(r.unreadable_line)}", soft_wrap=True)
    if not snap.runs:
        note = " (no such folder: check --reports)" if missing else ""  # the queue shown is elsewhere
        out.print(f"no sweep is running in {reports}{note}", markup=False)
        return
    runs = Table("run", "state", "progress", "current cell", "last trial", "ETA", "controller", title="sweeps")
    for r in snap.runs:
        state = (r.state if r.state != "finished" else r.run_status) + (", NOT restored" if r.left_changed else "")
        eta = f"{r.status.eta_s:.0f} s" if r.state == "running" and r.status.eta_s is not None else "-"
        runs.add_row(
            escape(r.directory),
            state,
            r.progress,
            escape(r.current_cell or "-"),
            escape(r.status.last or "-"),
            eta,
            escape(r.controller or "-"),
        )
    _print_table(runs)


def _print_queue(snap: "Snapshot") -> None:
    """The pending queue items, how many more, and why the queue cannot be read if it cannot."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import out, warn

    if snap.queue:
        queue = Table("id", "state", "prio", "matrix", "testbed", "run", "note", title="queue")
        for q in snap.queue:
            texts = (q.matrix, q.testbed, q.run, q.message)
            queue.add_row(str(q.id), q.state, str(q.priority), *(escape(t) for t in texts))
        _print_table(queue)
    if snap.queue_more:
        out.print(f"… and {snap.queue_more:,} more queued: `orch queue list` lists them all", markup=False)
    if snap.queue_unreadable:
        warn(f"queue unreadable: {snap.queue_unreadable}")


def _queue_elsewhere(args: argparse.Namespace) -> bool:
    """Does --store / $ORCH_QUEUE_STORE name a queue other than the reports folder's queue.db?"""
    from orchestrator.team.queue import DB_NAME, store_spec

    return Path(store_spec(args.store, args.reports)) != args.reports / DB_NAME


def _with_shared_queue(snap: "Snapshot", args: argparse.Namespace) -> "Snapshot":
    """The status with the queue read from the store --store / $ORCH_QUEUE_STORE names (a server,
    or a SQLite file other than the reports folder's queue.db, which the snapshot already read):
    the queue shown is the one `queue list` and `queue run` use."""
    import dataclasses

    from orchestrator.cli.console import warn
    from orchestrator.team.livestatus import queue_shown
    from orchestrator.team.queue import DB_NAME, STORE_ENV, is_server_url, open_store, store_spec

    spec = store_spec(args.store, args.reports)
    if not is_server_url(spec):
        path = Path(spec)
        if path.resolve() == (args.reports / DB_NAME).resolve():
            return snap
        if not path.is_file():  # nothing queued there yet, or a typo: either way, say so
            warn(f"no queue in {path} (the store --store / ${STORE_ENV} names): none is shown")
            return dataclasses.replace(snap, queue=(), queue_unreadable="")
    with open_store(spec, read_only=True) as q:  # status changes nothing, not even a schema
        items = q.items(("running", "resumable", "queued"))
        if getattr(q, "missing", False):  # a server without the queue's tables
            warn(f"no queue yet in {q.where} (the store --store / ${STORE_ENV} names): none is shown")
    shown, more = queue_shown(items)
    return dataclasses.replace(snap, queue=shown, queue_more=more, queue_unreadable="")


def cmd_notify(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import err, out, warn
    from orchestrator.core.words import counted
    from orchestrator.errors import UsageError
    from orchestrator.team.notify import configured, plain_http, send, summarize_run

    hooks = configured(args.webhook)
    if not hooks:
        raise UsageError("no webhook given", hint="pass --webhook URL or set ORCH_WEBHOOKS")
    for line in plain_http(hooks):
        warn(line)
    summary = summarize_run(args.run_dir)
    deliveries = send(summary, hooks, warn=lambda m: err.print(f"[yellow]{escape(m)}[/yellow]"))
    for d in deliveries:
        out.print(
            f"{d.webhook}: {'delivered' if d.ok else 'NOT delivered'} ({counted(d.attempts, 'attempt')})", markup=False
        )
    return 0 if all(d.ok for d in deliveries) else 1
