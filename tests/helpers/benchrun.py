"""Running a bench/ script as its user would, for the benchmarks' smoke tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_output(script: str, *args: str, timeout: float, env: Mapping[str, str] | None = None) -> str:
    """stdout of `python bench/SCRIPT ARGS` run from the repository's root; fails unless it exits
    0, with the tails of both streams."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def bench_module(script: str) -> ModuleType:
    """bench/SCRIPT imported as a module (its name without .py), for tests of its parts."""
    name = script.removesuffix(".py")
    if str(BENCH) not in sys.path:  # as when the script runs: its folder first (bench/timing.py & co)
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
