"""Ctrl-C reaches orch under test however pytest was started. A shell starts a background job with
SIGINT ignored, and an ignored signal stays ignored across exec: the conftest gave Python's own
handler back on xdist workers only, so a run without workers started that way (bench/mutants.py
as a background job, `-n0`) saw the signal tests fail on unmutated code (the seventh mutation
round)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_sigint_has_pythons_own_handler() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.process
def test_a_run_started_with_sigint_ignored_gets_pythons_handler_back() -> None:
    ignored = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.executable, sys.argv[1:])"
    )
    this = f"{Path(__file__).relative_to(REPO)}::test_sigint_has_pythons_own_handler"
    argv = [sys.executable, "-c", ignored, sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", this]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
