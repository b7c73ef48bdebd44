"""`orch serve --host ::1`: the server's socket was IPv4 whatever the address, so the IPv6 loopback
failed to bind (`Address family for hostname not supported`, under a hint to pick another port)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest
from helpers.serving import run_folder

from orchestrator.errors import UsageError
from orchestrator.team.serve import make_server


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_serve_binds_the_ipv6_loopback_and_accepts_its_host_header(tmp_path: Path) -> None:
    run_folder(tmp_path / "r1", {"notes.csv": "a,b\n"})
    server = make_server(tmp_path, "::1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        base = f"http://[::1]:{server.server_address[1]}"
        with httpx.Client(trust_env=False, timeout=5) as client:
            ok = client.get(f"{base}/r1/notes.csv")  # Host: [::1]:PORT
            rebound = client.get(f"{base}/r1/notes.csv", headers={"Host": "evil.example"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert (ok.status_code, ok.text) == (200, "a,b\n")
    assert rebound.status_code == 421  # the Host check holds on IPv6 too


def test_a_host_not_of_this_machine_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        make_server(tmp_path, "192.0.2.1", 0)  # TEST-NET-1: never an address of this machine
    assert "--host" in str(caught.value) and "192.0.2.1:0" in str(caught.value)
    assert "127.0.0.1 or ::1" in (caught.value.hint or "")
