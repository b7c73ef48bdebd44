"""SystemdManager against real systemd 252 hosts running the simulator (the testbed)."""

from __future__ import annotations

import shlex
import time

import pytest
from testbed.fixture import Testbed
from testbed.helpers import http_get, restored, server_flags, transport, wait_for, wait_healthy

from orchestrator.edges.services import log_was_cut
from orchestrator.edges.services.systemd import SystemdManager
from orchestrator.edges.transport import Result
from orchestrator.errors import FileChanged, ServiceError, TransportError

pytestmark = pytest.mark.testbed

DECODE, DECODE_SHELL, PREFILL = "sglang-dsv4-decode", "sglang-dsv4-decode-shell", "sglang-dsv4-prefill"


class CountingTransport:
    """Counts round trips (wraps a real transport)."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner, self.host, self.calls = inner, inner.host, 0

    def run(self, command, **kw) -> Result:  # noqa: ANN001
        self.calls += 1
        return self.inner.run(command, **kw)


def sub(tb: Testbed, host: str, path: str, sed: str) -> None:
    tb.ssh(host, f"sed -i {sed!r} {path}")


def single_line(err: ServiceError, host: str, unit: str) -> str:
    text = str(err)
    assert "\n" not in text and text.startswith(f"{host}: unit {unit}: "), text
    return text


def test_state_exists_and_host_clock(testbed: Testbed) -> None:
    t = transport(testbed, "decode")
    m = SystemdManager(t, "decode")
    st = m.state(DECODE)
    assert (st.active_state, st.sub_state, st.result) == ("active", "running", "success")
    pid = int(testbed.ssh("decode", f"systemctl show -p MainPID --value {DECODE}").stdout)
    assert st.main_pid == pid and st.is_active
    assert st.started_at is not None and 0 < m.now() - st.started_at < 3600
    assert m.unusable(DECODE) is None and m.unusable("sglang-nope") == "not found"
    t.close()


def test_restart_rereads_environment_file(testbed: Testbed) -> None:
    with restored(testbed, "decode", [DECODE], ["/etc/sglang/decode.env"]) as t:
        m = SystemdManager(t, "decode")
        assert m.environ(DECODE)["SGLANG_DSV4_BF16_INDEX_K"] == "1"
        old_pid = m.state(DECODE).main_pid
        sub(testbed, "decode", "/etc/sglang/decode.env", "s/^SGLANG_DSV4_BF16_INDEX_K=1/SGLANG_DSV4_BF16_INDEX_K=0/")
        since = m.restart(DECODE)
        st = m.state(DECODE)
        assert st.main_pid != old_pid and st.started_at is not None and st.started_at >= since
        env = m.environ(DECODE)
        assert env["SGLANG_DSV4_BF16_INDEX_K"] == "0"
        assert env["SIM_WARMUP_S"] == "0.3" and env["SGLANG_EXTRA_ARGS"] == ""  # systemd drops the quotes
        # the server agrees (independent evidence: what the process parsed)
        assert server_flags(testbed.url("decode"))["bf16_index_k"] is False
        m.check_alive(DECODE, since)


def test_export_line_is_ignored_by_systemd(testbed: Testbed) -> None:
    """The mismatch the runner must catch: the file says 0, the live process never got it."""
    with restored(testbed, "decode", [DECODE], ["/etc/sglang/decode.env"]) as t:
        m = SystemdManager(t, "decode")
        sub(
            testbed,
            "decode",
            "/etc/sglang/decode.env",
            "s/^SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1/export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0/",
        )
        since = m.restart(DECODE)
        env = m.environ(DECODE)
        assert env is not None and "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP" not in env
        assert env["SGLANG_DSV4_BF16_INDEX_K"] == "1"  # the other lines still count
        assert server_flags(testbed.url("decode"))["multi_stream_overlap"] is True  # default: ON
        wait_for(
            lambda: "Ignoring invalid environment assignment" in m.logs_since(DECODE, since - 1),
            5,
            "systemd's warning in the journal",
        )


def test_shell_dialect_unit_gets_export_lines(testbed: Testbed) -> None:
    with restored(testbed, "decode", [DECODE_SHELL], ["/etc/sglang/decode-shell.env"]) as t:
        m = SystemdManager(t, "decode")
        sub(
            testbed,
            "decode",
            "/etc/sglang/decode-shell.env",
            "s/^export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1/export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0/",
        )
        m.restart(DECODE_SHELL)
        env = m.environ(DECODE_SHELL)
        assert env["SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"] == "0"
        url = testbed.url("decode", DECODE_SHELL)
        wait_healthy(url + "/health")
        assert server_flags(url)["multi_stream_overlap"] is False


def test_environ_follows_a_wrapper_shell_to_its_child(testbed: Testbed) -> None:
    """A wrapper that does not exec stays MainPID; the server is its child."""
    unit = "orch-wrapper-test"
    testbed.ssh(
        "decode",
        f"systemd-run -q --unit={unit} -p EnvironmentFile=/etc/sglang/decode.env "
        "/bin/bash -c 'export WRAPPED=yes; sleep 300; true'",
    )
    t = transport(testbed, "decode")
    try:
        m = SystemdManager(t, "decode")
        main = m.state(unit).main_pid
        assert testbed.ssh("decode", f"cat /proc/{main}/comm").stdout.strip() == "bash"
        env = wait_for_env(m, unit)
        assert env["WRAPPED"] == "yes" and env["SGLANG_DSV4_BF16_INDEX_K"] == "1"
        main_env = testbed.ssh("decode", f"tr '\\0' '\\n' < /proc/{main}/environ").stdout
        assert "WRAPPED" not in main_env  # so it really came from the child
    finally:
        testbed.ssh("decode", f"systemctl stop {unit}", check=False)
        t.close()
    assert m.environ("sglang-nope") is None  # no process: None, not an error


def wait_for_env(m: SystemdManager, unit: str) -> dict[str, str]:
    box: list[dict[str, str]] = []

    def got() -> bool:
        env = m.environ(unit)
        if env and "WRAPPED" in env:
            box.append(env)
        return bool(box)

    wait_for(got, 5, "the wrapped child's environment")
    return box[0]


def test_crash_loop_is_detected_quickly_with_the_journal_tail(testbed: Testbed) -> None:
    with restored(testbed, "prefill", [PREFILL], ["/etc/sglang/prefill.env"]) as t:
        m = SystemdManager(t, "prefill")
        testbed.ssh("prefill", "echo SIM_FAIL_START=1 >> /etc/sglang/prefill.env")
        t_host = m.now()
        t0 = time.monotonic()
        with pytest.raises(ServiceError) as exc:
            since = m.restart(PREFILL)  # may already fail if the process died before the job ended
            while time.monotonic() - t0 < 5:
                m.check_alive(PREFILL, since)
                time.sleep(0.02)
        detected = time.monotonic() - t0
        text = single_line(exc.value, "prefill", PREFILL)
        assert "crash-looping" in text or "failed" in text
        assert detected < 2.0
        assert f"{PREFILL}.service" in exc.value.detail  # the journal tail came with the error
        # the server's own last words are there too (journald may lag a moment behind systemd)
        wait_for(lambda: "SIM_FAIL_START is set" in m.logs_since(PREFILL, t_host), 5, "the fatal line")
        print(f"crash loop detected after {detected:.2f} s")


def test_start_limit_hit_is_detected_and_cleared(testbed: Testbed) -> None:
    with restored(testbed, "prefill", [PREFILL], []) as t:
        m = SystemdManager(t, "prefill")
        before = m.now()
        # what a fast sweep without orch does: restart back to back until systemd refuses
        out = testbed.ssh(
            "prefill",
            f"for i in 1 2 3 4 5 6 7; do systemctl restart {PREFILL} || break; done; "
            f"systemctl show -p Result --value {PREFILL}",
            check=False,
        ).stdout
        assert out.strip().endswith("start-limit-hit")
        assert m.state(PREFILL).result == "start-limit-hit"
        with pytest.raises(ServiceError) as exc:
            m.check_alive(PREFILL, before)
        assert "start limit" in single_line(exc.value, "prefill", PREFILL)
        since = m.restart(PREFILL)  # reset-failed first: no waiting out the 10 s interval
        assert m.state(PREFILL).active_state == "active"
        wait_healthy(testbed.url("prefill") + "/health")
        m.check_alive(PREFILL, since)


def test_back_to_back_restarts_never_trip_the_start_limit(testbed: Testbed) -> None:
    with restored(testbed, "prefill", [PREFILL], []) as t:
        m = SystemdManager(t, "prefill")
        for _ in range(7):  # > StartLimitBurst=5 within 10 s
            since = m.restart(PREFILL)
        st = m.state(PREFILL)
        assert (st.active_state, st.result, st.n_restarts) == ("active", "success", 0)
        m.check_alive(PREFILL, since)


def test_restart_many_is_one_round_trip_and_restarts_both(testbed: Testbed) -> None:
    t = transport(testbed, "decode")
    counting = CountingTransport(t)
    m = SystemdManager(counting, "decode")  # type: ignore[arg-type]
    before = [s.state.main_pid for s in m.show([DECODE, DECODE_SHELL])]
    counting.calls = 0
    t0 = time.perf_counter()
    m.restart_many([DECODE, DECODE_SHELL])
    elapsed = time.perf_counter() - t0
    assert counting.calls == 1
    after = [s.state.main_pid for s in m.show([DECODE, DECODE_SHELL])]
    assert all(a != b and a for a, b in zip(after, before, strict=True))
    wait_healthy(testbed.url("decode") + "/health")
    wait_healthy(testbed.url("decode", DECODE_SHELL) + "/health")
    print(f"restart_many of 2 units: {elapsed * 1000:.0f} ms")
    t.close()


def test_logs_since_a_restart(testbed: Testbed) -> None:
    t = transport(testbed, "decode")
    m = SystemdManager(t, "decode")
    m.restart(DECODE)
    wait_healthy(testbed.url("decode") + "/health")
    since = m.restart(DECODE)
    wait_healthy(testbed.url("decode") + "/health")
    logs = wait_logs(m, since)
    assert logs.count(f"Started {DECODE}.service") == 1  # the earlier restart is not in it
    assert "listening on 0.0.0.0:30002" in logs
    assert all(line[:4].isdigit() for line in logs.splitlines())  # short-iso, one entry a line
    tail = cut_tail(m.logs_since(DECODE, since, max_bytes=120))
    assert 0 < len(tail.encode()) <= 120 and logs.endswith(tail)
    t.close()


def cut_tail(text: str) -> str:
    """A log read past max_bytes: its first line says it was cut (a collector counting over it must
    know, edges.services.log_was_cut), then the whole lines of the end; those lines."""
    assert log_was_cut(text), text
    return text.split("\n", 1)[1]


def test_restart_with_file_writes_then_restarts_in_one_command(testbed: Testbed) -> None:
    """A trial's one env file goes with its unit's restart (SshTransport.write_then_run): the new
    process has the new value; a write that fails restarts nothing and says why."""
    env = "/etc/sglang/decode.env"
    with restored(testbed, "decode", [DECODE], [env]) as t:
        m = SystemdManager(t, "decode")
        text = testbed.ssh("decode", f"cat {env}").stdout
        new = text.replace("SGLANG_DSV4_BF16_INDEX_K=1", "SGLANG_DSV4_BF16_INDEX_K=0").encode()
        assert new != text.encode()
        before = m.state(DECODE).main_pid
        since = m.restart_with_file(DECODE, t, env, new)
        assert 0 < m.now() - since < 60 and m.state(DECODE).main_pid != before
        assert testbed.ssh("decode", f"cat {env}").stdout.encode() == new
        assert m.environ(DECODE)["SGLANG_DSV4_BF16_INDEX_K"] == "0"
        wait_healthy(testbed.url("decode") + "/health")
        pid = m.state(DECODE).main_pid
        testbed.ssh("decode", f"printf 'MY_NEW_FLAG=1\\n' >> {env}")  # someone's line, since orch wrote `new`
        with pytest.raises(FileChanged):  # told what orch wrote there: neither written over nor restarted
            m.restart_with_file(DECODE, t, env, text.encode(), expect=new)
        assert testbed.ssh("decode", f"cat {env}").stdout.encode() == new + b"MY_NEW_FLAG=1\n"
        assert m.state(DECODE).main_pid == pid
        nowhere = "/etc/sglang/no-such-dir/decode.env"
        with pytest.raises(TransportError) as info:
            m.restart_with_file(DECODE, t, nowhere, b"X=1\n")
        with pytest.raises(TransportError) as plain:
            t.write_bytes_atomic(nowhere, b"X=1\n")
        assert str(info.value) == str(plain.value) and f"cannot write {nowhere}: " in str(info.value)  # as ever
        assert m.state(DECODE).main_pid == pid  # not restarted
        run = t.write_then_run("/tmp/orch-wtr.txt", b"hello\n", "cat /tmp/orch-wtr.txt; exit 7", timeout=10)
        assert (run.exit_code, run.stdout) == (7, "hello\n")


def test_logs_and_ids_in_one_round_trip(testbed: Testbed) -> None:
    """After the repro, the log collection also reads the units' ids (the identity check): one
    command gives what logs_since and unit_ids give apart."""
    t = CountingTransport(transport(testbed, "decode"))
    m = SystemdManager(t, "decode")  # type: ignore[arg-type]
    since = m.restart(DECODE)
    wait_healthy(testbed.url("decode") + "/health")
    wait_logs(m, since)
    t.calls = 0
    logs, ids = m.logs_and_ids([DECODE, DECODE_SHELL], since)
    assert t.calls == 1
    assert "] ready" in logs[DECODE] and m.logs_since(DECODE, since).startswith(logs[DECODE])
    assert m.logs_since(DECODE_SHELL, since).startswith(logs[DECODE_SHELL])
    assert ids == m.unit_ids([DECODE, DECODE_SHELL])
    assert ids[DECODE].main_pid == int(testbed.ssh("decode", f"systemctl show -p MainPID --value {DECODE}").stdout)
    tails, _ = m.logs_and_ids([DECODE], since, max_bytes=120)
    tail = cut_tail(tails[DECODE])
    assert 0 < len(tail.encode()) <= 120 and logs[DECODE].endswith(tail)
    t.inner.close()


def wait_logs(m: SystemdManager, since: float) -> str:
    box = [""]

    def ready() -> bool:
        box[0] = m.logs_since(DECODE, since)
        return "] ready" in box[0]

    wait_for(ready, 5, "the server's ready line in the journal")
    return box[0]


def test_unknown_unit_errors_name_host_and_unit(testbed: Testbed) -> None:
    t = transport(testbed, "router")
    m = SystemdManager(t, "router")
    with pytest.raises(ServiceError) as exc:
        m.restart("sglang-nope")
    assert "not found on the host" in single_line(exc.value, "router", "sglang-nope")
    with pytest.raises(ServiceError) as exc:
        m.check_alive("sglang-nope", m.now())
    assert "not found" in single_line(exc.value, "router", "sglang-nope")
    with pytest.raises(ServiceError):
        m.stop("sglang-nope")
    t.close()


def test_stop_then_check_alive_reports_not_running(testbed: Testbed) -> None:
    with restored(testbed, "router", ["sglang-router-shell"], []) as t:
        m = SystemdManager(t, "router")
        since = m.now()
        m.stop("sglang-router-shell")
        assert m.state("sglang-router-shell").active_state == "inactive"
        assert http_get(testbed.url("router", "sglang-router-shell") + "/health")[0] == 0
        with pytest.raises(ServiceError) as exc:
            m.check_alive("sglang-router-shell", since)
        assert "not running" in single_line(exc.value, "router", "sglang-router-shell")


# the values core.argsvar.unreachable judges for the systemd dialect (tests/unit/test_flag_value_reach.py)
FLAG_VALUES = ["64", "64,128", "64 128", "tab\tin", "it's", 'say "hi"', "a\\b", "a*b", "$HOME", "~/x"]


def test_a_flag_value_reaches_the_server_whole_exactly_when_orch_accepts_it(testbed: Testbed) -> None:
    """What the rule for a flag factor's value rests on, on real systemd 252: orch writes the flag
    into SGLANG_EXTRA_ARGS (quoted where the value needs it), the unit's ExecStart expands
    `$SGLANG_EXTRA_ARGS`, and the server gets the value as one argument exactly when orch accepts
    it for the systemd dialect ('64 128' whole, quotes honoured; a backslash read as an escape and
    dropped: refused before any host is touched)."""
    from orchestrator.core.argsvar import ArgsEdit, FlagSetting, unreachable
    from orchestrator.core.envfile import edit

    path, out, unit = "/etc/sglang/flag-reach.env", "/etc/sglang/flag-reach.out", "orch-flag-reach"
    try:
        for value in FLAG_VALUES:
            written = ArgsEdit((FlagSetting("--cuda-graph-max-bs", True, value),)).apply("--tp 8")
            text = edit("", {"SGLANG_EXTRA_ARGS": written}, "systemd")
            testbed.ssh("decode", f"printf %s {shlex.quote(text)} > {path}")
            testbed.ssh(  # no --wait/--pipe: those need D-Bus, which the testbed hosts do not run
                "decode",
                f"rm -f {out}; systemd-run -q --collect --unit={unit} -p EnvironmentFile={path} "
                f"-p StandardOutput=file:{out} /usr/bin/printf '<%s>' '$SGLANG_EXTRA_ARGS'",
            )
            wait_for(lambda: testbed.ssh("decode", f"test -s {out}", check=False).returncode == 0, 10, "the output")
            got = testbed.ssh("decode", f"cat {out}").stdout
            whole = got == f"<--tp><8><--cuda-graph-max-bs><{value}>"
            assert whole == (unreachable(value, "systemd") is None), (value, text, got)
    finally:
        testbed.ssh("decode", f"rm -f {path} {out}; systemctl reset-failed {unit} 2>/dev/null", check=False)
