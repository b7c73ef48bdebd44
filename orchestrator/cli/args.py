"""What every command module shares: default paths, a subcommand maker, the matrix arguments
and the request they name. A module of its own so command modules (team, reports) need not
import cli.main, which imports them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.cli import output
from orchestrator.sweep.api import PreparedSweep, SweepRequest, prepare, testbeds_from_spec

DEFAULT_INVENTORY = Path("inventory/local.yaml")
DEFAULT_REPORTS = Path("reports")


def command(
    sub: argparse._SubParsersAction, name: str, help_: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_, description=help_)
    cmd.set_defaults(func=func)
    return cmd


def matrix_args(cmd: argparse.ArgumentParser) -> None:
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


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]. Bounds keep a typo (10^23) from reaching a
    database or an allocation as an OverflowError or gigabytes."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{value if len(text) < 40 else text[:20] + '...'} is not between {low} and {high}"
            )
        return value

    return parse


def bounded_seconds(high: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds in (0, high] (no inf or nan)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not 0 < value <= high:  # nan fails both comparisons
            raise argparse.ArgumentTypeError(f"{text[:40]} is not a number of seconds in (0, {high:g}]")
        return value

    return parse


def sweep_request(args: argparse.Namespace, **more: Any) -> SweepRequest:
    """The sweep the matrix arguments name (MATRIX, -i, -t), with a command's further options."""
    return SweepRequest(args.matrix, args.inventory, testbeds_from_spec(args.testbed), **more)


def prepared_sweep(req: SweepRequest) -> PreparedSweep:
    """Plan the sweep (nothing touched) and show its warnings."""
    ready = prepare(req)
    for warning in ready.warnings:
        output.warn(warning)
    return ready
