"""The fakes themselves (tests/fakes.py): they refuse what was not scripted, and behave like the
edges they stand for where runner tests rely on it."""

from __future__ import annotations

import re

import httpx
import pytest
from fakes import FakeServiceManager, FakeTransport, FakeUnit, Reply, Role, make_bed, make_matrix, make_plan

from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import CommandFailed, LockError, ServiceError, TransportError


def test_an_unscripted_command_is_refused_by_name() -> None:
    t = FakeTransport("decode (10.0.0.4:22)")
    with pytest.raises(AssertionError, match=r"decode \(10.0.0.4:22\): unscripted command refused: nvidia-smi -L"):
        t.run(["nvidia-smi", "-L"])
    assert t.refused == ["nvidia-smi -L"]
    assert t.commands() == ["nvidia-smi -L"]  # logged too


def test_scripts_match_exactly_by_prefix_or_by_regex_and_the_latest_wins() -> None:
    t = FakeTransport()
    t.script("echo hi", stdout="hi\n")
    t.script(["systemctl", "is-active"], stdout="active\n")
    t.script(re.compile(r"^journalctl "), stdout="line\n")
    assert t.run("echo hi").stdout == "hi\n"
    assert t.run(["systemctl", "is-active", "x"]).stdout == "active\n"
    assert t.run("journalctl -u x").stdout == "line\n"
    with pytest.raises(AssertionError):
        t.run("echo hi there")  # exact means exact
    t.script("echo hi", stdout="again\n")
    assert t.run("echo hi").stdout == "again\n"


def test_times_limits_a_script_then_the_command_is_refused_again() -> None:
    t = FakeTransport()
    t.script("flaky", exit_code=1, times=1)
    t.script("flaky", stdout="ok", times=1)
    assert t.run("flaky").stdout == "ok"
    assert t.run("flaky", check=False).exit_code == 1
    with pytest.raises(AssertionError):
        t.run("flaky")


def test_exit_codes_raise_when_checked_and_timeouts_raise_as_transport_errors() -> None:
    t = FakeTransport("h")
    t.script("false", exit_code=1, stderr="nope\n")
    t.script("sleep 99", timeout=True)
    with pytest.raises(CommandFailed):
        t.run("false")
    result = t.run("false", check=False)
    assert (result.ok, result.exit_code, result.stderr) == (False, 1, "nope\n")
    with pytest.raises(TransportError, match="timed out after 5 s"):
        t.run("sleep 99", timeout=5)


def test_a_handler_computes_the_reply_from_the_command() -> None:
    t = FakeTransport()
    t.script(["echo"], lambda text, argv: Reply(stdout=" ".join((argv or [])[1:]) + "\n"))
    assert t.run(["echo", "a", "b"]).stdout == "a b\n"


def test_files_live_in_memory_and_every_access_is_logged() -> None:
    t = FakeTransport(files={"/etc/a.env": "A=1\n"})
    assert t.exists("/etc/a.env") and not t.exists("/etc/b.env")
    t.write_bytes_atomic("/etc/a.env", b"A=2\n")
    assert t.read_bytes("/etc/a.env") == b"A=2\n"
    with pytest.raises(TransportError, match="cannot read /etc/b.env"):
        t.read_bytes("/etc/b.env")
    assert [(c.op, c.target) for c in t.calls] == [
        ("exists", "/etc/a.env"),
        ("exists", "/etc/b.env"),
        ("write", "/etc/a.env"),
        ("read", "/etc/a.env"),
        ("read", "/etc/b.env"),
    ]


def test_file_commands_act_on_the_in_memory_files() -> None:
    t = FakeTransport(files={"/e": "x"})
    t.allow_file_commands()
    assert t.run(["test", "-w", "/e"], check=False).ok
    assert not t.run(["test", "-w", "/nope"], check=False).ok
    assert t.run(["cat", "/e"]).stdout == "x"
    t.run(["rm", "-f", "/e"])
    assert t.files == {}
    with pytest.raises(AssertionError):
        t.run(["rm", "-rf", "/"])  # not the scripted prefix


def manager(text: str, dialect: str = "systemd", **unit: object) -> tuple[FakeTransport, FakeServiceManager]:
    t = FakeTransport("h", {"/e.env": text})
    return t, FakeServiceManager(t, "/e.env", dialect, [FakeUnit("u", **unit)])  # type: ignore[arg-type]


def test_a_start_reads_the_env_file_in_the_units_dialect() -> None:
    t, m = manager("A=1\nexport B=2\n")
    assert m.environ("u") is None and not m.state("u").is_active
    m.restart("u")
    assert m.environ("u") == {"PATH": "/usr/bin:/bin", "A": "1"}  # systemd drops `export` lines
    t.write_bytes_atomic("/e.env", b"A=3\n")
    assert m.environ("u")["A"] == "1"  # type: ignore[index]  # a running process keeps its env
    m.restart("u")
    assert m.environ("u")["A"] == "3"  # type: ignore[index]

    _, shell = manager("A=1\nexport B=2\n", "shell")
    shell.restart("u")
    assert shell.environ("u") == {"PATH": "/usr/bin:/bin", "A": "1", "B": "2"}


def test_main_pid_changes_at_every_restart_and_stop_clears_it() -> None:
    _, m = manager("A=1\n", active=True)
    first = m.state("u").main_pid
    m.restart("u")
    second = m.state("u").main_pid
    assert first and second and first != second
    m.stop("u")
    assert m.state("u").main_pid is None and m.environ("u") is None
    assert [(c.op, c.target) for c in m.calls] == [("restart", "u"), ("stop", "u")]


def test_failing_starts_crash_loops_and_deaths_are_reported() -> None:
    _, m = manager("A=1\n", fail_starts=1)
    with pytest.raises(ServiceError, match="h: unit u: failed"):
        m.restart("u")
    assert m.state("u").active_state == "failed"
    m.restart("u")
    assert m.state("u").is_active

    _, loop = manager("A=1\n", crash_loops=True)
    loop.restart("u")
    with pytest.raises(ServiceError, match="crash-looping"):
        loop.check_alive("u", 0)

    _, dies = manager("A=1\n", dies_after_s=0.0)
    dies.restart("u")
    with pytest.raises(ServiceError, match="not running"):
        dies.check_alive("u", 0)


def test_a_file_its_reader_refuses_fails_the_start() -> None:
    _, m = manager("A=\x00\n")
    with pytest.raises(ServiceError):
        m.restart("u")


def test_logs_since_returns_the_lines_written_after_since() -> None:
    _, m = manager("A=1\n", log_lines=("ANOMALY x",))
    m.restart("u")
    assert "ANOMALY x" in m.logs_since("u", 0)
    m.log("u", "later")
    assert m.logs_since("u", float("inf")) == ""


def test_health_answers_from_the_units_state() -> None:
    bed = make_bed({"decode": Role("A=1\n", [FakeUnit("d", ready_after_s=60)])})
    url = bed.deployment.hosts["decode"].host.health
    with pytest.raises(httpx.ConnectError):
        bed.client.get(url)  # nothing runs: connection refused
    bed.managers["decode"].restart("d")
    assert bed.client.get(url).status_code == 503  # loading
    bed.unit("decode").ready_after_s = 0
    assert bed.client.get(url).status_code == 200
    with pytest.raises(httpx.ConnectError):
        bed.client.get("http://stranger:1/health")


def test_the_testbed_lock_works_through_the_fake_file_commands() -> None:
    bed = make_bed({"decode": Role("A=1\n")})
    first = TestbedLock.for_run(bed.deployment, "run-1", "now")
    first.acquire()
    assert any(p.endswith(".orch-lock") for p in bed.transports["decode"].files)
    with pytest.raises(LockError, match="locked"):
        TestbedLock.for_run(bed.deployment, "run-2", "now").acquire()
    first.release()
    assert list(bed.transports["decode"].files) == [bed.env_file("decode")]


def test_make_plan_builds_a_small_sequential_plan() -> None:
    bed = make_bed({"decode": Role("A=0\n"), "prefill": Role("B=0\n")})
    plan = make_plan(bed, {"a": {"env": {"decode": "A"}, "levels": ["0", "1"]}}, replicates=2)
    assert [s.env["decode"]["A"] for s in plan.steps] == ["0", "1", "0", "1"]
    assert make_matrix({"a": {"env": {"decode": "A"}, "levels": ["0", "1"]}}).name == "fake"


def test_a_fake_units_pid_is_never_one_a_test_gives_a_stranger() -> None:
    """Strangers in tests hold pids like 4242 (tests/unit/test_identity.py, test_preflight_where.py):
    a worker that had started 242 fake units gave the next one 4242, so a stranger on its port read
    as the unit itself and preflight let it through (one fresh-clone run, by test order)."""
    transport = FakeTransport("h", {"/e.env": "X=1\n"})
    manager = FakeServiceManager(transport, "/e.env", "systemd", [FakeUnit(f"u{i}", active=True) for i in range(300)])
    pids = [manager.units[f"u{i}"].pid for i in range(300)]
    assert all(pid is not None and pid >= 100_000 for pid in pids), pids[:3]
    for _ in range(300):
        manager.restart("u0")
    assert manager.units["u0"].pid is not None and manager.units["u0"].pid >= 100_000
