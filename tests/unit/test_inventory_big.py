"""A large inventory's errors stay short and speak of the inventory (the fourth new-user walk:
an inventory of 1,000 hosts). A role of too many hosts was refused with the matrix's hint ("split
the matrix"), and a role the matrix or an `after:` names that the testbed lacks listed every role
of it on one line (6,036 characters for 1,003 roles)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import make_matrix

from orchestrator.core.config import MAX_MEMBERS, check_against_inventory, read_inventory
from orchestrator.errors import ConfigError


def role(name: str, extra: str = "") -> str:
    return (
        f"      {name}:\n        transport: ssh\n        ssh: {{host: {name}.example}}\n"
        f"        env_file: /etc/sglang/{name}.env\n        units: [sglang-{name}]\n"
        f"        url: http://{name}.example:30000\n{extra}"
    )


def write(tmp_path: Path, roles: str) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("testbeds:\n  big:\n    hosts:\n" + roles)
    return path


def test_a_role_of_too_many_hosts_is_refused_with_an_inventory_hint(tmp_path: Path) -> None:
    hosts = "".join(f"          - {{ssh: {{host: 10.1.{i // 250}.{i % 250 + 1}}}}}\n" for i in range(MAX_MEMBERS + 1))
    prefill = role("prefill").replace("        url: http://prefill.example:30000\n", "")
    path = write(tmp_path, prefill + "        instances:\n" + hosts)
    with pytest.raises(ConfigError) as err:
        read_inventory(path)
    text = str(err.value)
    assert f"inv.yaml:9: testbeds.big.hosts.prefill.instances: has {MAX_MEMBERS + 1} entries" in text, text
    assert "matrix" not in text and "several testbeds" in text, text


def many_roles(tmp_path: Path, after: str = "") -> Path:
    roles = "".join(role(f"r{i}") for i in range(40))
    return write(tmp_path, roles + role("router", f"        after: [{after or 'r0'}]\n"))


def test_an_after_role_the_testbed_lacks_lists_a_few_roles_and_their_count(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        read_inventory(many_roles(tmp_path, "decode"))
    text = str(err.value)
    assert "unknown role 'decode'" in text and err.value.exit_code == 2
    assert "r0, r1, r2, r3, r4, r5, r6, r7, ... (41 roles in all)" in text and "r8" not in text, text


def test_a_matrix_role_the_testbed_lacks_lists_a_few_roles_and_their_count(tmp_path: Path) -> None:
    testbed = read_inventory(many_roles(tmp_path)).testbed("big")
    matrix = make_matrix({"f": {"env": {"decode": "X"}, "levels": ["on", "off"]}})
    with pytest.raises(ConfigError) as err:
        check_against_inventory(matrix, testbed)
    text = str(err.value)
    assert "role 'decode' is not in the inventory" in text, text
    assert "r0, r1, r2, r3, r4, r5, r6, r7, ... (41 roles in all)" in text and "r8" not in text, text


def test_a_close_role_is_still_suggested_among_many(tmp_path: Path) -> None:
    testbed = read_inventory(many_roles(tmp_path)).testbed("big")
    matrix = make_matrix({"f": {"env": {"r39x": "X"}, "levels": ["on", "off"]}})
    with pytest.raises(ConfigError) as err:
        check_against_inventory(matrix, testbed)
    assert "did you mean 'r39'" in str(err.value), str(err.value)
