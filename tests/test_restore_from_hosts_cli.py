"""`orch restore --testbed NAME -i INVENTORY` on a local testbed (the real local transport and
lock commands, `sh` included: hence `process`), as the audit left it: a run killed with -9, its
folder deleted, its lock and its copies of the env files still on the hosts. The units never ran
here, so nothing starts. The logic is tested on the fakes (tests/unit/test_restore_from_hosts.py);
this is the command and its arguments."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from orchestrator.cli.main import main

RUN = "20261205-033147-q_ablation-q1"
DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process
ORIGINAL = {"decode": b'# decode flags\r\nSIM_SEED=7\r\nSGLANG_EXTRA_ARGS=""', "prefill": b"SIM_SEED=7\n"}


def killed_and_deleted(root: Path) -> Path:
    """The testbed's files as the audit found them; the inventory's path."""
    for role, original in ORIGINAL.items():
        (root / f"{role}.env.orch-backup-{RUN}").write_bytes(original)
        (root / f"{role}.env").write_bytes(original.replace(b"SIM_SEED=7", b"SIM_SEED=8"))  # a cell's values
        lock = {"run_id": RUN, "user": "ann", "pid": DEAD_PID, "controller": socket.gethostname(),
                "started": "2026-12-05T03:31:47", "testbed": "sim", "run_dir": str(root / "rq" / RUN)}  # fmt: skip
        (root / f"{role}.env.orch-lock").write_text(json.dumps(lock) + "\n")
    hosts = "".join(
        f"      {role}:\n"
        f"        env_file: {role}.env\n"
        f"        units: [{{name: t-{role}, command: [/bin/false]}}]\n"
        "        url: http://127.0.0.1:9\n"
        for role in ORIGINAL
    )
    inventory = root / "inventory.yaml"
    inventory.write_text("testbeds:\n  sim:\n    state_dir: state\n    hosts:\n" + hosts)
    return inventory


@pytest.mark.process
@pytest.mark.timeout(60)
def test_orch_restore_testbed_puts_the_hosts_back_without_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = killed_and_deleted(tmp_path)
    assert main(["restore", "--testbed", "sim", "-i", str(inventory)]) == 0  # the run: the one the lock names
    said = capsys.readouterr()
    assert "restored: decode, prefill" in said.out, said
    assert "folder is gone" in said.err, said
    kept = {role: tmp_path / f"{role}.env.orch-drift-{RUN}" for role in ORIGINAL}
    for role, original in ORIGINAL.items():
        assert (tmp_path / f"{role}.env").read_bytes() == original, role
        # without the run's folder orch cannot tell the run's cell from an edit: what was there is
        # kept aside (sweep.drift: "unsure"), private, and named at the end
        assert kept[role].read_bytes() == original.replace(b"SIM_SEED=7", b"SIM_SEED=8"), role
        assert kept[role].stat().st_mode & 0o777 == 0o600, role
        assert f"kept aside: {role} ({kept[role]})" in said.out, said
    left = sorted(p.name for p in tmp_path.iterdir() if ".orch-" in p.name)
    assert left == sorted(p.name for p in kept.values()), left  # the copies and the dead run's locks are gone


def test_restore_takes_a_run_dir_or_a_testbed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["restore"]) == 2
    assert "give the run's folder (RUN_DIR), or --testbed NAME" in capsys.readouterr().err
    assert main(["restore", str(tmp_path), "--testbed", "sim"]) == 2
    assert "RUN_DIR or --testbed, not both" in capsys.readouterr().err


def test_restore_help_says_the_hosts_record_of_the_units_decides(capsys: pytest.CaptureFixture[str]) -> None:
    """The help said units running now are restarted (what an older orch's copy gets), not that the
    record beside each copy now says which ran before and that a unit the run started is stopped."""
    with pytest.raises(SystemExit):
        main(["restore", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "orch-units-<run_id>" in said and "one the run started is stopped" in said
