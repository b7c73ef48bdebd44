"""A host at an IPv6 address is named `[2001:db8::2]:22`, as ssh, URLs and every tool write it:
`2001:db8::2:22` (how orch named it in every message, `orch validate` and the env-file clash
check) reads as the address 2001:db8::2:22 on no port at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.hostsview import _reach
from orchestrator.core.config import read_inventory
from orchestrator.edges.transport.ssh import SshTransport

INVENTORY = """\
testbeds:
  v6:
    hosts:
      prefill:
        transport: ssh
        ssh: {host: "2001:db8::2", user: sglang}
        env_file: /etc/sglang/prefill.env
        units: [sglang-prefill]
        url: http://[2001:db8::2]:30000
      decode:
        transport: ssh
        ssh: {host: 10.0.0.4, port: 2222}
        env_file: /etc/sglang/decode.env
        units: [sglang-decode]
        url: http://10.0.0.4:30002
"""


def test_an_ipv6_host_is_named_with_brackets_and_an_ipv4_one_as_before(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    tb = read_inventory(path).testbed(None)
    prefill, decode = tb.hosts["prefill"], tb.hosts["decode"]
    assert prefill.label == "prefill ([2001:db8::2]:22)"
    assert prefill.env_file_at == "[2001:db8::2]:22:/etc/sglang/prefill.env"
    assert _reach(prefill).startswith("ssh sglang@[2001:db8::2]:22 (default port)")
    assert decode.label == "decode (10.0.0.4:2222)" and decode.env_file_at == "10.0.0.4:2222:/etc/sglang/decode.env"


def test_the_transports_own_label_brackets_an_ipv6_address_too() -> None:
    t = SshTransport("decode", hostname="2001:db8::4", user="root", port=22)
    assert t.label == "decode ([2001:db8::4]:22)"
    assert SshTransport("decode (10.0.0.4:22)", hostname="10.0.0.4", user="root").label == "decode (10.0.0.4:22)"


@pytest.mark.parametrize("written", ["2001:db8::2", "[2001:db8::2]"])
def test_an_ipv6_host_without_a_url_gets_its_roles_default_url_in_brackets(tmp_path: Path, written: str) -> None:
    """The default URL is the SSH host on the role's port: for an IPv6 host `http://2001:db8::2:30000`
    was refused at the host's line as "an invalid port", a URL the user never wrote."""
    path = tmp_path / "inv.yaml"
    path.write_text(
        INVENTORY.replace(
            'ssh: {host: "2001:db8::2", user: sglang}', f'ssh: {{host: "{written}", user: sglang}}'
        ).replace("        url: http://[2001:db8::2]:30000\n", "")
    )
    prefill = read_inventory(path).testbed(None).hosts["prefill"]
    assert (prefill.url, prefill.health) == ("http://[2001:db8::2]:30000", "http://[2001:db8::2]:30000/health")
