"""A host orch cannot connect to outside preflight (`orch restore` of a run whose host is down, from
its folder or from its hosts' copies (--testbed), `orch resume`, which runs no preflight) is said
at the inventory line of its `ssh:` address, as preflight says it (sweep.session.at_lines), where
it named no line. On the fakes, in process: the host's transport raises what the SSH transport
raises for a refused connection."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest
from helpers.inproc import run_main
from helpers.parallel_fakes import Fleet, fake_matrix, install, interrupted_sweep, write_files
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.core.config import read_inventory
from orchestrator.errors import ConnectError
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

SSH_DECODE = "        ssh: {host: A-decode.fake, user: root}"
REFUSED = "decode (A-decode.fake:22): cannot connect: connection refused (is sshd running and listening on port 22?)"


def _stopped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """A 2x3 sweep Ctrl-C'd in its third trial's repro: hosts restored, 2 of 6 trials done."""
    return interrupted_sweep(tmp_path, monkeypatch, "down")[0]


def _host_down(fleet: Fleet) -> None:
    """decode refuses connections: every command fails as the SSH transport's connect fails."""
    from orchestrator.edges.transport.ssh import SshTransport

    refused = NoValidConnectionsError({("10.9.0.4", 22): ConnectionRefusedError(errno.ECONNREFUSED, "refused")})
    error = SshTransport("decode (A-decode.fake:22)", "A-decode.fake")._connect_error(refused)

    def down(*args: object, **kwargs: object) -> None:
        raise error

    transport = fleet.transports[("A", "decode")]
    for op in ("run", "read_bytes", "read_entry", "write_bytes_atomic", "write_then_run", "exists"):
        setattr(transport, op, down)


@pytest.mark.parametrize(
    "argv",
    [["restore", "reports/r1"], ["resume", "reports/r1"], ["restore", "--testbed", "A", "-i", "inv.yaml"]],
    ids=["restore", "resume", "restore-from-hosts"],
)
def test_a_host_down_after_the_run_is_said_at_the_line_of_its_ssh_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    fleet = _stopped_run(tmp_path, monkeypatch)
    line = (tmp_path / "inv.yaml").read_text().splitlines().index(SSH_DECODE) + 1
    _host_down(fleet)
    said = io.StringIO()
    code = run_main(argv, tmp_path, {"COLUMNS": "400"}, said, said)
    output = " ".join(said.getvalue().split())
    assert code == 1, output  # a host that cannot be reached: the infrastructure, not bad input
    assert f"error: inv.yaml:{line}: {REFUSED}" in output, output
    assert fleet.file("A", "decode") == b"D=0\n"


def test_a_run_under_skip_preflight_says_a_host_down_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No preflight to translate it: the error from the first lock still names the `ssh:` line."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("down", 1), ("A",))
    line = i.read_text().splitlines().index(SSH_DECODE) + 1
    fleet.connect(read_inventory(i).testbed("A"))
    _host_down(fleet)
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    with pytest.raises(ConnectError) as down:
        api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert str(down.value) == f"{i}:{line}: {REFUSED}"
    assert fleet.file("A", "decode") == b"D=0\n" and not (tmp_path / "reports" / "r1").exists()
