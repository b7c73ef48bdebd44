"""The port-held demo (issue 12): another program listens where the bundled simulator's health URL
points. `orch run` must refuse before any edit (exit 2, naming host, port, pid and command line),
not measure the stranger. Real local manager, a private inventory on free ports, and a foreign
listener (a Python socket in its own process) started and stopped here by pid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.shipped import REPO, private_inventory

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

LISTENER = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_port_held_by_another_program_refuses_the_demo_before_any_edit(tmp_path: Path, capsys) -> None:
    inventory, ports = private_inventory(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")}
    held = ports[0]  # prefill's health URL
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, str(held)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        code = main(
            [
                "run",
                str(REPO / "matrices" / "overlap_ablation.yaml"),
                "-i",
                str(inventory),
                "--out",
                str(tmp_path / "reports"),
                "--run-id",
                "held",
            ]
        )
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert code == 2, text
        assert f"port {held} is held by pid {proc.pid} ({sys.executable} -c import socket" in text, text
        assert "user " in text and "not by unit sim-prefill (not running)" in text, text
        assert "stop it, or point the inventory at another port" in text, text
        assert "Traceback" not in text
        assert proc.poll() is None  # the stranger is left alone
    finally:
        proc.kill()
        proc.wait(10)
    assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
    assert not any(port_open(p) for p in ports)  # no simulator was started
    assert not (tmp_path / "reports" / "held" / "journal.jsonl").exists()
