"""`orch ARGS` run to the end in the test's process, as a subprocess of `python -m
orchestrator.cli.main` would run it: from `cwd` (relative paths in its output and arguments
resolve as there), with the environment changes given, stdout and stderr collected apart.

Why: each orch subprocess pays an interpreter start and the imports of pydantic, pandas and scipy
(~1-2 CPU-s). Only for commands that nothing signals or kills and whose output does not depend on
the terminal's width; anything testing the process itself stays a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def _environment(env: dict[str, str | None]) -> Iterator[None]:
    """os.environ changed as given (None: removed) while the block runs, then as it was."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            _set(name, value)
        yield
    finally:
        for name, value in saved.items():
            _set(name, value)


def orch_in(args: list[str], cwd: Path, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """`orch ARGS` in this process from `cwd`: a CompletedProcess as subprocess.run gives."""
    out, err = io.StringIO(), io.StringIO()
    code = run_main(args, cwd, env or {}, out, err)
    return subprocess.CompletedProcess(["orch", *args], code, out.getvalue(), err.getvalue())


def run_main(args: list[str], cwd: Path, env: dict[str, str | None], out: IO[str], err: IO[str]) -> int:
    """orch's main(ARGS) from `cwd` with the environment changes given, its stdout and stderr
    written to `out` and `err` (one stream for both keeps their lines in order, as 2>&1 does)."""
    from orchestrator.cli.main import main

    here = os.getcwd()
    os.chdir(cwd)
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                return main(args)
            except SystemExit as exc:  # argparse refusing the command line
                return int(exc.code or 0)
    finally:
        os.chdir(here)
