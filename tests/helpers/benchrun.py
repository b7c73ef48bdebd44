"""Running a bench/ script as its user would, for the benchmarks' smoke tests."""

from __future__ import annotations

import importlib.util
import runpy
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest

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


def bench_in_process(
    script: str, *args: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """stdout of bench/SCRIPT ARGS run as __main__ in this process (its folder first on sys.path, as
    when it runs): no second interpreter nor second import of scipy (half a smoke test's time)."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    monkeypatch.syspath_prepend(str(BENCH))
    runpy.run_path(str(BENCH / script), run_name="__main__")
    return capsys.readouterr().out


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
