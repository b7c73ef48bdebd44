"""The `orch` command. Maps every OrchError to a message and an exit code, in one place.

Exit codes: 0 ok, 1 the sweep finished with failed trials (or a runtime fault), 2 bad input or
usage (nothing on any host touched), 130 interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from orchestrator import __version__
from orchestrator.core.config import Inventory, Matrix, Testbed, check_against_inventory, read_inventory, read_matrix
from orchestrator.core.plan import Plan, make_plan
from orchestrator.errors import Interrupted, OrchError, UsageError

DEFAULT_INVENTORY = Path("inventory/local.yaml")
DEFAULT_REPORTS = Path("reports")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _sigterm_as_interrupt()
    try:
        return int(args.func(args))
    except Interrupted as exc:
        err.print(f"interrupted ({escape(str(exc))})")
        return exc.exit_code
    except OrchError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        if exc.detail:
            err.print(exc.detail.rstrip(), markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _sigterm_as_interrupt() -> signal.Handlers | None:
    """SIGTERM behaves like Ctrl-C for the whole command, so `finally` blocks (lock release,
    restore) run instead of the process vanishing; the runner installs the same during a sweep."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"received {signal.Signals(signum).name}")

    return signal.signal(signal.SIGTERM, handler)  # type: ignore[return-value]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orch",
        description="Sweep server flags on prefill/decode inference deployments and report which "
        "flag causes what, with evidence.",
        epilog="Start with: orch run matrices/overlap_ablation.yaml  (runs on the bundled simulator)",
    )
    p.add_argument("--version", action="version", version=f"orch {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")

    run = _command(sub, "run", "run a sweep: edit env files, restart, wait, run the repro, report", cmd_run)
    _matrix_args(run)
    run.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    run.add_argument("--replicates", type=_positive, help="replicate rounds (overrides the matrix)")
    run.add_argument("--seed", type=int, help="seed for the randomized order (default: matrix seed or random)")
    run.add_argument("--out", type=Path, default=DEFAULT_REPORTS, help="reports folder (default: reports/)")
    run.add_argument("--run-id", help="name of the run directory (default: <utc time>-<matrix name>)")
    run.add_argument("--fail-fast", action="store_true", help="stop at the first failed trial")
    run.add_argument("--retries", type=int, default=1, help="extra attempts for infrastructure failures (default 1)")
    run.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    run.add_argument(
        "--webhook",
        action="append",
        metavar="URL",
        help="POST a summary here when the sweep ends (repeatable; slack+https://... for Slack)",
    )
    run.add_argument("--skip-preflight", action="store_true", help=argparse.SUPPRESS)

    resume = _command(sub, "resume", "continue an interrupted run (same matrix, inventory and plan)", cmd_resume)
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    resume.add_argument("--fail-fast", action="store_true", help="stop at the first failed trial")
    resume.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    resume.add_argument("--webhook", action="append", metavar="URL", help="POST a summary here when the sweep ends")

    val = _command(sub, "validate", "check a matrix (and the inventory) without touching any host", cmd_validate)
    _matrix_args(val)

    plan = _command(sub, "plan", "show cells, env changes per host, restarts and the estimated duration", cmd_plan)
    _matrix_args(plan)
    plan.add_argument("--replicates", type=_positive)
    plan.add_argument("--seed", type=int)
    plan.add_argument("--trials", action="store_true", help="list every trial in run order")

    rep = _command(sub, "report", "re-render the HTML report of a run directory", cmd_report)
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    res = _command(sub, "restore", "put a run's hosts back as they were (after a crash or kill -9)", cmd_restore)
    res.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    res.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    _register_extensions(sub)
    return p


def _register_extensions(sub: argparse._SubParsersAction) -> None:
    """Commands that live in their own modules (team features) add themselves here."""
    import importlib

    for name in ("reports", "team"):
        try:
            module = importlib.import_module(f"orchestrator.cli.{name}")
        except ModuleNotFoundError as exc:  # pragma: no cover - a module not present yet
            if exc.name != f"orchestrator.cli.{name}":
                raise
            continue
        module.register(sub)


def _command(
    sub: argparse._SubParsersAction, name: str, help_: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_, description=help_)
    cmd.set_defaults(func=func)
    return cmd


def _matrix_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("matrix", type=Path, metavar="MATRIX", help="matrix YAML, e.g. matrices/overlap_ablation.yaml")
    cmd.add_argument(
        "-i",
        "--inventory",
        type=Path,
        default=DEFAULT_INVENTORY,
        help="inventory YAML (default: inventory/local.yaml, the bundled simulator)",
    )
    cmd.add_argument(
        "-t",
        "--testbed",
        help="testbed name in the inventory (default: the first); "
        "A,B or 'all' runs the trials across several testbeds at once",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def load(args: argparse.Namespace) -> tuple[Matrix, Inventory]:
    matrix = read_matrix(args.matrix, _shown(args.matrix))
    if not args.inventory.exists():
        raise UsageError(
            f"inventory {args.inventory} not found", hint="run from the orch checkout or pass -i INVENTORY"
        )
    inventory = read_inventory(args.inventory, _shown(args.inventory))
    return matrix, inventory


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _plan(args: argparse.Namespace) -> tuple[Plan, Inventory]:
    matrix, inventory = load(args)
    from orchestrator.core.matrix import warnings_for

    for warning in warnings_for(matrix, getattr(args, "replicates", None)):
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    testbeds = select_testbeds(inventory, args.testbed)
    plan = make_plan(matrix, testbeds[0], getattr(args, "seed", None), getattr(args, "replicates", None))
    for other in testbeds[1:]:
        check_same_roles(plan.testbed, other, inventory)
        check_against_inventory(matrix, other)
    return plan, inventory


def select_testbeds(inventory: Inventory, spec: str | None) -> list[Testbed]:
    """-t NAME, -t A,B (parallel testbeds) or -t all; default: the inventory's first testbed."""
    if spec is None:
        return [inventory.testbed(None)]
    if spec == "all":
        return list(inventory.testbeds.values())
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise UsageError(f"testbed listed twice in -t {spec}")
    return [inventory.testbed(n) for n in names]


def check_same_roles(first: Testbed, other: Testbed, inventory: Inventory) -> None:
    if set(first.hosts) != set(other.hosts):
        raise UsageError(
            f"{inventory.path}: testbeds {first.name!r} and {other.name!r} have different roles "
            f"({', '.join(first.hosts)} vs {', '.join(other.hosts)})",
            hint="parallel testbeds must be copies of one deployment",
        )


def cmd_validate(args: argparse.Namespace) -> int:
    plan, _ = _plan(args)
    m = plan.matrix
    out.print(
        escape(
            f"{m.path}: ok — {len(m.factors)} factors, {len(plan.cells)} cells, "
            f"{len(plan.steps)} trials on testbed {plan.testbed.name!r}"
        )
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    plan, _ = _plan(args)
    from orchestrator.cli.planview import print_plan

    print_plan(plan, out, list_trials=args.trials)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    plan, inventory = _plan(args)
    if args.dry_run:
        from orchestrator.cli.planview import print_plan

        print_plan(plan, out, list_trials=True)
        out.print("dry run: nothing was changed")
        return 0
    testbeds = select_testbeds(inventory, args.testbed)
    if len(testbeds) > 1:
        from orchestrator.sweep.parallel import run_parallel

        return run_parallel(plan, testbeds, inventory, args, out, err)
    from orchestrator.sweep.session import run_sweep

    return run_sweep(plan, inventory, args, out, err)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.report.render import write_report
    from orchestrator.report.site import write_index

    path = write_report(args.run_dir)
    write_index(args.run_dir.parent)
    out.print(f"report: {path}", markup=False)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from orchestrator.sweep.session import restore_run

    return restore_run(args.run_dir, out, err, args.break_lock)


def cmd_resume(args: argparse.Namespace) -> int:
    from orchestrator.sweep.session import resume_run

    return resume_run(args.run_dir, args, out, err)


if __name__ == "__main__":
    sys.exit(main())
