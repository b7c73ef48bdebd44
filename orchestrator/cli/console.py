"""The two consoles every command prints to: results on stdout, progress and messages on stderr."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

from orchestrator.cli.stdio import to_devnull

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports of a command whose reader went away


def stdout_closed() -> int:
    """The reader of stdout went away (`orch run M --dry-run | head`): the command ends quietly with
    EXIT_PIPE_CLOSED, as one killed by SIGPIPE does (what a shell with pipefail sees of `yes | head`),
    never with a traceback. stdout is pointed at /dev/null first, so the interpreter's own flush at
    exit cannot fail again (Python's docs, signal module: "Note on SIGPIPE")."""
    to_devnull(sys.stdout.fileno())
    return EXIT_PIPE_CLOSED


class _Console(Console):
    """rich's Console, ending the command on a closed pipe with orch's code for it (stdout_closed)
    rather than rich's 1 (orch's "trials failed"): the same code whichever way the output was written.
    A SystemExit, as rich's own: it unwinds a sweep through its `finally` blocks (the restore) and no
    `except Exception` on the way takes it for a failed trial."""

    def on_broken_pipe(self) -> None:
        if not self.quiet:
            raise SystemExit(stdout_closed())


# emoji=False: rich reads ':100:' and ':1234:' as emoji codes, so 'm.yaml:100: invalid YAML' printed as
# 'm.yaml💯 invalid YAML' and an error lost its line (bench_fuzz_inputs, seed 1108)
out = _Console(highlight=False, soft_wrap=True, emoji=False)
err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {escape(message)}")
