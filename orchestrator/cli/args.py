"""What every command module shares: default paths, a subcommand maker, the matrix arguments
and the request they name. A module of its own so command modules (team, reports) need not
import cli.main, which imports them; it builds requests only (sweep.apitypes), so it stays
below the sweep machinery."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.sweep.apitypes import SweepRequest, testbeds_from_spec

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


def sweep_request(args: argparse.Namespace, **more: Any) -> SweepRequest:
    """The sweep the matrix arguments name (MATRIX, -i, -t), with a command's further options."""
    return SweepRequest(args.matrix, args.inventory, testbeds_from_spec(args.testbed), **more)
