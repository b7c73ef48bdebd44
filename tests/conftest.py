"""Shared fixtures. Real-system fixtures (sim processes, testbed hosts, browser) live in their
own modules and are registered here so every test module can ask for them by name.

tests/ is on sys.path once, through pyproject's pytest `pythonpath`: shared code imports as
`helpers.<module>` (tests/helpers/), `fakes` (tests/fakes.py: fake transport, service manager
and health side for runner tests) and `testbed.<module>`. No test module imports another."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Bytecode caching on, whatever the machine says: with PYTHONDONTWRITEBYTECODE set (these machines
# set it), every orch, simulator and repro process the suite starts (over a thousand) compiled the
# whole package from source again, and every xdist worker re-rewrote every test module's asserts.
# __pycache__ is ignored by git; only the caching changes, never what runs.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Tests send traffic only to loopback or namespaces they make: a proxy the machine exports must
# not carry their webhooks (orch's webhooks honour one: tests/team/test_notify.py sets its own)
for _proxy in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
    os.environ.pop(_proxy, None)

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def repo() -> Path:
    return REPO


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# Real systemd + sshd hosts (tests/testbed/fixture.py): one booted testbed per session.
# Headless Chromium over the DevTools pipe (tests/helpers/chromium.py), for the browser tests.
from helpers.chromium import browser  # noqa: E402,F401
from helpers.workers import TIERS, workers_for  # noqa: E402
from testbed.fixture import testbed  # noqa: E402,F401

# ------------------------------------------------------------------------------- pytest-xdist
# The suite runs on several workers (pyproject: -n, --dist loadgroup). There, real-system tests
# (they mostly wait: restarts, warm-ups, outages, deadlines) go first, so the workers start on the
# long ones and the short unit tests fill the tail instead of one long test ending the run alone.
# TIERS (helpers.workers): every tier but the unit tier. The unit tier (`-m "not sim and not
# testbed and not browser and not process"`) starts no process at all; the guard below holds it to that.


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's own marker, declared here too so that runs without xdist (-p no:xdist) accept it
    config.addinivalue_line("markers", "xdist_group(name): run every test of the group on one worker")
    if os.environ.get("PYTEST_XDIST_WORKER") or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # execnet starts workers with SIGINT ignored (Ctrl-C is the controller's business), as a
        # shell starts a background job, and an ignored signal stays ignored across exec: orch
        # under test would never see the Ctrl-C the signal tests send it. Such a process gets
        # Python's own handler back, as in a plain run (tests/test_sigint_inherited.py).
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto` (pyproject's default): one per core for the unit tier alone, one
    more than cores with real-system tests (helpers.workers). PYTEST_XDIST_AUTO_NUM_WORKERS
    still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return workers_for(config.option.markexpr or "", len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects, and all agree on the order
        real = {id(i) for i in items if any(i.get_closest_marker(m) for m in TIERS)}
        items.sort(key=lambda i: id(i) not in real)  # stable: file order kept within each part


# ------------------------------------------------------------------------------- the unit tier
@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test without a tier marker is a unit test, and a unit test starts no process (no orch in
    a subprocess, no benchmark script, no shell): the unit tier stays fast and means what it says.
    A test that needs a process says so with `process` (or sim, testbed, browser)."""
    if any(request.node.get_closest_marker(m) for m in TIERS):
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it `@pytest.mark.process` (or sim, testbed, "
            "browser), or test the logic without one"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
    yield
