"""The small parts the Runner was split into: signals, per-host gathering, typed timeouts."""

from __future__ import annotations

import os
import pty
import re
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fakes
import pytest

from orchestrator.edges.transport import Result
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import STOPPING, CommandTimedOut, GroupError, Interrupted, ServiceError, TransportError
from orchestrator.sweep import runner as runner_module
from orchestrator.sweep import signals
from orchestrator.sweep.pool import gather, per_host
from orchestrator.sweep.runner import RunOptions, run_with_retries
from orchestrator.sweep.signals import signals_as_interrupt, sigterm_as_interrupt


# ---------------------------------------------------------------- signals
def test_sigterm_raises_interrupted_and_sets_stopping() -> None:
    stopping = threading.Event()
    with pytest.raises(Interrupted, match="received SIGTERM"), signals_as_interrupt(stopping):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert stopping.is_set()


def test_sigint_raises_keyboard_interrupt_and_sets_stopping() -> None:
    with pytest.raises(KeyboardInterrupt), signals_as_interrupt() as stopping:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert stopping.is_set()


def test_previous_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with signals_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before[1]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_an_ignored_sigint_or_sighup_stays_ignored(sig: signal.Signals) -> None:
    """A background job (`orch run ... &`) starts with SIGINT ignored: Ctrl-C in the shell must
    not stop it. `nohup orch run ...` starts with SIGHUP ignored: the sweep runs on when the
    terminal closes."""
    previous = signal.signal(sig, signal.SIG_IGN)
    try:
        with signals_as_interrupt() as stopping:
            assert signal.getsignal(sig) is signal.SIG_IGN
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        assert not stopping.is_set()
    finally:
        signal.signal(sig, previous)


def test_sighup_leaves_the_lost_terminal_then_raises_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal orch runs in closed (tests/faults/test_signals.py does it for real): stdout and
    stderr leave it first, then the sweep stops as on SIGTERM, saying why."""
    left: list[bool] = []
    monkeypatch.setattr(signals, "leave_lost_terminal", lambda: left.append(True))
    with (
        pytest.raises(Interrupted, match="received SIGHUP: the terminal closed") as exc,
        sigterm_as_interrupt() as stopping,
    ):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(1)
    assert stopping.is_set() and left == [True]
    assert signals.interrupted_by(exc.value) == "interrupted: received SIGHUP: the terminal closed"


def test_a_hung_up_terminal_is_still_told_from_a_file_or_a_pipe(tmp_path: Path) -> None:
    """os.isatty says False of a terminal once it hung up; that terminal is the one to leave."""
    master, slave = pty.openpty()
    read_end, write_end = os.pipe()
    try:
        assert signals._terminal(slave)
        os.close(master)  # the hang-up
        assert not os.isatty(slave) and signals._terminal(slave)
        assert not signals._terminal(write_end)
        with open(tmp_path / "log", "wb") as log:
            assert not signals._terminal(log.fileno())
    finally:
        for fd in (slave, read_end, write_end):
            os.close(fd)


def test_the_journal_says_which_interrupt_stopped_a_run() -> None:
    assert signals.interrupted_by(KeyboardInterrupt()) == "interrupted by Ctrl-C (SIGINT)"
    assert signals.interrupted_by(Interrupted("received SIGTERM")) == "interrupted: received SIGTERM"
    assert signals.interrupted_by(Interrupted(STOPPING)) == "interrupted by the user or a signal"


def test_sigterm_as_interrupt_leaves_sigint_alone() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted), sigterm_as_interrupt():
        assert signal.getsignal(signal.SIGINT) is before
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)


def test_outside_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []

    def worker() -> None:
        with signals_as_interrupt() as stopping:
            seen.append(stopping)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert isinstance(seen[0], threading.Event) and signal.getsignal(signal.SIGTERM) is before


# ---------------------------------------------------------------- every host's outcome
def deployment(*roles: str) -> SimpleNamespace:
    return SimpleNamespace(hosts={r: SimpleNamespace(role=r) for r in roles})


def test_per_host_returns_each_host_result() -> None:
    assert per_host(deployment("a", "b", "c"), lambda h: h.role * 2) == {"a": "aa", "b": "bb", "c": "cc"}  # type: ignore[arg-type]


def test_every_host_failure_is_reported_at_once() -> None:
    finished: list[str] = []

    def work(h: SimpleNamespace) -> str:
        time.sleep(0.05 if h.role == "c" else 0)
        finished.append(h.role)
        if h.role != "b":
            raise TransportError(h.role, "cannot connect")
        return "ok"

    with pytest.raises(GroupError) as caught:
        per_host(deployment("a", "b", "c"), work)  # type: ignore[arg-type]
    assert sorted(finished) == ["a", "b", "c"]  # the slow host was not abandoned
    assert set(caught.value.failures) == {"a", "c"}
    assert str(caught.value) == "2 hosts failed: a: cannot connect; c: cannot connect"
    assert caught.value.kind == "infrastructure"


def test_one_failure_is_raised_as_itself() -> None:
    def work(h: SimpleNamespace) -> None:
        if h.role == "b":
            raise ServiceError("b", "u", "failed to start", detail="tail")

    with pytest.raises(ServiceError, match="b: unit u: failed to start"):
        per_host(deployment("a", "b"), work)  # type: ignore[arg-type]


def test_an_interrupt_or_a_bug_is_not_dressed_as_a_host_failure() -> None:
    def interrupted(h: SimpleNamespace) -> None:
        raise (Interrupted("stop") if h.role == "a" else TransportError(h.role, "down"))

    with pytest.raises(Interrupted):
        gather({"a": SimpleNamespace(role="a"), "b": SimpleNamespace(role="b")}, interrupted)

    def bug(h: SimpleNamespace) -> None:
        raise (KeyError("x") if h.role == "b" else TransportError(h.role, "down"))

    with pytest.raises(KeyError):
        gather({"a": SimpleNamespace(role="a"), "b": SimpleNamespace(role="b")}, bug)


def test_group_error_keeps_each_detail() -> None:
    err = GroupError(
        {"x": ServiceError("x", "u", "died", detail="log x"), "y": TransportError("y", "gone")}, what="units"
    )
    assert str(err).startswith("2 units failed: x: unit u: died; y: gone")
    assert err.detail == "--- x\nlog x"


# ---------------------------------------------------------------- typed timeout
@pytest.mark.process
def test_command_timed_out_carries_the_output_so_far() -> None:
    t = LocalTransport("here")
    with pytest.raises(CommandTimedOut) as caught:
        t.run("echo partial; echo oops >&2; sleep 5", timeout=0.5)
    exc = caught.value
    assert isinstance(exc, TransportError) and exc.timeout == 0.5
    assert exc.result.stdout == "partial\n" and exc.result.stderr == "oops\n"
    assert str(exc) == "here: command timed out after 0.5 s and was killed: echo partial; echo oops >&2; sleep 5"
    assert exc.detail == "oops\n"


def test_command_timed_out_message_shortens_a_long_command() -> None:
    result = Result("h", "x" * 200, -1, "", "", 1.0)
    exc = CommandTimedOut(result, 1, host="h (10.0.0.1)")
    assert str(exc) == f"h (10.0.0.1): command timed out after 1 s and was killed: {'x' * 117}..."


# ---------------------------------------------------------------- on the runner (tests/fakes.py)
def test_a_remote_repro_that_times_out_keeps_what_it_printed(tmp_path: Path) -> None:
    bed = fakes.make_bed({"web": fakes.Role("FLAG=0\n", [fakes.FakeUnit("web-server")])})
    plan = fakes.make_plan(bed, {"f": fakes.flag("web", "FLAG")}, repro=fakes.remote_repro("web"))
    bed.transports["web"].script(
        re.compile("fake-repro"), stdout="score=0.1 partial\n", stderr="warming\n", timeout=True
    )
    result = fakes.runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first = result.records[0]
    assert first.status == "failed" and first.failure is not None and first.failure.kind == "workload"
    assert first.repro is not None and first.repro.exit_code is None
    assert first.repro.stdout_tail == "score=0.1 partial\n"
    assert (tmp_path / "run" / first.repro.stdout_path).read_text() == "score=0.1 partial\n"
    err = (tmp_path / "run" / first.repro.stderr_path).read_text()
    assert err.startswith("warming\n") and "command timed out after 30 s and was killed" in err
    assert not result.not_restored


def test_a_trial_failing_on_two_hosts_names_both(tmp_path: Path) -> None:
    bed = fakes.make_bed(
        {
            "a": fakes.Role("FA=0\n", [fakes.FakeUnit("a-server", active=True)]),
            "b": fakes.Role("FB=0\n", [fakes.FakeUnit("b-server", active=True)]),
        }
    )
    plan = fakes.make_plan(bed, {"f": fakes.flag("a", "FA")})
    for role in ("a", "b"):
        services = bed.deployment.hosts[role].services

        def gone(unit: str, since: float, max_bytes: int = 0, role: str = role) -> str:
            raise TransportError(role, "connection lost while reading the journal")

        services.logs_since = gone  # type: ignore[method-assign]
    result = fakes.runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    failure = result.records[0].failure
    assert failure is not None and failure.error == "GroupError" and failure.kind == "infrastructure"
    assert failure.message == (
        "2 hosts failed: a: connection lost while reading the journal; b: connection lost while reading the journal"
    )
    assert not result.not_restored


# ---------------------------------------------------------------- retries and the deadline
def _infra_failure(n: int) -> Any:
    return SimpleNamespace(status="failed", failure=SimpleNamespace(kind="infrastructure", message=f"ssh died ({n})"))


def test_no_retry_starts_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--until`: an attempt is a restart, a warm-up and a whole repro; one that failed just
    before the deadline is not tried again after it (the trial stays failed, as when retries run out)."""
    clock = [1000.0]
    monkeypatch.setattr(runner_module.time, "time", lambda: clock[0])
    starts: list[float] = []

    def attempt(n: int) -> Any:
        starts.append(clock[0])
        clock[0] += 60.0  # each attempt takes a minute and fails on infrastructure
        return _infra_failure(n)

    late = RunOptions("r", infra_attempts=4, retry_backoff_s=0.0, deadline=1030.0)
    record = run_with_retries(attempt, late, lambda record: None)
    assert starts == [1000.0] and record.failure.message == "ssh died (1)"
    clock[0], starts[:] = 1000.0, []
    run_with_retries(attempt, RunOptions("r", infra_attempts=4, retry_backoff_s=0.0), lambda record: None)
    assert len(starts) == 4  # without a deadline every attempt runs


def test_a_retry_back_off_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, slept = [1000.0], []
    monkeypatch.setattr(runner_module.time, "time", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: slept.append(s))  # tenacity's sleep

    def attempt(n: int) -> Any:
        clock[0] += 1.0
        return _infra_failure(n)

    options = RunOptions("r", infra_attempts=2, retry_backoff_s=100.0, deadline=1003.0)
    run_with_retries(attempt, options, lambda record: None)
    assert slept == [2.0]  # 100 s of back-off, cut to the 2 s left before the deadline
