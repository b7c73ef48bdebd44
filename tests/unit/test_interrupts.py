"""An interrupt (Ctrl-C, SIGTERM) never leaves a process orch started but does not know about.

The CI saw it once: SIGTERM landed in the main thread between `Popen` returning and the local
service manager recording the new pid, and a simulated decode server outlived the sweep. These
tests put the interrupt exactly there (the signal handler's own function, called from inside the
patched `Popen`), and in the main thread while worker threads restart units.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.edges import interrupts
from orchestrator.edges.interrupts import raise_now_or_later, uninterrupted
from orchestrator.edges.services.local import LocalServiceManager, LocalUnit
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.edges.workload import run_command
from orchestrator.errors import Interrupted
from orchestrator.sweep.pool import gather
from orchestrator.sweep.signals import signals_as_interrupt

SLEEPER = (sys.executable, "-c", "import time; time.sleep(60)")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def interrupting_popen(monkeypatch: pytest.MonkeyPatch, module: object, started: list[int]) -> None:
    """`module`'s subprocess.Popen starts the process, then the signal handler fires (as if
    SIGTERM arrived the instant Popen returned)."""
    real = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc.pid)
        raise_now_or_later(Interrupted("received SIGTERM"))
        return proc

    monkeypatch.setattr(module, "Popen", popen)


def test_an_interrupt_inside_a_section_waits_for_its_end_and_outside_is_raised_at_once() -> None:
    steps = []
    with pytest.raises(Interrupted, match="first"):
        with uninterrupted():
            with uninterrupted():
                raise_now_or_later(Interrupted("first"))
                steps.append("inner")
                raise_now_or_later(Interrupted("second"))  # the first one is the one reported
            steps.append("outer")
    assert steps == ["inner", "outer"]
    assert interrupts._pending is None and interrupts._depth == 0
    with pytest.raises(KeyboardInterrupt):
        raise_now_or_later(KeyboardInterrupt())


def test_in_a_worker_thread_a_section_defers_nothing() -> None:
    """Signal handlers run only in the main thread; elsewhere the section must not swallow."""
    caught: list[BaseException] = []

    def work() -> None:
        try:
            with uninterrupted():
                raise_now_or_later(Interrupted("x"))
        except Interrupted as exc:
            caught.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert len(caught) == 1 and interrupts._pending is None


@pytest.mark.process
def test_interrupt_right_after_a_unit_starts_leaves_it_tracked_and_stoppable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "decode.env"
    env.write_text("A=1\n")
    manager = LocalServiceManager({"decode": LocalUnit("decode", SLEEPER, env)}, tmp_path / "state")
    started: list[int] = []
    interrupting_popen(monkeypatch, subprocess, started)
    try:
        with pytest.raises(Interrupted):
            manager.restart("decode")
        assert started and alive(started[0])
        assert manager.state("decode").main_pid == started[0]  # known: the restore can stop it
        assert (tmp_path / "state" / "decode.pid").read_text().strip() == str(started[0])
        monkeypatch.undo()
        manager.stop("decode")
        assert not alive(started[0])
    finally:
        manager.stop_all()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.process
def test_interrupt_right_after_a_command_starts_kills_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    interrupting_popen(monkeypatch, subprocess, started)
    try:
        with pytest.raises(Interrupted):
            LocalTransport().run(list(SLEEPER))
        assert started and not alive(started[0])
        started.clear()
        with pytest.raises(Interrupted):
            run_command(
                "sleep 60", cwd=tmp_path, env=None, timeout_s=60, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e"
            )
        deadline = time.monotonic() + 5
        while alive(started[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(started[0])
    finally:
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_gather_interrupted_waits_for_the_work_already_running() -> None:
    """SIGTERM while two hosts restart in worker threads: gather propagates it only after both
    finished, so the restore that follows never races a restart still in progress."""
    finished: list[str] = []

    def work(name: str) -> str:
        time.sleep(0.6)
        finished.append(name)
        return name

    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    with signals_as_interrupt():
        timer.start()
        try:
            with pytest.raises(Interrupted):
                gather({"prefill": "prefill", "decode": "decode"}, work)
        finally:
            timer.cancel()
    assert sorted(finished) == ["decode", "prefill"]
