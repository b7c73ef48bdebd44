"""What a new user writing an inventory for real hosts is told before any host is contacted (the
fifth new-user walk): a missing SSH key file on this machine and a health URL on another role's
usual port are said at `orch validate`, with the inventory's line to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.config import read_inventory
from orchestrator.core.inventory import port_warnings
from orchestrator.sweep import session

GOOD = """\
name: demo
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""

SSH_ROLE = """\
      {role}:
        transport: ssh
        ssh:
          host: {address}
          user: sglang
{key}        env_file: /etc/sglang/{role}.env
        units: [sglang-{role}]
{health}"""


def inventory(tmp_path: Path, keys: dict[str, str] | None = None, health: dict[str, str] | None = None) -> Path:
    """Three SSH roles (lines: prefill 4, decode 13, router 22; each `ssh:` host at +3, key or port at +5)."""
    roles = ""
    for i, role in enumerate(("prefill", "decode", "router")):
        key = f"          key: {(keys or {})[role]}\n" if role in (keys or {}) else "          port: 22\n"
        url = f"        health: {(health or {})[role]}\n" if role in (health or {}) else "        dialect: systemd\n"
        roles += SSH_ROLE.format(role=role, address=f"10.0.0.{i + 2}", key=key, health=url)
    roles = roles.replace(
        "        units: [sglang-router]\n", "        units: [sglang-router]\n        after: [prefill, decode]\n"
    )
    (tmp_path / "m.yaml").write_text(GOOD)
    path = tmp_path / "inv.yaml"
    path.write_text("testbeds:\n  pd:\n    hosts:\n" + roles)
    return path


def orch(tmp_path: Path, *argv: str) -> int:
    return main([*argv[:1], str(tmp_path / "m.yaml"), "-i", str(tmp_path / "inv.yaml"), *argv[1:]])


@pytest.fixture
def untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """No host may be contacted: connecting to the testbed fails the test."""

    def connected(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(session, "connected", connected)


@pytest.mark.parametrize("command", [("validate",), ("plan",)])
def test_a_missing_ssh_key_is_a_warning_with_its_line_before_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None, command: tuple[str, ...]
) -> None:
    there = tmp_path / "id_ed25519"
    there.write_text("a key")
    inventory(tmp_path, keys={"prefill": str(there), "decode": str(tmp_path / "id_gone")})
    assert orch(tmp_path, *command) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"inv.yaml:18: SSH key {tmp_path / 'id_gone'} not found on this machine" in err, err
    assert "decode (10.0.0.3:22)" in err, err
    assert "id_ed25519" not in err, err  # the key that exists is not said


@pytest.mark.parametrize("dry", [(), ("--dry-run",)], ids=["run", "dry-run"])
def test_a_missing_ssh_key_refuses_the_run_before_any_host_is_contacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None, dry: tuple[str, ...]
) -> None:
    """The dry run refuses what the run refuses (exit 2): it warned and exited 0."""
    inventory(tmp_path, keys={"router": "~/.ssh/orch-test-no-such-key"})
    assert orch(tmp_path, "run", "--out", str(tmp_path / "reports"), *dry) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "inv.yaml:27: SSH key ~/.ssh/orch-test-no-such-key not found on this machine" in err, err
    assert "router (10.0.0.4:22)" in err, err
    assert not (tmp_path / "reports").exists()


def test_a_health_url_on_another_roles_usual_port_is_a_warning_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """decode's block copied from prefill's: its health URL asks prefill's usual port, 30000."""
    health = {
        "prefill": "http://10.0.0.2:30000/health",  # its own usual port: nothing to say
        "decode": "http://10.0.0.3:30000/health",  # prefill's port: likely a copy
        "router": "http://10.0.0.4:31001/readiness",  # moved, to no other role's port: deliberate
    }
    inventory(tmp_path, health=health)
    assert orch(tmp_path, "validate") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "inv.yaml:21: decode (10.0.0.3:22): health URL http://10.0.0.3:30000/health is on port 30000, "
        "prefill's usual port (decode's is 30002)"
    ) in err, err
    assert err.count("warning:") == 1, err


def test_health_port_warnings_of_many_instances_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory(tmp_path)
    text = (tmp_path / "inv.yaml").read_text()
    instances = "".join(
        f"          - {{ssh: {{host: 10.1.0.{i + 1}}}, health: 'http://10.1.0.{i + 1}:30000/health'}}\n"
        for i in range(20)
    )
    decode = "      decode:\n        transport: ssh\n        instances:\n" + instances + "        ssh:\n"
    (tmp_path / "inv.yaml").write_text(text.replace("      decode:\n        transport: ssh\n        ssh:\n", decode))
    assert orch(tmp_path, "validate") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("is on port 30000, prefill's usual port") == 8, err
    assert "inv.yaml:16: decode.0 (10.1.0.1:22): health URL" in err, err
    assert "inv.yaml: ... and 12 more health URLs on another role's usual port" in err, err


def test_missing_key_warnings_of_many_roles_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of 20 hosts names its own missing key on its own line: 8 are said, then how many more."""
    inventory(tmp_path)
    text = (tmp_path / "inv.yaml").read_text()
    instances = "".join(f"          - {{ssh: {{host: 10.1.0.{i + 1}, key: /no/key{i}}}}}\n" for i in range(20))
    decode = "      decode:\n        transport: ssh\n        instances:\n" + instances + "        ssh:\n"
    (tmp_path / "inv.yaml").write_text(text.replace("      decode:\n        transport: ssh\n        ssh:\n", decode))
    assert orch(tmp_path, "validate") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("not found on this machine") == 8, err
    assert "inv.yaml:16: SSH key /no/key0 not found on this machine (decode.0 (10.1.0.1:22))" in err, err
    assert "inv.yaml: ... and 12 more SSH key files not found" in err, err


def test_a_health_url_on_the_port_of_a_role_the_testbed_lacks_is_not_said(tmp_path: Path) -> None:
    """decode on 30001 with no router in its testbed waits on no other server: a choice."""
    path = inventory(tmp_path, health={"decode": "http://10.0.0.3:30001/health"})
    with_router = read_inventory(path)
    assert len(port_warnings(with_router.testbeds.values(), "inv.yaml")) == 1  # beside a router: said
    text = path.read_text()
    path.write_text(text[: text.index("      router:")])
    alone = read_inventory(path)
    assert "router" not in alone.testbeds["pd"].roles
    assert port_warnings(alone.testbeds.values(), "inv.yaml") == []


def test_validate_shows_the_hosts_as_orch_read_them_with_its_defaults_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("a key")
    inventory(tmp_path, keys={"decode": str(key)}, health={"router": "http://10.0.0.4:30001/readiness"})
    assert orch(tmp_path, "validate") == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert lines[0].endswith(": ok — 1 factor, 2 cells, 2 trials on testbed 'pd'"), lines
    assert lines[1:] == [
        f"testbed 'pd' ({tmp_path / 'inv.yaml'}:2): 3 hosts",
        "prefill prefill ssh sglang@10.0.0.2:22 key (default: ssh-agent, ~/.ssh) env /etc/sglang/prefill.env "
        "unit sglang-prefill health http://10.0.0.2:30000/health (default)",
        f"decode decode ssh sglang@10.0.0.3:22 (default port) key {key} env /etc/sglang/decode.env "
        "unit sglang-decode health http://10.0.0.3:30002/health (default)",
        "router router ssh sglang@10.0.0.4:22 key (default: ssh-agent, ~/.ssh) env /etc/sglang/router.env "
        "unit sglang-router health http://10.0.0.4:30001/readiness",
    ], lines


def test_validate_shows_a_thousand_hosts_in_a_few_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """20 roles of 50 instances: the first roles' first hosts, then how many more of each."""
    inventory(tmp_path)
    extra = "".join(
        f"      w{r}:\n        transport: ssh\n        ssh: {{user: sglang}}\n        env_file: /etc/w.env\n"
        f"        units: [w]\n        instances:\n"
        + "".join(
            f"          - {{ssh: {{host: 10.{r}.0.{i + 1}}}, url: 'http://10.{r}.0.{i + 1}:8000', env_file: /e/{i}}}\n"
            for i in range(50)
        )
        for r in range(20)
    )
    path = tmp_path / "inv.yaml"
    path.write_text(path.read_text() + extra)
    assert orch(tmp_path, "validate") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"testbed 'pd' ({path}:2): 1,003 hosts", lines
    assert len(lines) <= 30, "\n".join(lines)
    said = " ".join(" ".join(lines).split())
    assert "w0 w0.0 ssh sglang@10.0.0.1:22 (default port)" in said, said
    assert "w0: ... and 47 more hosts" in said, said
    assert "... and 15 more roles (750 hosts)" in said, said


def test_every_missing_key_is_said_at_once_when_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None
) -> None:
    """Two roles name missing keys: the refusal says both, each at its line (it said the first only,
    so a user who fixed it was sent back by the next); the shared hint once, exit 2."""
    inventory(tmp_path, keys={"prefill": "/no/key-p", "router": "/no/key-r"})
    assert orch(tmp_path, "run", "--out", str(tmp_path / "reports")) == 2
    err = capsys.readouterr().err
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert lines[0] == "error: SSH key files not found on this machine, no host was contacted:", err
    inv = tmp_path / "inv.yaml"
    assert lines[1] == f"{inv}:9: SSH key /no/key-p not found on this machine (prefill (10.0.0.2:22))", err
    assert lines[2].startswith(f"{inv}:27: SSH key /no/key-r not found on this machine (router (10.0.0.4:22))"), err
    assert err.count("check `key:`") == 1, err
    assert not (tmp_path / "reports").exists()


def test_a_refusal_for_many_missing_keys_is_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None
) -> None:
    """20 hosts each naming its own missing key: the first 8 at their lines, then how many more."""
    inventory(tmp_path)
    text = (tmp_path / "inv.yaml").read_text()
    instances = "".join(f"          - {{ssh: {{host: 10.1.0.{i + 1}, key: /no/key{i}}}}}\n" for i in range(20))
    decode = "      decode:\n        transport: ssh\n        instances:\n" + instances + "        ssh:\n"
    (tmp_path / "inv.yaml").write_text(text.replace("      decode:\n        transport: ssh\n        ssh:\n", decode))
    assert orch(tmp_path, "run", "--out", str(tmp_path / "reports")) == 2
    err = capsys.readouterr().err
    assert err.count("not found on this machine (decode.") == 8, err
    assert "inv.yaml:16: SSH key /no/key0 not found on this machine (decode.0 (10.1.0.1:22))" in err, err
    assert "inv.yaml:23: SSH key /no/key7 " in err and "/no/key8 " not in err, err
    assert "inv.yaml: ... and 12 more SSH key files not found" in err, err
    assert not (tmp_path / "reports").exists()


def _known_hosts(path: Path, role_line: int, value: str) -> None:
    """The role at `role_line` names `known_hosts: value` where it named `port: 22` (5 lines below)."""
    lines = path.read_text().splitlines(keepends=True)
    assert lines[role_line + 4] == "          port: 22\n"
    lines[role_line + 4] = f"          known_hosts: {value}\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("command", [("validate",), ("plan",)])
def test_a_missing_known_hosts_file_is_a_warning_with_its_line_before_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None, command: tuple[str, ...]
) -> None:
    there = tmp_path / "known_hosts"
    there.write_text("")
    _known_hosts(inventory(tmp_path), 4, str(there))
    _known_hosts(tmp_path / "inv.yaml", 13, str(tmp_path / "kh_gone"))
    assert orch(tmp_path, *command) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"inv.yaml:18: known_hosts file {tmp_path / 'kh_gone'} not found on this machine" in err, err
    assert "decode (10.0.0.3:22)" in err and "check `known_hosts:`" in err, err
    assert f"{there} not found" not in err, err  # the file that exists is not said


@pytest.mark.parametrize("dry", [(), ("--dry-run",)], ids=["run", "dry-run"])
def test_a_missing_known_hosts_file_refuses_the_run_before_any_host_is_contacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None, dry: tuple[str, ...]
) -> None:
    """Said with a missing key in one refusal, each at its line (exit 2, nothing made); by the dry
    run as by the run."""
    inventory(tmp_path, keys={"prefill": "/no/key-p"})
    _known_hosts(tmp_path / "inv.yaml", 22, "~/.ssh/orch-test-no-such-known-hosts")
    assert orch(tmp_path, "run", "--out", str(tmp_path / "reports"), *dry) == 2
    err = capsys.readouterr().err
    inv = tmp_path / "inv.yaml"
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert lines[0] == "error: SSH files not found on this machine, no host was contacted:", err
    assert lines[1] == f"{inv}:9: SSH key /no/key-p not found on this machine (prefill (10.0.0.2:22))", err
    assert lines[2].startswith(
        f"{inv}:27: known_hosts file ~/.ssh/orch-test-no-such-known-hosts not found on this machine "
        "(router (10.0.0.4:22))"
    ), err
    assert "check `key:` and `known_hosts:`" in lines[2], err
    assert not (tmp_path / "reports").exists()


def test_a_missing_ssh_key_refuses_a_hunts_dry_run_as_the_hunt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], untouched: None
) -> None:
    """`orch hunt --dry-run` refuses what the hunt refuses (api.run's check_key_files), exit 2."""
    inventory(tmp_path, keys={"decode": "~/.ssh/orch-test-no-such-key"})
    hunt = Path(__file__).resolve().parents[2] / "matrices" / "dsv4_hunt.yaml"
    argv = ["hunt", str(hunt), "-i", str(tmp_path / "inv.yaml"), "--out", str(tmp_path / "reports"), "--dry-run"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "inv.yaml:18: SSH key ~/.ssh/orch-test-no-such-key not found on this machine" in err, err
    assert not (tmp_path / "reports").exists()
