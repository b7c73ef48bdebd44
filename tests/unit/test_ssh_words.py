"""The SSH transport's pure parts, one by one (its commands are proven on the real SSH + systemd
testbed; these are what the fourteenth mutation round found held only there, or nowhere): the
exact command line sent (sudo outermost, the pid line, the scope, `timeout`, env innermost), the
entry script's answer read back, sudo's refusal told from its warnings, and the one line a user
reads for each way connecting can fail."""

from __future__ import annotations

import errno
import shlex
import socket

import paramiko
import pytest
from paramiko.ssh_exception import (
    AuthenticationException,
    BadAuthenticationType,
    BadHostKeyException,
    NoValidConnectionsError,
    PartialAuthentication,
    PasswordRequiredException,
)

from orchestrator.edges.transport import FileEntry, ssh
from orchestrator.edges.transport.ssh import SshTransport, command_line, connect_error_message, parse_entry
from orchestrator.errors import ConfigError

SCOPE = ["systemd-run", "--scope", "--unit=orch-r1-t3.scope", "--collect", "--quiet", "--"]


# ---------------------------------------------------------------- the command line
def test_a_plain_string_goes_to_the_login_shell_as_written() -> None:
    assert command_line("echo $HOME | wc -c", sudo=False, timeout=None) == "echo $HOME | wc -c"


def test_a_sequence_is_quoted_word_by_word() -> None:
    assert command_line(["printf", "%s", "a b", "$X"], sudo=False, timeout=None) == "printf %s 'a b' '$X'"


def test_every_wrapper_in_its_order_around_a_string() -> None:
    line = command_line("echo hi", sudo=True, timeout=2.5, stoppable=True, env={"A": "1 2"}, scope="orch-r1-t3.scope")
    words = shlex.split(line)
    announce = ["sh", "-c", ssh._ANNOUNCE, "orch-run"]
    timeout = ["timeout", "-k", f"{ssh.KILL_GRACE_S:g}", "2.500"]
    assert words == [
        "sudo",
        "-n",
        "--",
        *announce,
        *SCOPE,
        *timeout,
        "env",
        "A=1 2",
        "${SHELL:-/bin/sh}",
        "-c",
        "echo hi",
    ]
    assert '"${SHELL:-/bin/sh}" -c' in line  # the user's shell, expanded on the host


@pytest.mark.parametrize(
    ("timeout", "stoppable", "duration"),
    [(None, True, "0"), (0.0, False, "0.001"), (-5.0, False, "0.001"), (30.0, False, "30.000")],
)
def test_the_timeout_is_coreutils_seconds_and_0_only_for_none(
    timeout: float | None, stoppable: bool, duration: str
) -> None:
    """`timeout 0` means no timeout to coreutils: a stoppable line without one says 0, a timeout of
    0 or less is the smallest one instead (it ran for ever under a `0`)."""
    words = command_line(["true"], sudo=False, timeout=timeout, stoppable=stoppable)
    assert shlex.split(words)[-3:] == [f"{ssh.KILL_GRACE_S:g}", duration, "true"]


def test_no_timeout_and_not_stoppable_has_no_timeout_wrapper() -> None:
    assert command_line(["true"], sudo=True, timeout=None) == "sudo -n -- true"


def test_an_empty_command_or_a_bad_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="empty command"):
        command_line([], sudo=False, timeout=None)
    for name, value in (("1A", "x"), ("A-B", "x"), ("--help", "x"), ("A", "x\0y")):
        with pytest.raises(ValueError, match="not an environment variable"):
            command_line(["true"], sudo=False, timeout=None, env={name: value})
    assert command_line(["true"], sudo=False, timeout=None, env={"_A1": ""}) == "env _A1= true"


# ---------------------------------------------------------------- the entry script's answers
@pytest.mark.parametrize(
    ("out", "entry"),
    [
        (b"orch-missing\n", FileEntry(None)),
        (b"orch-link /etc/real.env\norch-missing\n", FileEntry(None, "/etc/real.env")),
        (b"orch-file 640 0 12\nK=1\n", FileEntry(b"K=1\n", None, 0o640, 0, 12)),
        (b"orch-link real.env\norch-file 600 5 6\n", FileEntry(b"", "real.env", 0o600, 5, 6)),
        (b"orch-special fifo\n", FileEntry(None, special="a FIFO")),
        (b"orch-special directory\n", FileEntry(None, special="a directory")),
        (b"orch-special socket\n", FileEntry(None, special="a socket")),
        (b"orch-special character special file\n", FileEntry(None, special="a device")),
        (b"orch-special weird\n", FileEntry(None, special="not a file")),
    ],
)
def test_the_entry_scripts_answers_are_read_back(out: bytes, entry: FileEntry) -> None:
    assert parse_entry(out) == entry


@pytest.mark.parametrize(
    "out",
    [
        b"",
        b"Welcome!\n",
        b"orch-file 640 0\nK=1\n",
        b"orch-file 640 0 x\n",
        b"orch-file 640 0 12 9\n",
        b"orch-fil 1 2 3\n",
    ],
)
def test_anything_else_is_no_answer(out: bytes) -> None:
    assert parse_entry(out) is None


def test_a_special_file_behind_a_link_is_no_answer() -> None:
    """The script follows a link to read a file; a link to a FIFO is not one of its answers."""
    assert parse_entry(b"orch-link x\norch-special fifo\n") is None


# ---------------------------------------------------------------- sudo
@pytest.mark.parametrize(
    ("stderr", "code", "reason"),
    [
        (b"sudo: a password is required\n", 1, "a password is required"),
        (b"Could not chdir to home directory /home/x\nsudo: a password is required\n", 1, "a password is required"),
        (b"sudo: unable to resolve host decode\nsudo: sorry, you must have a tty to run sudo\n", 1,
         "sorry, you must have a tty to run sudo"),
        (b"sudo: unable to resolve host decode\n", 1, None),  # a warning: the command ran
        (b"sudo: a password is required\n", 2, None),  # sudo refuses with 1 only
        (b"grep: x: No such file\n", 1, None),  # the command's own failure
    ],
)  # fmt: skip
def test_sudos_refusal_is_its_last_word_never_a_warning(stderr: bytes, code: int, reason: str | None) -> None:
    assert ssh.sudo_refusal(stderr, code) == reason


def test_sudos_refusal_is_read_from_the_last_lines_only() -> None:
    noise = b"".join(b"login noise %d\n" % i for i in range(ssh.SUDO_LINES_READ))
    assert ssh.sudo_refusal(b"sudo: old refusal\n" + noise, 1) is None
    assert ssh.sudo_refusal(noise + b"sudo: a password is required\n", 1) == "a password is required"


# ---------------------------------------------------------------- connecting: what the user reads
def _t(**kw: object) -> SshTransport:
    return SshTransport("decode", "10.0.0.4", **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def keys() -> tuple[paramiko.PKey, paramiko.PKey]:
    return paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()


def test_an_unknown_host_key_names_its_fingerprint_and_the_keyscan(keys: tuple[paramiko.PKey, paramiko.PKey]) -> None:
    said = connect_error_message(ssh._UnknownHostKey("10.0.0.4", keys[0]), _t(port=2222, known_hosts="/k/hosts"))
    assert said.startswith(f"host key not in known_hosts /k/hosts: server offers {ssh._fingerprint(keys[0])}")
    assert "`ssh-keyscan -p 2222 10.0.0.4 >> /k/hosts`" in said and "accept_new_host_keys: true" in said


@pytest.mark.parametrize(("port", "entry"), [(22, "10.0.0.4"), (2222, "'[10.0.0.4]:2222'")])
def test_a_changed_host_key_names_both_and_how_to_forget_the_old(
    keys: tuple[paramiko.PKey, paramiko.PKey], port: int, entry: str
) -> None:
    said = connect_error_message(BadHostKeyException("10.0.0.4", keys[1], keys[0]), _t(port=port))
    assert said.startswith(
        f"host key CHANGED: known_hosts has {ssh._fingerprint(keys[0])}, server offers {ssh._fingerprint(keys[1])}"
    )
    assert f"`ssh-keygen -R {entry} -f ~/.ssh/known_hosts`" in said


def test_a_fingerprint_is_sha256_base64_unpadded(keys: tuple[paramiko.PKey, paramiko.PKey]) -> None:
    import base64
    import hashlib

    digest = base64.b64encode(hashlib.sha256(keys[0].asbytes()).digest()).decode()
    shown = ssh._fingerprint(keys[0])
    assert shown == f"{keys[0].get_name()} SHA256:{digest.rstrip('=')}" and not shown.endswith("=")


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (PasswordRequiredException("x"), "key /k/id is passphrase-protected (load it into ssh-agent"),
        (BadAuthenticationType("x", ["password"]), "authentication failed for ops: server allows only password"),
        (PartialAuthentication(["keyboard-interactive"]), "but the server also requires keyboard-interactive"),
        (AuthenticationException("Authentication failed."), "authentication failed for ops (check `key:`;"),
        (AuthenticationException("Authentication timeout."), "no answer within 4 s"),
        (AuthenticationException("transport shut down or saw EOF"), "login refused for ops: the server closed"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve host name 10.0.0.4"),
        (TimeoutError(), "cannot connect: timed out after 4 s (host down, or a firewall drops port 2200?)"),
        (paramiko.SSHException("Error reading SSH protocol banner"),
         "SSH handshake failed: Error reading SSH protocol banner (is port 2200"),
        (EOFError(), "SSH handshake failed: EOFError (is port 2200"),
        (ValueError("odd\nthing"), "cannot connect: ValueError: odd thing"),
    ],
)  # fmt: skip
def test_each_way_connecting_fails_is_one_line_to_act_on(exc: BaseException, said: str) -> None:
    t = _t(port=2200, user="ops", key_filename="/k/id", connect_timeout=4.0)
    assert said in connect_error_message(exc, t)


def test_without_a_key_the_auth_hint_names_the_agent_too() -> None:
    said = connect_error_message(AuthenticationException("Authentication failed."), _t(user="ops"))
    assert "(check `key:` or your ssh-agent;" in said


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (errno.ECONNREFUSED, "connection refused (is sshd running and listening on port 2200?)"),
        (errno.EHOSTUNREACH, "no route to host"),
        (errno.ENETUNREACH, "network unreachable"),
        (errno.ETIMEDOUT, "timed out (host down, or a firewall drops the port?)"),
        (errno.ECONNRESET, "connection reset by the server"),
        (errno.EACCES, "Permission denied"),
        (None, "unknown error"),
    ],
)
def test_each_connect_errno_is_said_in_words(code: int | None, said: str) -> None:
    assert said in ssh._errno_text(code, _t(port=2200))


def test_refused_everywhere_or_unreachable_is_said_so() -> None:
    t = _t(port=2200)
    refused = NoValidConnectionsError({("10.0.0.4", 2200): OSError(errno.ECONNREFUSED, "refused")})
    assert connect_error_message(refused, t) == f"cannot connect: {ssh._errno_text(errno.ECONNREFUSED, t)}"
    unreachable = connect_error_message(OSError(errno.EHOSTUNREACH, "x"), t)
    assert unreachable == "cannot connect: no route to host (host down or wrong address?)"


def test_an_oserror_of_another_kind_is_said_as_the_system_says_it() -> None:
    said = connect_error_message(OSError(errno.EMFILE, "Too many open files"), _t())
    assert said == "cannot connect: [Errno 24] Too many open files"


# ---------------------------------------------------------------- small words
def test_a_remote_failure_reason_is_known_words_else_its_last_line() -> None:
    assert ssh._reason(b"mv: cannot move: Read-only file system\n") == "read-only file system"
    assert ssh._reason(b"x: Operation not permitted\n").startswith("operation not permitted (immutable")
    assert ssh._reason(b"first\n  last   line  \n") == "last line"
    assert ssh._reason(b"") == "unknown error"


def test_one_line_and_short_cut_where_they_say() -> None:
    assert ssh._one_line("a\n b\t c") == "a b c" and len(ssh._one_line("x" * 500)) == 300
    assert ssh._short("y" * 120) == "y" * 120
    assert ssh._short("y" * 121) == "y" * 117 + "..."


def test_output_keeps_its_last_bytes_up_to_the_cap() -> None:
    buf = bytearray(b"abc")
    ssh._append(buf, b"defg", 5)
    assert bytes(buf) == b"cdefg"
    ssh._append(buf, b"h", None)
    assert bytes(buf) == b"cdefgh"


def test_the_write_scripts_expect_argument_is_the_files_sha256_or_empty() -> None:
    import hashlib

    assert ssh._digest(None) == "" and ssh._digest(b"K=1\n") == hashlib.sha256(b"K=1\n").hexdigest()


@pytest.mark.parametrize("value", ["", "-oProxyCommand=x", "a b", "a;b", "$(id)", "a`b", "x\0", "*"])
def test_a_host_or_user_that_reads_as_an_option_or_shell_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="is not a host or user name"):
        ssh._check_operand("ssh.host", value)
    ssh._check_operand("ssh.host", "db-1.example:x_y")  # letters, digits, . - _ :
