"""The two consoles every command prints to: results on stdout, progress and messages on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {escape(message)}")
