"""What a repro leaves running once it exited: a daemonised child (setsid, a double fork) leaves the
repro's process group, and killing that group missed it. An audit on a real testbed saw one
started by trial 0 load the deployment through every later trial (anomalies 81-152 against 36-51
clean) while the sweep said "8 trials completed, 0 failed", and outlive orch. Now every process
carrying the repro's mark is stopped when the repro ends, named in ReproOutcome.left_behind, and
the trial is void (LeftBehind); a repro that leaves nothing, the local units and the other repros
of a parallel sweep are untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan, runner_for
from helpers.procs import pid_running, set_once

from orchestrator.core.records import ReproOutcome
from orchestrator.edges import leftovers, workload
from orchestrator.edges.leftovers import MARK_VAR, new_pids
from orchestrator.edges.workload import run_command, stop_recorded_group

_EVENTS = {"kind": "proportion", "regex": r"events=(?P<k>\d+)/(?P<n>\d+)"}

# A repro that daemonises a sleeper (setsid, its parent subshell gone at once: a double fork), waits
# until the sleeper wrote its pid, then exits 0 having printed its metrics.
DAEMONISE = (
    "( setsid sh -c 'echo $$ >> {pids}; exec sleep 1000' </dev/null >/dev/null 2>&1 & ); "
    "until [ -s {pids} ]; do sleep 0.01; done; echo 'score=0.5 events=3/10'"
)


def _run(tmp_path: Path, command: str, name: str = "repro", **kw) -> ReproOutcome:  # type: ignore[no-untyped-def]
    return run_command(
        command,
        timeout_s=kw.pop("timeout_s", 20.0),
        cwd=tmp_path,
        env=None,
        stdout_path=tmp_path / f"{name}.out",
        stderr_path=tmp_path / f"{name}.err",
        **kw,
    )


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """The file the repros append their daemons' pids to; whatever is still running at the end is
    killed by its pid (a failing test leaves no sleeper behind)."""
    path = tmp_path / "daemon.pids"
    yield path
    for pid in (int(x) for x in (path.read_text().split() if path.exists() else [])):
        if pid_running(pid):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- pure: which pids are new


def test_new_pids_without_a_wrap_are_between_the_repro_and_the_last_pid() -> None:
    new = new_pids(leader=1000, last=1500, forks=500, threads=200, pid_max=32768)
    assert new is not None
    assert [new(p) for p in (999, 1000, 1200, 1500, 1501, 30000)] == [False, True, True, True, False, False]


def test_new_pids_after_one_wrap_are_above_the_repro_or_below_the_last_pid() -> None:
    new = new_pids(leader=32000, last=400, forks=900, threads=200, pid_max=32768)
    assert new is not None
    assert [new(p) for p in (32700, 32000, 350, 400, 401, 31999)] == [True, True, True, True, False, False]


def test_any_pid_may_be_new_once_the_counter_may_have_gone_round() -> None:
    assert new_pids(leader=1000, last=1500, forks=32450, threads=10, pid_max=32768) is None
    assert new_pids(leader=1000, last=1500, forks=32440, threads=10, pid_max=32768) is not None  # 32468 free
    assert new_pids(leader=1000, last=1500, forks=100, threads=16300, pid_max=32768) is None  # few free pids
    assert new_pids(leader=1000, last=1500, forks=100, threads=100, pid_max=4194304) is not None


# ---------------------------------------------------------------- real processes


@pytest.mark.process
def test_a_daemonised_sleeper_is_stopped_when_the_repro_exits_and_named(tmp_path: Path, pids: Path) -> None:
    t0 = time.monotonic()
    outcome = _run(tmp_path, DAEMONISE.format(pids=pids))
    (pid,) = (int(x) for x in pids.read_text().split())
    assert not pid_running(pid), f"the repro's daemonised sleeper {pid} outlived it"
    assert outcome.exit_code == 0
    assert len(outcome.left_behind) == 1, outcome.left_behind
    assert outcome.left_behind[0] == f"pid {pid} (sleep 1000)"
    # it was given SETTLE_S to exit by itself; the repro's duration is its own, without that
    assert time.monotonic() - t0 - outcome.duration_s >= workload.SETTLE_S


@pytest.mark.process
def test_a_well_behaved_repro_is_unaffected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Children it waits for, and one still exiting when it ends (a pool's worker, a resource
    tracker: here a 0.2 s sleep it did not wait for), are no leftovers; a repro that leaves
    nothing pays no settle time (made 5 s here: the call would take that long)."""
    monkeypatch.setattr(workload, "SETTLE_S", 5.0)
    t0 = time.monotonic()
    waited = _run(tmp_path, "sleep 0.05 & setsid sleep 0.05 & wait; echo ok", name="waited")
    assert time.monotonic() - t0 < 5.0
    assert (waited.exit_code, waited.stdout_tail, waited.left_behind) == (0, "ok\n", [])
    exiting = _run(tmp_path, "( setsid sleep 0.2 & ); echo ok", name="exiting")
    assert (exiting.exit_code, exiting.stdout_tail, exiting.left_behind) == (0, "ok\n", [])


@pytest.mark.process
def test_only_this_repros_processes_are_stopped(tmp_path: Path, pids: Path) -> None:
    """While a repro that daemonises a sleeper runs, another repro starts (a parallel sweep's
    other testbed) with a child, and orch starts a process of its own (like a local unit): both
    are newer than the first repro and still run when it ends, and neither is touched."""
    other_child, go = tmp_path / "other.pid", tmp_path / "go"
    waits = f"sleep 30 & echo $! > {other_child}; until [ -e {go} ]; do sleep 0.01; done; kill $!; echo other-done"
    other: list[ReproOutcome] = []
    runner = threading.Thread(target=lambda: other.append(_run(tmp_path, waits, name="other")))
    own: list[subprocess.Popen[bytes]] = []

    def start_the_others() -> None:  # once the first repro runs: the others are newer
        runner.start()
        own.append(subprocess.Popen(["sleep", "30"], start_new_session=True))
        while not other_child.exists() or not other_child.read_text().strip():
            time.sleep(0.01)

    try:
        outcome = _run(tmp_path, DAEMONISE.format(pids=pids), on_spawn=start_the_others)
        assert len(outcome.left_behind) == 1, outcome.left_behind
        assert own[0].poll() is None, "orch's own process was killed"
        assert pid_running(int(other_child.read_text())), "the other repro's child was killed"
    finally:
        go.touch()
        if runner.is_alive():
            runner.join(timeout=10)
        for proc in own:
            proc.kill()
            proc.wait()
    assert other[0].exit_code == 0 and other[0].stdout_tail == "other-done\n" and other[0].left_behind == []
    assert MARK_VAR not in os.environ  # the mark is the repro's, never orch's own


@pytest.mark.process
def test_a_killed_controllers_daemon_is_stopped_by_its_record(tmp_path: Path) -> None:
    """The repro.pid record names the repro's mark: resume and restore after a kill -9 of the
    controller stop what the repro daemonised, not only its process group (gone here)."""
    mark = leftovers.new_mark()
    daemon = subprocess.Popen(["sleep", "30"], env={**os.environ, MARK_VAR: mark}, start_new_session=True)
    # Popen returns once the child's close-on-exec pipe closed, which execve does before the new
    # image's environment is in place: /proc/PID/environ read empty in 63 of 300 tries right
    # after Popen (and this test failed ~1 in 30). A killed controller's daemon has long run.
    deadline = time.monotonic() + 5
    while mark.encode() not in Path(f"/proc/{daemon.pid}/environ").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)
    record = tmp_path / "repro.pid"
    record.write_text(f"999999999 1 {mark}\n")  # as run_command writes it; that process group is gone
    try:
        assert stop_recorded_group(record) == 999999999
        assert daemon.wait(timeout=5) == -signal.SIGTERM
        assert not record.exists()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


# ---------------------------------------------------------------- the trial


@pytest.mark.process
def test_the_trial_that_leaked_is_void_and_the_journal_names_the_process(tmp_path: Path, pids: Path) -> None:
    """Trial 0's repro daemonises a sleeper: that trial fails (LeftBehind, an infrastructure
    failure: never data), its record and the journal name the sleeper's pid, the sleeper is gone
    before trial 1 starts, and trial 1 (a repro that leaves nothing) completes as before."""
    bed = make_bed({"decode": Role("D=0\n", [FakeUnit("decode-server", active=True)])})
    script = tmp_path / "repro.sh"
    script.write_text(
        f'if [ "$1" = 0 ]; then {DAEMONISE.format(pids=pids)}; else '
        f'for p in $(cat {pids}); do awk \'$3 != "Z" {{print "alive", $1}}\' /proc/$p/stat 2>/dev/null; done; '
        "echo 'score=0.5 events=3/10'; fi\n"
    )
    repro = {"command": f"sh {script} {{trial}}", "timeout": 30, "metrics": {"events": _EVENTS}}
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=repro, stop_after_repeated_failures=0)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first, second = sorted(result.records, key=lambda r: r.trial)
    (pid,) = (int(x) for x in pids.read_text().split())
    assert not pid_running(pid)
    assert first.status == "failed" and first.metrics == {} and first.failure is not None
    assert (first.failure.kind, first.failure.error) == ("infrastructure", "LeftBehind")
    assert f"left 1 process running: pid {pid} (sleep 1000)" in first.failure.message
    assert first.repro is not None and first.repro.left_behind == [f"pid {pid} (sleep 1000)"]
    assert second.status == "completed" and second.repro is not None and second.repro.left_behind == []
    assert "alive" not in second.repro.stdout_tail  # trial 1 started after the sleeper was gone
    journaled = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()]
    trial0 = next(r for r in journaled if r.get("type") == "trial" and r["trial"] == 0)
    assert trial0["repro"]["left_behind"] == [f"pid {pid} (sleep 1000)"]


@pytest.mark.process
def test_a_warm_up_that_leaves_a_process_voids_the_trial_before_the_repro(tmp_path: Path, pids: Path) -> None:
    """repro.warmup runs just before the measured repro: what it leaves would load that repro."""
    bed = make_bed({"decode": Role("D=0\n", [FakeUnit("decode-server", active=True)])})
    repro = {
        "command": "echo 'score=0.5 events=3/10'",
        "warmup": DAEMONISE.format(pids=pids),
        "timeout": 30,
        "metrics": {"events": _EVENTS},
    }
    plan = make_plan(bed, {"d": flag("decode", "D")}, repro=repro, stop_after_repeated_failures=0)
    record = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, fail_fast=True).execute().records[0]
    (pid,) = (int(x) for x in pids.read_text().split())
    assert not pid_running(pid)
    assert record.status == "failed" and record.failure is not None and record.failure.error == "LeftBehind"
    assert record.failure.message.startswith(f"repro.warmup exited but left 1 process running: pid {pid} (sleep 1000)")
    assert record.repro is None  # the measured repro never ran beside it


def test_the_line_of_what_outlived_sigkill_is_no_extra_process() -> None:
    """A local repro's leftovers and the line naming the one that could not be stopped (another
    user's): two processes, not three."""
    from orchestrator.sweep.phases import left_behind

    entries = [leftovers.shown(7, b"loadgen\0"), leftovers.shown(8, b"helper\0"), leftovers.survivors_shown([8])]
    assert leftovers.counted(entries) == 2
    rel = ReproOutcome(command="repro", exit_code=0, duration_s=1.0, left_behind=entries)
    assert str(left_behind("repro", rel)).startswith("repro exited but left 2 processes running: pid 7 (loadgen)")
    assert leftovers.counted([leftovers.unnamed_shown(1), "pid 3 (x)"]) == 2


@pytest.mark.process
def test_what_an_interrupted_repro_left_is_given_to_the_caller_to_name(tmp_path: Path, pids: Path) -> None:
    """Ctrl-C (the runner's stop Event) while the repro's daemonised sleeper runs: stopped, and
    named to the caller (before, stopped and never named: no outcome is returned then)."""
    from orchestrator.errors import Interrupted

    stop, named = threading.Event(), []
    with set_once(stop, lambda: pids.exists() and bool(pids.read_text().strip())), pytest.raises(Interrupted):
        _run(tmp_path, DAEMONISE.format(pids=pids).replace("echo 'score", "sleep 60; echo 'score"),
             stop=stop, on_left=named.extend)  # fmt: skip
    (pid,) = (int(x) for x in pids.read_text().split())
    assert not pid_running(pid)
    assert named == [f"pid {pid} (sleep 1000)"]


def test_a_repro_record_that_is_a_fifo_or_huge_is_dropped_without_blocking_or_reading_it(tmp_path: Path) -> None:
    """repro.pid is read by resume and restore in a run folder the user may have edited: a FIFO
    there blocked read_text() for ever, and a huge file was read whole. Neither is a record orch
    wrote: it is removed, as a garbled record is, and nothing is stopped."""
    import threading
    import tracemalloc

    record = tmp_path / "repro.pid"
    os.mkfifo(record)
    got: list[int | None] = []
    worker = threading.Thread(target=lambda: got.append(stop_recorded_group(record)), daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        os.close(os.open(record, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        worker.join(5)
        raise AssertionError("stop_recorded_group blocked on a FIFO")
    assert got == [None] and not record.exists()
    with open(record, "wb") as f:
        f.truncate(256 << 20)  # sparse
    tracemalloc.start()
    try:
        assert stop_recorded_group(record) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and not record.exists()
