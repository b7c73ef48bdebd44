"""argparse types with bounds, in a module that imports nothing of orch: every command module
(cli.hunt included, which must not import cli.args and the sweep API behind it) uses the same
parsers and the same messages."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


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


def reports_folder(text: str) -> Path:
    """An argparse type: a reports folder, never a run's own folder (it holds run.json). Given
    reports/<run-id>, `orch status` said no sweep runs there and `queue list` that nothing was ever
    queued, both exit 0, and `queue add` made a queue.db inside the run."""
    path = Path(text)
    if (path / "run.json").is_file():
        norm = os.path.normpath(text)
        parent = os.path.dirname(norm) or (".." if norm == "." else ".")
        raise argparse.ArgumentTypeError(
            f"{text} is a run's folder (it holds run.json), not a reports folder: "
            f"pass the folder that holds the runs, e.g. --reports {parent}"
        )
    return path
