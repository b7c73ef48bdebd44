"""A trial that changes one env file whose host restarts one unit writes that file in its restart's
round trip (Services.apply defers it, restart_units hands it to restart_with_file): still written
before the restart, still verified in the live process. Anything else (the first trial, two files,
several units) writes first, as before. On fakes; the real command is in tests/remote/test_systemd.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeTransport, FakeUnit, Reply, Role, make_bed, make_plan, runner_for

from orchestrator.edges.services.systemd import SystemdManager
from orchestrator.edges.transport import Result
from orchestrator.errors import TransportError


def count_folded(bed: Any, role: str) -> list[bytes]:
    """Record what each restart_with_file of `role` wrote (the bytes it was given)."""
    manager, seen = bed.managers[role], []
    original = manager.restart_with_file

    def spy(unit: str, transport: Any, path: str, data: bytes, **kw: Any) -> float:
        seen.append(data)
        return original(unit, transport, path, data, **kw)

    manager.restart_with_file = spy
    return seen


def test_one_changed_file_is_written_with_its_restart_after_the_first_trial(tmp_path: Path) -> None:
    bed = make_bed({"decode": Role("FLAG=0\n")})
    folded = count_folded(bed, "decode")
    plan = make_plan(bed, {"f": {"env": {"decode": "FLAG"}, "levels": ["1", "2"]}}, replicates=2)
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0)  # each verified in the live process
    assert folded == [b"FLAG=2\n", b"FLAG=1\n", b"FLAG=2\n"]  # the first trial wrote first, as before
    env_file = bed.env_file("decode")
    calls = sorted(bed.transports["decode"].calls + bed.managers["decode"].calls, key=lambda c: c.seq)
    ops = [c.op for c in calls if c.op == "restart" or (c.op == "write" and c.target == env_file)]
    assert ops[:8] == ["write", "restart"] * 4  # every trial's restart after its write
    assert bed.file("decode") == b"FLAG=0\n"  # restored


def test_two_changed_files_are_written_before_any_restart(tmp_path: Path) -> None:
    bed = make_bed({"prefill": Role("A=0\n"), "decode": Role("B=0\n")})
    folded = count_folded(bed, "decode") + count_folded(bed, "prefill")
    factor = {"env": {"prefill": "A", "decode": "B"}, "levels": ["1", "2"]}
    result = runner_for(bed, make_plan(bed, {"f": factor}, replicates=2), tmp_path / "run").execute()
    assert result.completed == 4 and folded == []


def test_a_host_with_two_units_writes_first(tmp_path: Path) -> None:
    bed = make_bed({"decode": Role("FLAG=0\n", [FakeUnit("d1"), FakeUnit("d2")])})
    folded = count_folded(bed, "decode")
    plan = make_plan(bed, {"f": {"env": {"decode": "FLAG"}, "levels": ["1", "2"]}}, replicates=2)
    assert runner_for(bed, plan, tmp_path / "run").execute().completed == 4 and folded == []


class Recorder:
    """A transport stub that records which operations the manager used."""

    def __init__(self, host: str = "decode", fail_write: bool = False) -> None:
        self.host, self.ops, self.fail_write = host, [], fail_write

    def run(self, command: str | Sequence[str], **kw: Any) -> Result:
        self.ops.append(("run", str(command)))
        return Result(self.host, str(command), 0, "1764550800.5\n", "", 0.0)

    def write_bytes_atomic(self, path: str, data: bytes, *, expect: bytes | None = None) -> None:
        self.ops.append(("write", path))

    def write_then_run(
        self, path: str, data: bytes, command: str, *, timeout: float, expect: bytes | None = None
    ) -> Result:
        if self.fail_write:
            raise TransportError(self.host, f"cannot write {path}: permission denied")
        self.ops.append(("write_then_run", command))
        return Result(self.host, command, 0, "1764550800.5\n", "", 0.0)


def test_systemd_restart_with_file_is_one_round_trip_on_its_own_connection() -> None:
    own = Recorder()
    m = SystemdManager(own, "decode")  # type: ignore[arg-type]
    assert m.restart_with_file("u.service", own, "/etc/x.env", b"X=1\n") == 1764550800.5  # type: ignore[arg-type]
    ((op, command),) = own.ops
    assert (
        op == "write_then_run"
        and "reset-failed -- u.service" in command
        and "systemctl restart -- u.service" in command
    )


def test_systemd_restart_with_a_file_on_another_transport_writes_there_first() -> None:
    own, other = Recorder(), Recorder("elsewhere")
    m = SystemdManager(own, "decode")  # type: ignore[arg-type]
    m.restart_with_file("u.service", other, "/etc/x.env", b"X=1\n")  # type: ignore[arg-type]
    assert other.ops == [("write", "/etc/x.env")] and [op for op, _ in own.ops] == ["run"]


def test_a_failed_write_restarts_nothing() -> None:
    own = Recorder(fail_write=True)
    m = SystemdManager(own, "decode")  # type: ignore[arg-type]
    with pytest.raises(TransportError, match="cannot write /etc/x.env: permission denied"):
        m.restart_with_file("u.service", own, "/etc/x.env", b"X=1\n")  # type: ignore[arg-type]
    assert own.ops == []


def test_the_fake_transport_writes_then_runs() -> None:
    t = FakeTransport("decode", {"/etc/x.env": b"X=0\n"})
    t.script("echo hi", Reply(0, "hi\n"))
    assert t.write_then_run("/etc/x.env", b"X=1\n", "echo hi", timeout=5).stdout == "hi\n"
    assert t.files["/etc/x.env"] == b"X=1\n" and [c.op for c in t.calls] == ["write", "run"]
