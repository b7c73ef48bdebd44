"""edges.workload's running side without a process (the unit tier starts none): run_command on a
fake spawn, the exit wait on a process that outlives the test (the test's own), the process-group
probes on faked signals and a faked /proc stat, the output bound on sparse files. Each pins a line
that only the process-tier tests of tests/test_workload.py and tests/test_repro_leftovers.py
exercised (bench/mutants.py round nine); the rest are the metric parser's edges."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.edges import leftovers, reaper_process, workload
from orchestrator.edges.workload import MetricSpec, extract_metrics
from orchestrator.errors import WorkloadError

NEVER_EXITS = os.getpid()  # a pid whose pidfd stays unreadable for as long as a test runs: the test's own

Seen = dict[str, list[object]]  # "killed": the procs whose group was killed, "left": what the repro left


class FakeProc:
    """What run_command and the waits use of a repro under its reaper (edges.reaper.Reaped): pid,
    poll(), wait(), when it started, what it left (nothing), close()."""

    def __init__(self, pid: int = NEVER_EXITS, code: int | None = None) -> None:
        self.pid, self.code = pid, code
        self.started, self.closed = 0.0, 0
        self.start_ticks = 4242  # the shell's start time as its reaper read it (clock ticks since boot)

    def find(self) -> list[int]:
        return []

    def carries(self, pid: int) -> bool:
        return False

    def close(self) -> None:
        self.closed += 1

    def poll(self) -> int | None:
        return self.code

    def wait(self, timeout: float | None = None) -> int:
        if self.code is None:
            raise subprocess.TimeoutExpired("fake", timeout or 0.0)
        return self.code


class Killpg:
    """os.killpg recorded: the group probes and signals, never sent."""

    def __init__(self, raises: type[OSError] | None = None) -> None:
        self.sent: list[tuple[int, int]] = []
        self.raises = raises

    def __call__(self, pgid: int, sig: int) -> None:
        self.sent.append((pgid, int(sig)))
        if self.raises is not None:
            raise self.raises()


# ---------------------------------------------------------------- metrics and output bounds


def test_a_number_group_that_took_no_part_in_the_match_is_named_not_a_crash() -> None:
    spec = MetricSpec("wall", "number", r"wall=(?P<value>\d+)?s")
    with pytest.raises(WorkloadError, match=r"wall \(group value did not take part in the match\)"):
        extract_metrics("wall=s\n", [spec])


def test_the_quoted_tail_of_a_metrics_error_is_its_last_1500_characters() -> None:
    garbage = "".join(f"line {i}\n" for i in range(1000))
    with pytest.raises(WorkloadError) as info:
        extract_metrics(garbage, [MetricSpec("wall", "number", r"wall=(\d+)")])
    assert info.value.detail == "..." + garbage[-1500:]


def test_the_output_bound_is_the_readmes_256_mib_per_file(tmp_path: Path) -> None:
    """README: a repro writing more than 256 MiB to its stdout or stderr in one trial is stopped.
    Sparse files: no disk is written."""
    with open(tmp_path / "repro.out", "wb") as out, open(tmp_path / "repro.err", "wb") as err:
        out.truncate(256 << 20)
        workload._check_output_size(out, err)  # exactly 256 MiB: still within
        err.truncate((256 << 20) + 1)
        with pytest.raises(WorkloadError, match=r"repro\.err \(more than 256 MiB"):
            workload._check_output_size(out, err)


def test_output_files_share_a_folder_and_a_new_one_replaces_the_old(tmp_path: Path) -> None:
    folder = tmp_path / "trials" / "0001"  # neither exists yet
    with workload._open_output(folder / "repro.out") as old, workload._open_output(folder / "repro.err") as err:
        err.write(b"e")
        with workload._open_output(folder / "repro.out") as new:  # a repro of a killed controller holds `old`
            old.write(b"late")
            old.flush()
            new.write(b"new")
    assert (folder / "repro.out").read_bytes() == b"new"  # a new file, not the old one truncated
    assert (folder / "repro.err").read_bytes() == b"e"


def test_output_tail_is_the_files_last_bytes(tmp_path: Path) -> None:
    (tmp_path / "repro.out").write_bytes(b"0123456789")
    assert workload.output_tail(tmp_path / "repro.out", 4) == "6789"
    assert workload.output_tail(tmp_path / "repro.out", 100) == "0123456789"


# ---------------------------------------------------------------- run_command on a fake spawn


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """run_command with _spawn giving a FakeProc, and the kill and leftover steps recorded."""
    seen: Seen = {"killed": [], "left": []}
    monkeypatch.setattr(workload, "_spawn", lambda *a: FakeProc())
    monkeypatch.setattr(workload, "_kill_group", lambda proc: seen["killed"].append(proc))
    monkeypatch.setattr(workload, "_stop_leftovers", lambda pgid, marked, settle_s=0.5: list(seen["left"]))
    return seen


def _run(tmp_path: Path, **kw: object) -> object:
    return workload.run_command(
        "fake-repro",
        timeout_s=5.0,
        cwd=tmp_path,
        env={},
        stdout_path=tmp_path / "repro.out",
        stderr_path=tmp_path / "repro.err",
        **kw,  # type: ignore[arg-type]
    )


def _readable_fd() -> int:
    """A descriptor that polls readable now, as a repro's exit descriptor does once it exited."""
    read, write = os.pipe()
    os.write(write, b"x")
    os.close(write)
    return read


def _boom() -> None:
    raise RuntimeError("on_spawn failed")


def test_a_repro_gone_before_it_is_recorded_is_recorded_from_its_reapers_reading(
    tmp_path: Path, spawned: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper reaps its shell the moment it exits: a repro that ends at once (`exit 0`, a
    loaded machine) was gone before orch read its start time from /proc/PID/stat, and the trial
    failed "cannot record the repro's process group: No such file or directory: /proc/29044/stat"
    (tests/faults/test_orphan_repro.py, once, under load). The reaper reads it before it can reap."""

    def gone(pid: int) -> int:
        raise FileNotFoundError(2, "No such file or directory", f"/proc/{pid}/stat")

    monkeypatch.setattr(workload, "_start_ticks", gone)
    record = tmp_path / "repro.pid"
    seen: list[str] = []
    monkeypatch.setattr(workload, "_forget_group", lambda path, pgid: seen.append(path.read_text()))
    spawned_proc = FakeProc(code=0)
    monkeypatch.setattr(workload, "_spawn", lambda *a: spawned_proc)
    monkeypatch.setattr(workload, "_exit_fd", lambda proc: _readable_fd())  # it exited at once
    outcome = _run(tmp_path, pid_path=record)
    assert outcome.exit_code == 0  # type: ignore[attr-defined]
    (line,) = seen
    assert line.split()[:2] == [str(NEVER_EXITS), "4242"]


def test_an_error_after_the_spawn_kills_the_group_and_names_what_it_left(tmp_path: Path, spawned: Seen) -> None:
    spawned["left"] = ["pid 7 (worker)"]
    named: list[list[str]] = []
    with pytest.raises(RuntimeError, match="on_spawn failed"):
        _run(tmp_path, on_spawn=_boom, on_left=named.append)
    assert [p.pid for p in spawned["killed"]] == [NEVER_EXITS]  # type: ignore[attr-defined]
    assert named == [["pid 7 (worker)"]]
    assert [p.closed for p in spawned["killed"]] == [1]  # type: ignore[attr-defined] # its reaper let go


def test_an_error_after_the_spawn_that_left_nothing_names_nothing(tmp_path: Path, spawned: Seen) -> None:
    named: list[list[str]] = []
    with pytest.raises(RuntimeError, match="on_spawn failed"):
        _run(tmp_path, on_spawn=_boom, on_left=named.append)
    assert len(spawned["killed"]) == 1 and named == []


def test_without_on_left_the_error_itself_goes_on(tmp_path: Path, spawned: Seen) -> None:
    spawned["left"] = ["pid 7 (worker)"]
    with pytest.raises(RuntimeError, match="on_spawn failed"):
        _run(tmp_path, on_spawn=_boom)


def test_a_spawn_that_fails_is_its_own_error_and_nothing_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: Seen
) -> None:
    def cannot(*a: object) -> None:
        raise WorkloadError("repro: cannot start 'fake-repro'")

    monkeypatch.setattr(workload, "_spawn", cannot)
    with pytest.raises(WorkloadError, match="cannot start"):
        _run(tmp_path)
    assert spawned["killed"] == []


# ---------------------------------------------------------------- waiting for the exit


def _watch_raising() -> Callable[[], None]:
    def watch() -> None:
        raise WorkloadError("repro: stopped after writing too much")

    return watch


def test_the_wait_ends_false_at_its_timeout_while_the_process_runs() -> None:
    assert workload._wait_exit(FakeProc(), 0.05) is False


def test_a_process_that_exited_by_the_deadline_counts_as_exited(monkeypatch: pytest.MonkeyPatch) -> None:
    assert workload._wait_exit(FakeProc(code=0), 0.0) is True
    monkeypatch.setattr(workload.os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "ENOSYS")))
    assert workload._wait_exit(FakeProc(), 0.05) is False


def test_the_wait_looks_at_its_watch_every_output_check_not_once_an_hour() -> None:
    """The output bound is checked every OUTPUT_CHECK_S (0.2 s) while the repro runs: without a
    stop Event the wait's chunk is otherwise an hour."""
    calls: list[int] = []
    assert workload._wait_exit(FakeProc(), 1.0, None, lambda: calls.append(1)) is False
    assert len(calls) >= 3


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_wait_calls_its_watch_and_what_it_raises_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    if not pidfd:
        monkeypatch.setattr(workload.os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "ENOSYS")))
    with pytest.raises(WorkloadError, match="too much"):
        workload._wait_exit(FakeProc(), 0.5, None, _watch_raising())


# ---------------------------------------------------------------- the process group


def test_a_group_is_gone_once_no_member_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    reaped: list[int] = []
    monkeypatch.setattr(workload, "_group_alive", lambda pgid: False)
    assert workload._await_group_gone(4321, 1.0, lambda: reaped.append(1)) is True
    assert reaped == [1]


def test_a_group_orch_may_not_signal_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload.os, "killpg", Killpg(PermissionError))
    assert workload._group_alive(4321) is True


def test_the_group_probes_send_signal_0_and_signals_reach_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = Killpg(ProcessLookupError)
    monkeypatch.setattr(workload.os, "killpg", gone)
    assert workload._group_members(4321) == []
    workload._signal_group(4321, signal.SIGTERM)  # a group gone meanwhile: no error
    assert gone.sent == [(4321, 0), (4321, int(signal.SIGTERM))]


def test_the_group_members_are_the_processes_of_that_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload.os, "killpg", Killpg())  # the probe only: nothing is sent
    members = workload._group_members(os.getpgrp())
    assert os.getpid() in members


STAT = b"42 (a) b) c) S 1 77 77 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 98765 1000 10\n"


def _fake_stat(monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    monkeypatch.setattr(workload, "open", lambda path, mode="r": io.BytesIO(content), raising=False)


def test_in_group_reads_the_pgrp_after_a_command_name_with_parentheses(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_stat(monkeypatch, STAT)
    assert workload._in_group(42, 77) is True
    assert workload._in_group(42, 1) is False  # the ppid field, not the process group
    _fake_stat(monkeypatch, STAT.replace(b") S ", b") Z "))
    assert workload._in_group(42, 77) is False  # a zombie runs nothing


def test_in_group_of_a_process_that_is_gone_is_false() -> None:
    assert workload._in_group(0, 0) is False  # no /proc/0


def test_start_ticks_is_field_22_after_a_command_name_with_parentheses(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_stat(monkeypatch, STAT)
    assert workload._start_ticks(42) == 98765


def test_what_outlived_sigkill_is_named_only_when_something_did(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leftovers, "settle", lambda find, settle_s: [5])
    monkeypatch.setattr(leftovers, "describe", lambda pid: f"pid {pid} (worker)")
    survivors: list[int] = []
    monkeypatch.setattr(leftovers, "stop", lambda found, find, ours, grace: list(survivors))
    marked = leftovers.Marked("0123456789abcdef", NEVER_EXITS)
    assert workload._stop_leftovers(NEVER_EXITS, marked) == ["pid 5 (worker)"]
    survivors.append(5)
    assert workload._stop_leftovers(NEVER_EXITS, marked) == ["pid 5 (worker)", leftovers.survivors_shown([5])]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_on_linux_the_repro_dies_with_its_spawner() -> None:
    """The spawner is the repro's reaper now (edges.reaper_process sets PR_SET_PDEATHSIG in its
    shell; tests/test_repro_reaper.py kills a reaper -9)."""
    assert callable(reaper_process._prctl())  # not called here: it would mark the test process


# ---------------------------------------------------------------- a killed controller's record


def test_a_record_of_a_group_that_is_gone_is_dropped_and_names_no_group(tmp_path: Path) -> None:
    record = tmp_path / "repro.pid"
    record.write_text("999999999 1\n")  # above any pid_max: no such group
    assert workload.stop_recorded_group(record) is None
    assert not record.exists()


def test_a_recorded_live_group_is_stopped_by_its_pgid_and_start_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "repro.pid"
    record.write_text("4321 98765\n")  # as a controller wrote it before a mark existed: no mark field
    asked: list[tuple[int, int]] = []
    terminated: list[int] = []
    alive = {4321}
    monkeypatch.setattr(workload, "_group_alive", lambda pgid: pgid in alive)
    monkeypatch.setattr(workload, "_same_group", lambda pgid, ticks: asked.append((pgid, ticks)) or True)
    monkeypatch.setattr(workload, "_terminate_group", lambda pgid, reap: (terminated.append(pgid), alive.clear()))
    assert workload.stop_recorded_group(record) == 4321
    assert asked == [(4321, 98765)] and terminated == [4321]
    assert not record.exists()


def test_what_a_recorded_repro_daemonised_is_stopped_though_its_group_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "repro.pid"
    record.write_text("999999999 1 0123456789abcdef\n")

    class Daemon(leftovers.Marked):
        def find(self) -> list[int]:
            return [55]

    stopped: list[list[int]] = []
    monkeypatch.setattr(workload, "Marked", Daemon)
    monkeypatch.setattr(leftovers, "stop", lambda found, find, ours, grace: stopped.append(list(found)) or [])
    assert workload.stop_recorded_group(record) == 999999999
    assert stopped == [[55]]
