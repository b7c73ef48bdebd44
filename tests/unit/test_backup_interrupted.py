"""A SIGTERM (or Ctrl-C) during the backup leaves no copy of the run's on the host it was backing up.

Found by the kill-point harness (bench/bench_kill_points.py --signals TERM, seeds 303 and 329): the
run exited 130 with every env file intact, but the host being backed up kept the run's copy
(`<env>.orch-backup-<run>`) and a temp file: status.json named nothing left changed, and only
`orch restore` removed them. Nothing was edited yet (the backup comes first), so the copy is
removed at once, by the command the restore uses (sweep.hosts.remove_run_files).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Role, flag, make_bed, make_plan

from orchestrator.errors import Interrupted
from orchestrator.sweep import hosts
from orchestrator.sweep.progress import QuietProgress
from orchestrator.sweep.runner import Runner, RunOptions


def _orch_files(bed: FakeBed) -> list[str]:
    files = [p for t in bed.transports.values() for p in t.files]
    return sorted(p for p in files if ".orch-" in p)


@pytest.mark.parametrize("stop", [Interrupted("received SIGTERM"), KeyboardInterrupt()])
def test_an_interrupt_during_a_hosts_backup_leaves_no_copy_on_any_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    bed = make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("D=0\n", [FakeUnit("decode-server", active=True)]),
        }
    )
    plan = make_plan(bed, {"d": flag("decode", "D")})
    real = hosts.write_host_units

    def stopped_on_decode(transport, env_file, run_id, active):  # type: ignore[no-untyped-def]
        if "decode" in env_file:  # its copy is written; the signal lands before its units' record
            raise stop
        return real(transport, env_file, run_id, active)

    monkeypatch.setattr(hosts, "write_host_units", stopped_on_decode)
    runner = Runner(
        plan, bed.deployment, tmp_path / "run", RunOptions("r1", retry_backoff_s=0.0), progress=QuietProgress(),
        client=bed.client,
    )  # fmt: skip
    result = runner.execute()
    assert result.interrupted and result.completed == 0
    assert _orch_files(bed) == [], f"the hosts still hold {_orch_files(bed)} after the interrupted backup"
    assert bed.file("decode") == b"D=0\n" and bed.file("prefill") == b"P=0\n"


@pytest.mark.parametrize("stop", [Interrupted("received SIGTERM"), KeyboardInterrupt()])
def test_an_interrupt_inside_a_local_atomic_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    """The temp file of an atomic write was removed only when the write failed (OSError): a signal
    arriving while it was filled left `.NAME.orch-XXXXXXXX` beside the file."""
    from orchestrator.edges.transport import local

    target = tmp_path / "decode.env"
    target.write_bytes(b"D=0\n")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise stop

    monkeypatch.setattr(local, "_fill", interrupted)
    with pytest.raises(type(stop)):
        local.LocalTransport().write_bytes_atomic(str(target), b"D=1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env"]
    assert target.read_bytes() == b"D=0\n"


def test_a_host_that_fails_before_its_copy_is_written_is_not_asked_to_tidy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose env file cannot be read holds none of the run's files: no tidy command is sent
    to it (to a host that is gone, it would only wait out a connect timeout before the error)."""
    from orchestrator.errors import TransportError

    bed = make_bed({"decode": Role("D=0\n", [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "D")})
    transport = bed.transports["decode"]

    def gone(path: str) -> object:
        raise TransportError("decode", "ssh: connect to host decode port 22: No route to host")

    monkeypatch.setattr(transport, "read_entry", gone)
    runner = Runner(
        plan, bed.deployment, tmp_path / "run", RunOptions("r1", retry_backoff_s=0.0), progress=QuietProgress(),
        client=bed.client,
    )  # fmt: skip
    with pytest.raises(TransportError):
        runner.execute()
    assert not [c for c in transport.commands() if "orch-tidy" in c], transport.commands()
