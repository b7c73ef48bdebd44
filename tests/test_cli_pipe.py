"""An orch command whose stdout reader went away (`orch run M --dry-run | head`) ends quietly
with 141 (128 + SIGPIPE, what a shell reports of `yes | head`), never with a BrokenPipeError
traceback, whichever way it wrote: a raw write (the plan's rows) or rich's console (whose own
handling exited 1, orch's "trials failed"). argparse's --help already ends quietly (it ignores the
error; the interpreter's last flush does too).

A real pipe whose read end is closed before orch starts: its first write fails, every time (a
reader that closes after some lines races with orch's last write)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MATRIX = "matrices/overlap_ablation.yaml"

COMMANDS = {
    "run --dry-run (raw rows)": ["run", MATRIX, "--dry-run"],
    "validate (rich console)": ["validate", MATRIX],
}


@pytest.mark.process
@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_closed_stdout_pipe_ends_the_command_quietly_with_141(argv: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.main", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=50,
            cwd=ROOT,
            env={**os.environ, "NO_COLOR": "1", "TERM": "dumb"},
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.process
def test_orch_on_an_ascii_terminal_writes_ascii_and_no_traceback(tmp_path: Path) -> None:
    """PYTHONIOENCODING=ascii (a terminal that is not UTF-8, cli.stdio), the real interpreter's
    streams: `orch validate` and `orch plan` of the demo, and a missing file with a dash in its
    name, end 0 or 2, every byte ASCII, no traceback, no escape of orch's dash (exit 1 and
    UnicodeEncodeError before)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "ascii", "HOME": str(tmp_path)}
    for args in (["validate", MATRIX], ["plan", MATRIX], ["validate", str(tmp_path / "missing—file.yaml")]):
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.main", *args],
            capture_output=True,
            env=env,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode in (0, 2), done.stderr
        for stream in (done.stdout, done.stderr):
            stream.decode("ascii")
            assert b"Traceback" not in stream
            assert b"\\u2014" not in stream
    assert b"missing-file.yaml: file not found" in done.stderr


@pytest.mark.process
@pytest.mark.parametrize("closed", [">&-", ">&- 2>&- <&-", "<&-"])
def test_a_standard_stream_closed_at_start_is_not_a_failed_run(closed: str) -> None:
    """`orch run M >&-` from a script or a daemon tool: Python makes sys.stdout None, and a sweep
    that completed every trial and wrote its report ended in an AttributeError traceback, exit 1
    (orch's "trials failed"). cli.stdio gives a closed stream /dev/null: `orch validate` and `orch
    run --dry-run` end 0; with stderr open, nothing is said on it."""
    for argv in (["validate", MATRIX], ["run", MATRIX, "--dry-run"]):
        done = subprocess.run(
            ["sh", "-c", f'exec "$@" {closed}', "sh", sys.executable, "-m", "orchestrator.cli.main", *argv],
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        if "2>&-" not in closed:
            assert done.stderr == b""
