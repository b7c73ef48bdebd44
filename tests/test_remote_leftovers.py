"""What a repro run on a host (`repro.on: ROLE`) leaves running there. A repro on the controller
was marked and checked when it ended, one on a host was not: measured on the testbed, `setsid sleep
41 >/dev/null 2>&1 & echo done` on decode ended 0, the trial counted and the sleep ran on; at a
timeout, `timeout` killed the repro's process group and the setsid child lived on. Now the remote
repro carries a mark too, and one round trip after it ended (edges.remote_leftovers) names and
stops what carries it: the trial is void (LeftBehind, retried, never data), worded as on the
controller. The runner tests script the host's answer on the fakes; the last tests run the script
for real, through the local transport, against real orphans."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import FakeBed, FakeTransport, FakeUnit, Reply, Role, flag, make_bed, make_plan, remote_repro, runner_for
from helpers.held_output import assert_returns_at_exit
from helpers.notes import Notes

from orchestrator.edges import leftovers, remote_leftovers
from orchestrator.edges.leftovers import MARK_VAR, MAX_SHOWN_CHARS, RUN_VAR
from orchestrator.edges.remote_leftovers import SCRIPT, check_argv, parse, stop_marked
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.edges.transport.ssh import command_line
from orchestrator.errors import TransportError
from orchestrator.sweep.runner import Runner, RunOptions

MARK = re.compile(rf"{MARK_VAR}=([0-9a-f]{{16}})")


def b64(cmdline: bytes) -> str:
    return base64.b64encode(cmdline).decode()


def orphan_answer(pid: int = 4242, cmdline: bytes = b"loadgen\0--rate\0005\0") -> Reply:
    """The host's answer when one process still carried the mark (and was stopped)."""
    return Reply(stdout=f"left|{pid}|{b64(cmdline)}\n")


def bed_with_remote_repro() -> FakeBed:
    return make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("D=0\n", [FakeUnit("decode-server", active=True)], after=["prefill"]),
        }
    )


def runs_on(t: FakeTransport) -> list[tuple[str, str | None]]:
    """(the repro or the check, the mark it carried or looked for), in order."""
    got: list[tuple[str, str | None]] = []
    for call in t.calls:
        if call.op != "run":
            continue
        if call.target.startswith("fake-repro"):
            got.append(("repro", (call.env or {}).get(MARK_VAR)))
        elif SCRIPT in call.target or "orch-left" in call.target:
            found = MARK.search(call.target)
            got.append(("check", found.group(1) if found else None))
    return got


def run_sweep(bed: FakeBed, tmp_path: Path, **options: object):  # type: ignore[no-untyped-def]
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=remote_repro("decode"), stop_after_repeated_failures=0)
    return runner_for(bed, plan, tmp_path / "run", **options).execute()


# ---------------------------------------------------------------- the runner, on the fakes


def test_a_remote_repro_that_leaves_nothing_counts_after_one_check_with_its_own_mark(tmp_path: Path) -> None:
    bed = bed_with_remote_repro()
    result = run_sweep(bed, tmp_path)
    assert (result.completed, result.failed) == (2, 0)
    assert all(r.repro is not None and r.repro.left_behind == [] for r in result.records)
    seen = runs_on(bed.transports["decode"])
    assert [what for what, _ in seen] == ["repro", "check", "repro", "check"]  # one round trip more per repro
    marks = [mark for _, mark in seen]
    assert all(m is not None and len(m) == 16 for m in marks)
    assert marks[0] == marks[1] and marks[2] == marks[3] and marks[0] != marks[2]  # each repro its own mark
    assert not runs_on(bed.transports["prefill"])  # only the repro's host is looked at
    assert MARK_VAR not in os.environ


def test_an_orphan_on_the_host_is_named_stopped_and_voids_the_trial_which_is_retried(tmp_path: Path) -> None:
    bed = bed_with_remote_repro()
    bed.transports["decode"].script(("sh", "-c", SCRIPT), orphan_answer(), times=1)  # trial 0, attempt 1
    result = run_sweep(bed, tmp_path, infra_attempts=2)
    assert (result.completed, result.failed) == (2, 0)  # the retry counted, the void attempt did not
    first = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()]
    void = next(r for r in first if r.get("type") == "trial" and r["trial"] == 0 and r["attempt"] == 1)
    assert void["status"] == "failed" and void["metrics"] == {}
    assert (void["failure"]["kind"], void["failure"]["error"]) == ("infrastructure", "LeftBehind")
    assert void["failure"]["message"].startswith(
        "repro exited but left 1 process running: pid 4242 (loadgen --rate 5) (orch stopped them; the trial is void"
    )
    assert void["repro"]["left_behind"] == ["pid 4242 (loadgen --rate 5)"]
    retried = next(r for r in result.records if r.trial == 0)
    assert (retried.status, retried.attempt) == ("completed", 2) and retried.repro is not None
    assert retried.repro.left_behind == []


def test_a_remote_repro_killed_at_its_timeout_is_checked_too(tmp_path: Path) -> None:
    """`timeout` on the host kills the repro's process group; a child that left it (setsid) is
    found by its mark, stopped, and named in the timeout's failure."""
    bed = bed_with_remote_repro()
    decode = bed.transports["decode"]
    decode.script(re.compile(r"^fake-repro --trial 0\b"), stdout="partial\n", timeout=True)
    decode.script(("sh", "-c", SCRIPT), orphan_answer(77, b"sleep\0001000\0"), times=1)
    result = run_sweep(bed, tmp_path, infra_attempts=1)
    timed_out = next(r for r in result.records if r.trial == 0)
    assert timed_out.status == "failed" and timed_out.failure is not None
    timed = "repro timed out after 30 s (the matrix's repro.timeout) and was killed"
    assert timed_out.failure.message.startswith(timed)
    assert timed_out.failure.message.endswith("; it also left 1 process running: pid 77 (sleep 1000) (stopped)")
    assert timed_out.repro is not None and timed_out.repro.left_behind == ["pid 77 (sleep 1000)"]
    assert [what for what, _ in runs_on(decode)][:2] == ["repro", "check"]


def test_an_interrupted_remote_repro_is_checked_at_once(tmp_path: Path) -> None:
    """Ctrl-C kills the repro's process group on the host; what left it is stopped too, at once
    (no settle time: the sweep is stopping), as a local repro's leftovers are."""
    bed = bed_with_remote_repro()
    decode = bed.transports["decode"]
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=remote_repro("decode"))
    runner = runner_for(bed, plan, tmp_path / "run")

    def ctrl_c(text: str, argv: object) -> Reply:
        runner.stopping.set()  # as the SIGINT handler does: the transport then kills the repro
        return Reply(until_stopped=True, stdout="partial\n")

    decode.script(re.compile(r"^fake-repro --trial 0\b"), ctrl_c, times=1)
    decode.script(("sh", "-c", SCRIPT), orphan_answer())
    result = runner.execute()
    assert result.interrupted
    checks = [c for c in decode.calls if c.op == "run" and "orch-left" in c.target]
    assert len(checks) == 1 and checks[0].stop is None  # it runs though the sweep is stopping
    argv = checks[0].target.split()
    marked = next(a for a in argv if a.startswith(f"{MARK_VAR}="))
    assert argv[argv.index(marked) + 1] == "0"  # no settle steps
    repro = next(c for c in decode.calls if c.target.startswith("fake-repro"))
    # the interrupted repro's own mark, and its run's id (what `orch restore --testbed` finds it by)
    assert repro.env == {MARK_VAR: marked.split("=")[1], RUN_VAR: "fake-run"}


def test_what_an_interrupted_remote_repro_left_is_named_where_the_user_sees_it(tmp_path: Path) -> None:
    """Stopped, but before named nowhere: no trial is recorded for an interrupted repro, so the
    terminal's (and status.json's) notes say it, in LeftBehind's words."""
    bed = bed_with_remote_repro()
    decode = bed.transports["decode"]
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=remote_repro("decode"))
    notes = Notes()
    runner = Runner(plan, bed.deployment, tmp_path / "run", RunOptions("fake-run"), progress=notes, client=bed.client)

    def ctrl_c(text: str, argv: object) -> Reply:
        runner.stopping.set()
        return Reply(until_stopped=True, stdout="partial\n")

    decode.script(re.compile(r"^fake-repro --trial 0\b"), ctrl_c, times=1)
    decode.script(("sh", "-c", SCRIPT), orphan_answer())
    assert runner.execute().interrupted
    said = "trial 0's repro, cut short, left 1 process running: pid 4242 (loadgen --rate 5) (orch stopped them)"
    assert said in notes.lines
    assert notes.lines.index(said) < next(i for i, n in enumerate(notes.lines) if n.startswith("interrupted:"))


def test_what_a_remote_repro_left_when_its_host_stopped_answering_is_in_the_trials_failure(tmp_path: Path) -> None:
    bed = bed_with_remote_repro()
    decode = bed.transports["decode"]

    def gone(text: str, argv: object) -> Reply:
        raise TransportError("decode", "ssh: the connection dropped")

    decode.script(re.compile(r"^fake-repro --trial 0\b"), gone, times=1)
    decode.script(("sh", "-c", SCRIPT), orphan_answer(), times=1)
    result = run_sweep(bed, tmp_path, infra_attempts=1)
    failed = next(r for r in result.records if r.trial == 0)
    assert failed.failure is not None and failed.failure.error == "TransportError"
    assert failed.failure.message.endswith(
        "ssh: the connection dropped; trial 0's repro, cut short, left 1 process running: "
        "pid 4242 (loadgen --rate 5) (orch stopped them)"
    )


def test_a_host_that_cannot_be_looked_at_fails_the_trial_as_infrastructure(tmp_path: Path) -> None:
    """No /proc/PID/environ to read (or no grep): what the repro left is unknown, so the trial is
    not data; the error says what the host lacks."""
    bed = bed_with_remote_repro()
    bed.transports["decode"].script(("sh", "-c", SCRIPT), exit_code=3, stderr="orch-left: grep not found\n")
    result = run_sweep(bed, tmp_path, infra_attempts=1)
    failure = result.records[0].failure
    assert failure is not None and (failure.kind, failure.error) == ("infrastructure", "TransportError")
    assert "cannot look for processes the repro left running: orch-left: grep not found" in failure.message


# ---------------------------------------------------------------- pure: the host's answer


def test_the_answer_is_worded_as_the_local_check_words_it() -> None:
    long = b"python\0" + b"x" * 1000 + b"\0"
    answer = (
        "Welcome to decode!\n"  # a login script's chatter is not the script's
        f"left|12|{b64(b'sleep' + bytes([0]) + b'1000' + bytes([0]))}\n"
        f"left|13|{b64(long)}\n"
        "left|14|\n"  # exited before its command line was read
        "left|15|not base64!\n"
        "left|x|abc\n"
    )
    got = parse(answer)
    assert got[0] == "pid 12 (sleep 1000)" == leftovers.shown(12, b"sleep\x001000\x00")
    assert got[1] == leftovers.shown(13, long) and len(got[1]) == len("pid 13 ()") + MAX_SHOWN_CHARS
    assert got[1].endswith("...)")
    assert got[2:] == ["pid 14 (?)", "pid 15 (?)"]
    assert parse("") == [] and parse("motd\n") == []


def test_the_answer_counts_what_it_did_not_name_and_names_what_outlived_sigkill() -> None:
    named = "".join(f"left|{p}|{b64(b'w')}\n" for p in range(100, 100 + remote_leftovers.MAX_NAMED))
    got = parse(named + "more|3\nalive|100\nalive|101\n")
    assert len(got) == remote_leftovers.MAX_NAMED + 2
    assert got[-2] == "3 more processes carrying its mark (not named)"
    assert got[-1] == "still running, could not be stopped: pid 100, 101" == leftovers.survivors_shown([100, 101])


def test_the_failure_counts_the_processes_not_the_entries(tmp_path: Path) -> None:
    """64 named and 10 more read "65 processes" (the unnamed rest counted as one, the line of
    what outlived SIGKILL as another)."""
    named = "".join(f"left|{p}|{b64(b'w')}\n" for p in range(100, 100 + remote_leftovers.MAX_NAMED))
    bed = bed_with_remote_repro()
    answer = Reply(stdout=named + "more|10\nalive|100\n")
    bed.transports["decode"].script(("sh", "-c", SCRIPT), answer, times=1)
    result = run_sweep(bed, tmp_path, infra_attempts=1)
    void = next(r for r in result.records if r.trial == 0)
    assert void.failure is not None and void.repro is not None
    total = remote_leftovers.MAX_NAMED + 10
    assert void.failure.message.startswith(
        f"repro exited but left {total} processes running: pid 100 (w), pid 101 (w), pid 102 (w), "
        f"pid 103 (w), pid 104 (w) and {total - 5} more (orch stopped them"
    )
    assert leftovers.counted(void.repro.left_behind) == total


def test_the_check_command_is_bounded_and_carries_no_mark_in_its_environment() -> None:
    argv = check_argv("0123456789abcdef", settle_s=0.5, grace_s=2.0)
    assert argv[:3] == ["sh", "-c", SCRIPT]
    assert argv[4:] == [
        f"{MARK_VAR}=0123456789abcdef",
        "10",
        "40",
        str(remote_leftovers.MAX_NAMED),
        str(leftovers.CMDLINE_BYTES),
        str(leftovers.KILL_ROUNDS),
    ]
    t = FakeTransport("decode")
    t.script(("sh", "-c", SCRIPT), Reply())
    assert stop_marked(t, "0123456789abcdef", settle_s=0.5, grace_s=2.0) == []
    assert t.calls[-1].env is None  # the check must not find itself


def test_the_ssh_line_sets_the_mark_inside_sudo_and_timeout() -> None:
    """sudo's env_reset drops a variable set before it: env(1) runs innermost, just before the
    user's shell, and the command text stays the user's."""
    line = command_line("loadgen --rate 5", sudo=True, timeout=30, stoppable=True, env={MARK_VAR: "0123456789abcdef"})
    assert line.startswith("sudo -n -- sh -c ")
    assert (
        f"timeout -k 2 30.000 env {MARK_VAR}=0123456789abcdef \"${{SHELL:-/bin/sh}}\" -c 'loadgen --rate 5'"
    ) in line
    assert command_line(["true"], sudo=False, timeout=None, env={"A_1": "x y"}) == "env 'A_1=x y' true"
    assert command_line("true", sudo=False, timeout=None) == "true"  # no env: the line is as before
    with pytest.raises(ValueError, match="not an environment variable"):
        command_line("true", sudo=False, timeout=None, env={"-i": "1"})


# ---------------------------------------------------------------- the script, for real


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; whatever still runs at the end is killed by its pid."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.process
def test_the_script_names_and_stops_real_orphans_and_nothing_else(started: list[subprocess.Popen[bytes]]) -> None:
    """Through orch's local transport, against real processes in their own sessions (as a setsid
    child of a repro is): one carrying the mark that exits on SIGTERM, one that ignores SIGTERM
    (SIGKILL after the grace), and one carrying another repro's mark, which is left alone. With
    nothing left, the check is one quick round trip."""
    mark, other = leftovers.new_mark(), leftovers.new_mark()

    def start(argv: list[str], with_mark: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, MARK_VAR: with_mark}
        started.append(subprocess.Popen(argv, env=env, start_new_session=True))
        return started[-1]

    polite = start(["sleep", "1000.25"], mark)
    stubborn = start(["sh", "-c", "trap '' TERM; exec sleep 1000.5"], mark)
    stranger = start(["sleep", "1000.75"], other)
    deadline = time.monotonic() + 5
    while b"1000.5" not in Path(f"/proc/{stubborn.pid}/cmdline").read_bytes():  # the trap is set
        assert time.monotonic() < deadline
        time.sleep(0.01)
    local = LocalTransport("decode")
    t0 = time.monotonic()
    left = stop_marked(local, mark, settle_s=0.1, grace_s=0.3)
    took = time.monotonic() - t0
    assert sorted(left) == [f"pid {polite.pid} (sleep 1000.25)", f"pid {stubborn.pid} (sleep 1000.5)"]
    assert polite.wait(timeout=5) == -signal.SIGTERM
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    assert stranger.poll() is None, "another repro's process was stopped"
    assert took < 4, f"the check took {took:.2f} s"
    t0 = time.monotonic()
    assert stop_marked(local, mark, settle_s=0.5, grace_s=2.0) == []
    assert time.monotonic() - t0 < 0.4  # nothing left: no settle, no grace paid


@pytest.mark.process
def test_the_needle_inside_another_variable_is_no_mark(started: list[subprocess.Popen[bytes]]) -> None:
    """Through sudo (`ssh: sudo: true`) the check's own shell holds the needle inside SUDO_COMMAND,
    sudo's copy of the command line: matched anywhere in an environ, the check found itself and
    killed itself (on the testbed: "connection lost", every trial). The mark is a whole entry."""
    mark = leftovers.new_mark()
    env = {**os.environ, "SUDO_COMMAND": f"/usr/bin/sh -c ... orch-left {MARK_VAR}={mark} 10 40"}
    env.pop(MARK_VAR, None)
    started.append(subprocess.Popen(["sleep", "1000.0625"], env=env, start_new_session=True))
    marked = subprocess.Popen(["sleep", "1000.125"], env={**os.environ, MARK_VAR: mark}, start_new_session=True)
    started.append(marked)
    assert stop_marked(LocalTransport("decode"), mark, settle_s=0.0, grace_s=0.3) == [
        f"pid {marked.pid} (sleep 1000.125)"
    ]
    assert started[0].poll() is None, "a process that only quotes the mark was stopped"
    assert marked.wait(timeout=5) == -signal.SIGTERM


@pytest.mark.process
def test_a_grep_without_z_still_finds_the_mark(
    started: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose grep has no -z (busybox's may not): the mark is matched anywhere, as before."""
    real = subprocess.run(["sh", "-c", "command -v grep"], capture_output=True, text=True, check=True).stdout.strip()
    fake = tmp_path / "grep"
    fake.write_text(f'#!/bin/sh\nfor a; do [ "$a" != -z ] || exit 2; done\nexec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    mark = leftovers.new_mark()
    marked = subprocess.Popen(["sleep", "1000.1875"], env={**os.environ, MARK_VAR: mark}, start_new_session=True)
    started.append(marked)
    left = stop_marked(LocalTransport("decode"), mark, settle_s=0.0, grace_s=0.3)
    assert left == [f"pid {marked.pid} (sleep 1000.1875)"]


@pytest.mark.process
def test_the_local_transport_gives_the_command_its_env_and_keeps_its_text() -> None:
    """A simulated deployment's hosts are the controller (LocalTransport): the repro gets its mark
    there too, and orch's own environment stays without it."""
    res = LocalTransport("decode").run('echo "$ORCH_REPRO_MARK"', env={MARK_VAR: "0123456789abcdef"})
    assert (res.stdout, res.command) == ("0123456789abcdef\n", 'echo "$ORCH_REPRO_MARK"')
    assert MARK_VAR not in os.environ


@pytest.mark.process
def test_a_repro_whose_child_holds_its_output_returns_when_it_exits() -> None:
    """`setsid sleep &` without a redirection keeps the repro's stdout open after the repro exited:
    the transport waited for EOF until the timeout (then called the repro timed out), and the
    child lived on. Now the repro's own exit ends the wait, and the check stops the child."""
    assert_returns_at_exit(LocalTransport("decode"), "1000.125", timeout=5, within_s=2)


def test_what_an_interrupted_local_repro_left_is_named_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's repro: edges.workload stops what it left and hands the names over
    (tests/test_repro_leftovers.py, on real processes); the runner says them as for a host's."""
    from orchestrator.sweep import phases

    def interrupted(*args: object, on_left: Callable[[list[str]], None], **kwargs: object) -> None:
        on_left([leftovers.shown(9, b"loadgen\0"), leftovers.shown(10, b"helper\0")])
        raise KeyboardInterrupt

    monkeypatch.setattr(phases, "run_command", interrupted)
    bed = bed_with_remote_repro()
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro={**remote_repro("decode"), "on": "controller"})
    notes = Notes()
    runner = Runner(plan, bed.deployment, tmp_path / "run", RunOptions("fake-run"), progress=notes, client=bed.client)
    assert runner.execute().interrupted
    assert (
        "trial 0's repro, cut short, left 2 processes running: pid 9 (loadgen), pid 10 (helper) (orch stopped them)"
        in notes.lines
    )
