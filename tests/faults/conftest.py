"""Fixtures for the fault-injection tests: a private simulated testbed per test, and a last-resort
cleanup (by pid, only processes on that testbed's own ports) if a test failed half-way."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from .helpers import SimBed, cleanup_processes, make_simbed


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[SimBed]:
    b = make_simbed(tmp_path / "bed")
    yield b
    cleanup_processes(b)
