"""Preflight's first checks and its HTTP client, on the fakes (no socket, no process): a host that
does not answer is refused first, within its ssh connect timeout + 5 s (10 s for a local host),
an env file orch cannot read is refused even when nothing else would read it before the first
edit, each said with the host and "nothing was changed" (exit 2, nothing touched); the client
preflight makes for itself ignores proxy variables, has its timeout and is closed, a caller's is
left open. (Mutation round six: each test failed on a mutant the other preflight tests let
through.)"""

from __future__ import annotations

import dataclasses
import socket
import types
from typing import Any

import httpx
import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, make_bed

from orchestrator.edges import preflight as preflight_mod
from orchestrator.edges.deployment import Deployment
from orchestrator.edges.preflight import PREFLIGHT_HEALTH_TIMEOUT_S, WRITE_PROBE, preflight
from orchestrator.errors import PreflightError, TransportError


@pytest.fixture(autouse=True)
def _names_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])  # the fake hosts' names


def _refusal(deployment: Deployment, bed: FakeBed) -> str:
    with pytest.raises(PreflightError) as caught:
        preflight(deployment, client=bed.client)
    assert caught.value.exit_code == 2
    assert all(bed.transports[r].files[bed.env_file(r)] == bed.originals[r] for r in bed.transports)
    assert bed.restarts() == []
    return str(caught.value)


def _local(bed: FakeBed, role: str) -> Deployment:
    """The bed with `role`'s host made local (no ssh settings)."""
    handle = bed.deployment.hosts[role]
    local = dataclasses.replace(handle, host=dataclasses.replace(handle.host, ssh=None))
    return Deployment(bed.deployment.testbed, {**bed.deployment.hosts, role: local})


def test_a_host_that_does_not_answer_is_refused_first_within_its_connect_timeout() -> None:
    bed = make_bed({"decode": Role("D=1\n")})
    t = bed.transports["decode"]
    t.script(("true",), Reply(timeout=True))  # ssh connect_timeout 10 s in the fakes
    said = _refusal(bed.deployment, bed)
    assert said.startswith("decode (decode.fake:22): command timed out after 15 s and was killed: true")
    assert said.endswith("(preflight: nothing was changed)")
    assert [c.op for c in t.calls] == ["run"]  # nothing else asked of a host that does not answer


def test_a_local_host_that_does_not_answer_is_given_10_s() -> None:
    bed = make_bed({"decode": Role("D=1\n")})
    bed.transports["decode"].script(("true",), Reply(timeout=True))
    assert "command timed out after 10 s and was killed: true" in _refusal(_local(bed, "decode"), bed)


def test_an_env_file_orch_cannot_read_is_refused_before_anything_else_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No plan and no running unit: nothing but this check reads the file before the first edit."""
    bed = make_bed({"decode": Role("D=1\n", [FakeUnit("decode-server", active=False)])})
    t = bed.transports["decode"]

    def denied(path: str) -> bytes:
        raise TransportError(t.host, f"cannot read {path}: Permission denied")

    monkeypatch.setattr(t, "read_bytes", denied)
    said = _refusal(bed.deployment, bed)
    assert said == "decode (decode.fake:22): cannot read /etc/orch/decode.env: Permission denied " + (
        "(preflight: nothing was changed)"
    )


def _spy_clients(monkeypatch: pytest.MonkeyPatch, bed: FakeBed) -> list[dict[str, Any]]:
    made: list[dict[str, Any]] = []

    def client(**kwargs: Any) -> httpx.Client:
        made.append(kwargs)
        return bed.client  # answers from the fakes

    monkeypatch.setattr(preflight_mod, "httpx", types.SimpleNamespace(Client=client, HTTPError=httpx.HTTPError))
    return made


@pytest.mark.parametrize("fails", [False, True])
def test_the_client_preflight_makes_ignores_proxies_and_is_closed(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    """HTTP_PROXY on the controller must not carry the health GETs to the hosts elsewhere."""
    bed = make_bed({"decode": Role("D=1\n", [FakeUnit("decode-server", active=True)])})
    made = _spy_clients(monkeypatch, bed)
    if fails:
        del bed.managers["decode"].units["decode-server"]
        with pytest.raises(PreflightError, match="unit decode-server not found"):
            preflight(bed.deployment)
    else:
        assert preflight(bed.deployment) == []
    assert made == [{"timeout": PREFLIGHT_HEALTH_TIMEOUT_S, "trust_env": False}]
    assert bed.client.is_closed


def test_a_client_the_caller_gives_is_left_open(monkeypatch: pytest.MonkeyPatch) -> None:
    bed = make_bed({"decode": Role("D=1\n", [FakeUnit("decode-server", active=True)])})
    made = _spy_clients(monkeypatch, bed)
    assert preflight(bed.deployment, client=bed.client) == []
    assert made == [] and not bed.client.is_closed
    assert bed.client.get("http://decode.fake:30000/health").status_code == 200  # still usable after


@pytest.mark.parametrize(("sudo", "local", "want"), [(False, False, False), (True, False, True), (False, True, False)])
def test_the_write_probe_uses_sudo_only_when_the_inventory_says_so(
    monkeypatch: pytest.MonkeyPatch, sudo: bool, local: bool, want: bool
) -> None:
    """`test -w` run with sudo where the edits will run without it would pass a file only root can
    write, and the first edit would then fail mid-sweep."""
    bed = make_bed({"decode": Role("D=1\n")})
    handle = bed.deployment.hosts["decode"]
    ssh = None if local else dataclasses.replace(handle.host.ssh, sudo=sudo)
    deployment = Deployment(
        bed.deployment.testbed, {"decode": dataclasses.replace(handle, host=dataclasses.replace(handle.host, ssh=ssh))}
    )
    t, asked = bed.transports["decode"], []
    real = t.run

    def run(command: Any, **kwargs: Any) -> Any:
        asked.append((command, kwargs.get("sudo", False)))
        return real(command, **kwargs)

    monkeypatch.setattr(t, "run", run)
    preflight(deployment, client=bed.client)
    assert [s for c, s in asked if list(c)[:3] == ["sh", "-c", WRITE_PROBE]] == [want]


def _with_ssh(bed: FakeBed, role: str, **changes: Any) -> Deployment:
    handle = bed.deployment.hosts[role]
    assert handle.host.ssh is not None
    host = dataclasses.replace(handle.host, ssh=dataclasses.replace(handle.host.ssh, **changes))
    return Deployment(bed.deployment.testbed, {**bed.deployment.hosts, role: dataclasses.replace(handle, host=host)})


# what WRITE_PROBE printed on a host (found on the real testbed: chattr +i, +a, a read-only bind mount
# of the file or its folder, a folder only root may write) -> what the refusal says, and its hint; the
# old `test -w` passed an append-only file and a file in a folder that takes no temp file (the first
# edit then failed mid-sweep), and called every other cause "permission denied; set ssh.sudo: true"
# even for root
WRITE_REFUSALS = [
    (
        "file: Operation not permitted",
        {},
        "env file /etc/orch/decode.env is not writable (immutable or append-only (chattr))",
        "see `lsattr -d /etc/orch/decode.env`; `chattr -i -a /etc/orch/decode.env` as root lets orch replace it",
    ),
    (
        "file: Read-only file system",
        {},
        "env file /etc/orch/decode.env is not writable (on a read-only mount)",
        "remount it read-write (see `findmnt -T /etc/orch/decode.env`)",
    ),
    (
        "folder /etc/orch: Read-only file system",
        {},
        "env file /etc/orch/decode.env is not writable: its folder /etc/orch takes no new file (on a read-only mount)",
        "orch writes a temp file beside the env file and renames it over it; remount it read-write (see "
        "`findmnt -T /etc/orch`)",
    ),
    (
        "folder /etc/orch: Permission denied",
        {"user": "orchuser"},
        "env file /etc/orch/decode.env is not writable: its folder /etc/orch takes no new file (permission denied)",
        "orch writes a temp file beside the env file and renames it over it; set ssh.sudo: true or let the login "
        "user write it",
    ),
    (
        "file: Permission denied",
        {"user": "orchuser"},
        "env file /etc/orch/decode.env is not writable (permission denied)",
        "set ssh.sudo: true or let the login user write it",
    ),
    (
        "file: Permission denied",
        {"user": "orchuser", "sudo": True},
        "env file /etc/orch/decode.env is not writable (permission denied)",
        "even as root: a network file system that maps root to nobody (root_squash)?",
    ),
]


@pytest.mark.parametrize(("said", "ssh", "message", "hint"), WRITE_REFUSALS, ids=[w[0] for w in WRITE_REFUSALS])
def test_an_env_file_orch_cannot_replace_is_refused_with_its_cause(
    said: str, ssh: dict[str, Any], message: str, hint: str
) -> None:
    bed = make_bed({"decode": Role("D=1\n")})
    bed.transports["decode"].script(("sh", "-c", WRITE_PROBE), Reply(1, stdout=said + "\n"))
    refused = _refusal(_with_ssh(bed, "decode", **ssh), bed)
    assert refused.startswith(f"decode (decode.fake:22): {message}"), refused
    assert hint in refused and "set ssh.sudo" not in refused.replace(hint, ""), refused


@pytest.mark.process
def test_the_write_probe_changes_nothing_and_creates_nothing(tmp_path: Any) -> None:
    """WRITE_PROBE as a host's sh runs it: a writable file passes with its bytes and mtime kept, a
    missing one is not created (dd without O_CREAT), and a folder that takes no file is named."""
    import os
    import subprocess

    env = tmp_path / "decode.env"
    env.write_bytes(b"D=1\n")
    os.utime(env, (1_000_000, 1_000_000))
    ran = subprocess.run(["sh", "-c", WRITE_PROBE, "orch-probe", str(env)], capture_output=True, text=True)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert env.read_bytes() == b"D=1\n" and env.stat().st_mtime == 1_000_000
    missing = tmp_path / "nope.env"
    ran = subprocess.run(["sh", "-c", WRITE_PROBE, "orch-probe", str(missing)], capture_output=True, text=True)
    assert ran.returncode == 1 and ran.stdout == "file: No such file or directory\n"
    assert not missing.exists()
    if os.geteuid() != 0:  # root writes any folder it may: the testbed's tests cover root's causes
        tmp_path.chmod(0o555)
        try:
            ran = subprocess.run(["sh", "-c", WRITE_PROBE, "orch-probe", str(env)], capture_output=True, text=True)
        finally:
            tmp_path.chmod(0o755)
        assert ran.returncode == 1 and ran.stdout == f"folder {tmp_path}: Permission denied\n"


@pytest.mark.process
def test_the_write_probe_never_opens_the_env_file_for_writing(tmp_path: Any) -> None:
    """A close after an open for writing is inotify's IN_CLOSE_WRITE, on which a systemd .path
    unit's PathChanged= restarts the service that reads the file: preflight, which touches
    nothing, set it off with its `dd ... conv=nocreat count=0` probe (written bytes: none)."""
    import ctypes
    import os
    import subprocess

    env = tmp_path / "decode.env"
    env.write_bytes(b"D=1\n")
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert watch >= 0
    try:
        in_modify, in_attrib, in_close_write = 0x2, 0x4, 0x8
        assert libc.inotify_add_watch(watch, str(env).encode(), in_modify | in_attrib | in_close_write) >= 0
        ran = subprocess.run(["sh", "-c", WRITE_PROBE, "orch-probe", str(env)], capture_output=True, text=True)
        assert (ran.returncode, ran.stdout) == (0, "")
        with pytest.raises(BlockingIOError):  # no event: the probe never opened it for writing
            os.read(watch, 4096)
        with open(env, "ab"):  # the watch works: an open for writing is seen
            pass
        assert len(os.read(watch, 4096)) >= 16
    finally:
        os.close(watch)


@pytest.mark.parametrize("active", [True, False])
def test_a_masked_unit_is_refused_before_anything_is_touched(active: bool) -> None:
    """Found on the testbed: a masked unit (still running) passed preflight, then every trial that
    restarted it failed "is masked" and so did the restore's restart (exit 1 after 3 trials)."""
    bed = make_bed({"decode": Role("D=1\n", [FakeUnit("decode-server", active=active, masked=True)])})
    refused = _refusal(bed.deployment, bed)
    assert refused.startswith("decode (decode.fake:22): unit decode-server is masked (systemctl unmask it first)")


def test_a_systemd_dialect_env_file_no_unit_reads_is_refused() -> None:
    """Found on the testbed: env_file: naming a copy of the file the unit reads (same values) passed
    preflight; every changed trial then failed verification, blaming "a drop-in, or another
    EnvironmentFile=" (exit 1). The unit's EnvironmentFile= lines are asked; none names it: exit 2."""
    bed = make_bed({"decode": Role("D=1\n", [FakeUnit("decode-server", environment_files=("/etc/orch/real.env",))])})
    refused = _refusal(bed.deployment, bed)
    assert refused.startswith(
        "decode (decode.fake:22): env file /etc/orch/decode.env is read by none of its units with EnvironmentFile= "
        "(decode-server reads /etc/orch/real.env)"
    ), refused
    assert "set dialect: shell" in refused
    bed.managers["decode"].units["decode-server"].environment_files = ("/etc/orch/real.env", "/etc/orch/decode.env")
    assert preflight(bed.deployment, client=bed.client) == []


def test_a_health_url_whose_name_does_not_resolve_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    bed = make_bed({"decode": Role("D=1\n")})
    handle = bed.deployment.hosts["decode"]
    host = dataclasses.replace(handle.host, health="http://decode-typo.fake:30000/health")
    deployment = Deployment(bed.deployment.testbed, {"decode": dataclasses.replace(handle, host=host)})

    def resolve(name: str, *args: Any, **kwargs: Any) -> list[Any]:
        if name == "decode-typo.fake":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return []

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert _refusal(deployment, bed) == (
        "decode (decode.fake:22): cannot resolve 'decode-typo.fake' in http://decode-typo.fake:30000/health "
        "(preflight: nothing was changed)"
    )


def test_a_command_that_fails_is_said_with_its_own_reason() -> None:
    """A command preflight runs that fails (on a real host: `systemctl show` as a login without the
    system bus, "Failed to connect to bus") was said as "command failed with exit code 1: ..." and
    nothing more: the reason was in the exception, never on the line (preflight joins its
    problems as lines). Its stderr's last line is said now, the login's noise before it not."""
    bed = make_bed({"decode": Role("D=1\n")})
    noise = "Could not chdir to home directory /home/u\n"
    bed.transports["decode"].script(
        ("true",), Reply(1, "", noise + "Failed to connect to bus: No such file or directory\n")
    )
    said = _refusal(bed.deployment, bed)
    assert (
        "command failed with exit code 1: true: Failed to connect to bus: No such file or directory (preflight" in said
    )
    assert "chdir" not in said
