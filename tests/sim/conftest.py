"""Fixtures for the simulator and the local edges: real processes on loopback, free ports, and a
check after every test that each process a test started is gone (by PID)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from .helpers import Sim, pid_running


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    s = Sim(tmp_path)
    yield s
    s.stop_all()
    left = [p.pid for p in s.started if pid_running(p.pid)]
    assert not left, f"processes left running: {left}"
