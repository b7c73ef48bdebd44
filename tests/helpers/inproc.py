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


@contextlib.contextmanager
def _environment(env: dict[str, str | None]) -> Iterator[None]:
    """os.environ changed as given (None: removed) while the block runs, then as it was."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def orch_in(args: list[str], cwd: Path, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """`orch ARGS` in this process from `cwd`: a CompletedProcess as subprocess.run gives."""
    from orchestrator.cli.main import main

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with _environment(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse refusing the command line
                code = int(exc.code or 0)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["orch", *args], code, out.getvalue(), err.getvalue())
