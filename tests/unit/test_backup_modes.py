"""The hosts' original env files hold real secrets (HF_TOKEN=...: the restore must write them back,
so they cannot be masked like the run's other outputs), and every copy orch keeps of them is as
private as the original. Found on a real testbed: decode.env at 600 root:nogroup was copied to
`decode.env.orch-backup-<run>` at 644 root:root on the host (left there for good when a restore
fails) and to the run folder's backup/decode.env at 644 inside 755 folders.

The host-side copy takes the original's mode and owner (0600 if the original is gone); the run
folder's backup/ (and a parallel run's backup/<testbed>/) is 0700 and its files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Role, make_bed

from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import JournalError
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.hosts import HostGuard, host_backup_path
from orchestrator.sweep.progress import QuietProgress

SECRET_ENV = "SGLANG_FLAG=1\nHF_TOKEN=hf_secretvalue123\n"


def _bed() -> FakeBed:
    bed = make_bed(
        {
            "prefill": Role("PREFILL_FLAG=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role(SECRET_ENV, [FakeUnit("decode-server", active=True)]),
        }
    )
    bed.transports["decode"].set_mode(bed.env_file("decode"), 0o600, "root:nogroup")
    bed.transports["prefill"].set_mode(bed.env_file("prefill"), 0o640, "root:sglang")
    return bed


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_host_side_backup_keeps_the_originals_mode_and_owner(tmp_path: Path) -> None:
    bed = _bed()
    HostGuard(bed.deployment, RunDir(tmp_path / "r1").backup(), "r1", QuietProgress()).backup()
    decode, prefill = bed.transports["decode"], bed.transports["prefill"]
    assert decode.files[host_backup_path(bed.env_file("decode"), "r1")] == SECRET_ENV.encode()
    assert decode.mode_of(host_backup_path(bed.env_file("decode"), "r1")) == (0o600, "root:nogroup")
    assert prefill.mode_of(host_backup_path(bed.env_file("prefill"), "r1")) == (0o640, "root:sglang")


@pytest.mark.parametrize("testbed", ["", "tb-a"], ids=["one-testbed", "parallel"])
def test_the_run_folders_backup_is_private_to_its_owner(tmp_path: Path, testbed: str) -> None:
    run = RunDir(tmp_path / "r1")
    run.backup_root.mkdir(parents=True, mode=0o755)  # as an older orch (or a umask) left it
    run.backup_root.chmod(0o755)
    HostGuard(_bed().deployment, run.backup(testbed), "r1", QuietProgress()).backup()
    folder = run.backup(testbed)
    assert (folder.env("decode")).read_bytes() == SECRET_ENV.encode()
    for path in (folder.env("decode"), folder.env("prefill"), folder.units_json):
        assert _mode(path) == 0o600, path
    for path in {run.backup_root, folder.path}:
        assert _mode(path) == 0o700, path


def test_a_resumed_run_writes_its_host_backups_back_as_private_as_the_originals(tmp_path: Path) -> None:
    """The restore that ended the first process removed the host-side copies; the resume writes
    them again before any edit (HostGuard.rewrite_host_backups), with the original's mode."""
    bed = _bed()
    backup = RunDir(tmp_path / "r1").backup()
    HostGuard(bed.deployment, backup, "r1", QuietProgress()).backup()
    copy = host_backup_path(bed.env_file("decode"), "r1")
    del bed.transports["decode"].files[copy]
    resumed = HostGuard(bed.deployment, backup, "r1", QuietProgress())
    assert resumed.adopt()
    resumed.rewrite_host_backups()
    assert bed.transports["decode"].mode_of(copy) == (0o600, "root:nogroup")


def test_the_local_transport_gives_a_copy_the_mode_and_owner_of_its_source(tmp_path: Path) -> None:
    """LocalTransport (the simulated deployment's hosts): `like` as over SSH."""
    env, copy = tmp_path / "decode.env", tmp_path / "decode.env.orch-backup-r1"
    env.write_text(SECRET_ENV)
    env.chmod(0o600)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # nobody:nogroup as root
    if os.geteuid() == 0:
        os.chown(env, *owner)
    t = LocalTransport("decode")
    t.write_bytes_atomic(str(copy), SECRET_ENV.encode(), like=str(env))
    st = copy.stat()
    assert (_mode(copy), st.st_uid, st.st_gid) == (0o600, *owner)
    gone = tmp_path / "gone.env"
    t.write_bytes_atomic(str(tmp_path / "gone.env.copy"), b"A=1\n", like=str(gone))
    assert _mode(tmp_path / "gone.env.copy") == 0o600  # never the umask's 644 for a copy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env", "decode.env.orch-backup-r1", "gone.env.copy"]


@pytest.mark.parametrize("name", ["units.json", "files.json"])
def test_a_backup_json_nested_too_deep_is_a_damaged_backup_not_a_traceback(tmp_path: Path, name: str) -> None:
    """json.loads gives up on lists nested 100,000 deep with RecursionError, no ValueError: resume
    and restore of a run folder with such a backup file ended in a traceback."""
    bed = _bed()
    backup = RunDir(tmp_path / "r1").backup()
    HostGuard(bed.deployment, backup, "r1", QuietProgress()).backup()
    (backup.path / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(JournalError, match=f"cannot read the backup of the original env files.*{name}"):
        HostGuard(bed.deployment, backup, "r1", QuietProgress()).adopt()
