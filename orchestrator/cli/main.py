"""The `orch` command. Maps every OrchError to a message and an exit code, in one place.

Exit codes: 0 ok, 1 the sweep finished with failed trials (or stopped early, or hosts not restored,
or a runtime fault, or a hunt named no culprit set), 2 bad input, usage or a testbed another run
holds (nothing on any host touched), 3 a gate of the matrix failed, 130 interrupted, 141 stdout
closed early (args.EXIT_CODES, shown in `orch --help`).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from orchestrator import __version__
from orchestrator.cli import hunt, reports, team
from orchestrator.cli.args import (
    DEFAULT_INVENTORY,
    DEFAULT_REPORTS,
    EXIT_CODES,
    HUNT_EXIT_CODES,
    REPLICATES_HELP,
    REPORTS_HELP,
    RESTORE_EXIT_CODES,
    SEED_HELP,
    SWEEP_WEBHOOK_HELP,
    OrchParser,
    add_examples,
    command,
    matrix_args,
    run_choice_args,
    sweep_request,
)
from orchestrator.cli.argtypes import bounded_int, positive
from orchestrator.cli.stdio import never_fail_on_encoding, open_closed_streams
from orchestrator.core.bounds import MAX_RETRIES, MAX_SEED
from orchestrator.errors import Interrupted, OrchError, UsageError, notes

# Building the parser (`orch --help`, a usage error) imports the standard library and the command
# modules' registrations only; each command imports what it runs (the sweep API: pydantic, numpy,
# httpx; the report stack: pandas, scipy, jinja2) when it is run. tests/test_startup_imports.py
# holds it.
if TYPE_CHECKING:
    from orchestrator.sweep import api
    from orchestrator.sweep.apitypes import PreparedSweep, Warn
    from orchestrator.sweep.progress import Progress
    from orchestrator.team.notify import Webhook

__all__ = ["DEFAULT_INVENTORY", "DEFAULT_REPORTS", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    open_closed_streams()  # `orch run M >&-`: /dev/null, not an AttributeError after the sweep
    never_fail_on_encoding()  # a terminal that is not UTF-8 gets "ok - 3 factors", not a traceback
    try:
        return _main(argv)
    except BrokenPipeError:  # written to a closed pipe (`orch ... | head`): rich's consoles say so too
        from orchestrator.cli.console import stdout_closed

        return stdout_closed()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(args._orch_parser, unknown, parser)
    if args.func is None:
        parser.print_help()
        return 2
    from rich.markup import escape  # rich: once a command runs (it prints through rich)

    from orchestrator.cli.console import err
    from orchestrator.sweep.signals import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # `finally` blocks (lock release, restore) run on SIGTERM too
            code = int(args.func(args))
            sys.stdout.flush()  # a reader gone before the last lines: said here, not at exit
            return code
    except Interrupted as exc:
        err.print(f"interrupted ({escape(str(exc))})")
        _print_notes(exc)
        return exc.exit_code
    except OrchError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        _print_notes(exc)
        if exc.detail:
            err.print(exc.detail.rstrip(), markup=False)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        err.print("interrupted")
        _print_notes(exc)
        return 130
    except Exception as exc:
        if (words := _out_of_resources(exc)) is not None:
            err.print(f"[red]error:[/red] {escape(words)}")
            _print_notes(exc)
            return 1
        # a bug: Python's traceback shows it (and prints the notes at its end, long after the
        # user stopped reading), so the notes - what was left changed and how to put it back,
        # e.g. "NOT restored: ...; finish with: orch restore RUN_DIR" - come first, on their own
        _print_notes(exc)
        raise


def _out_of_resources(exc: BaseException) -> str | None:
    """The words for a controller that ran out of threads or memory, or None (a bug: its
    traceback). Why: under `ulimit -v 2000000` (2 GB of address space, as some shared login nodes
    set) a sweep's fourth trial could not start a thread: a Python traceback, exit 1, the hosts
    restored and the finished trials kept, which the traceback did not say."""
    if isinstance(exc, MemoryError):
        what = "out of memory"
    elif isinstance(exc, RuntimeError) and str(exc) == "can't start new thread":
        what = "cannot start a thread"
    else:
        return None
    return (
        f"the controller ran out of resources: {what} (raise its limits: `ulimit -v` address space, `ulimit -u` "
        "processes, or its cgroup's memory.max or pids.max; a run keeps its finished trials: `orch status` says "
        "how to continue it)"
    )


def _refuse_unknown(parser: argparse.ArgumentParser, unknown: list[str], root: argparse.ArgumentParser) -> None:
    """Unknown arguments are refused by the command they were given to: its usage, and the option
    meant when one is close (`--dry-rn`: did you mean --dry-run?), or the commands it is an option
    of (`orch queue add --replicates`: orch run's; it was "did you mean --reports?"). Exits 2."""
    known = [o for action in parser._actions for o in action.option_strings]
    elsewhere = {arg: found for arg in unknown if arg.startswith("--") and (found := _commands_with(root, arg))}
    close = {
        arg: match[0]
        for arg in unknown
        if arg.startswith("-")
        and arg not in elsewhere
        and (match := difflib.get_close_matches(arg.split("=", 1)[0], known, n=1))
    }
    hints = [f"{arg}: did you mean {m}?" for arg, m in close.items()]
    if len(unknown) == 1 and close:  # the common case reads plainly: (did you mean --dry-run?)
        hints = [f"did you mean {close[unknown[0]]}?"]
    hints += [f"{arg} is an option of {_some(found)}, not of {parser.prog}" for arg, found in elsewhere.items()]
    more = f" ({'; '.join(hints)})" if hints else ""
    parser.error(f"unrecognized arguments: {' '.join(unknown)}{more}")


def _some(commands: list[str], shown: int = 3) -> str:
    """`orch run, orch plan`; past `shown`, the rest counted (--store is an option of six)."""
    more = f" and {len(commands) - shown} more" if len(commands) > shown else ""
    return ", ".join(commands[:shown]) + more


def _commands_with(parser: argparse.ArgumentParser, option: str) -> list[str]:
    """The commands (`orch run`, `orch queue add`) that take `option` (`--x=1` as `--x`), in --help's order."""
    name = option.split("=", 1)[0]
    found = [parser.prog] if any(name in a.option_strings for a in parser._actions) else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # an alias names its command again
                found += _commands_with(sub, option)
    return found


def _print_notes(exc: BaseException) -> None:
    """Each note added to the error on its way up (BaseException.add_note), a line of its own."""
    from rich.markup import escape

    from orchestrator.cli.console import err

    for note in notes(exc):
        err.print(escape(note))


def build_parser() -> argparse.ArgumentParser:
    p = OrchParser(
        prog="orch",
        description="Sweep server flags on prefill/decode inference deployments and report which "
        "flag causes what, with evidence.",
        epilog="Start with: orch run matrices/overlap_ablation.yaml  (runs on the bundled simulator). " + EXIT_CODES,
    )
    p.add_argument("--version", action="version", version=f"orch {__version__}")
    p.set_defaults(func=None)  # a command sets its own
    sub = p.add_subparsers(metavar="COMMAND")  # its parsers are OrchParsers too

    _add_run(sub)
    _add_resume(sub)
    _add_views(sub)
    _add_restore(sub)
    hunt_cmd = command(
        sub, "hunt", "find which suspect flags cause a failure (the matrix's hunt: section)", hunt.cmd_hunt
    )
    matrix_args(hunt_cmd, example="matrices/dsv4_hunt.yaml")
    hunt_cmd.epilog = HUNT_EXIT_CODES
    hunt.add_options(hunt_cmd, DEFAULT_REPORTS)
    reports.register(sub)
    team.register(sub)
    notify_hook = _option(sub, "notify", "--webhook")  # `notify` sends now, not "when a sweep ends"
    notify_hook.help = "POST the run's summary here now (repeatable; slack+https://... for Slack; also $ORCH_WEBHOOKS)"
    add_examples(p)
    return p


def _add_run(sub: argparse._SubParsersAction) -> None:
    """`orch run`: the sweep, with its options."""
    run = command(sub, "run", "run a sweep: edit env files, restart, wait, run the repro, report", cmd_run)
    run.epilog = EXIT_CODES
    matrix_args(run)
    run.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    run_choice_args(run)
    run.add_argument("--out", "--reports", type=Path, default=DEFAULT_REPORTS, metavar="DIR", help=REPORTS_HELP)
    run.add_argument("--run-id", help="name of the run directory (default: <utc time>-<matrix name>)")
    run.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    run.add_argument("--webhook", action="append", metavar="URL", help=SWEEP_WEBHOOK_HELP)
    run.add_argument("--skip-preflight", action="store_true", help=argparse.SUPPRESS)


def _add_resume(sub: argparse._SubParsersAction) -> None:
    """`orch resume`: an interrupted run taken up again."""
    resume = command(sub, "resume", "continue an interrupted run (same matrix, inventory and plan)", cmd_resume)
    resume.epilog = EXIT_CODES  # a resume ends as the run it continues (a hunt's: 1 with no culprit set)
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's folder (orch run printed it)")
    resume.add_argument(
        "--dry-run", action="store_true", help="print the trials a resume would run and touch nothing (no host)"
    )
    resume.add_argument("--fail-fast", action="store_true", help="stop at the first failed trial")
    resume.add_argument(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        help="extra attempts for infrastructure failures (default: what the run was started with)",
    )
    resume.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    resume.add_argument("--webhook", action="append", metavar="URL", help=SWEEP_WEBHOOK_HELP)


def _add_views(sub: argparse._SubParsersAction) -> None:
    """`orch validate`, `orch plan` and `orch report`: what touches no host."""
    val = command(
        sub,
        "validate",
        "check a matrix (and the inventory) without touching any host, and show each host as orch read it "
        "(address, user, port and key, env file, unit, health URL; the defaults orch filled in marked)",
        cmd_validate,
    )
    matrix_args(val)

    plan = command(sub, "plan", "show cells, env changes per host, restarts and the estimated duration", cmd_plan)
    matrix_args(plan)
    plan.add_argument("--replicates", type=positive, help=REPLICATES_HELP)
    plan.add_argument("--seed", type=bounded_int(0, MAX_SEED), help=SEED_HELP)
    plan.add_argument("--trials", action="store_true", help="list every trial in run order")

    rep = command(
        sub,
        "report",
        "re-render the HTML report of a run directory and the runs index beside it (reports/index.html)",
        cmd_report,
    )
    rep.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the run's folder (orch run printed it), e.g. reports/<run-id>"
    )


def _add_restore(sub: argparse._SubParsersAction) -> None:
    """`orch restore`: from the run's folder, or from the hosts' own copies without it."""
    res = command(sub, "restore", "put a run's hosts back as they were (after a crash or kill -9)", cmd_restore)
    res.epilog = RESTORE_EXIT_CODES
    res.add_argument("run_dir", type=Path, metavar="RUN_DIR", nargs="?", help="the run's folder (orch run printed it)")
    res.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    hosts = res.add_argument_group(
        "without the run folder (deleted)",
        "put a testbed back from the copies of their env files a run left on its hosts; which units ran before "
        "the run is read from the record beside each copy (<env>.orch-units-<run_id>): those are restarted on the "
        "originals, one the run started is stopped; a copy without a record (older orch) leaves every unit "
        "running now running, named",
    )
    hosts.add_argument("-t", "--testbed", help="the testbed, instead of RUN_DIR")
    hosts.add_argument("--run-id", help="the run whose copies to put back (default: the one the testbed's lock names)")
    hosts.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY, help="inventory YAML (the run's)")


def _option(sub: argparse._SubParsersAction, name: str, option: str) -> argparse.Action:
    """An option of a command registered elsewhere (its help worded for this command)."""
    return next(a for a in sub.choices[name]._actions if option in a.option_strings)


def warn_controller_files(prepared: PreparedSweep, warn: Warn) -> None:
    """What `orch run` refuses on this machine before contacting a host (a missing SSH key or
    known_hosts file), said as a warning by `orch validate` and `orch plan`, which look at the
    design (the dry runs refuse it, as the run does): the user fixes it before the run, not at it.
    A few, then a count (1,000 roles each naming one missing key)."""
    from orchestrator.sweep.prepare import bounded_problems, missing_key_files

    for line in bounded_problems(missing_key_files(prepared.testbeds, prepared.inventory), prepared.inventory):
        warn(line)


def cmd_validate(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli.console import out, warn
    from orchestrator.core.words import counted, on_testbeds
    from orchestrator.sweep.prepare import prepare  # the config models and the plan, not the run machinery

    prepared = prepare(sweep_request(args), warn=warn)
    warn_controller_files(prepared, warn)
    plan = prepared.plan
    m = plan.matrix
    # the testbeds the run would use (-t A,B said "on testbed 'A'")
    where = on_testbeds([tb.name for tb in prepared.testbeds])
    if m.hunt is not None:  # a hunt decides its trials as it goes: its first wave is all that is known
        out.print(
            escape(
                f"{m.path}: ok — a hunt over {len(m.hunt.flags)} suspect flags {where}; "
                f"first wave {len(plan.steps)} trials, the rest decided as it goes "
                f"(`orch plan {m.path}` shows the expected sessions)"
            )
        )
        _print_hosts(prepared)
        return 0
    if m.gates:  # valid, but a gate no data of this design can pass: said now, not as exit 3
        from orchestrator.cli.planview import gate_warnings  # the statistics stack (scipy, pandas): for gates only

        for line in gate_warnings(plan):
            warn(line)
    out.print(
        escape(
            f"{m.path}: ok — {counted(len(m.factors), 'factor')}, {counted(len(plan.cells), 'cell')}, "
            f"{counted(len(plan.steps), 'trial')}{' at most' if m.adaptive else ''} {where}"
        )
    )
    _print_hosts(prepared)
    return 0


def _print_hosts(prepared: PreparedSweep) -> None:
    """The chosen testbeds' hosts as orch read them, defaults marked (cli.hostsview)."""
    from rich.markup import escape

    from orchestrator.cli.console import out
    from orchestrator.cli.hostsview import host_lines

    for line in host_lines(prepared.testbeds, prepared.inventory.path):
        out.print(escape(line))


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out, warn
    from orchestrator.sweep.prepare import prepare

    prepared = prepare(sweep_request(args, replicates=args.replicates, seed=args.seed), warn=warn)
    warn_controller_files(prepared, warn)
    plan = prepared.plan
    if plan.matrix.hunt is not None:  # a hunt plans its first wave and shows its expected cost (-t a,b: on each)
        hunt.print_hunt_plan(plan, out, [tb.name for tb in prepared.testbeds])
        return 0
    from orchestrator.cli.planview import print_plan

    print_plan(plan, out, testbeds=[tb.name for tb in prepared.testbeds], list_trials=args.trials)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out, warn
    from orchestrator.sweep.prepare import check_new_run, prepare

    request = sweep_request(
        args,
        replicates=args.replicates,
        seed=args.seed,
        reports_dir=args.out,
        run_id=args.run_id,
        fail_fast=args.fail_fast,
        retries=args.retries,
        break_lock=args.break_lock,
        skip_preflight=args.skip_preflight,
    )
    prepared = prepare(request, warn=warn)
    if prepared.plan.matrix.hunt is not None:  # a hunt is its own command (nothing touched yet)
        raise hunt.not_a_run(prepared.plan.matrix)
    # every argument is checked before the dry run returns: it refuses what the real run would
    check_new_run(request, prepared)  # a bad or taken --run-id, a repro program this machine lacks
    hooks = _webhooks(args.webhook)  # a bad URL is bad input: exit 2 before anything is touched
    if args.dry_run:
        from orchestrator.cli.planview import print_plan
        from orchestrator.sweep.prepare import check_key_files

        check_key_files(prepared.testbeds, prepared.inventory)  # a missing SSH file: refused, as api.run does
        print_plan(prepared.plan, out, testbeds=[tb.name for tb in prepared.testbeds], list_trials=True)
        out.print("dry run: nothing was changed")
        return 0
    from orchestrator.sweep import api  # the run machinery (transports, HTTP, the runner): for a real run

    outcome = api.run(request, _live_progress, warn=warn, prepared=prepared)
    return _finished(outcome, hooks)


def cmd_resume(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import warn
    from orchestrator.sweep import api

    request = api.ResumeRequest(
        args.run_dir, fail_fast=args.fail_fast, retries=args.retries, break_lock=args.break_lock
    )
    hooks = _webhooks(args.webhook)
    if args.dry_run:
        from orchestrator.cli.console import out
        from orchestrator.cli.planview import print_resume_dry_run

        return print_resume_dry_run(api.preview_resume(args.run_dir), out)
    return _finished(api.resume(request, _live_progress, warn=warn), hooks)


def cmd_restore(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from orchestrator.cli import output
    from orchestrator.cli.console import err, warn
    from orchestrator.sweep import api
    from orchestrator.sweep.progress import RichProgress, Tee
    from orchestrator.team.livestatus import RestoreStatus

    if args.run_dir is None:  # the folder is gone: the hosts' own copies
        outcome = api.restore_from_hosts(_host_restore_request(args), RichProgress(err))
    elif args.testbed is not None or args.run_id is not None or args.inventory is not DEFAULT_INVENTORY:
        raise UsageError("RUN_DIR or --testbed, not both", hint="a run's folder names its testbeds and inventory")
    else:
        progress = Tee(RichProgress(err), RestoreStatus(args.run_dir))  # status.json: the hosts are back
        outcome = api.restore(api.RestoreRequest(args.run_dir, break_lock=args.break_lock), progress, warn=warn)
    for tb in outcome.testbeds:  # a testbed of a parallel run that could not be restored at all, and why
        if tb.error is not None:
            err.print(f"[red]error:[/red] testbed {escape(tb.testbed)}: {escape(tb.error)}")
    output.show_restore(outcome)
    return outcome.exit_code


def _host_restore_request(args: argparse.Namespace) -> api.HostRestoreRequest:
    """`orch restore --testbed NAME`: a testbed is named, or there is nothing to restore."""
    from orchestrator.sweep import api

    if args.testbed is None:
        raise UsageError(
            "give the run's folder (RUN_DIR), or --testbed NAME to restore from the copies on its hosts",
            hint="orch restore reports/<run-id>, or orch restore --testbed NAME -i INVENTORY [--run-id ID]",
        )
    return api.HostRestoreRequest(args.inventory, args.testbed, args.run_id, break_lock=args.break_lock)


def _live_progress(started: api.Started) -> Progress:
    """The terminal bar plus status.json (read by `orch status` and `orch serve`)."""
    from orchestrator.cli import output
    from orchestrator.sweep.progress import Tee
    from orchestrator.team.livestatus import LiveStatus, RestoreStatus

    if started.resumed and started.left == 0 and not started.open_ended:
        # nothing left: the finished run's status.json stays as it ended, but for its restore
        return Tee(output.terminal(started), RestoreStatus(started.run_dir, by="orch resume"))
    return Tee(output.terminal(started), LiveStatus(started.run_dir, cell_name=started.cell_name))


def _webhooks(webhooks: list[str] | None) -> list[Webhook]:
    """The --webhook URLs (and ORCH_WEBHOOKS, when some --webhook is given), parsed before the
    sweep starts: a bad one found after it would turn the sweep's exit code into a usage error."""
    if not webhooks:
        return []
    from orchestrator.cli.console import warn
    from orchestrator.team import notify

    hooks = notify.configured(webhooks)
    for line in notify.plain_http(hooks):
        warn(line)
    return hooks


def _finished(outcome: api.SweepOutcome, hooks: list[Webhook]) -> int:
    """Show how the sweep ended; POST its summary to the webhooks; a webhook never fails the sweep."""
    from orchestrator.cli import output
    from orchestrator.cli.console import err
    from orchestrator.core.words import counted

    output.show_outcome(outcome)
    hunt.after(outcome)  # a hunt's culprit summary and hunt.html (nothing for other runs)
    if hooks:
        from orchestrator.team import notify

        try:
            summary = notify.summarize_run(outcome.run_dir)
        except OrchError as exc:  # a journal the report refuses (damage at its line): say why, as a queue does
            err.print(f"webhook: no summary of the run: {exc}", markup=False)
            summary = notify.error_summary(outcome.run_id, f"run {outcome.status}, no summary: {exc}")
        sent = notify.send(summary, hooks, warn=lambda m: err.print(f"{m} {notify.SWEEP_UNAFFECTED}", markup=False))
        for d in sent:  # a delivered one was not said at all: did the team's channel get it?
            if d.ok:
                err.print(f"webhook {d.webhook}: delivered ({counted(d.attempts, 'attempt')})", markup=False)
    return outcome.exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out
    from orchestrator.report.render import fresh_summary, write_report
    from orchestrator.report.site import write_index

    path = write_report(args.run_dir)
    write_index(args.run_dir.parent, fresh_summary)
    _say_torn(args.run_dir)
    out.print(f"report: {path}", markup=False)
    return 0


def _say_torn(run_dir: Path) -> None:
    """A torn last line of the journal (the controller stopped mid-write) was said on the page
    only: `orch report` printed 'report: ...' as for a whole journal."""
    from orchestrator.cli.console import warn
    from orchestrator.store.journal import torn_line
    from orchestrator.store.rundir import RunDir

    journal = RunDir(run_dir).journal
    line = torn_line(journal) if journal.is_file() else None
    if line is not None:
        warn(
            f"{journal}:{line}: the journal's last line is torn (the controller stopped mid-write); "
            "the report leaves it out"
        )


if __name__ == "__main__":
    sys.exit(main())
