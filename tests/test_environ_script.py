"""The script that reads a unit's live environment on its host (edges.services.systemd's
_TREE_SCRIPT), run by sh on this machine with a stand-in `systemctl`: a process that exits as its
environ is read is not "permission denied". Found on the testbed: decode crash-looping ('Address
already in use') was reported as "cannot read /proc/361/environ: permission denied (connect as
root or set sudo: true)", to a controller connected as root."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from orchestrator.edges.services.systemd import _TREE_SCRIPT, parse_tree

pytestmark = pytest.mark.process


def _bin(tmp_path: Path, **scripts: str) -> dict[str, str]:
    """An environment whose PATH finds these stand-ins first."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    for name, text in scripts.items():
        (folder / name).write_text("#!/bin/sh\n" + text)
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _tree(env: dict[str, str]) -> str:
    argv = ["sh", "-c", _TREE_SCRIPT, "orch-environ", "decode.service", "8"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=True).stdout


def test_a_server_that_exits_as_its_environ_is_read_is_not_called_unreadable(tmp_path: Path) -> None:
    server = subprocess.Popen(["sleep", "60"])
    reaped = threading.Thread(target=server.wait)  # reaped at once, as systemd reaps a unit's process
    reaped.start()
    try:
        env = _bin(
            tmp_path,
            systemctl=f"printf 'MainPID={server.pid}\\nControlGroup=\\n'\n",
            # the read of its environ fails because it exits meanwhile (killed, then gone)
            base64=f"kill -9 {server.pid}; while [ -e /proc/{server.pid} ]; do sleep 0.01; done; exit 1\n",
        )
        main, procs, denied = parse_tree(_tree(env))
    finally:
        server.kill()
        reaped.join(10)
    assert (main, procs, denied) == (server.pid, {}, [])  # no process to read, and no permission problem


def test_a_live_server_is_read_and_one_whose_environ_cannot_be_read_is_said(tmp_path: Path) -> None:
    server = subprocess.Popen(["sleep", "60"], env={"SGLANG_FLAG": "1", "PATH": os.environ["PATH"]})
    try:
        shown = f"printf 'MainPID={server.pid}\\nControlGroup=\\n'\n"
        main, procs, denied = parse_tree(_tree(_bin(tmp_path / "a", systemctl=shown)))
        assert main == server.pid and denied == [] and b"SGLANG_FLAG=1" in procs[server.pid].environ
        # alive, and its environ cannot be read (another user's, without sudo): said, to be named
        refused = _bin(tmp_path / "b", systemctl=shown, base64="exit 1\n")
        assert parse_tree(_tree(refused)) == (server.pid, {}, [server.pid])
    finally:
        server.kill()
        server.wait(10)
