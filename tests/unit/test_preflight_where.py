"""Preflight's problems and warnings say where the inventory declares the host: `orch run` on the
fakes (tests/helpers/parallel_fakes: ssh hosts in memory, no socket, no process) refuses a testbed
whose host lacks its env file, names an unknown unit, or has a stranger on its port, with
`INVENTORY:LINE: HOST: ...` (the file as the user named it, the host's own line), exit 2 and no host
touched; several hosts failing at once each carry their own line."""

from __future__ import annotations

import dataclasses
import errno
import io
import socket
from pathlib import Path

import pytest
from fakes import Role, make_bed
from helpers.inproc import run_main
from helpers.parallel_fakes import Fleet, fake_matrix, install_with_preflight, inventory_text
from paramiko.ssh_exception import AuthenticationException, NoValidConnectionsError

from orchestrator.core.config import read_inventory
from orchestrator.edges.deployment import Deployment
from orchestrator.edges.identity import Holder
from orchestrator.edges.preflight import preflight
from orchestrator.errors import ConnectError, TransportError

INVENTORY = "lab/inv.yaml"  # as the user names it on the command line (relative to the cwd)
STRANGER = Holder(4242, 30001, 1000, "python3 -m http.server 30001", (4242, 1))


def line_of(text: str, testbed: str, role: str) -> int:
    """The line of `role:` under `testbed:` in the inventory text, counted here, not by orch."""
    lines = text.splitlines()
    start = lines.index(f"  {testbed}:")
    return next(i for i, line in enumerate(lines, 1) if i > start and line == f"      {role}:")


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """Two testbeds (tb1, tb2) of prefill and decode on the fakes, every host made up front (a test
    breaks one before the run); preflight's health GETs answered from the fakes, the fake names
    resolve without a lookup."""
    (tmp_path / "lab").mkdir()
    (tmp_path / INVENTORY).write_text(inventory_text(["tb1", "tb2"]))
    (tmp_path / "m.yaml").write_text(fake_matrix("where", 1))
    fleet = Fleet({"prefill": "P=1\n", "decode": "D=1\n"})
    install_with_preflight(monkeypatch, fleet)
    for testbed in read_inventory(tmp_path / INVENTORY).testbeds.values():
        fleet.connect(testbed)
    return fleet


def orch_run(tmp_path: Path, testbeds: str) -> tuple[int, str]:
    out = io.StringIO()
    args = ["run", "m.yaml", "-i", INVENTORY, "-t", testbeds, "--out", "reports"]
    code = run_main(args, tmp_path, {"COLUMNS": "400", "NO_COLOR": "1"}, out, out)
    return code, out.getvalue()


def assert_untouched(fleet: Fleet, tmp_path: Path) -> None:
    """No write, no lock or backup beside an env file, no unit restarted or stopped, no run folder."""
    for (testbed, role), t in fleet.transports.items():
        assert [c.target for c in t.calls if c.op == "write"] == [], (testbed, role)
        assert fleet.extra_files(testbed, role) == [], (testbed, role)
    for key, m in fleet.managers.items():
        assert [c for c in m.calls if c.op in ("restart", "stop")] == [], key
    assert not (tmp_path / "reports" / "r1").exists() and not list((tmp_path / "reports").glob("*/run.json"))


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_a_missing_env_file_names_the_inventory_line_of_its_host(fleet: Fleet, tmp_path: Path) -> None:
    del fleet.transports[("tb2", "decode")].files["/etc/orch/decode.env"]
    code, output = orch_run(tmp_path, "tb2")
    line = line_of((tmp_path / INVENTORY).read_text(), "tb2", "decode") + 3  # its `env_file:` (walk10: the role's line)
    assert line == 37  # neither line 1, the testbed's line (23), its role's (34) nor tb1's decode (13)
    assert code == 2, output
    assert error_lines(output) == [
        f"error: {INVENTORY}:{line}: decode (tb2-decode.fake:22): env file /etc/orch/decode.env does not exist "
        "(preflight: nothing was changed)"
    ]
    assert_untouched(fleet, tmp_path)


def test_an_unknown_unit_names_the_inventory_line_of_its_host(fleet: Fleet, tmp_path: Path) -> None:
    del fleet.managers[("tb1", "prefill")].units["tb1-prefill"]
    code, output = orch_run(tmp_path, "tb1")
    line = line_of((tmp_path / INVENTORY).read_text(), "tb1", "prefill") + 5  # its `units:` line, where it is named
    assert code == 2, output
    assert error_lines(output) == [
        f"error: {INVENTORY}:{line}: prefill (tb1-prefill.fake:22): unit tb1-prefill not found "
        "(preflight: nothing was changed)"
    ]
    assert_untouched(fleet, tmp_path)


def test_a_stranger_on_a_port_names_the_inventory_line_of_its_host(fleet: Fleet, tmp_path: Path) -> None:
    """Two testbeds at once: tb1 passes, tb2's decode (its own line, not tb1's) is refused."""
    fleet.managers[("tb2", "decode")].strangers[30001] = STRANGER
    code, output = orch_run(tmp_path, "tb1,tb2")
    line = line_of((tmp_path / INVENTORY).read_text(), "tb2", "decode")
    assert code == 2, output
    [said] = error_lines(output)
    assert said.startswith(f"error: {INVENTORY}:{line}: decode (tb2-decode.fake:22): port 30001 is held by pid 4242")
    assert said.endswith("(stop it, or point the inventory at another port) (preflight: nothing was changed)")
    assert_untouched(fleet, tmp_path)


def test_two_hosts_failing_at_once_each_carry_their_own_line(fleet: Fleet, tmp_path: Path) -> None:
    del fleet.transports[("tb2", "prefill")].files["/etc/orch/prefill.env"]
    del fleet.managers[("tb2", "decode")].units["tb2-decode"]
    code, output = orch_run(tmp_path, "tb2")
    text = (tmp_path / INVENTORY).read_text()
    assert code == 2, output
    assert error_lines(output) == [
        "error: preflight failed on several hosts, nothing was changed:",
        f"  {INVENTORY}:{line_of(text, 'tb2', 'prefill') + 3}: prefill (tb2-prefill.fake:22): "
        "env file /etc/orch/prefill.env does not exist",
        f"  {INVENTORY}:{line_of(text, 'tb2', 'decode') + 5}: decode (tb2-decode.fake:22): unit tb2-decode not found",
    ]
    assert_untouched(fleet, tmp_path)


def test_a_warning_names_the_inventory_line_and_an_unknown_line_says_what_it_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Warnings (a router polled on /health) carry the line too; a host with no known line, or no
    inventory named (callers other than the sweep API), reads as before."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])
    bed = make_bed({"router": Role("X=1\n")})
    before = preflight(bed.deployment, client=bed.client, inventory="inv.yaml")  # Host.line None
    assert len(before) == 1 and before[0].startswith("router (router.fake:22): health ")
    assert preflight(bed.deployment, client=bed.client) == before
    handle = bed.deployment.hosts["router"]
    lined = dataclasses.replace(handle, host=dataclasses.replace(handle.host, line=7))
    deployment = Deployment(bed.deployment.testbed, {"router": lined})
    assert preflight(deployment, client=bed.client, inventory="inv.yaml") == [f"inv.yaml:7: {before[0]}"]


def test_two_testbeds_failing_at_once_are_both_said(fleet: Fleet, tmp_path: Path) -> None:
    """Parallel testbeds: every testbed is checked before the run is refused, so a user fixing
    tb1's host is not sent back by tb2's on the next try (per-host operations report every
    host's failure, not only the first)."""
    del fleet.transports[("tb1", "decode")].files["/etc/orch/decode.env"]
    fleet.managers[("tb2", "decode")].strangers[30001] = STRANGER
    code, output = orch_run(tmp_path, "tb1,tb2")
    text = (tmp_path / INVENTORY).read_text()
    assert code == 2, output
    said = error_lines(output)
    assert said[:2] == [
        "error: preflight failed on several hosts, nothing was changed:",
        f"  {INVENTORY}:{line_of(text, 'tb1', 'decode') + 3}: decode (tb1-decode.fake:22): "
        "env file /etc/orch/decode.env does not exist",
    ]
    assert len(said) == 3 and said[2].startswith(
        f"  {INVENTORY}:{line_of(text, 'tb2', 'decode')}: decode (tb2-decode.fake:22): port 30001 is held by pid 4242"
    )
    assert_untouched(fleet, tmp_path)


def connect_failure(exc: BaseException) -> TransportError:
    """What the SSH transport raises for `exc` while connecting (its own translation, no socket)."""
    from orchestrator.edges.transport.ssh import SshTransport

    return SshTransport("decode (tb1-decode.fake:22)", "tb1-decode.fake")._connect_error(exc)


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (
            NoValidConnectionsError({("10.9.0.4", 22): ConnectionRefusedError(errno.ECONNREFUSED, "refused")}),
            "cannot connect: connection refused (is sshd running and listening on port 22?)",
        ),
        (socket.gaierror(-2, "Name or service not known"), "cannot connect: cannot resolve host name tb1-decode.fake"),
    ],
)
def test_a_host_orch_cannot_connect_to_names_the_line_of_its_ssh_address(
    fleet: Fleet, tmp_path: Path, exc: BaseException, said: str
) -> None:
    """Refused or unresolvable: the fix is the address, on the `ssh:` line, not the role's line."""

    def unreachable(*args: object, **kwargs: object) -> None:
        raise connect_failure(exc)

    fleet.transports[("tb1", "decode")].run = unreachable  # type: ignore[method-assign]
    code, output = orch_run(tmp_path, "tb1")
    text = (tmp_path / INVENTORY).read_text()
    line = text.splitlines().index("        ssh: {host: tb1-decode.fake, user: root}") + 1
    assert line == line_of(text, "tb1", "decode") + 2
    assert code == 2, output
    [error] = error_lines(output)
    assert error.startswith(f"error: {INVENTORY}:{line}: decode (tb1-decode.fake:22): {said}"), error
    assert_untouched(fleet, tmp_path)


def test_a_failed_login_names_the_line_of_its_key() -> None:
    """Refused credentials are fixed at `key:`; a connection that never came up, at the address."""
    login = connect_failure(AuthenticationException("Authentication failed."))
    assert isinstance(login, ConnectError) and login.about == "key"
    refused = connect_failure(socket.gaierror(-2, "unknown"))
    assert isinstance(refused, ConnectError) and refused.about == "host"
