"""Health checks through an SSH tunnel, for ports a firewall (or a loopback bind) hides."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml
from helpers.ssh_sweep import ENV_FILES, MATRIX, no_leftovers, snapshot, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main
from orchestrator.edges.transport.ssh import SshTransport

pytestmark = pytest.mark.testbed


def decode_transport(tb: Testbed) -> SshTransport:
    return SshTransport("decode", tb.host("decode").ip, key_filename=str(tb.key), known_hosts=str(tb.known_hosts))


def test_tunnel_reaches_a_loopback_only_port(testbed: Testbed):
    python = testbed.python
    testbed.ssh(
        "decode", f"systemd-run --unit=orch-lo --collect {python} -m http.server 30099 --bind 127.0.0.1 -d /etc"
    )
    t = decode_transport(testbed)
    try:
        with httpx.Client(trust_env=False, timeout=2) as client:
            with pytest.raises(httpx.ConnectError):  # not reachable from the controller directly
                client.get(f"http://{testbed.host('decode').ip}:30099/")
            tunnel = t.open_tunnel("127.0.0.1", 30099)
            deadline = time.monotonic() + 10
            while True:  # the server may still be starting: the tunnel reads as "not ready yet"
                try:
                    answer = client.get(tunnel.url_for("http://127.0.0.1:30099/hostname"))
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert answer.status_code == 200 and answer.text.strip() == "decode"
            assert t.connects == 1  # rides on the existing connection
    finally:
        t.close()
        testbed.ssh("decode", "systemctl stop orch-lo", check=False)


def test_sweep_with_health_through_tunnels(testbed: Testbed, tmp_path: Path, capsys):
    data = yaml.safe_load(testbed.inventory.read_text())
    for role, port in (("prefill", 30000), ("decode", 30002)):
        entry = data["testbeds"]["dsv4-pd"]["hosts"][role]
        entry["health"] = f"http://127.0.0.1:{port}/health"  # the host's own loopback
        entry["health_tunnel"] = True
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    (tmp_path / "m.yaml").write_text(MATRIX)
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    code = main(
        [
            "run",
            str(tmp_path / "m.yaml"),
            "-i",
            str(inventory),
            "--out",
            str(tmp_path / "reports"),
            "--run-id",
            "tunnel",
        ]
    )
    assert code == 0, capsys.readouterr().err
    trials = trials_of(tmp_path / "reports" / "tunnel")
    assert [t.status for t in trials] == ["completed"] * 4
    assert all("decode" in t.health_wait_s for t in trials)
    assert snapshot(testbed, files) == before
    no_leftovers(testbed)
