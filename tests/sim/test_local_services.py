"""LocalServiceManager with real processes: env file re-read at every start in the unit's
dialect, failures seen at once, process groups stopped whole, pid files adopted safely, logs
delimited by time, and nothing left running."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from orchestrator.edges.services import ServiceManager
from orchestrator.edges.services import local as local_mod
from orchestrator.edges.services.local import LocalServiceManager, LocalUnit
from orchestrator.errors import ServiceError

from .helpers import free_port, get, pid_running, wait_until

pytestmark = pytest.mark.sim

Factory = Callable[..., LocalServiceManager]


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[Factory]:
    made: list[LocalServiceManager] = []

    def make(*units: LocalUnit, state_dir: Path | None = None) -> LocalServiceManager:
        m = LocalServiceManager({u.name: u for u in units}, state_dir or tmp_path / "state", host="h1")
        made.append(m)
        return m

    yield make
    for m in made:
        m.stop_all()
    left = [p.pid for m in made for p in m._children if pid_running(p.pid)]
    assert not left, f"processes left running: {left}"


def env_file(tmp_path: Path, text: str, name: str = "unit.env") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def sim_unit(tmp_path: Path, text: str, port: int | None = None) -> LocalUnit:
    port = port or free_port()
    command = (sys.executable, "-m", "orchestrator.sim.server", "--role", "decode", "--port", str(port))
    return LocalUnit("sim-decode", command, env_file(tmp_path, text, "decode.env"))


def sh_unit(tmp_path: Path, script: str, name: str = "sh-unit", text: str = "") -> LocalUnit:
    return LocalUnit(name, ("/bin/sh", "-c", script), env_file(tmp_path, text, f"{name}.env"))


def environ_after_exec(m: ServiceManager, unit: str) -> dict[str, str] | None:
    """The unit's environment once the kernel has written it: just after a start, the exec is
    already seen as done (Popen returned) while /proc/PID/environ can still read empty."""
    wait_until(lambda: m.environ(unit) != {}, timeout=5)
    return m.environ(unit)


def test_is_a_service_manager(managers: Factory, tmp_path: Path) -> None:
    m: ServiceManager = managers(sh_unit(tmp_path, "sleep 30"))
    assert m.unusable("sh-unit") is None and m.unusable("other") == "not found"
    with pytest.raises(ServiceError, match="h1: unit other: unknown unit"):
        m.state("other")


def test_restart_rereads_the_env_file(managers: Factory, tmp_path: Path) -> None:
    unit = sim_unit(tmp_path, "SIM_WARMUP_S=0\nSGLANG_DSV4_BF16_INDEX_K=1\n")
    m = managers(unit)
    assert m.state(unit.name).active_state == "inactive" and m.environ(unit.name) is None
    m.restart(unit.name)
    first = m.state(unit.name)
    assert (first.active_state, first.sub_state, first.n_restarts) == ("active", "running", 0)
    env = environ_after_exec(m, unit.name)
    assert env is not None and env["SGLANG_DSV4_BF16_INDEX_K"] == "1"
    assert env["PATH"] == os.environ["PATH"]  # orch's environment, overlaid by the file

    unit.env_file.write_text("SIM_WARMUP_S=0\nSGLANG_DSV4_BF16_INDEX_K=0\n")
    m.restart(unit.name)
    second = m.state(unit.name)
    assert second.main_pid != first.main_pid and second.n_restarts == 1
    assert environ_after_exec(m, unit.name)["SGLANG_DSV4_BF16_INDEX_K"] == "0"  # type: ignore[index]
    # what the trial's identity check compares before and after the repro (edges.identity): the
    # process the unit runs now and a start count that a restart moves on
    (ids,) = m.unit_ids([unit.name]).values()
    assert (ids.unit, ids.main_pid, ids.invocation_id) == (unit.name, second.main_pid, "2")
    assert not pid_running(first.main_pid or 0)
    log = m.log_path(unit.name).read_text()
    assert f"-- started sim-decode pid={first.main_pid} at " in log
    assert f"-- started sim-decode pid={second.main_pid} at " in log


@pytest.mark.parametrize("dialect, expected", [("systemd", None), ("shell", "bar")])
def test_export_lines_follow_the_dialect(managers: Factory, tmp_path: Path, dialect: str, expected: str | None) -> None:
    unit = LocalUnit("u", ("sleep", "30"), env_file(tmp_path, "export ORCH_T_FOO=bar\nORCH_T_BAZ=1\n"), dialect=dialect)  # type: ignore[arg-type]
    m = managers(unit)
    m.restart("u")
    env = environ_after_exec(m, "u")
    assert env is not None and env["ORCH_T_BAZ"] == "1" and env.get("ORCH_T_FOO") == expected


def test_a_unit_that_fails_to_start_is_seen_at_once(managers: Factory, tmp_path: Path) -> None:
    unit = sim_unit(tmp_path, "SIM_FAIL_START=1\n")
    m = managers(unit)
    since = m.restart(unit.name)
    started = time.monotonic()

    def raised() -> bool:
        try:
            m.check_alive(unit.name, since)
        except ServiceError:
            return True
        return False

    wait_until(raised, timeout=5)
    assert time.monotonic() - started < 2
    with pytest.raises(ServiceError) as info:
        m.check_alive(unit.name, since)
    assert str(info.value) == "h1: unit sim-decode: exited with code 1"
    assert "SIM_FAIL_START" in info.value.detail
    state = m.state(unit.name)
    assert (state.active_state, state.result, state.main_pid) == ("failed", "exit-code", None)


def test_a_unit_that_died_says_how_and_its_log_is_made_as_open_would(managers: Factory, tmp_path: Path) -> None:
    """A unit killed from outside (the OOM killer's SIGKILL) and one that exited 3 are named so
    in check_alive's error, the words a failed trial's record carries; the log file is created
    with the umask's mode, as open(path, "ab") makes it."""
    m = managers(sh_unit(tmp_path, "sleep 300", "killed"), sh_unit(tmp_path, "exit 3", "exits"))
    since = m.restart("killed")
    pid = m.state("killed").main_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: m.state("killed").active_state == "failed", timeout=5)
    with pytest.raises(ServiceError, match="killed by SIGKILL"):
        m.check_alive("killed", since)
    assert m.state("killed").result == "signal"
    since = m.restart("exits")
    wait_until(lambda: m.state("exits").active_state == "failed", timeout=5)
    with pytest.raises(ServiceError, match="exited with code 3"):
        m.check_alive("exits", since)
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(m.log_path("killed").stat().st_mode) == 0o666 & ~umask


def test_check_alive_passes_while_running(managers: Factory, tmp_path: Path) -> None:
    m = managers(sh_unit(tmp_path, "sleep 30"))
    since = m.restart("sh-unit")
    m.check_alive("sh-unit", since)  # no exception
    m.stop("sh-unit")
    with pytest.raises(ServiceError, match="not running \\(stopped\\)"):
        m.check_alive("sh-unit", since)
    assert m.state("sh-unit").active_state == "inactive"


def test_missing_env_file_or_program_fails_the_start(managers: Factory, tmp_path: Path) -> None:
    gone = LocalUnit("gone", ("sleep", "30"), tmp_path / "missing.env")
    noexec = LocalUnit("noexec", ("/nonexistent/server",), env_file(tmp_path, ""))
    m = managers(gone, noexec)
    with pytest.raises(ServiceError, match="failed to load environment file .*missing.env"):
        m.restart("gone")
    assert (m.state("gone").active_state, m.state("gone").result) == ("failed", "resources")
    with pytest.raises(ServiceError, match="203/EXEC"):
        m.restart("noexec")
    with pytest.raises(ServiceError, match="203/EXEC"):
        m.check_alive("noexec", 0.0)


def test_stop_kills_the_whole_process_group(managers: Factory, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    m = managers(sh_unit(tmp_path, f"sleep 300 & echo $! > {pidfile}; wait"))
    m.restart("sh-unit")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", timeout=5)
    leader, child = m.state("sh-unit").main_pid, int(pidfile.read_text())
    assert leader and pid_running(leader) and pid_running(child)
    m.stop("sh-unit")
    assert not pid_running(leader)
    wait_until(lambda: not pid_running(child), timeout=2)
    assert not m.pid_path("sh-unit").exists()


def test_stop_escalates_to_sigkill(managers: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_mod, "STOP_TIMEOUT_S", 0.3)
    m = managers(sh_unit(tmp_path, "trap '' TERM; sleep 300 & wait; sleep 300"))
    m.restart("sh-unit")
    time.sleep(0.2)  # let the shell install its trap
    leader = m.state("sh-unit").main_pid
    started = time.monotonic()
    m.stop("sh-unit")
    assert 0.25 < time.monotonic() - started < 3 and not pid_running(leader or 0)


def test_a_later_manager_adopts_the_unit_from_its_pid_file(managers: Factory, tmp_path: Path) -> None:
    unit = sim_unit(tmp_path, "SIM_WARMUP_S=0\nSIM_SEED=4\n")
    first = managers(unit)
    first.restart(unit.name)
    pid = first.state(unit.name).main_pid
    later = managers(unit)  # e.g. `orch restore` after the first orch process crashed
    assert later.state(unit.name).main_pid == pid and later.state(unit.name).is_active
    assert environ_after_exec(later, unit.name)["SIM_SEED"] == "4"  # type: ignore[index]
    later.stop(unit.name)
    wait_until(lambda: not pid_running(pid or 0), timeout=5)
    assert first.state(unit.name).active_state == "inactive"


def _healthy(port: int) -> bool:
    try:
        return get(f"http://127.0.0.1:{port}/health")[0] == 200
    except OSError:  # not listening yet
        return False


def test_a_unit_whose_pid_file_was_never_written_is_still_adopted(managers: Factory, tmp_path: Path) -> None:
    """A controller killed -9 between starting a unit and writing its pid file (a shared-queue
    test saw it: the next controller restarted the unit beside the orphan, which kept the port
    and voided the trial as a stranger). The unit's environment carries its mark, so a later
    manager finds it, stops it on restart, and the port serves the new process."""
    port = free_port()
    unit = sim_unit(tmp_path, "SIM_WARMUP_S=0\n", port=port)
    first = managers(unit)
    first.restart(unit.name)
    orphan = first.state(unit.name).main_pid
    assert orphan is not None
    wait_until(lambda: _healthy(port), timeout=20)
    first.pid_path(unit.name).unlink()  # what the killed controller never wrote
    first.start_path(unit.name).unlink()
    later = managers(unit)
    assert later.state(unit.name).main_pid == orphan
    assert later.pid_path(unit.name).read_text().strip() == str(orphan)  # adopted for good
    later.restart(unit.name)
    wait_until(lambda: not pid_running(orphan), timeout=10)
    fresh = later.state(unit.name).main_pid
    assert fresh not in (None, orphan)
    wait_until(lambda: _healthy(port), timeout=20)
    later.stop(unit.name)


def test_a_marked_process_of_another_unit_is_not_adopted(managers: Factory, tmp_path: Path) -> None:
    unit = sim_unit(tmp_path, "SIM_WARMUP_S=0\n")
    other = sh_unit(tmp_path, "sleep 60", name="other")
    first = managers(unit, other)
    first.restart(other.name)
    first.pid_path(other.name).unlink()
    first.start_path(other.name).unlink()
    assert (
        managers(unit, other, state_dir=tmp_path / "elsewhere").state(other.name).main_pid is None
    )  # another state dir
    assert managers(unit, other).state(unit.name).main_pid is None  # another unit
    first.stop(other.name)


def test_a_later_manager_adopts_a_unit_that_retitled_itself(managers: Factory, tmp_path: Path) -> None:
    """The real sglang-router sets its process title (cmdline `sglang::router`): the pid file's
    start time, not the command line, tells a later orch (restore after a crash) it is the unit."""
    retitle = "import setproctitle, time; setproctitle.setproctitle('sglang::router'); time.sleep(60)"
    unit = LocalUnit("router", (sys.executable, "-c", retitle), env_file(tmp_path, "NO_COLOR=1\n", "router.env"))
    first = managers(unit)
    first.restart(unit.name)
    pid = first.state(unit.name).main_pid
    wait_until(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sglang::router"), timeout=10)
    later = managers(unit)
    assert later.state(unit.name).main_pid == pid
    (tmp_path / "state" / "router.start").write_text("1\n")  # another process's start time: a recycled pid
    assert managers(unit).state(unit.name).main_pid is None
    (tmp_path / "state" / "router.start").write_text(f"{local_mod._start_ticks(pid or 0)}\n")
    later.stop(unit.name)
    wait_until(lambda: not pid_running(pid or 0), timeout=5)
    assert not (tmp_path / "state" / "router.start").exists() and not (tmp_path / "state" / "router.pid").exists()


def test_a_pid_file_naming_another_process_is_never_trusted(managers: Factory, tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        m = managers(sh_unit(tmp_path, "sleep 30"))
        m.pid_path("sh-unit").write_text(f"{stranger.pid}\n")
        assert m.state("sh-unit").active_state == "inactive" and m.environ("sh-unit") is None
        m.stop("sh-unit")
        time.sleep(0.1)
        assert stranger.poll() is None  # not killed
    finally:
        stranger.kill()
        stranger.wait()


def test_logs_since_returns_what_was_written_after_since(managers: Factory, tmp_path: Path) -> None:
    script = 'i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo "$$ line-$i"; sleep 0.02; done; sleep 30'
    m = managers(sh_unit(tmp_path, script))
    t_start = m.restart("sh-unit")
    pid1 = m.state("sh-unit").main_pid
    time.sleep(0.3)
    m.state("sh-unit")  # the runner touches units between trials
    mid = time.time()
    time.sleep(0.3)
    whole, recent = m.logs_since("sh-unit", t_start), m.logs_since("sh-unit", mid)
    assert f"-- started sh-unit pid={pid1} at " in whole and f"{pid1} line-1\n" in whole
    assert f"{pid1} line-1\n" not in recent and "-- started" not in recent and f"{pid1} line-" in recent
    t2 = m.restart("sh-unit")
    pid2 = m.state("sh-unit").main_pid
    time.sleep(0.1)
    lines = m.logs_since("sh-unit", t2).splitlines()
    # the marker follows Popen, so a command that prints at once may precede it; the byte
    # offset recorded before the start is what keeps the previous run's lines out
    assert f"-- started sh-unit pid={pid2} at " in "\n".join(lines)
    assert len(lines) >= 2 and all(ln.startswith((f"{pid2} line-", "-- started")) for ln in lines), lines
    bounded = m.logs_since("sh-unit", t_start, max_bytes=100)
    assert bounded.startswith("-- (log truncated:") and len(bounded) < 200


def test_a_new_manager_ignores_logs_of_earlier_runs(managers: Factory, tmp_path: Path) -> None:
    unit = sh_unit(tmp_path, "echo hello; sleep 30")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "sh-unit.log").write_text("ANOMALY from a run last week\n")
    m = managers(unit)
    since = time.time()
    m.restart("sh-unit")
    wait_until(lambda: "hello" in m.logs_since("sh-unit", since), timeout=5)
    assert "ANOMALY" not in m.logs_since("sh-unit", since)


def test_a_large_log_is_rotated_at_the_next_start_and_the_new_one_read_whole(
    managers: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ROTATE_BYTES a unit's log moves to <unit>.log.1 when the unit next starts; what a trial
    reads since its restart is the new log from its first byte (the rotation was never tested)."""
    monkeypatch.setattr(local_mod, "ROTATE_BYTES", 1000)
    m = managers(sh_unit(tmp_path, "head -c 3000 /dev/zero | tr '\\0' x; echo; echo up-$$; sleep 300"))
    m.restart("sh-unit")
    wait_until(lambda: "up-" in m.logs_since("sh-unit", 0.0), timeout=5)
    since = time.time()
    m.restart("sh-unit")
    pid = m.state("sh-unit").main_pid
    wait_until(lambda: f"up-{pid}" in m.logs_since("sh-unit", since), timeout=5)
    old, new = m.log_path("sh-unit").with_suffix(".log.1").read_text(), m.log_path("sh-unit").read_text()
    assert "x" * 3000 in old and f"up-{pid}" not in old
    assert m.logs_since("sh-unit", since) == new and new.startswith("-- started sh-unit pid=")


def test_stop_all_gives_a_unit_its_time_to_exit_on_sigterm_before_sigkill(managers: Factory, tmp_path: Path) -> None:
    """A server finishing its in-flight work on SIGTERM (here 0.5 s, then a last line) is not
    killed at once: stop_all waits up to STOP_TIMEOUT_S for the group, as stop() does."""
    ready, done = tmp_path / "ready", tmp_path / "done"
    script = f"trap 'sleep 0.5; echo bye > {done}; exit 0' TERM; touch {ready}; while :; do sleep 0.05; done"
    m = managers(sh_unit(tmp_path, script))
    m.restart("sh-unit")
    wait_until(ready.exists, timeout=5)  # the trap is set
    m.stop_all()
    assert done.read_text() == "bye\n"


def test_stop_all_leaves_nothing_running(managers: Factory, tmp_path: Path) -> None:
    a, b = sh_unit(tmp_path, "sleep 300 & wait", "a"), sh_unit(tmp_path, "sleep 300", "b")
    m = managers(a, b)
    m.restart("a")
    m.restart("b")
    pids = [m.state(u).main_pid for u in ("a", "b")]
    m.stop_all()
    assert all(not pid_running(p or 0) for p in pids)
    assert [m.state(u).active_state for u in ("a", "b")] == ["inactive", "inactive"]


def test_full_sim_deployment_under_the_manager(managers: Factory, tmp_path: Path) -> None:
    """The three sim units as the embedded default runs them, then the repro through the router."""
    pp, dp, rp = free_port(), free_port(), free_port()
    server = (sys.executable, "-m", "orchestrator.sim.server")
    units = [
        LocalUnit(
            "sim-prefill",
            (*server, "--role", "prefill", "--port", str(pp)),
            env_file(tmp_path, "SIM_WARMUP_S=0.2\n", "p.env"),
        ),
        LocalUnit(
            "sim-decode",
            (*server, "--role", "decode", "--port", str(dp)),
            env_file(tmp_path, "SIM_WARMUP_S=0.2\nSGLANG_DSV4_BF16_INDEX_K=1\n", "d.env"),
        ),
        LocalUnit(
            "sim-router",
            (
                *server,
                "--role",
                "router",
                "--port",
                str(rp),
                "--prefill-url",
                f"http://127.0.0.1:{pp}",
                "--decode-url",
                f"http://127.0.0.1:{dp}",
            ),
            env_file(tmp_path, "", "r.env"),
        ),
    ]
    m = managers(*units)
    since = min(m.restart(u.name) for u in units)
    wait_until(lambda: _ready(f"http://127.0.0.1:{rp}/readiness"), timeout=10)
    from orchestrator.edges.transport.local import LocalTransport

    out = LocalTransport().run(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.repro",
            "--router",
            f"http://127.0.0.1:{rp}",
            "--sessions",
            "10",
            "--seed",
            "1",
        ],
        timeout=60,
    )
    assert "CORRUPTION sessions: " in out.stdout and "/10 = " in out.stdout
    decode_log = m.logs_since("sim-decode", since)
    assert "decode req=" in decode_log and "ANOMALY" in decode_log


def _ready(url: str) -> bool:
    try:
        return get(url, timeout=1)[0] == 200
    except OSError:
        return False
