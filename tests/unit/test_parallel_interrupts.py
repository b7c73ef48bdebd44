"""Ctrl-C, SIGTERM and errors in a parallel sweep (runner._execute_parallel), on the fakes
(helpers.parallel_fakes): the main thread gets the signal, the runner threads do the work.

Pinned here: the sweep never returns (journal closed, locks released) while a runner still works,
whatever interrupted the main thread's wait (CPython 3.11 marks a thread whose join() was
interrupted as stopped, bpo-45274); Ctrl-C kills the repros the runners run on the controller, as
it does in a single-testbed run; a second Ctrl-C skips the host each runner is restoring; and an
error on one testbed never hides the hosts another testbed left unrestored."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import (
    Fleet,
    install,
    main_thread_waits_for_runners,
    run,
    runner_threads,
    runners_made,
    sweep_stops,
    trials_journaled,
    write_files,
)

from orchestrator.core.records import TrialRecord
from orchestrator.edges import workload
from orchestrator.errors import Interrupted, JournalError
from orchestrator.store.journal import read_journal
from orchestrator.sweep import api
from orchestrator.sweep.hosts import HostGuard

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
REMOTE = """\
name: par
factors:
  d: {env: {decode: D}, levels: ["1", "2"]}
replicates: REPLICATES
repro:
  command: "fake-repro --trial {trial}"
  on: prefill
  timeout: 30
  metrics:
    events: {kind: proportion, regex: 'events=(?P<k>\\d+)/(?P<n>\\d+)'}
"""
HANG_S = 30  # a hung repro or restore: far longer than any assertion below waits


def remote_matrix(replicates: int) -> str:
    return REMOTE.replace("REPLICATES", str(replicates))


def journal_of(tmp_path: Path) -> Path:
    return tmp_path / "reports" / "r1" / "journal.jsonl"


def events(tmp_path: Path) -> list[str]:
    records = read_journal(journal_of(tmp_path)).records
    return [f"{r.event}: {r.message}" for r in records if not isinstance(r, TrialRecord)]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture
def background() -> Iterator[Callable[[Callable[[], None]], None]]:
    """Start the test's interrupter thread; its failure fails the test (after the run)."""
    threads: list[threading.Thread] = []
    failures: list[BaseException] = []

    def start(fn: Callable[[], None]) -> None:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        t = threading.Thread(target=body, daemon=True)
        threads.append(t)
        t.start()

    yield start
    for t in threads:
        t.join(timeout=HANG_S)
    if failures:
        raise failures[0]


def sweep_ends(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When (time.monotonic) the sweep's trials are over: api.execute returned, every testbed
    restored and the journal closed. What a Ctrl-C must not hold up; the report that `run` writes
    afterwards takes what the machine's load makes it take (seconds on a loaded one)."""
    ends: list[float] = []
    execute = api.execute

    def timed(*args: object, **kwargs: object) -> object:
        try:
            return execute(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            ends.append(time.monotonic())

    monkeypatch.setattr(api, "execute", timed)
    return ends


def settle(*events_to_set: threading.Event) -> None:
    """After a test: let whatever it left hanging end (so no thread of it runs into the next one)."""
    for e in events_to_set:
        e.set()
    wait_for(lambda: not runner_threads(), "the runner threads to end", HANG_S)
    wait_for(lambda: not any(t.name.startswith("restore-") for t in threading.enumerate()), "restores", HANG_S)


# ------------------------------------------------------------------ one Ctrl-C, one busy testbed
def test_one_ctrl_c_returns_only_once_the_busy_testbed_is_restored(tmp_path, monkeypatch, background):
    """A is inside a repro on its host that outlives its cancel (the hook ignores the stop Event; a
    repro that is killed at once: test_remote_repro_stop.py) and B has finished its share when
    Ctrl-C comes: the sweep must wait for A to end its trial and restore, not return with A
    mid-trial (the main thread's Thread.join was interrupted: CPython then calls A stopped)."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(4), ["A", "B"])
    hung, release = threading.Event(), threading.Event()
    at_return: dict[str, object] = {}
    runners = runners_made(monkeypatch)

    def hook(testbed: str, command: str) -> Reply | None:
        if testbed == "A" and not hung.is_set():  # A's first repro, once B has journaled a trial: B
            # does the others meanwhile (A getting a trial after B's first was up to the threads)
            wait_for(lambda: trials_journaled(journal_of(tmp_path)) >= 1, "a trial of B journaled")
            hung.set()
            release.wait(HANG_S)  # a repro on a host that ends when it ends
        return None

    def execute(*args: object, **kwargs: object) -> object:  # what holds when the trials are over
        try:
            return run_trials(*args, **kwargs)
        finally:
            at_return.update(running=runner_threads(), released=release.is_set(), a=fleet.file("A", "decode"))

    def interrupter() -> None:
        wait_for(
            lambda: hung.is_set() and runner_threads() == ["testbed-A"] and main_thread_waits_for_runners(),
            "A hung, B done and the main thread in its wait for A",
        )
        ctrl_c()
        # A's repro ends only once the main thread has taken the Ctrl-C and told every runner to stop
        wait_for(lambda: len(runners) == 2 and all(r.stopping.is_set() for r in runners), "the runners told to stop")
        release.set()

    run_trials = api.execute
    monkeypatch.setattr(api, "execute", execute)
    fleet.repro_hook = hook
    background(interrupter)
    try:
        outcome = run(tmp_path, m, i, ("A", "B"))
    finally:
        settle(release)
    assert at_return["released"] and not at_return["running"], f"the trials ended with A mid-trial: {at_return}"
    assert at_return["a"] == ENV["decode"].encode() and fleet.extra_files("A", "decode") == []
    assert outcome.interrupted and outcome.not_restored == ()


# ------------------------------------------------------------------ Ctrl-C kills local repros
def local_matrix(tmp_path: Path, marker: Path) -> str:
    script = tmp_path / "repro.py"
    hanging = tmp_path / "hanging"  # a repro that hangs says so first: hanging/<its pid>
    hanging.mkdir()
    script.write_text(
        f"import os, time\nif os.path.exists({str(marker)!r}):\n"
        f"    open(os.path.join({str(hanging)!r}, str(os.getpid())), 'w').close()\n"
        f"    time.sleep({HANG_S})\n"
        "print('score=0.5 events=3/10')\n"
    )
    return f"""\
name: par
factors:
  d: {{env: {{decode: D}}, levels: ["1", "2"]}}
replicates: 5
repro:
  command: "{{python}} {script}"
  timeout: 60
  metrics:
    events: {{kind: proportion, regex: 'events=(?P<k>\\d+)/(?P<n>\\d+)'}}
"""


@pytest.mark.process
def test_ctrl_c_in_a_parallel_run_kills_the_repros_the_runners_run(tmp_path, monkeypatch, background):
    """Both testbeds' repros (on the controller) hang when Ctrl-C comes: their process groups are
    killed at once, as in a single-testbed run, and both testbeds are restored."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    marker = tmp_path / "hang"
    m, i = write_files(tmp_path, local_matrix(tmp_path, marker), ["A", "B"])
    sent: list[float] = []
    ends = sweep_ends(monkeypatch)

    def interrupter() -> None:
        wait_for(lambda: trials_journaled(journal_of(tmp_path)) >= 2, "two trials")
        marker.write_text("")  # every repro from now on hangs
        # one hung repro per testbed (a testbed runs one at a time, and a hung one never ends)
        wait_for(lambda: len(list((tmp_path / "hanging").iterdir())) >= 2, "both testbeds' repros hung")
        sent.append(time.monotonic())
        ctrl_c()

    background(interrupter)
    try:
        outcome = run(tmp_path, m, i, ("A", "B"))
        took, still_running = ends[0] - sent[0], runner_threads()
    finally:
        settle()
    assert took < 10, f"Ctrl-C took {took:.1f} s: the sweep waited for the hung repros ({HANG_S} s)"
    assert not still_running and outcome.interrupted and outcome.not_restored == ()
    for tb in "AB":
        assert fleet.file(tb, "decode") == ENV["decode"].encode() and fleet.extra_files(tb, "decode") == []


@pytest.mark.process
@pytest.mark.parametrize("pidfd", [True, False])
def test_a_set_stop_event_kills_the_repro_group_and_raises_interrupted(tmp_path, monkeypatch, pidfd):
    """run_command's `stop`: how a runner thread, which no signal reaches, ends a repro."""
    if not pidfd:
        monkeypatch.setattr(workload.os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "ENOSYS")))
    stop, pid_file = threading.Event(), tmp_path / "pid"
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        workload.run_command(
            f"echo $$ > {pid_file}; sleep {HANG_S} & sleep {HANG_S}",
            timeout_s=HANG_S,
            cwd=tmp_path,
            env=None,
            stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e",
            stop=stop,
        )
    timer.join()
    assert time.monotonic() - t0 < 5
    assert not workload._group_alive(int(pid_file.read_text()))  # the shell and its background sleep


# ------------------------------------------------------------------ a second Ctrl-C
def test_a_second_ctrl_c_skips_the_host_each_testbed_is_restoring(tmp_path, monkeypatch, background):
    """Ctrl-C, then Ctrl-C again while each testbed's decode host takes forever to restore: each
    runner gives that host up and the sweep returns at once, saying which hosts are left (as
    runner.py tells the user: "a second Ctrl-C or SIGTERM skips the host being restored")."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(50), ["A", "B"])
    stuck, release = threading.Semaphore(0), threading.Event()
    restore_host = HostGuard._restore_host

    def slow_restore(self: HostGuard, role: str) -> None:
        if role == "decode":  # a unit whose stop hangs
            stuck.release()
            release.wait(HANG_S)
        restore_host(self, role)

    monkeypatch.setattr(HostGuard, "_restore_host", slow_restore)
    runners, ends = runners_made(monkeypatch), sweep_ends(monkeypatch)

    def hook(testbed: str, command: str) -> Reply | None:
        if trials_journaled(journal_of(tmp_path)) >= 2:  # no trial ends before the Ctrl-C reaches the runners
            wait_for(lambda: len(runners) == 2 and all(r.stopping.is_set() for r in runners), "the Ctrl-C")
        return None

    fleet.repro_hook = hook
    sent: list[float] = []

    def interrupter() -> None:
        wait_for(lambda: trials_journaled(journal_of(tmp_path)) >= 2, "two trials")
        ctrl_c()
        for _ in "AB":  # both runners are stuck restoring their decode host
            assert stuck.acquire(timeout=20), "a runner never reached its decode host's restore"
        sent.append(time.monotonic())
        ctrl_c()

    background(interrupter)
    try:
        outcome = run(tmp_path, m, i, ("A", "B"))
        took, still_running = ends[0] - sent[0], runner_threads()
    finally:
        settle(release)
    assert took < 5 and not still_running, f"returned {took:.1f} s after the second Ctrl-C; {still_running} ran"
    assert outcome.interrupted and sorted(outcome.not_restored) == ["A/decode", "B/decode"]
    assert events(tmp_path).count("restored: not restored: decode") == 2
    for tb in "AB":  # the abandoned restores still finished, later
        assert fleet.file(tb, "decode") == ENV["decode"].encode()


# ------------------------------------------------------------------ errors on one testbed
def fail_a_after_b_ran(fleet: Fleet, error: Callable[[], Reply], monkeypatch: pytest.MonkeyPatch) -> None:
    """A's repro fails once B is inside a trial's repro (its units started); at A's third failure
    B's decode unit stops starting, so B's restore cannot bring it back. B's repro ends only once
    A's failures have stopped the sweep (the source closed): B completes that one trial and
    starts no other, whatever the threads' timing."""
    failures: list[str] = []
    b_in_repro, stopped = threading.Event(), sweep_stops(monkeypatch)

    def hook(testbed: str, command: str) -> Reply | None:
        if testbed == "B":
            b_in_repro.set()
            if not stopped.wait(HANG_S):
                raise AssertionError("A's failures never stopped the sweep")
            return None
        if not b_in_repro.wait(HANG_S):
            raise AssertionError("B never reached a repro")
        failures.append(command)
        if len(failures) == 3:
            fleet.managers[("B", "decode")].units["B-decode"].fail_starts = 10**6
        return error()

    fleet.repro_hook = hook


def test_repeated_failures_on_one_testbed_do_not_hide_another_testbeds_unrestored_hosts(tmp_path, monkeypatch):
    """A's repro fails the same way 3 times (the sweep stops: RepeatedFailure) and B's decode unit
    does not come back when B is restored: the outcome says so, naming the testbed."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(10), ["A", "B"])
    fail_a_after_b_ran(fleet, lambda: Reply(3, stderr="boom\n"), monkeypatch)
    outcome = run(tmp_path, m, i, ("A", "B"), retries=0)
    assert outcome.stopped is not None and "consecutive trials failed" in outcome.stopped
    assert not fleet.managers[("B", "decode")].state("B-decode").is_active
    assert "restored: not restored: decode" in events(tmp_path)  # B's runner journals its own roles
    assert outcome.not_restored == ("B/decode",)
    assert outcome.failed == 3 and outcome.completed >= 1  # B's trials are in the outcome too


def test_an_error_on_one_testbed_names_another_testbeds_unrestored_hosts(tmp_path, monkeypatch):
    """An error that ends the sweep (here the run folder failing on A) is raised with a note of
    every testbed's hosts left unrestored."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(10), ["A", "B"])
    calls: list[int] = []

    def disk_full() -> Reply:
        calls.append(1)
        if len(calls) < 3:
            return Reply(3, stderr="boom\n")
        raise JournalError("journal.jsonl: No space left on device")

    fail_a_after_b_ran(fleet, disk_full, monkeypatch)
    with pytest.raises(JournalError) as info:
        run(tmp_path, m, i, ("A", "B"), retries=0)
    assert any("NOT restored: B/decode" in note for note in getattr(info.value, "__notes__", []))


def test_a_testbed_that_stops_the_sweep_stops_the_others_before_its_own_restore(tmp_path, monkeypatch):
    """A's third identical failure stops the sweep (RepeatedFailure) while B is inside a trial: B
    ends that trial and starts no other, though A is still restoring (a restore can take
    minutes: each unit's restart and warm-up). A's restore here waits until B has either started
    another trial or begun its own restore, so this holds whatever the threads' timing; before
    the fix the source closed only once A's restore had returned, and B started a trial."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(10), ["A", "B"])
    b_in_repro, a_restoring, b_moved = threading.Event(), threading.Event(), threading.Event()
    b_trials: list[str] = []  # B's repros
    restore = HostGuard.restore

    def hook(testbed: str, command: str) -> Reply | None:
        if testbed == "B":
            b_trials.append(command)
            if len(b_trials) == 1:
                b_in_repro.set()
                assert a_restoring.wait(HANG_S), "A never restored"
            else:
                b_moved.set()  # B started a trial after A stopped the sweep
            return None
        assert b_in_repro.wait(HANG_S), "B never reached a repro"
        return Reply(3, stderr="boom\n")

    def restoring(self: HostGuard, run_dir: Path) -> list[str]:
        if self.deployment.testbed.name == "A":
            a_restoring.set()
            assert b_moved.wait(HANG_S), "B neither started a trial nor restored"
        else:
            b_moved.set()  # B ended its trials
        return restore(self, run_dir)

    monkeypatch.setattr(HostGuard, "restore", restoring)
    fleet.repro_hook = hook
    outcome = run(tmp_path, m, i, ("A", "B"), retries=0)
    assert outcome.stopped is not None and "consecutive trials failed" in outcome.stopped
    assert len(b_trials) == 1, f"B started {len(b_trials) - 1} trial(s) after A stopped the sweep"
    assert outcome.failed == 3 and outcome.completed == 1 and outcome.not_restored == ()


def test_a_single_testbed_names_its_unrestored_roles_as_before(tmp_path, monkeypatch):
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, remote_matrix(2), ["A"])

    def hook(testbed: str, command: str) -> Reply | None:
        fleet.managers[("A", "decode")].units["A-decode"].fail_starts = 10**6
        return None

    fleet.repro_hook = hook
    outcome = run(tmp_path, m, i, ("A",), retries=0)
    assert outcome.not_restored == ("decode",)
