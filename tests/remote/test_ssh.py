"""SshTransport against real sshd hosts (the testbed): round trips, one connection, atomic
writes, injection, timeouts, reconnects, and every connection error as one line naming the host."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.held_output import assert_returns_at_exit
from testbed.fixture import Testbed
from testbed.helpers import transport, wait_for

from orchestrator.edges import leftovers
from orchestrator.edges.leftovers import MARK_VAR
from orchestrator.edges.remote_leftovers import stop_marked
from orchestrator.edges.transport.ssh import SshTransport
from orchestrator.errors import CommandFailed, CommandInterrupted, CommandTimedOut, TransportError
from orchestrator.sweep.signals import signals_as_interrupt

pytestmark = pytest.mark.testbed


@pytest.fixture
def decode(testbed: Testbed):
    t = transport(testbed, "decode")
    yield t
    t.close()


@pytest.fixture
def scratch(testbed: Testbed, decode: SshTransport):
    """A fresh directory on the decode host, removed afterwards."""
    path = f"/var/tmp/orch-test-{os.getpid()}-{time.monotonic_ns()}"
    testbed.ssh("decode", f"mkdir -p {path}")
    yield path
    testbed.ssh("decode", f"rm -rf {path}")


def one_line_error(err: BaseException, t: SshTransport) -> str:
    text = str(err)
    assert "\n" not in text, text
    assert text.startswith(t.label + ": "), text
    return text


# ----------------------------------------------------------------------------- run
def test_run_string_uses_the_login_shell_and_reports_exit_code(decode: SshTransport) -> None:
    res = decode.run("echo out; echo err >&2; exit 3", check=False)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert res.host == "decode" and not res.ok
    assert decode.run("hostname").stdout.strip() == "decode"


def test_run_check_raises_command_failed_naming_the_host(decode: SshTransport) -> None:
    with pytest.raises(CommandFailed) as exc:
        decode.run(["ls", "/no/such/dir"])
    assert exc.value.result_code == 2
    assert one_line_error(exc.value, decode).startswith("decode (")
    assert "No such file" in exc.value.detail


def test_argv_words_arrive_verbatim(decode: SshTransport) -> None:
    words = ["a b", "", "it's", '"q"', "$HOME", "`id`", "\\", "*", "~", "x\ny", "ünï"]
    res = decode.run(["printf", "%s|", *words])
    assert res.stdout == "|".join(words) + "|"


def test_one_connection_for_many_commands_and_latency(
    testbed: Testbed, decode: SshTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    since = decode.run(["date", "+%s.%N"]).stdout.strip()
    latencies = []
    for _ in range(40):
        t0 = time.perf_counter()
        decode.run(["true"])
        latencies.append(time.perf_counter() - t0)
    assert decode.connects == 1
    # Evidence from the server side too: sshd logged no new login during those commands...
    logins = f"journalctl -q -u orch-sshd --since @{since} --no-pager | grep -c 'Accepted publickey for root'"
    assert decode.run(logins, check=False).stdout.strip() == "0"
    # ...and it does log one for a new connection (so the count above can fail)
    other = transport(testbed, "decode")
    other.run("true")
    other.close()
    wait_for(lambda: decode.run(logins, check=False).stdout.strip() == "1", 5, "one login in sshd's journal")
    med, p95 = statistics.median(latencies), sorted(latencies)[int(0.95 * len(latencies))]
    with capsys.disabled():
        print(
            f"\n[ssh] per-command latency on the persistent connection: median {med * 1000:.1f} ms, "
            f"p95 {p95 * 1000:.1f} ms (40 x `true`)"
        )
    assert med < 0.1  # generous: ~5-15 ms measured; a reconnect per command would be ~100 ms


def test_timeout_kills_the_remote_command(testbed: Testbed, decode: SshTransport) -> None:
    t0 = time.monotonic()
    with pytest.raises(TransportError) as exc:
        decode.run("sleep 31.25", timeout=0.5)
    assert time.monotonic() - t0 < 4
    assert "timed out after 0.5 s" in one_line_error(exc.value, decode)
    # killed ON THE HOST, not just abandoned by the client
    assert testbed.ssh("decode", "pgrep -f 'sleep 31.25'", check=False).returncode == 1


def test_timeout_is_typed_and_keeps_the_output_so_far(decode: SshTransport) -> None:
    """A remote repro that hangs after printing: the runner keeps what it printed (the type, not
    the message text, tells it the command timed out)."""
    with pytest.raises(CommandTimedOut) as exc:
        decode.run("echo partial; echo oops >&2; sleep 31.5", timeout=1)
    assert exc.value.timeout == 1
    assert exc.value.result.stdout == "partial\n" and exc.value.result.stderr == "oops\n"
    assert str(exc.value).endswith(
        "command timed out after 1 s and was killed: echo partial; echo oops >&2; sleep 31.5"
    )


# The remote repro's cancel (Ctrl-C/SIGTERM): sleeps of their own lengths, so that pgrep finds only these.
@pytest.mark.parametrize("sudo", [False, True], ids=["root", "sudo"])
def test_a_set_stop_event_kills_the_remote_process_group_and_keeps_the_output(
    testbed: Testbed, decode: SshTransport, scratch: str, sudo: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A remote repro (240 s timeout) whose stop Event is set after 0.5 s: run() returns within
    seconds, with what it printed, and the command's whole process group is gone ON THE HOST (the
    shell, a background child, the foreground sleep): closing the channel alone leaves them running."""
    ids = f"{scratch}/ids"
    command = (
        # the user's shell records its pid and process group (fields 1 and 5 of /proc/PID/stat)
        f'read -r s < /proc/$$/stat; set -- ${{s#*) }}; echo "$$ $3" > {ids}; '
        "echo partial; echo oops >&2; sleep 300.25 & sleep 300.5; wait"
    )
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(CommandInterrupted) as exc:
        decode.run(command, timeout=240, check=False, sudo=sudo, stop=stop)
    took = time.monotonic() - t0
    timer.cancel()
    assert took < 4, f"a stopped remote command took {took:.2f} s to return"
    assert exc.value.result.stdout == "partial\n"  # orch's pid line is not the command's output
    assert exc.value.result.stderr.endswith("oops\n") and not getattr(exc.value, "__notes__", [])
    pid, pgid = testbed.ssh("decode", f"cat {ids}").stdout.split()
    left = testbed.ssh("decode", f"kill -0 {pid}; pgrep -g {pgid}; pgrep -f 'sleep 300[.]'", check=False)
    assert left.returncode == 1 and left.stdout == "", f"left running on the host: {left.stdout}"
    assert decode.run("echo after").stdout == "after\n" and decode.connects == 1  # the connection lives on
    with capsys.disabled():
        how = "sudo" if sudo else "root"
        print(f"\n[ssh] stopped remote `sleep 300` ({how}): returned {took - 0.5:.2f} s after the stop")


def test_sigterm_in_the_main_thread_kills_the_remote_process_group(testbed: Testbed, decode: SshTransport) -> None:
    """A one-testbed sweep runs the repro in the main thread: there SIGTERM (or Ctrl-C) raises in the
    middle of the wait (sweep.signals), and the command is killed on the host all the same."""
    stop = threading.Event()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    t0 = time.monotonic()
    try:
        with signals_as_interrupt(stop, sigint=False), pytest.raises(CommandInterrupted) as exc:
            timer.start()
            decode.run("echo partial; sleep 300.75", timeout=240, stop=stop)
    finally:
        timer.cancel()  # never a SIGTERM after the handler is gone: it would end pytest
    assert time.monotonic() - t0 < 4 and stop.is_set()
    assert exc.value.result.stdout == "partial\n" and "SIGTERM" in str(exc.value.__cause__)
    assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]75'", check=False).returncode == 1


def test_a_remote_repros_setsid_child_outlives_its_timeout_and_is_found_by_its_mark(
    testbed: Testbed, decode: SshTransport
) -> None:
    """At a timeout, `timeout` on the host kills the repro's process group; a child that left it
    (setsid) lives on. The mark given as `env` reaches it through sshd and the login shell, and
    the leftover check (edges.remote_leftovers), one more exec, names and stops it."""
    mark = leftovers.new_mark()
    with pytest.raises(CommandTimedOut):
        decode.run(
            "setsid sleep 300.125 >/dev/null 2>&1 </dev/null & sleep 30",
            timeout=0.5,
            stop=threading.Event(),
            env={MARK_VAR: mark},
        )
    assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]125'", check=False).returncode == 0  # the group kill missed it
    t0 = time.monotonic()
    left = stop_marked(decode, mark, settle_s=0.2, grace_s=1.0)
    took = time.monotonic() - t0
    assert len(left) == 1 and re.fullmatch(r"pid [0-9]+ \(sleep 300\.125\)", left[0]), left
    assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]125'", check=False).returncode == 1, "still running"
    t1 = time.monotonic()
    assert stop_marked(decode, mark, settle_s=0.5, grace_s=2.0) == []  # nothing left: one quick round trip
    assert took < 3 and time.monotonic() - t1 < 0.5, (took, time.monotonic() - t1)


def test_a_remote_repro_whose_child_holds_its_output_returns_when_it_exits(decode: SshTransport) -> None:
    """sshd sends EOF once every holder of the command's stdout closed it: a child left running with
    it (`setsid sleep &`, no redirection) held the repro until its timeout and the backstop, then
    "no answer (host hung?)". The exit status arrives at once: the repro's own exit ends the wait."""
    assert_returns_at_exit(decode, "300.375", timeout=2, within_s=1.5)


def test_a_stop_set_before_the_call_runs_nothing(decode: SshTransport, scratch: str) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(CommandInterrupted):
        decode.run(f"touch {scratch}/ran", stop=stop)
    assert not decode.exists(f"{scratch}/ran")


def test_a_stoppable_command_that_ends_returns_as_any_other(decode: SshTransport) -> None:
    """The stop Event unset: output, exit code and timeout as without one (the pid line taken out)."""
    stop = threading.Event()
    res = decode.run("echo out; echo err >&2; exit 3", check=False, stop=stop)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert decode.run(["printf", "%s|", "a b", "$HOME"], stop=stop).stdout == "a b|$HOME|"
    with pytest.raises(CommandTimedOut) as exc:
        decode.run("echo partial; sleep 31.75", timeout=0.5, stop=stop)
    assert exc.value.result.stdout == "partial\n"


def test_reconnects_once_after_the_connection_dropped(testbed: Testbed, decode: SshTransport) -> None:
    assert decode.run("echo hi").stdout == "hi\n"
    # kill this connection's sshd session process on the host: the link drops mid-command
    with pytest.raises(TransportError) as exc:
        decode.run("kill -9 $PPID; sleep 5")
    assert "connection lost" in one_line_error(exc.value, decode)
    assert decode.run("echo again").stdout == "again\n"  # transparent reconnect
    assert decode.connects == 2


# ----------------------------------------------------------------------------- files
def test_read_write_round_trip_binary_and_large(decode: SshTransport, scratch: str) -> None:
    for name, data in [("bin", bytes(range(256)) * 3), ("empty", b""), ("big", os.urandom(1 << 20))]:
        path = f"{scratch}/{name}"
        decode.write_bytes_atomic(path, data)
        assert decode.read_bytes(path) == data
        assert decode.exists(path)
    assert not decode.exists(f"{scratch}/missing")


def test_atomic_write_keeps_mode_owner_and_replaces_by_rename(
    testbed: Testbed, decode: SshTransport, scratch: str
) -> None:
    path = f"{scratch}/decode.env"
    testbed.ssh("decode", f"printf 'A=1\\n' > {path} && chown nobody:nogroup {path} && chmod 640 {path}")
    inode_before = testbed.ssh("decode", f"stat -c %i {path}").stdout
    decode.write_bytes_atomic(path, b"A=2\n")
    stat = testbed.ssh("decode", f"stat -c '%a %U %G %i' {path}").stdout.split()
    assert stat[:3] == ["640", "nobody", "nogroup"]
    assert stat[3] != inode_before.strip()  # a new file renamed over the old one, not rewritten
    assert testbed.ssh("decode", f"cat {path}").stdout == "A=2\n"
    assert testbed.ssh("decode", f"ls -A {scratch}").stdout.split() == ["decode.env"]  # no temp left
    decode.write_bytes_atomic(f"{path}.copy", b"A=2\n", like=path)  # a backup: as private as its original
    assert testbed.ssh("decode", f"stat -c '%a %U %G' {path}.copy").stdout.split() == ["640", "nobody", "nogroup"]


def test_write_through_a_symlink_keeps_the_link(testbed: Testbed, decode: SshTransport, scratch: str) -> None:
    testbed.ssh(
        "decode", f"mkdir {scratch}/real && echo A=1 > {scratch}/real/x.env && ln -s real/x.env {scratch}/x.env"
    )
    decode.write_bytes_atomic(f"{scratch}/x.env", b"A=3\n")
    assert testbed.ssh("decode", f"readlink {scratch}/x.env; cat {scratch}/real/x.env").stdout == "real/x.env\nA=3\n"


def test_new_file_gets_the_umask_mode(testbed: Testbed, decode: SshTransport, scratch: str) -> None:
    decode.write_bytes_atomic(f"{scratch}/new.env", b"B=1\n")
    assert testbed.ssh("decode", f"stat -c %a {scratch}/new.env").stdout.strip() == "644"


def test_injection_attempts_land_verbatim_and_run_nothing(testbed: Testbed, decode: SshTransport, scratch: str) -> None:
    testbed.ssh("decode", "rm -f /tmp/pwned* ~/pwned*")
    evil = ["1; touch /tmp/pwned", "$(touch /tmp/pwned2)", "`touch /tmp/pwned3`", "x' ; touch /tmp/pwned4 ; '"]
    data = "".join(f"K{i}={v}\n" for i, v in enumerate(evil)).encode()
    name = "$(touch pwned5); `touch pwned6` e.env"  # relative: would land in the login's home
    path = f"{scratch}/{name}"
    decode.write_bytes_atomic(path, data)
    assert decode.read_bytes(path) == data
    assert decode.run(["echo", *evil]).stdout == " ".join(evil) + "\n"
    assert decode.run(["cat", path]).stdout.encode() == data
    assert decode.exists(path)
    listing = testbed.ssh("decode", f"ls {scratch}").stdout
    assert listing == name + "\n"
    # checked with the OpenSSH client, inside the host: nothing ran
    assert testbed.ssh("decode", "ls /tmp/pwned* ~/pwned* 2>/dev/null", check=False).stdout == ""


# ----------------------------------------------------------------------------- errors
def test_connection_refused_is_one_line_naming_host_and_port(testbed: Testbed) -> None:
    t = transport(testbed, "decode", port=23)
    with pytest.raises(TransportError) as exc:
        t.run("true")
    text = one_line_error(exc.value, t)
    assert (
        text == f"decode ({testbed.host('decode').ip}:23): cannot connect: connection refused "
        "(is sshd running and listening on port 23?)"
    )


def test_unreachable_address_times_out_quickly(testbed: Testbed) -> None:
    t = SshTransport(
        "ghost",
        f"{testbed.net}.250",
        key_filename=str(testbed.key),
        known_hosts=str(testbed.known_hosts),
        connect_timeout=0.5,
    )
    t0 = time.monotonic()
    with pytest.raises(TransportError) as exc:
        t.run("true")
    assert time.monotonic() - t0 < 4
    text = one_line_error(exc.value, t)
    assert "cannot connect: " in text and ("timed out" in text or "no route to host" in text)


def test_wrong_key_says_authentication_failed(testbed: Testbed, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
        check=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    t = transport(testbed, "decode", key_filename=str(other))
    with pytest.raises(TransportError) as exc:
        t.exists("/")
    assert one_line_error(exc.value, t).endswith(
        ": authentication failed for root (check `key:`; or the account is locked or expired: see sshd's log)"
    )


def test_missing_key_file_is_named(testbed: Testbed, tmp_path: Path) -> None:
    t = transport(testbed, "decode", key_filename=str(tmp_path / "nope"))
    with pytest.raises(TransportError) as exc:
        t.run("true")
    assert f"key file {tmp_path / 'nope'} not found" in one_line_error(exc.value, t)


def test_unknown_host_key_is_refused_by_default(testbed: Testbed, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = transport(testbed, "decode", known_hosts=str(empty))
    with pytest.raises(TransportError) as exc:
        t.run("true")
    text = one_line_error(exc.value, t)
    assert "host key not in known_hosts" in text and "ssh-keyscan" in text and "accept_new_host_keys: true" in text
    assert t.connects == 0


def test_accept_new_host_keys_connects_without_writing_known_hosts(testbed: Testbed, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = transport(testbed, "decode", known_hosts=str(empty), accept_new_host_keys=True)
    assert t.run("hostname").stdout.strip() == "decode"
    assert empty.read_text() == ""
    t.close()


def test_changed_host_key_is_refused(testbed: Testbed, tmp_path: Path) -> None:
    # decode's address with prefill's key: what a reinstalled (or impersonated) host looks like
    prefill_key = (testbed.lab / "state" / "prefill" / "known_hosts").read_text().split(None, 1)[1]
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{testbed.host('decode').ip} {prefill_key}")
    t = transport(testbed, "decode", known_hosts=str(forged))
    with pytest.raises(TransportError) as exc:
        t.run("true")
    text = one_line_error(exc.value, t)
    assert "host key CHANGED" in text and "ssh-keygen -R" in text


def test_permission_denied_on_env_file_as_unprivileged_user(testbed: Testbed, scratch: str) -> None:
    # a real second account on the host (shares the lab's authorized key, see testbed.sh)
    testbed.ssh("decode", "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser")
    secret = f"{scratch}/secret.env"
    testbed.ssh("decode", f"chmod 755 {scratch} && echo K=1 > {secret} && chmod 600 {secret}")
    t = transport(testbed, "decode", user="orchuser")
    try:
        assert t.run("id -un").stdout.strip() == "orchuser"
        with pytest.raises(TransportError) as exc:
            t.read_bytes(secret)
        text = one_line_error(exc.value, t)
        assert f"cannot read {secret}: permission denied (connected as orchuser" in text
        for data in (b"K=2\n", b"K=" + b"x" * (4 << 20)):  # big: the host stops reading stdin early
            with pytest.raises(TransportError) as exc:
                t.write_bytes_atomic(secret, data)
            assert f"cannot write {secret}: permission denied" in one_line_error(exc.value, t)
        assert t.connects == 1
        assert testbed.ssh("decode", f"cat {secret}").stdout == "K=1\n"  # untouched
    finally:
        t.close()
