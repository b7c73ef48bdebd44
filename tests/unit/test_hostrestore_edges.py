"""`orch restore --testbed NAME` through its API entry (sweep.hostrestore.restore_from_hosts): what
the outcome and the progress are told, a missing inventory, and a run named with --run-id, on the
fakes of tests/helpers/parallel_fakes.py (no process, no socket). Mutation survivors of
sweep/hostrestore.py (bench/README.md, round ten): its other tests (test_restore_from_hosts.py)
call restore_testbed and run_to_restore directly, below this entry."""

from __future__ import annotations

import base64
import json
import shlex
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import Call, FakeTransport, Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.core.config import read_inventory
from orchestrator.edges.leftovers import RUN_VAR
from orchestrator.edges.lock import LockInfo, lock_path
from orchestrator.edges.remote_leftovers import SCRIPT as LEFT_SCRIPT
from orchestrator.edges.remote_scope import run_tag, run_units
from orchestrator.errors import UsageError
from orchestrator.sweep import api
from orchestrator.sweep.apitypes import HostRestoreRequest
from orchestrator.sweep.hostrestore import run_to_restore
from orchestrator.sweep.hosts import host_backup_path
from orchestrator.sweep.hostunits import host_units_path
from orchestrator.sweep.progress import QuietProgress

DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process


class EndedProgress(QuietProgress):
    def __init__(self) -> None:
        self.ended: list[tuple[str, ...]] = []
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def restore_ended(self, not_restored: Sequence[str]) -> None:
        self.ended.append(tuple(not_restored))


def _left_by_a_killed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_id: str, *, sudo: bool = False
) -> tuple[Fleet, Path]:
    """Testbed A's decode holds a cell's env file and, beside it, run `run_id`'s copy of the
    original, as a run killed -9 leaves it (its folder deleted since; no lock, no units' record).
    `sudo`: its hosts log in as a user who writes the env files through sudo."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    _, inventory = write_files(tmp_path, fake_matrix("m", 1), ["A"])
    if sudo:
        inventory.write_text(inventory.read_text().replace("user: root}", "user: ann, sudo: true}"))
    deployment = fleet.connect(read_inventory(inventory).testbed("A"))
    decode = fleet.transports[("A", "decode")]
    env = deployment.hosts["decode"].host.env_file
    decode.files[host_backup_path(env, run_id)] = b"D=0\n"
    decode.files[env] = b"D=1\n"
    return fleet, inventory


def test_a_restore_from_the_hosts_outcome_names_no_folder_and_the_progress_is_told_it_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome's run_dir is None (restored from the hosts' own copies: apitypes.RestoreOutcome),
    its `again` the command with this inventory, and the progress is told the restore ended (what a
    status sink keeps), once, with no host left changed, after being told what happens to the units."""
    fleet, inventory = _left_by_a_killed_run(tmp_path, monkeypatch, "r9")
    progress = EndedProgress()
    outcome = api.restore_from_hosts(HostRestoreRequest(inventory, "A"), progress)
    assert fleet.file("A", "decode") == b"D=0\n"
    assert outcome.run_dir is None and outcome.run_id == "r9"
    assert outcome.again == f"orch restore --testbed A --run-id r9 -i {inventory}"
    assert [t.not_restored for t in outcome.testbeds] == [()] and outcome.exit_code == 0
    assert progress.ended == [()]
    # no record of the units beside the copy (an orch from before): what it will do with them, said first
    assert progress.notes[0] == (
        "run r9's folder is gone, and with it which units ran before it (a copy without the record of them): "
        "the units running now are restarted on the original env files, stopped ones are left stopped"
    )


def test_a_missing_inventory_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    """Said as a wrong argument, with the hint to pass the run's inventory (not as a config file
    that could not be read)."""
    gone = tmp_path / "nowhere.yaml"
    with pytest.raises(UsageError) as info:
        api.restore_from_hosts(HostRestoreRequest(gone, "A"), QuietProgress())
    assert str(info.value) == f"inventory {gone} not found (pass -i INVENTORY (the run's))"


def test_the_run_given_with_run_id_is_the_one_restored_whatever_the_lock_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--run-id wins over the run the testbed's lock (or the hosts' copies) name: a host holding
    copies of two runs is put back from the one asked for."""
    fleet, inventory = _left_by_a_killed_run(tmp_path, monkeypatch, "r9")
    deployment = fleet.connect(read_inventory(inventory).testbed("A"))
    other = LockInfo("r8", "ann", DEAD_PID, socket.gethostname(), "t", "A", str(tmp_path / "gone"))
    for key, handle in deployment.hosts.items():
        fleet.transports[("A", key)].files[lock_path(handle, "A")] = (json.dumps(other.__dict__) + "\n").encode()
    assert run_to_restore(deployment, None) == "r8"  # the lock's
    assert run_to_restore(deployment, "r9") == "r9"
    assert run_to_restore(deployment, "r7") == "r7"  # named even where no host holds its copy


def test_the_copies_and_the_units_record_are_looked_for_with_sudo_on_a_sudo_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose env file orch writes through sudo keeps the copy and the record beside it, where
    the login user may not see them: looked for without sudo, the copy would be "none" and the host
    left on a cell's file. (The fake transport ignores sudo, so its calls are recorded here.)"""
    fleet, inventory = _left_by_a_killed_run(tmp_path, monkeypatch, "r9", sudo=True)
    decode = fleet.transports[("A", "decode")]
    asked: list[tuple[str, object]] = []
    run = decode.run

    def recording(command: object, **kwargs: object) -> object:
        if isinstance(command, list) and command[:1] == ["test"]:
            asked.append((command[-1], kwargs.get("sudo")))
        return run(command, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(decode, "run", recording)
    api.restore_from_hosts(HostRestoreRequest(inventory, "A"), QuietProgress())
    assert fleet.file("A", "decode") == b"D=0\n"
    copy = host_backup_path("/etc/orch/decode.env", "r9")
    record = host_units_path("/etc/orch/decode.env", "r9")
    assert {path for path, _ in asked} >= {copy, record}, asked
    assert all(sudo is True for path, sudo in asked if path in (copy, record)), asked


def _scan_for(run_id: str, transport: FakeTransport) -> list[Call]:
    """The looks for run `run_id`'s repros (remote_leftovers.stop_run) sent to a fake host."""
    needle = f"{RUN_VAR}={run_id}"
    return [c for c in transport.calls if c.op == "run" and c.target.startswith("sh -c ") and needle in c.target]


def test_a_repro_the_killed_run_left_on_a_host_is_stopped_and_named_before_any_env_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the run folder, which recorded each repro's mark, the run's own entry in its repros'
    environment finds them: every host is asked once, under the lock, before the first write; what
    decode still runs is named (its command line masked: the run's declared secrets are gone, a
    token's value form is not) and the restore goes on."""
    fleet, inventory = _left_by_a_killed_run(tmp_path, monkeypatch, "r9")
    decode = fleet.transports[("A", "decode")]
    cmdline = base64.b64encode(b"python\0load.py\0hf_abcdefghijklmnopqrstuvwxyz0123\0").decode()
    decode.script(("sh", "-c", LEFT_SCRIPT), Reply(stdout=f"left|4242|{cmdline}\n"))
    progress = EndedProgress()
    outcome = api.restore_from_hosts(HostRestoreRequest(inventory, "A"), progress)
    assert outcome.exit_code == 0 and fleet.file("A", "decode") == b"D=0\n"
    for key in ("prefill", "decode"):
        [scan] = _scan_for("r9", fleet.transports[("A", key)])
        assert shlex.split(scan.target)[-1] == run_units("r9"), key  # and what runs in the run's scopes
    first_write = min(c.seq for c in decode.calls if c.op == "write")
    assert _scan_for("r9", decode)[0].seq < first_write
    said = [n for n in progress.notes if "4242" in n]
    assert said == [
        "stopped on decode (A-decode.fake:22) what run r9's repro left running when its controller was killed: "
        "pid 4242 (python load.py ••••)"
    ], progress.notes


def test_a_host_that_cannot_be_looked_at_for_repros_is_said_and_the_restore_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, inventory = _left_by_a_killed_run(tmp_path, monkeypatch, "r9")
    fleet.transports[("A", "prefill")].script(
        ("sh", "-c", LEFT_SCRIPT), Reply(3, stderr="orch-left: base64 not found\n")
    )
    progress = EndedProgress()
    outcome = api.restore_from_hosts(HostRestoreRequest(inventory, "A"), progress)
    assert outcome.exit_code == 0 and fleet.file("A", "decode") == b"D=0\n"
    units = f"orch-repro-{run_tag('r9')}-*.scope"
    assert [n for n in progress.notes if n.startswith("cannot look")] == [
        "cannot look for run r9's repros: prefill (A-prefill.fake:22): cannot look for processes the repro left "
        "running: orch-left: base64 not found (orch needs sh, grep, head, base64 and a readable /proc/PID/environ on "
        f"the host); any still running there carry ORCH_REPRO_RUN=r9 in their environment or run in a scope {units} "
        f"(find them: grep -l -a ORCH_REPRO_RUN=r9 /proc/*/environ; systemctl status '{units}')"
    ]
