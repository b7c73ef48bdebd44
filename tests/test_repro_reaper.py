"""What a repro leaves running after clearing its environment: ``env -i setsid daemon &`` carries no
mark (edges.leftovers' Limits), so it outlived its trial and loaded every later one. Each local
repro now runs under a reaper of its own (edges.reaper: PR_SET_CHILD_SUBREAPER on that process),
which adopts whatever the repro orphans, marked or not: orch stops those as it stops marked ones
and names them in ``left_behind``; the repro's exit code, output, timeout and interrupt are as
before, and neither the reaper nor a zombie is left (each checked by its pid)."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan, runner_for
from helpers.procs import pid_running, set_once, stop_running, wait_for_lines

from orchestrator.core.records import ReproOutcome
from orchestrator.edges.workload import run_command
from orchestrator.errors import Interrupted, WorkloadError

# Each daemon writes its own pid to {pids}; the repro writes its parent's (the reaper) to {reaper}.
UNMARKED = {
    # env -i: no mark; setsid: out of the repro's group and session; a plain `&`: the shell's child
    "setsid": "env -i /usr/bin/setsid /bin/sh -c 'echo $$ >> {pids}; exec /bin/sleep 300' </dev/null >/dev/null 2>&1 &",
    # a double fork (the subshell exits at once) with env -i and setsid
    "double fork": "( env -i /usr/bin/setsid /bin/sh -c 'echo $$ >> {pids}; exec /bin/sleep 300' "
    "</dev/null >/dev/null 2>&1 & )",
    # an unmarked daemon with a child of its own: the child's parent is the daemon, not the reaper
    "daemon with a child": "( env -i /usr/bin/setsid /bin/sh -c '/bin/sleep 300 & echo $! >> {pids}; "
    "echo $$ >> {pids}; wait' </dev/null >/dev/null 2>&1 & )",
}
WAIT_FOR = {"setsid": 1, "double fork": 1, "daemon with a child": 2}


def _repro(kind: str, pids: Path, reaper: Path, then: str = "echo 'score=0.5 events=3/10'; exit 3") -> str:
    started = UNMARKED[kind].format(pids=pids)
    return (
        f"echo $PPID > {reaper}\n{started}\n"
        f"until [ $(cat {pids} 2>/dev/null | wc -l) -ge {WAIT_FOR[kind]} ]; do sleep 0.01; done; {then}"
    )


def _run(tmp_path: Path, command: str, **kw) -> ReproOutcome:  # type: ignore[no-untyped-def]
    return run_command(
        command,
        timeout_s=kw.pop("timeout_s", 20.0),
        cwd=tmp_path,
        env=None,
        stdout_path=tmp_path / "repro.out",
        stderr_path=tmp_path / "repro.err",
        **kw,
    )


def _gone(pid: int) -> bool:
    """No process and no zombie: /proc has no entry for it."""
    return not os.path.exists(f"/proc/{pid}")


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the daemons' pid file, the reaper's pid file); whatever still runs at the end is killed by
    its pid (a failing test leaves no sleeper behind)."""
    pids, reaper = tmp_path / "daemon.pids", tmp_path / "reaper.pid"
    yield pids, reaper
    for pid in _pids(pids) + _pids(reaper):
        if pid != os.getpid() and pid_running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(UNMARKED))
def test_an_unmarked_daemon_is_stopped_and_named_and_the_repros_result_is_unchanged(
    tmp_path: Path, files: tuple[Path, Path], kind: str
) -> None:
    pids, reaper = files
    outcome = _run(tmp_path, _repro(kind, pids, reaper))
    daemons = _pids(pids)
    assert len(daemons) == WAIT_FOR[kind]
    assert [pid for pid in daemons if not _gone(pid)] == [], "a daemon (or its zombie) outlived the trial"
    assert sorted(int(entry.split()[1]) for entry in outcome.left_behind) == sorted(daemons), outcome.left_behind
    assert f"pid {daemons[0]} (/bin/sleep 300)" in outcome.left_behind
    assert (outcome.exit_code, outcome.stdout_tail) == (3, "score=0.5 events=3/10\n")
    (reaper_pid,) = _pids(reaper)
    assert reaper_pid != os.getpid() and _gone(reaper_pid), "the reaper (or its zombie) is still there"


@pytest.mark.process
def test_a_repro_that_times_out_has_its_unmarked_daemon_stopped(tmp_path: Path, files: tuple[Path, Path]) -> None:
    pids, reaper = files
    outcome = _run(tmp_path, _repro("double fork", pids, reaper, then="sleep 60"), timeout_s=1.0)
    (daemon,) = _pids(pids)
    assert outcome.exit_code is None
    assert outcome.left_behind == [f"pid {daemon} (/bin/sleep 300)"]
    assert _gone(daemon) and _gone(_pids(reaper)[0])


@pytest.mark.process
def test_an_interrupted_repros_unmarked_daemon_is_stopped_and_given_to_the_caller(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    pids, reaper = files
    stop, named = threading.Event(), []
    with set_once(stop, lambda: bool(_pids(pids))), pytest.raises(Interrupted):  # once the daemon runs
        _run(tmp_path, _repro("setsid", pids, reaper, then="sleep 60"), stop=stop, on_left=named.extend)
    (daemon,) = _pids(pids)
    assert named == [f"pid {daemon} (/bin/sleep 300)"]
    assert _gone(daemon) and _gone(_pids(reaper)[0])


@pytest.mark.process
def test_the_exit_code_of_a_repro_killed_by_a_signal_and_its_duration_are_kept(tmp_path: Path) -> None:
    t0 = time.monotonic()
    outcome = _run(tmp_path, "sleep 0.3; echo done; kill -TERM $$")
    assert (outcome.exit_code, outcome.stdout_tail, outcome.left_behind) == (-signal.SIGTERM, "done\n", [])
    assert 0.3 <= outcome.duration_s <= time.monotonic() - t0


@pytest.mark.process
def test_the_repro_gets_exactly_the_environment_it_is_given(tmp_path: Path) -> None:
    """The reaper is a Python process: its locale coercion or its own variables never reach the
    repro, which sees the environment run_command was given, its mark added."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ODD": "a=b c\nd"}
    outcome = run_command(
        "env | sort | grep -v '^PWD=\\|^SHLVL=\\|^_='",
        timeout_s=20.0,
        cwd=tmp_path,
        env=env,
        stdout_path=tmp_path / "env.out",
        stderr_path=tmp_path / "env.err",
    )
    lines = outcome.stdout_tail.splitlines()
    assert [line for line in lines if not line.startswith("ORCH_REPRO_MARK=")] == sorted(
        ["PATH=" + env["PATH"], "ODD=a=b c", "d"]
    )
    assert sum(line.startswith("ORCH_REPRO_MARK=") for line in lines) == 1


@pytest.mark.process
def test_a_repro_whose_reaper_is_killed_dies_with_it(tmp_path: Path, files: tuple[Path, Path]) -> None:
    """PR_SET_PDEATHSIG in the shell: the reaper killed -9 (out of memory) kills the shell too, and
    the repro counts as killed by SIGKILL, its duration its own."""
    _, reaper = files

    def kill_the_reaper() -> None:  # once it runs (bounded: a repro that never starts must not hang the test)
        deadline = time.monotonic() + 20
        while not _pids(reaper) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(_pids(reaper)[0], signal.SIGKILL)

    outcome = _run(
        tmp_path, f"echo $PPID > {reaper}; sleep 60", on_spawn=lambda: threading.Thread(target=kill_the_reaper).start()
    )
    assert outcome.exit_code == -signal.SIGKILL and outcome.duration_s < 30
    assert _gone(_pids(reaper)[0])


@pytest.mark.process
def test_the_trial_whose_repro_left_an_unmarked_daemon_is_void_and_names_it(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """Trial 0's repro leaves an env -i daemon: that trial fails (LeftBehind), its record names the
    daemon, which is gone before trial 1 starts; trial 1 completes with its metric as before."""
    pids, reaper = files
    bed = make_bed({"decode": Role("D=0\n", [FakeUnit("decode-server", active=True)])})
    script = tmp_path / "repro.sh"
    script.write_text(
        f'if [ "$1" = 0 ]; then {_repro("double fork", pids, reaper, then="echo events=3/10")}\n'
        f"else for p in $(cat {pids}); do [ -e /proc/$p ] && echo alive $p; done; echo events=3/10; fi\n"
    )
    events = {"kind": "proportion", "regex": r"events=(?P<k>\d+)/(?P<n>\d+)"}
    repro = {"command": f"sh {script} {{trial}}", "timeout": 30, "metrics": {"events": events}}
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=repro, stop_after_repeated_failures=0)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first, second = sorted(result.records, key=lambda r: r.trial)
    (daemon,) = _pids(pids)
    assert _gone(daemon)
    assert first.status == "failed" and first.failure is not None and first.failure.error == "LeftBehind"
    assert f"left 1 process running: pid {daemon} (/bin/sleep 300)" in first.failure.message
    assert first.repro is not None and first.repro.left_behind == [f"pid {daemon} (/bin/sleep 300)"]
    assert second.status == "completed" and second.repro is not None and second.repro.left_behind == []
    assert "alive" not in second.repro.stdout_tail  # trial 1 started after the daemon was gone
    assert second.metrics["events"].k == 3 and second.metrics["events"].n == 10


KILLED_ORCH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from orchestrator.edges.workload import run_command
    folder = Path(sys.argv[1])
    run_command(sys.argv[2], timeout_s=60, cwd=folder, env=None,
                stdout_path=folder / "k.out", stderr_path=folder / "k.err")
    """
)


@pytest.mark.process
def test_a_controller_killed_9_leaves_neither_the_unmarked_daemon_nor_the_reaper(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """orch killed -9 while the repro runs: its reaper sees orch's end of their socket close and
    kills what it adopted (before, the shell died with orch and the daemon ran on for ever)."""
    pids, reaper = files
    command = _repro("double fork", pids, reaper, then="sleep 60")
    orch = subprocess.Popen([sys.executable, "-c", KILLED_ORCH, str(tmp_path), command])
    try:
        deadline = time.monotonic() + 20
        while not (_pids(pids) and _pids(reaper)) and time.monotonic() < deadline:
            time.sleep(0.01)
        (daemon,), (reaper_pid,) = _pids(pids), _pids(reaper)
        orch.kill()
        orch.wait()
        deadline = time.monotonic() + 10
        while not (_gone(daemon) and _gone(reaper_pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_running(daemon), "the unmarked daemon outlived the killed controller"
        assert not pid_running(reaper_pid), "the reaper outlived the killed controller"
    finally:
        if orch.poll() is None:
            orch.kill()
            orch.wait()


@pytest.mark.process
def test_the_shell_leads_its_own_group_once_the_reaper_says_it_started(tmp_path: Path) -> None:
    """A group kill right after the start (on_spawn failing, an interrupt) must reach the shell:
    START came before the forked child's setsid(), so killpg found no group, the kill counted as
    done, and the repro ran on to its end (tests/test_repro_spawn.py caught it under load)."""
    from orchestrator.edges import reaper

    with open(tmp_path / "out", "wb") as out:
        for _ in range(30):
            repro = reaper.start("exec sleep 5", tmp_path, dict(os.environ), out, out)
            try:
                assert os.getpgid(repro.pid) == repro.pid
                with open(f"/proc/{repro.pid}/cmdline", "rb") as f:
                    assert b"reaper_process" not in f.read()  # exec'd: the reaper's Python is gone from it
            finally:
                os.killpg(repro.pid, signal.SIGKILL)
                repro.wait()
                repro.close()


@pytest.mark.process
def test_the_reapers_start_line_says_its_prctl_took_and_when_the_shell_started(tmp_path: Path) -> None:
    """START's SUBREAPER (1: orphans come to the reaper, not init) and the shell's start time,
    read from /proc by the reaper before the shell could end (orch's repro.pid carries it)."""
    from orchestrator.edges import reaper

    with open(tmp_path / "out", "wb") as out:
        repro = reaper.start("exec sleep 5", tmp_path, dict(os.environ), out, out)
        try:
            fields = Path(f"/proc/{repro.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            assert repro.subreaper is True and repro.start_ticks == int(fields[19]) > 0
        finally:
            os.killpg(repro.pid, signal.SIGKILL)
            repro.wait()
            repro.close()


@pytest.mark.process
def test_a_shell_that_cannot_be_executed_exits_127(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reaper's forked child execs /bin/sh; if that fails it exits 127, the shell's own "not
    found" code, which orch reports as the repro's exit (a fork of this test stands in for it)."""
    from orchestrator.edges import reaper_process

    monkeypatch.setattr(reaper_process, "SHELL", "/nonexistent/sh")
    child = os.fork()
    if child == 0:  # pragma: no cover - the child never returns
        reaper_process._exec_shell(b"true", {}, None, os.getppid())
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 127


def _started_then(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    raises: type[BaseException],
    *,
    read: bool = True,
) -> list[int]:
    """reaper.start of a shell that starts a child of its own, with `error` raised once the shell
    runs and the reaper's START came (read, or left unread in the socket: `read`), as a Ctrl-C under
    Python's own handler lands or a garbled answer reads; `raises` is what start raises. Returns
    which of the reaper, the shell and its child still run (each SIGKILLed then, so a failing test
    leaves none behind)."""
    from orchestrator.edges import reaper

    pids = tmp_path / "pids"
    real = reaper._read_line

    def answer_then_fail(sock: socket.socket, timeout_s: float | None = None) -> bytes:
        wait_for_lines(pids, 3, timeout=10)
        if read:
            real(sock, timeout_s)
        else:
            waiter = select.poll()
            waiter.register(sock, select.POLLIN)
            assert waiter.poll(10_000), "no START from the reaper"
        raise error

    monkeypatch.setattr(reaper, "_read_line", answer_then_fail)
    command = f"echo $PPID >> {pids}; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    with open(tmp_path / "out", "wb") as out, pytest.raises(raises):
        reaper.start(command, tmp_path, dict(os.environ), out, out)
    found = [int(x) for x in pids.read_text().split()]
    running = stop_running(found)
    assert len(found) == 3, found
    assert b"Traceback" not in (tmp_path / "out").read_bytes()  # the reaper's stderr
    return running


@pytest.mark.process
@pytest.mark.parametrize("read", [True, False], ids=["start-read", "start-unread"])
def test_ctrl_c_while_the_reaper_says_start_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: bool
) -> None:
    """A Ctrl-C under Python's own handler (orch's own defers it past the start: edges.interrupts)
    that lands while orch reads the reaper's START: the shell runs, orch has no handle on it yet.
    It went on running, its child too, for as long as the interrupt's traceback held orch's end of
    the socket (tests/test_workload.py's Ctrl-C test failed so under load, 1 run in ~10). With START
    unread when orch's end closed, the reaper's read said ECONNRESET, not an end: it died of it
    with a traceback, before stopping anything (the shell died with it, its child ran on)."""
    assert _started_then(tmp_path, monkeypatch, KeyboardInterrupt(), KeyboardInterrupt, read=read) == []


@pytest.mark.process
def test_a_reaper_whose_start_cannot_be_read_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer that is not START (or none in time) is a WorkloadError; the reaper was SIGKILLed
    at once, so the shell died with it (its PR_SET_PDEATHSIG) but its child ran on under init."""
    assert _started_then(tmp_path, monkeypatch, ValueError("garbled"), WorkloadError) == []


@pytest.mark.process
def test_a_reaper_whose_exit_line_is_unread_when_orch_goes_still_stops_what_the_repro_left(tmp_path: Path) -> None:
    """orch gone (killed -9, or closing) with the reaper's EXIT line unread: the reaper's read said
    ECONNRESET, it died of it, and the daemon the repro left ran on under init."""
    from orchestrator.edges import reaper

    pids = tmp_path / "pids"
    daemon = UNMARKED["setsid"].format(pids=pids)
    command = f"{daemon}\nuntil [ -s {pids} ]; do sleep 0.01; done; exit 0"
    with open(tmp_path / "out", "wb") as out:
        repro = reaper.start(command, tmp_path, dict(os.environ), out, out)
    ended, fd = select.poll(), repro.exit_fd()
    ended.register(fd, select.POLLIN)
    shell_ended = ended.poll(10_000)
    os.close(fd)
    repro.close()  # EXIT unread, as when orch is killed -9
    assert shell_ended, "the shell never ended"
    running = stop_running([int(x) for x in pids.read_text().split()])
    assert (running, pid_running(repro.reaper.pid)) == ([], False)
    assert b"Traceback" not in (tmp_path / "out").read_bytes()  # the reaper's stderr
