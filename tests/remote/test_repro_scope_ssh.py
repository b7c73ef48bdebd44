"""A repro on a host in a transient systemd scope of its own (edges.remote_scope), on the real
systemd 252 + sshd testbed: a daemon that clears its environment (`env -i`) carries no mark, so
before this it outlived its trial on the host and the trial counted; in the scope it is named,
stopped and the scope is gone, in the leftover check's one round trip. A plain repro keeps its
output and exit code and leaves no scope; a timeout and a stop still kill its process group
through systemd-run; a non-root user gets today's mark check."""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, no_leftovers, snapshot, ssh_overlap_matrix, trials_of
from testbed.fixture import Testbed
from testbed.helpers import transport

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.edges import leftovers
from orchestrator.edges.leftovers import MARK_VAR
from orchestrator.edges.remote_leftovers import stop_marked
from orchestrator.edges.remote_scope import probe, unit_name
from orchestrator.edges.transport.ssh import SshTransport
from orchestrator.errors import CommandInterrupted, CommandTimedOut
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.testbed

SETTLE_S, GRACE_S = 0.5, 2.0  # the sweep's (sweep.phases)
SUDOERS = "/etc/sudoers.d/orchuser-scope"


@pytest.fixture
def decode(testbed: Testbed):
    t = transport(testbed, "decode")
    yield t
    t.close()


def scopes(tb: Testbed) -> str:
    return tb.ssh("decode", "systemctl list-units --all --plain --no-legend 'orch-repro-*'").stdout.strip()


def no_scope_left(tb: Testbed) -> None:
    """Nothing named orch-repro-* is loaded (systemd unloads an emptied scope within milliseconds)."""
    deadline = time.monotonic() + 5
    while scopes(tb) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scopes(tb) == "", scopes(tb)


def alive(tb: Testbed, pid: str) -> bool:
    return tb.ssh("decode", f"kill -0 {pid}", check=False).returncode == 0


def run_scoped(t: SshTransport, command: str, *, timeout: float = 30, **kw: object) -> tuple[object, str, str]:
    """The repro as sweep.phases runs it in a scope: (its result or exception, mark, scope)."""
    mark = leftovers.new_mark()
    scope = unit_name(mark, "scope-test")
    try:
        got: object = t.run(command, timeout=timeout, check=False, env={MARK_VAR: mark}, scope=scope, **kw)  # type: ignore[arg-type]
    except (CommandTimedOut, CommandInterrupted) as exc:
        got = exc
    return got, mark, scope


def test_the_testbed_host_allows_a_scope_and_a_non_root_user_gets_the_mark_only(
    testbed: Testbed, decode: SshTransport
) -> None:
    yes = probe(decode, unit_name(leftovers.new_mark(), "scope-test"))
    assert yes.usable and yes.why.startswith("systemd 252"), yes
    testbed.ssh("decode", "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser")
    plain = transport(testbed, "decode", user="orchuser")
    try:
        no = probe(plain, unit_name(leftovers.new_mark(), "scope-test"))
    finally:
        plain.close()
    assert not no.usable and no.why == "not root (ssh user orchuser, no sudo)", no
    assert no.fact.startswith("mark only (not root (ssh user orchuser, no sudo)): a process that clears")
    no_scope_left(testbed)  # the probe's own scope of `true` is gone


def test_through_sudo_the_repro_gets_its_scope_and_its_env_i_daemon_is_stopped(testbed: Testbed) -> None:
    """`ssh: sudo: true` with an unprivileged user: the probe, the repro and the check run through
    sudo, so systemd-run makes the scope as root."""
    testbed.ssh("decode", "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser")
    testbed.ssh(
        "decode",
        f"printf 'orchuser ALL=(ALL) NOPASSWD: ALL\\n' > {SUDOERS} && chmod 440 {SUDOERS}",
    )
    t = transport(testbed, "decode", user="orchuser", use_sudo=True)
    try:
        assert probe(t, unit_name(leftovers.new_mark(), "scope-test")).usable
        got, mark, scope = run_scoped(t, "env -i setsid sleep 300.84375 >/dev/null 2>&1 & echo done")
        assert getattr(got, "exit_code", None) == 0 and getattr(got, "stdout", "") == "done\n", got
        left = stop_marked(t, mark, settle_s=SETTLE_S, grace_s=GRACE_S, scope=scope)
        assert len(left) == 1 and re.fullmatch(r"pid [0-9]+ \(sleep 300\.84375\)", left[0]), left
        assert testbed.ssh("decode", "pgrep -f '^sleep 300[.]84375$'", check=False).returncode == 1, "still running"
        no_scope_left(testbed)
    finally:
        t.close()
        testbed.ssh("decode", f"pkill -f '^sleep 300[.]84375$'; rm -f {SUDOERS}", check=False)


@pytest.mark.parametrize(
    "daemon",
    [
        "env -i setsid sleep 300.875 >/dev/null 2>&1 &",
        "(env -i sh -c 'sleep 300.875 >/dev/null 2>&1 &' &);",  # a double fork with env -i
    ],
    ids=["env-i-setsid", "env-i-double-fork"],
)
def test_an_env_i_daemon_is_found_in_the_scope_named_stopped_and_the_scope_gone(
    testbed: Testbed, decode: SshTransport, daemon: str
) -> None:
    pidfile = f"/var/tmp/orch-scope-{os.getpid()}-{time.monotonic_ns()}"
    try:
        got, mark, scope = run_scoped(
            decode, f"{daemon} sleep 0.2; pgrep -f '^sleep 300[.]875$' > {pidfile}; echo done"
        )
        assert getattr(got, "exit_code", None) == 0 and getattr(got, "stdout", "") == "done\n", got
        (pid,) = testbed.ssh("decode", f"cat {pidfile}").stdout.split()
        assert alive(testbed, pid)
        # the mark alone misses it: this is what a repro on a host had before
        assert stop_marked(decode, mark, settle_s=0.0, grace_s=GRACE_S) == []
        assert alive(testbed, pid), "the mark check found an env -i daemon"
        left = stop_marked(decode, mark, settle_s=SETTLE_S, grace_s=GRACE_S, scope=scope)
        assert left == [f"pid {pid} (sleep 300.875)"], left
        assert not alive(testbed, pid), f"pid {pid} still runs on decode"
        no_scope_left(testbed)
    finally:
        testbed.ssh("decode", f"pkill -f 'sleep 300[.]875'; rm -f {pidfile}", check=False)


def test_a_plain_repro_in_a_scope_keeps_its_output_and_exit_code_and_leaves_no_scope(
    testbed: Testbed, decode: SshTransport
) -> None:
    command = 'echo out; echo err >&2; grep -q -- "-$ORCH_REPRO_MARK.scope" /proc/self/cgroup && echo in; exit 3'
    got, mark, scope = run_scoped(decode, command)
    # its mark reached it through systemd-run, and its own cgroup is the scope named by that mark
    assert (getattr(got, "exit_code", None), getattr(got, "stdout", None), getattr(got, "stderr", None)) == (
        3,
        "out\nin\n",
        "err\n",
    ), got
    assert getattr(got, "command", None) == command  # the text stays the user's
    assert stop_marked(decode, mark, settle_s=SETTLE_S, grace_s=GRACE_S, scope=scope) == []
    no_scope_left(testbed)


def test_a_repro_killed_at_its_timeout_in_a_scope_leaves_nothing(testbed: Testbed, decode: SshTransport) -> None:
    """`timeout` still leads the process group (systemd-run exec'd it in place): the group dies at the
    timeout; what left the group and cleared its environment is stopped by the check, scope and all."""
    try:
        got, mark, scope = run_scoped(
            decode, "echo partial; env -i setsid sleep 300.9375 >/dev/null 2>&1 & sleep 300.96875", timeout=1
        )
        assert isinstance(got, CommandTimedOut) and got.result.stdout == "partial\n", got
        assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]96875'", check=False).returncode == 1  # the group died
        left = stop_marked(decode, mark, settle_s=0.0, grace_s=GRACE_S, scope=scope)
        assert len(left) == 1 and re.fullmatch(r"pid [0-9]+ \(sleep 300\.9375\)", left[0]), left
        assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]93'", check=False).returncode == 1, "still running"
        no_scope_left(testbed)
    finally:
        testbed.ssh("decode", "pkill -f 'sleep 300[.]9'", check=False)


@pytest.mark.parametrize("sudo", [False, True], ids=["root", "sudo"])
def test_a_stop_still_kills_the_repros_process_group_through_systemd_run(
    testbed: Testbed, decode: SshTransport, sudo: bool
) -> None:
    """The transport's cancel (`kill -- -PGID` of the pid the line printed) reaches a repro in a
    scope: that pid became systemd-run, then `timeout`, the group's leader."""
    stop = threading.Event()
    timer = threading.Timer(0.7, stop.set)
    timer.start()
    t0 = time.monotonic()
    try:
        got, mark, scope = run_scoped(
            decode, "echo partial; sleep 300.40625 & sleep 300.4375; wait", timeout=240, stop=stop, sudo=sudo
        )
    finally:
        timer.cancel()
    took = time.monotonic() - t0
    assert isinstance(got, CommandInterrupted) and got.result.stdout == "partial\n", got
    assert took < 4, took
    assert testbed.ssh("decode", "pgrep -f 'sleep 300[.]4'", check=False).returncode == 1, "the group lived on"
    assert stop_marked(decode, mark, settle_s=0.0, grace_s=GRACE_S, scope=scope) == []
    no_scope_left(testbed)


def test_through_sudo_the_mark_check_finds_the_repros_child_and_not_itself(testbed: Testbed) -> None:
    """Through sudo the check's own shell holds its needle in SUDO_COMMAND (sudo's copy of the command
    line): matched anywhere in an environ, the check found itself, killed itself, and the trial
    failed as "connection lost". Matched as a whole entry, it finds the repro's marked child only."""
    testbed.ssh("decode", "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser")
    testbed.ssh("decode", f"printf 'orchuser ALL=(ALL) NOPASSWD: ALL\\n' > {SUDOERS} && chmod 440 {SUDOERS}")
    t = transport(testbed, "decode", user="orchuser", use_sudo=True)
    try:
        mark = leftovers.new_mark()
        t.run(
            "setsid sleep 300.828125 >/dev/null 2>&1 < /dev/null &",
            timeout=30,
            env={MARK_VAR: mark},
            stop=threading.Event(),
        )
        left = stop_marked(t, mark, settle_s=SETTLE_S, grace_s=GRACE_S)
        assert len(left) == 1 and re.fullmatch(r"pid [0-9]+ \(sleep 300\.828125\)", left[0]), left
        assert stop_marked(t, mark, settle_s=SETTLE_S, grace_s=GRACE_S) == []  # nothing: not even itself
        assert testbed.ssh("decode", "pgrep -f '^sleep 300[.]828125$'", check=False).returncode == 1, "still running"
    finally:
        t.close()
        testbed.ssh("decode", f"pkill -f '^sleep 300[.]828125$'; rm -f {SUDOERS}", check=False)


MATRIX = ssh_overlap_matrix(
    "repro-scope",
    """\
  command: "if [ ! -e FLAG ]; then touch FLAG; env -i setsid sleep 300.78125 >/dev/null 2>&1 & fi;
    echo 'CORRUPTION sessions: 0/8'"
  on: decode
  timeout: 60
""",
    before_repro="stop_after_repeated_failures: 0\n",
)


def test_a_sweep_whose_remote_repro_leaves_an_env_i_daemon_voids_the_trial_naming_it(
    testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    flag = f"/var/tmp/orch-scope-flag-{os.getpid()}"
    (tmp_path / "m.yaml").write_text(MATRIX.replace("FLAG", flag))
    argv = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd", "--out", str(tmp_path)]
    try:
        code = main([*argv, "--run-id", "scoped"])
        run = tmp_path / "scoped"
        err = capsys.readouterr().err
        assert code == 0, err
        attempts = [r for r in read_journal(run / "journal.jsonl").records if isinstance(r, TrialRecord)]
        void = attempts[0]
        assert void.failure is not None and void.failure.error == "LeftBehind", void.failure
        assert void.repro is not None and len(void.repro.left_behind) == 1
        named = re.fullmatch(r"pid ([0-9]+) \(sleep 300\.78125\)", void.repro.left_behind[0])
        assert named, void.repro.left_behind
        assert not alive(testbed, named.group(1)), "the env -i daemon outlived its trial"
        assert [t.status for t in trials_of(run)] == ["completed", "completed"]  # the retry counted
        facts = json.loads((run / "run.json").read_text())["hosts"]["decode"]
        assert facts["repro_check"].startswith("transient scope and mark (systemd 252"), facts
        assert "repro_check=transient scope and mark (systemd 252" in (run / "index.html").read_text()  # host line
        no_scope_left(testbed)
        assert snapshot(testbed, files) == before
        no_leftovers(testbed)
    finally:
        testbed.ssh("decode", f"pkill -f 'sleep 300[.]78125'; rm -f {flag}", check=False)


def test_the_cost_of_a_scope_per_trial(
    testbed: Testbed, decode: SshTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    """Median of 20 each: the repro `true` with and without its scope, and the leftover check with
    and without the scope's grep."""
    runs: dict[str, list[float]] = {"plain": [], "scoped": [], "check": [], "check+scope": []}
    for _ in range(20):
        for scoped in (False, True):
            mark = leftovers.new_mark()
            scope = unit_name(mark, "scope-test") if scoped else None
            t0 = time.perf_counter()
            decode.run("true", timeout=30, env={MARK_VAR: mark}, scope=scope, stop=threading.Event())
            runs["scoped" if scoped else "plain"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert stop_marked(decode, mark, settle_s=SETTLE_S, grace_s=GRACE_S, scope=scope) == []
            runs["check+scope" if scoped else "check"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1000 for k, v in runs.items()}
    with capsys.disabled():
        print(
            f"\n[ssh] repro `true` median of 20: {med['plain']:.1f} ms plain, {med['scoped']:.1f} ms in a scope "
            f"(+{med['scoped'] - med['plain']:.1f} ms); leftover check {med['check']:.1f} ms, "
            f"with the scope's grep {med['check+scope']:.1f} ms (+{med['check+scope'] - med['check']:.1f} ms)"
        )
    assert med["scoped"] - med["plain"] < 100  # ~10 ms measured: one D-Bus call to systemd
    no_scope_left(testbed)
