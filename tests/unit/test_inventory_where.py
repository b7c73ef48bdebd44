"""core.inventory's pointers into the inventory (the seventh mutation round's survivors): a health
URL on another role's port is said once per multi-node instance, at its line; host_where names
the line of the host, of its `ssh:` address or of its key, and nothing when it cannot; a host's
health_tunnel is read as written."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchestrator.core import inventory
from orchestrator.core.config import read_inventory
from orchestrator.core.inventory import host_where, port_warnings

INVENTORY = """\
testbeds:
  pd:
    hosts:
      prefill:
        transport: ssh
        ssh: {host: 10.9.0.1, key: /keys/prefill}
        env_file: /etc/sglang/prefill.env
        units: [sglang-prefill]
        health_tunnel: true
      decode:
        transport: ssh
        env_file: /etc/sglang/decode.env
        units: [sglang-decode]
        nodes:
          - {ssh: {host: 10.9.0.3}, health: 'http://10.9.0.3:30000/health'}
          - {ssh: {host: 10.9.0.4}}
          - {ssh: {host: 10.9.0.5}}
"""


def _testbed(tmp_path: Path) -> inventory.Testbed:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return read_inventory(path).testbed(None)


def test_a_multi_node_instance_on_another_roles_port_is_said_once_at_its_health_line(tmp_path: Path) -> None:
    """Its nodes above rank 0 share rank 0's health URL: one mistake, one line (not three)."""
    tb = _testbed(tmp_path)
    assert [h.health for h in tb.hosts.values()].count("http://10.9.0.3:30000/health") == 3  # each node has it
    said = port_warnings([tb], "inv.yaml")
    assert said == [
        "inv.yaml:15: decode.n0 (10.9.0.3:22): health URL http://10.9.0.3:30000/health is on port 30000, "
        "prefill's usual port (decode's is 30002); check `health:` and `url:`"
    ]


def test_host_where_names_the_line_of_the_host_its_address_or_its_key(tmp_path: Path) -> None:
    prefill = _testbed(tmp_path).hosts["prefill"]
    assert (prefill.line, prefill.ssh_line, prefill.key_line) == (4, 6, 6)
    assert host_where(prefill, "inv.yaml") == "inv.yaml:4: "
    moved = dataclasses.replace(prefill, ssh_line=7, key_line=8)  # the address and key on lines of their own
    assert host_where(moved, "inv.yaml", "host") == "inv.yaml:7: "
    assert host_where(moved, "inv.yaml", "key") == "inv.yaml:8: "
    assert host_where(moved, "inv.yaml", "known_hosts") == "inv.yaml:4: "  # no line of its own here: the host's
    assert host_where(dataclasses.replace(moved, key_line=None), "inv.yaml", "key") == "inv.yaml:4: "


def test_host_where_says_nothing_without_an_inventory_or_a_line(tmp_path: Path) -> None:
    prefill = _testbed(tmp_path).hosts["prefill"]
    assert host_where(prefill, "") == ""
    assert host_where(dataclasses.replace(prefill, line=None), "inv.yaml") == ""


def test_health_tunnel_is_read_as_written_and_the_host_keeps_its_role_as_key(tmp_path: Path) -> None:
    tb = _testbed(tmp_path)
    assert tb.hosts["prefill"].health_tunnel is True and tb.hosts["prefill"].key == "prefill"
    assert tb.hosts["decode.n0"].health_tunnel is False and tb.hosts["decode.n0"].member == "decode.n0"
