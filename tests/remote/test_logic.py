"""The pure parts of the SSH transport, the systemd manager and the testbed fixture: no host
needed, so these run everywhere (the same code is exercised for real in the testbed tests)."""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import shlex
import socket
import subprocess
import threading
import time
import types
from pathlib import Path

import paramiko
import pytest
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    PasswordRequiredException,
)
from testbed import fixture

from orchestrator.core.records import TrialRecord
from orchestrator.edges.services import UnitState
from orchestrator.edges.services.systemd import (
    ProcInfo,
    ShowInfo,
    liveness_problem,
    parse_environ,
    parse_show,
    parse_timestamp,
    parse_tree,
    pick_server,
)
from orchestrator.edges.transport.ssh import (
    _WRITE_LIKE_SCRIPT,
    _WRITE_SCRIPT,
    _WRITE_THEN_RUN_SCRIPT,
    CHANGED,
    MAX_CHANNELS,
    SshTransport,
    _drain,
    _Raw,
    _UnknownHostKey,
    command_line,
    connect_error_message,
    sudo_refusal,
)
from orchestrator.errors import TransportError
from orchestrator.sweep.progress import failure_signature


# ----------------------------------------------------------------------------- ssh: reading output
class _LateChannel:
    """A channel whose last output and close arrive together, between two of the reader's looks:
    paramiko's reader thread queues the data, then marks the channel closed (or EOF)."""

    def __init__(self, out: bytes, err: bytes, flag: str) -> None:
        self.pending, self.flag = (out, err), flag
        self.out, self.err = b"", b""

    def _arrive(self) -> None:
        self.out, self.err = self.pending
        self.pending = (b"", b"")

    def recv_ready(self) -> bool:
        return bool(self.out)

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv(self, n: int) -> bytes:
        data, self.out = self.out[:n], self.out[n:]
        return data

    def recv_stderr(self, n: int) -> bytes:
        data, self.err = self.err[:n], self.err[n:]
        return data

    def _finished(self, flag: str) -> bool:
        if self.pending != (b"", b""):  # the data and the end land just before the first look
            self._arrive()
        return self.flag == flag

    @property
    def closed(self) -> bool:
        return self._finished("closed")

    @property
    def eof_received(self) -> bool:
        return self._finished("eof")


@pytest.mark.parametrize("flag", ["closed", "eof"])
def test_output_that_lands_with_the_close_is_read(flag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release read the lock file through `cat`, got nothing (its output came with the close)
    and left the lock behind: every byte sent before the end must be returned."""
    monkeypatch.setattr("select.select", lambda *a: ([], [], []))
    chan = _LateChannel(b'{"run_id": "sudo"}\n', b"warning\n", flag)
    out, err = _drain(chan, None, None)  # type: ignore[arg-type]
    assert (out, err) == (b'{"run_id": "sudo"}\n', b"warning\n")


# ----------------------------------------------------------------------------- ssh: command lines
def sh(line: str) -> str:
    """Run a command line through a real local sh and return what it printed."""
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout


@pytest.mark.process
def test_argv_is_quoted_word_by_word() -> None:
    words = ["printf", "%s|", "a b", "$(touch /nonexistent/x)", "`id`", "it's", ""]
    line = command_line(words, sudo=False, timeout=None)
    assert shlex.split(line) == words
    assert sh(line) == "a b|$(touch /nonexistent/x)|`id`|it's||"


def write_remotely(script: str, path: Path, sent: bytes, length: int, *more: str) -> subprocess.CompletedProcess[bytes]:
    """The remote half of an SSH write, run by a real local sh: `sent` on its stdin."""
    argv = ["sh", "-c", script, "orch-write", str(path), str(length), *more]
    return subprocess.run(argv, input=sent, capture_output=True, check=False)


@pytest.mark.process
def test_a_write_cut_short_leaves_the_file_unchanged(tmp_path: Path) -> None:
    """A controller killed mid-send closes stdin early: `cat` ends without an error on part of
    the file, and only the length check keeps the part from being renamed into place."""
    path = tmp_path / "decode.env"
    path.write_bytes(b"OLD=1\n")
    new = b"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0\n"
    cut = write_remotely(_WRITE_SCRIPT, path, new[:10], len(new))
    assert cut.returncode == 1 and b"received 10 of 38 bytes" in cut.stderr
    assert path.read_bytes() == b"OLD=1\n" and [p.name for p in tmp_path.iterdir()] == ["decode.env"]
    then = write_remotely(_WRITE_THEN_RUN_SCRIPT, path, new[:10], len(new), "2", "5", "echo ran")
    assert then.returncode == 1 and b"ran" not in then.stdout  # nor does the command run
    whole = write_remotely(_WRITE_THEN_RUN_SCRIPT, path, new, len(new), "2", "5", "echo ran")
    assert whole.returncode == 0 and whole.stdout == b"orch-written\nran\n" and path.read_bytes() == new
    assert [p.name for p in tmp_path.iterdir()] == ["decode.env"]


@pytest.mark.process
def test_a_write_told_what_the_file_holds_leaves_an_edit_made_since_alone(tmp_path: Path) -> None:
    """write_bytes_atomic(expect=): a trial's write is told what orch last wrote; the host compares
    (sha256) just before the rename, so a line someone added meanwhile is never written over, and
    the restart written with it does not run. The same write over the expected bytes goes through."""
    path = tmp_path / "decode.env"
    ours, new = b"FLAG=1\n", b"FLAG=2\n"
    path.write_bytes(ours + b"MY_NEW_FLAG=1\n")  # someone's edit since orch wrote `ours`
    digest = hashlib.sha256(ours).hexdigest()
    refused = write_remotely(_WRITE_SCRIPT, path, new, len(new), digest)
    assert refused.returncode == 5 and CHANGED in refused.stderr, refused.stderr
    assert path.read_bytes() == ours + b"MY_NEW_FLAG=1\n" and [p.name for p in tmp_path.iterdir()] == ["decode.env"]
    then = write_remotely(_WRITE_THEN_RUN_SCRIPT, path, new, len(new), "2", "5", "echo ran", digest)
    assert then.returncode == 5 and b"ran" not in then.stdout and CHANGED in then.stderr
    path.write_bytes(ours)
    done = write_remotely(_WRITE_THEN_RUN_SCRIPT, path, new, len(new), "2", "5", "echo ran", digest)
    assert done.returncode == 0 and done.stdout == b"orch-written\nran\n" and path.read_bytes() == new
    path.unlink()  # a deleted file is not what orch wrote either
    gone = write_remotely(_WRITE_SCRIPT, path, new, len(new), digest)
    assert gone.returncode == 5 and not path.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.process
def test_a_copy_takes_the_mode_and_owner_of_the_file_it_copies(tmp_path: Path) -> None:
    """write_bytes_atomic(like=): a host-side backup of an env file holding a token is as private
    as the env file (it was 644 root:root: the umask's), and 0600 when that file is gone."""
    env, copy = tmp_path / "decode.env", tmp_path / "decode.env.orch-backup-r1"
    env.write_bytes(b"HF_TOKEN=hf_x\n")
    env.chmod(0o600)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # nobody:nogroup as root
    if os.geteuid() == 0:
        os.chown(env, *owner)
    done = write_remotely(_WRITE_LIKE_SCRIPT, copy, b"HF_TOKEN=hf_x\n", 14, str(env))
    assert done.returncode == 0, done.stderr
    st = copy.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o600, *owner)
    orphan = tmp_path / "orphan.copy"
    done = write_remotely(_WRITE_LIKE_SCRIPT, orphan, b"A=1\n", 4, str(tmp_path / "gone.env"))
    assert done.returncode == 0 and orphan.stat().st_mode & 0o7777 == 0o600, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env", "decode.env.orch-backup-r1", "orphan.copy"]


@pytest.mark.process
def test_string_goes_to_the_shell_unchanged_unless_wrapped() -> None:
    assert command_line("echo $HOME | wc -c", sudo=False, timeout=None) == "echo $HOME | wc -c"
    line = command_line("echo 'a b' | tr a-z A-Z", sudo=False, timeout=5)
    assert line.startswith("timeout -k 2 5.000 ")
    assert sh(line) == "A B\n"  # the string still runs in a shell, quoted once


def test_sudo_wraps_outside_timeout_so_timeout_runs_as_root() -> None:
    line = command_line(["id", "-u"], sudo=True, timeout=1.5)
    assert shlex.split(line) == ["sudo", "-n", "--", "timeout", "-k", "2", "1.500", "id", "-u"]
    assert command_line("x", sudo=True, timeout=None).startswith('sudo -n -- "${SHELL:-/bin/sh}" -c ')


# what a real host said to `sudo -n true` as a user sudo asks a password (tests/remote/test_sweep_ssh.py)
REAL_REFUSAL = (
    b"Could not chdir to home directory /home/orchuser: No such file or directory\n"
    b"sudo: unable to resolve host decode: Temporary failure in name resolution\n"
    b"sudo: a password is required\n"
)


@pytest.mark.parametrize(
    "stderr,exit_code,reason",
    [
        (REAL_REFUSAL, 1, "a password is required"),  # the first line alone was the login's: no refusal seen
        (b"sudo: sorry, you must have a tty to run sudo\n", 1, "sorry, you must have a tty to run sudo"),
        (
            b"sudo: unable to resolve host d: x\nsudo: orchuser is not in the sudoers file.\n",
            1,
            "orchuser is not in the sudoers file.",
        ),
        (b"sudo: unable to resolve host decode: Temporary failure in name resolution\n", 1, None),  # ran, failed
        (b"grep: /etc/x: No such file or directory\n", 1, None),  # the command's own failure
        (REAL_REFUSAL, 2, None),  # sudo's refusals exit 1
        (b"", 1, None),
    ],
)
def test_sudos_refusal_is_its_last_word_not_the_first_line(stderr: bytes, exit_code: int, reason: str | None) -> None:
    assert sudo_refusal(stderr, exit_code) == reason


def test_a_refusal_deep_in_a_long_stderr_is_read_from_its_end() -> None:
    noise = b"".join(b"motd line %d\n" % i for i in range(10_000))
    assert sudo_refusal(noise + b"sudo: a password is required\n", 1) == "a password is required"
    assert sudo_refusal(b"sudo: a password is required\n" + noise, 1) is None  # not sudo's last word


def test_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError):
        command_line([], sudo=False, timeout=None)


# ----------------------------------------------------------------------------- ssh: error texts
@pytest.fixture
def t() -> SshTransport:
    return SshTransport("decode", "10.9.0.4", key_filename="/k/id", known_hosts="/k/known")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[paramiko.PKey, paramiko.PKey]:
    d = tmp_path_factory.mktemp("keys")
    out = []
    for name in ("a", "b"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
            check=True,
            env={"PATH": "/usr/bin:/bin", "TMPDIR": str(d)},
        )
        out.append(paramiko.Ed25519Key.from_private_key_file(str(d / name)))
    return out[0], out[1]


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            NoValidConnectionsError({("10.9.0.4", 22): OSError(errno.ECONNREFUSED, "refused")}),
            "cannot connect: connection refused (is sshd running and listening on port 22?)",
        ),
        (
            NoValidConnectionsError({("10.9.0.4", 22): OSError(errno.EHOSTUNREACH, "x")}),
            "cannot connect: no route to host (host down or wrong address?)",
        ),
        (socket.timeout("timed out"), "cannot connect: timed out after 10 s (host down, or a firewall drops port 22?)"),
        (
            socket.gaierror(-2, "Name or service not known"),
            "cannot connect: cannot resolve host name 10.9.0.4 (check `ssh.host`)",
        ),
        (
            AuthenticationException("Authentication failed."),
            "authentication failed for root (check `key:`; or the account is locked or expired: see sshd's log)",
        ),
        (
            PasswordRequiredException("private key file is encrypted"),
            "key /k/id is passphrase-protected (load it into ssh-agent and drop `key:`)",
        ),
        (EOFError(), "SSH handshake failed: EOFError (is port 22 an SSH server?)"),
        (
            paramiko.SSHException("Error reading SSH protocol\nbanner"),
            "SSH handshake failed: Error reading SSH protocol banner (is port 22 an SSH server?)",
        ),
    ],
)
def test_connect_errors_read_as_one_line(t: SshTransport, exc: BaseException, expected: str) -> None:
    assert connect_error_message(exc, t) == expected


def test_host_key_errors_name_fingerprints_and_the_fix(t: SshTransport, keys) -> None:  # noqa: ANN001
    a, b = keys
    unknown = connect_error_message(_UnknownHostKey("10.9.0.4", a), t)
    assert unknown.startswith("host key not in known_hosts /k/known: server offers ssh-ed25519 SHA256:")
    assert "ssh-keyscan -p 22 10.9.0.4 >> /k/known" in unknown and "accept_new_host_keys: true" in unknown
    changed = connect_error_message(BadHostKeyException("10.9.0.4", b, a), t)
    assert changed.startswith("host key CHANGED: known_hosts has ssh-ed25519 SHA256:")
    assert "ssh-keygen -R 10.9.0.4" in changed and "\n" not in changed


def test_label_names_the_address_once() -> None:
    assert SshTransport("decode", "10.9.0.4", port=2222).label == "decode (10.9.0.4:2222)"
    assert SshTransport("decode (10.9.0.4:22)", "10.9.0.4").label == "decode (10.9.0.4:22)"


def test_agent_hint_when_no_key_is_configured() -> None:
    t = SshTransport("decode", "10.9.0.4")
    assert (
        connect_error_message(AuthenticationException(), t)
        == "authentication failed for root (check `key:` or your ssh-agent; "
        "or the account is locked or expired: see sshd's log)"
    )


# ----------------------------------------------------------------------------- systemd parsing
SHOW = """Id=sglang-dsv4-decode.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
MainPID=0
NRestarts=2
ExecMainStartTimestamp=Mon 2026-11-30 05:01:08.123456 UTC
ExecMainStatus=1
Result=exit-code

Id=nope.service
LoadState=not-found
ActiveState=inactive
SubState=dead
MainPID=0
NRestarts=0
ExecMainStartTimestamp=
ExecMainStatus=0
Result=success
"""


def test_parse_show_blocks_in_order() -> None:
    a, b = parse_show(SHOW, ["sglang-dsv4-decode", "nope"])
    assert a.state == UnitState(
        "sglang-dsv4-decode",
        "activating",
        "auto-restart",
        None,
        2,
        parse_timestamp("Mon 2026-11-30 05:01:08.123456 UTC"),
        "exit-code",
    )
    assert (a.load_state, a.exec_main_status) == ("loaded", 1)
    assert b.load_state == "not-found" and b.state.started_at is None
    with pytest.raises(ValueError):
        parse_show(SHOW, ["only-one"])


def test_parse_timestamp_is_utc_with_microseconds() -> None:
    assert parse_timestamp("Thu 1970-01-01 00:00:01.500000 UTC") == 1.5
    assert parse_timestamp("Thu 1970-01-01 00:01:00 UTC") == 60.0
    assert parse_timestamp("") is None and parse_timestamp("n/a") is None
    assert parse_timestamp("Thu 1970-01-01 01:00:00 CET") is None  # local time: not guessed


def info(
    active: str, sub: str, *, result: str = "success", n: int = 0, load: str = "loaded", status: int | None = 0
) -> ShowInfo:
    return ShowInfo(UnitState("u", active, sub, None, n, None, result), load, status)


@pytest.mark.parametrize(
    ("show", "fragment"),
    [
        (info("active", "running"), None),
        (info("activating", "start"), None),
        (info("failed", "failed", result="start-limit-hit"), "start limit"),
        (info("failed", "failed", result="exit-code", status=1), "failed: exit-code (exit status 1)"),
        (info("activating", "auto-restart", result="exit-code", n=0, status=1), "crash-looping: its process exited"),
        (info("active", "running", n=2), "restart #2 since orch started it"),
        (info("inactive", "dead"), "not running (inactive/dead"),
        (info("inactive", "dead", load="not-found"), "not found on the host"),
    ],
)
def test_liveness_problem(show: ShowInfo, fragment: str | None) -> None:
    problem = liveness_problem(show)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem and "\n" not in problem


def test_a_crash_loop_is_one_reason_however_far_into_it_a_trial_looked() -> None:
    """From walk10 (real hosts): one crash-looping unit made two groups in the sweep's closing
    failure lines, read once mid-restart ("its process exited (exit status 1) and systemd is
    restarting it") and once running again after restarts ("systemd restarted it 2 times"). One
    wording, the restart's number aside (the journal tail under it says why the process exited)."""
    seen = [
        info("activating", "auto-restart", result="exit-code", n=0, status=1),
        info("activating", "auto-restart", result="exit-code", n=4, status=137),
        info("active", "running", n=2),
    ]
    problems = [liveness_problem(s) for s in seen]
    failures = [
        TrialRecord.model_validate(
            {**_FAILED, "failure": {"kind": "infrastructure", "error": "ServiceError", "message": p}}
        )
        for p in problems
    ]
    assert len({failure_signature(r) for r in failures}) == 1, problems


_FAILED = {
    "run_id": "r",
    "trial": 0,
    "round": 1,
    "cell": "c",
    "levels": {},
    "testbed": "t",
    "status": "failed",
    "started": "2026-12-06T00:00:00+00:00",
    "ended": "2026-12-06T00:00:01+00:00",
    "duration_s": 1.0,
}


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def test_tree_and_pick_server_follow_live_wrappers() -> None:
    env13 = b64(b"A=3\0B=x=y\0A=dup")
    text = "\n".join(
        [
            "main|10",
            f"proc|10|{b64('bash' + chr(10))}|{b64(b'A=1')}|11 12",  # comm ends in a newline
            f"proc|11|{b64('sudo')}|{b64(b'A=2')}|13",
            f"proc|12|{b64('logger')}|{b64(b'A=9')}|",
            f"proc|13|{b64('python3')}|{env13}|",
            "noaccess|14",
        ]
    )
    main, procs, denied = parse_tree(text)
    assert main == 10 and denied == [14] and procs[10].children == (11, 12)
    server = pick_server(procs, main)
    assert server is not None and server.pid == 13
    assert parse_environ(server.environ) == {"A": "3", "B": "x=y"}  # first duplicate wins


def test_a_shebang_script_that_does_not_exec_is_followed_as_a_wrapper() -> None:
    """ExecStart=/opt/start-decode, a `#!/bin/bash` script that sources the env file and runs the
    server as its child: comm is the script's name, exe the interpreter. Its own environ is from
    before the source, so stopping there failed every check on a correct deployment."""
    text = "\n".join(
        [
            "main|10",
            f"proc|10|{b64('start-decode')}|{b64(b'PATH=/bin')}|11|{b64('/usr/bin/bash')}",
            f"proc|11|{b64('python3')}|{b64(b'PATH=/bin' + bytes(1) + b'SGLANG_FLAG=1')}||{b64('/usr/bin/python3.11')}",
        ]
    )
    main, procs, _ = parse_tree(text)
    server = pick_server(procs, main or 0)
    assert server is not None and server.pid == 11 and parse_environ(server.environ)["SGLANG_FLAG"] == "1"
    assert not procs[11].is_wrapper and procs[10].exe == "/usr/bin/bash"


def test_pick_server_stops_at_a_non_wrapper_or_a_childless_shell() -> None:
    procs = {1: ProcInfo(1, "python3", b"", (2,)), 2: ProcInfo(2, "python3", b"", ())}
    assert pick_server(procs, 1).pid == 1  # type: ignore[union-attr]
    procs = {5: ProcInfo(5, "bash", b"K=v", ())}
    assert pick_server(procs, 5).pid == 5  # type: ignore[union-attr]
    assert pick_server({}, 7) is None


# ----------------------------------------------------------------------------- testbed fixture
def test_require_support_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixture, "unsupported_reason", lambda: "needs root")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="needs root"):
        fixture.require_support()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        fixture.require_support()
    monkeypatch.setattr(fixture, "unsupported_reason", lambda: None)
    monkeypatch.setenv("CI", "true")
    fixture.require_support()  # supported: neither


def test_unit_files_quote_for_systemd_and_shell() -> None:
    hosts = fixture.layout("10.9.0")
    shell = next(u for h in hosts for u in h.units if u.dialect == "shell")
    text = fixture.unit_file_text(shell, "/opt/py 3/bin/python", Path("/src/50%$x"))
    assert "EnvironmentFile" not in text
    assert (
        "ExecStart=/bin/bash -c \"set -a; . /etc/sglang/decode-shell.env; exec '/opt/py 3/bin/python' -m "
        'orchestrator.sim.server --role decode --port 30012 --host 0.0.0.0"'
    ) in text
    assert 'Environment="PYTHONPATH=/src/50%%$$x"' in text
    router = hosts[1].units[0]
    text = fixture.unit_file_text(router, "/py", Path("/src"))
    assert "EnvironmentFile=/etc/sglang/router.env" in text
    assert '"--decode-url" "http://10.9.0.4:30002"' in text


def test_env_files_per_dialect() -> None:
    hosts = fixture.layout("10.9.0")
    decode, shell = hosts[2].units
    assert "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\n" in fixture.env_file_text(decode)
    assert "export" not in fixture.env_file_text(decode)
    assert all(line.startswith(("#", "export ")) for line in fixture.env_file_text(shell).splitlines())
    assert "SIM_WARMUP_S=0.3" in fixture.env_file_text(hosts[1].units[0])


def test_bind_paths_only_what_a_host_would_not_see(tmp_path: Path) -> None:
    binds = fixture.bind_paths("/usr/bin/python3", Path("/usr/lib"), tmp_path)
    assert "/usr/lib" not in binds and "/usr" not in binds  # visible through the overlay
    assert all(not b.startswith("/usr/") for b in binds)


# ----------------------------------------------------------------------------- ssh: sessions on one connection
class _Link:
    """A connection's paramiko transport: refuses the first `refuse` sessions (as OpenSSH past its
    MaxSessions, or a busy host past the open timeout), and notes how many run at once."""

    def __init__(self, refuse: int = 0, alive: bool = True) -> None:
        self.refuse, self.alive = refuse, alive
        self.opened = 0

    def is_active(self) -> bool:
        return self.alive

    def open_session(self, timeout: float) -> object:
        if self.refuse:
            self.refuse -= 1
            raise paramiko.ChannelException(1, "Administratively prohibited")
        self.opened += 1
        return contextlib.nullcontext()


class _Conn:
    def __init__(self, link: _Link) -> None:
        self.client = types.SimpleNamespace(get_transport=lambda: link)
        self.closed = False
        self.is_connected = True

    def close(self) -> None:
        self.closed = True


def _transport_on(link: _Link, monkeypatch: pytest.MonkeyPatch) -> tuple[SshTransport, list[_Conn]]:
    t = SshTransport("decode", "10.0.0.4")
    made: list[_Conn] = []

    def connect() -> _Conn:
        made.append(_Conn(link))
        return made[-1]

    monkeypatch.setattr(t, "_open", connect)
    monkeypatch.setattr("orchestrator.edges.transport.ssh.REOPEN_WAIT_S", 0.0)
    return t, made


def test_a_refused_session_on_a_live_connection_keeps_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, a session the host refused closed the connection, and with it every command still
    running on it: the testbed's port scan then ended "connection lost while running"."""
    link = _Link(refuse=1)
    t, made = _transport_on(link, monkeypatch)
    monkeypatch.setattr(t, "_drive", lambda chan, *a: "ran")
    assert t._exec("true", shown="true") == "ran"
    assert len(made) == 1 and not made[0].closed and link.opened == 1


def test_sessions_refused_a_while_on_a_live_connection_are_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found on the testbed: with sshd's `MaxSessions 1` a trial failed "connection lost:
    ChannelException(2, 'Connect failed')" when two of orch's commands met on a host, which was
    neither lost nor a reason to void it: a refusal on a live connection is asked again until the
    connect timeout (a session of the others ends soon), then said as MaxSessions."""
    link = _Link(refuse=5)
    t, made = _transport_on(link, monkeypatch)
    monkeypatch.setattr(t, "_drive", lambda chan, *a: "ran")
    assert t._exec("true", shown="true") == "ran"
    assert len(made) == 1 and not made[0].closed and link.opened == 1
    link.refuse = 10**9
    t.connect_timeout = 0.05
    monkeypatch.setattr("orchestrator.edges.transport.ssh.REOPEN_WAIT_S", 0.01)
    with pytest.raises(TransportError) as caught:
        t._exec("true", shown="true")
    said = str(caught.value)
    assert said.startswith("decode (10.0.0.4:22): the host refused every new session on a live connection"), said
    assert "sshd's MaxSessions is below the 8 commands orch may run at once" in said and not made[0].closed


def test_a_refused_session_on_a_dead_connection_reconnects(monkeypatch: pytest.MonkeyPatch) -> None:
    link = _Link(refuse=1, alive=False)
    t, made = _transport_on(link, monkeypatch)
    monkeypatch.setattr(t, "_drive", lambda chan, *a: "ran")
    assert t._exec("true", shown="true") == "ran"
    assert len(made) == 2 and made[0].closed


def test_at_most_max_channels_commands_run_at_once_on_a_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    t, _ = _transport_on(_Link(), monkeypatch)
    running, peak, lock = [0], [0], threading.Lock()

    def drive(chan: object, *args: object) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return "ran"

    monkeypatch.setattr(t, "_drive", drive)
    threads = [
        threading.Thread(target=t._exec, args=("true",), kwargs={"shown": "true"}) for _ in range(3 * MAX_CHANNELS)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert peak[0] == MAX_CHANNELS
    assert t._exec("kill", shown="kill", reserved=True) == "ran"  # a stopped command's kill never waits for a slot


# (user, sudo, what the host said) -> whether the error suggests another user or `sudo: true`. Found
# on the testbed: an append-only env file (chattr +a) written as root ended "operation not permitted
# (immutable file? see lsattr) (connected as root: use a user who may do this, or set `sudo: true`)",
# which sudo cannot change
WRITE_HINTS = [
    ("root", False, b"mv: cannot move: Operation not permitted", False),
    ("root", False, b"mktemp: failed: Read-only file system", False),
    ("orchuser", True, b"mv: cannot move: Operation not permitted", False),
    ("orchuser", True, b"mktemp: failed: Permission denied", False),
    ("orchuser", False, b"mktemp: failed: Permission denied", True),
]


@pytest.mark.parametrize(("user", "sudo", "stderr", "hinted"), WRITE_HINTS)
def test_a_refused_write_suggests_sudo_only_to_a_user_who_is_not_root_yet(
    monkeypatch: pytest.MonkeyPatch, user: str, sudo: bool, stderr: bytes, hinted: bool
) -> None:
    t = SshTransport("decode", "10.0.0.4", user=user, use_sudo=sudo)
    monkeypatch.setattr(t, "_exec", lambda *a, **k: _Raw(1, b"", b"orch-write: " + stderr, 0.01))
    with pytest.raises(TransportError) as caught:
        t.write_bytes_atomic("/etc/sglang/decode.env", b"D=1\n")
    said = str(caught.value)
    assert said.startswith("decode (10.0.0.4:22): cannot write /etc/sglang/decode.env: "), said
    assert ("set `sudo: true`" in said) is hinted, said
    if b"Operation not permitted" in stderr:
        assert "operation not permitted (immutable or append-only file? see lsattr)" in said, said
