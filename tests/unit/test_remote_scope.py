"""A repro on a host runs in a transient systemd scope of its own where orch may make one
(edges.remote_scope): asked of the host once a session, said as its `repro_check` host fact, and
the leftover check then also looks in the scope (edges.remote_leftovers). Where it may not, the
mark check runs exactly as before. The runner's side on the fakes; the transports' command lines;
the probe's answer (PURE)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeBed, FakeTransport, FakeUnit, Reply, Role, flag, make_bed, make_plan, remote_repro, runner_for

from orchestrator.edges.leftovers import MARK_VAR
from orchestrator.edges.remote_leftovers import SCRIPT, check_argv
from orchestrator.edges.remote_scope import PROBE, Scoping, parse_probe, run_tag, unit_name
from orchestrator.edges.transport import scope_argv
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.edges.transport.ssh import command_line

YES = Reply(stdout="Welcome to decode\norch-scope|yes|systemd 252 (252.38-1~deb12u1)\n")
NO_ROOT = Reply(stdout="orch-scope|no|not root (ssh user deploy, no sudo)\n")


def bed(probe: Reply) -> FakeBed:
    made = make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("D=0\n", [FakeUnit("decode-server", active=True)], after=["prefill"]),
        }
    )
    made.transports["decode"].script(("sh", "-c", PROBE), probe)
    return made


def sweep(b: FakeBed, tmp_path: Path, found: dict[str, dict[str, str]] | None = None) -> Any:
    """Two trials; `found` gets the host facts the runner hands to run.json."""
    plan = make_plan(b, {"d": flag("decode", "D")}, repro=remote_repro("decode"), stop_after_repeated_failures=0)
    facts = found if found is not None else {}
    return runner_for(
        b, plan, tmp_path / "run", infra_attempts=1, hosts_found=lambda testbed, f: facts.update(f)
    ).execute()


def calls(t: FakeTransport, what: str) -> list:  # type: ignore[type-arg]
    return [c for c in t.calls if c.op == "run" and what in c.target]


def check_args(target: str) -> list[str]:
    """The check's arguments after the script (the mark onwards)."""
    argv = shlex.split(target)
    return argv[argv.index("orch-left") + 1 :]


def host_fact(b: FakeBed, tmp_path: Path) -> str:
    """The repro host's `repro_check` fact, as the runner hands it to run.json."""
    found: dict[str, dict[str, str]] = {}
    result = sweep(b, tmp_path, found)
    assert (result.completed, result.failed) == (2, 0)
    assert "repro_check" not in found.get("prefill", {})  # only the repro's host is asked
    return found["decode"]["repro_check"]


def test_a_host_that_allows_a_scope_runs_each_repro_in_its_own_and_the_check_looks_in_it(tmp_path: Path) -> None:
    b = bed(YES)
    decode = b.transports["decode"]
    fact = host_fact(b, tmp_path)
    assert len(calls(decode, "orch-scope")) == 1  # asked once a session, before the first repro
    repros = calls(decode, "fake-repro")
    assert len(repros) == 2
    for repro, check in zip(repros, calls(decode, "orch-left"), strict=True):
        mark = (repro.env or {})[MARK_VAR]
        tag = run_tag("fake-run")  # runner_for's run id
        assert repro.scope == unit_name(mark, "fake-run") == f"orch-repro-{tag}-{mark}.scope"  # its run's and mark's
        assert repro.target.startswith("fake-repro")  # the command text stays the user's
        assert check_args(check.target)[0] == f"{MARK_VAR}={mark}"
        assert check_args(check.target)[-1] == repro.scope  # the check looks in that scope too
    assert repros[0].scope != repros[1].scope
    assert fact == "transient scope and mark (systemd 252 (252.38-1~deb12u1))"


def test_where_orch_is_not_root_the_check_is_todays_mark_check_and_the_host_fact_says_why(tmp_path: Path) -> None:
    b = bed(NO_ROOT)
    decode = b.transports["decode"]
    fact = host_fact(b, tmp_path)
    repros = calls(decode, "fake-repro")
    assert [r.scope for r in repros] == [None, None]
    for repro, check in zip(repros, calls(decode, "orch-left"), strict=True):
        mark = (repro.env or {})[MARK_VAR]
        argv = shlex.split(check.target)
        assert argv == check_argv(mark, settle_s=0.5, grace_s=2.0)  # exactly today's six arguments
        assert len(check_args(check.target)) == 6
    assert fact == (
        "mark only (not root (ssh user deploy, no sudo)): a process that clears its environment is not found"
    )


def test_an_interrupted_repro_in_a_scope_has_its_scope_checked_at_once(tmp_path: Path) -> None:
    b = bed(YES)
    decode = b.transports["decode"]
    plan = make_plan(b, {"d": flag("decode", "D")}, repro=remote_repro("decode"))
    runner = runner_for(b, plan, tmp_path / "run")

    def ctrl_c(text: str, argv: object) -> Reply:
        runner.stopping.set()
        return Reply(until_stopped=True, stdout="partial\n")

    decode.script(re.compile(r"^fake-repro --trial 0\b"), ctrl_c, times=1)
    decode.script(("sh", "-c", SCRIPT), Reply(stdout="left|4242|ZW52AC1pAHNsZWVwADMwMAA=\n"))
    assert runner.execute().interrupted
    (repro,) = calls(decode, "fake-repro")
    (check,) = calls(decode, "orch-left")
    assert repro.scope is not None and check_args(check.target)[-1] == repro.scope
    assert check_args(check.target)[1] == "0"  # no settle steps: the sweep is stopping


def test_a_timed_out_repro_in_a_scope_names_what_its_scope_still_held(tmp_path: Path) -> None:
    b = bed(YES)
    decode = b.transports["decode"]
    decode.script(re.compile(r"^fake-repro --trial 0\b"), stdout="partial\n", timeout=True)
    decode.script(("sh", "-c", SCRIPT), Reply(stdout="left|77|c2xlZXAAMzAwAA==\n"), times=1)  # sleep 300
    result = sweep(b, tmp_path)
    timed_out = next(r for r in result.records if r.trial == 0)
    assert timed_out.repro.left_behind == ["pid 77 (sleep 300)"]
    assert timed_out.failure.message.endswith("; it also left 1 process running: pid 77 (sleep 300) (stopped)")
    assert calls(decode, "fake-repro")[0].scope is not None


# ---------------------------------------------------------------- the transports' command lines


def test_the_ssh_line_puts_the_scope_inside_sudo_and_the_pid_line_and_before_timeout() -> None:
    """The announced pid execs systemd-run, which execs `timeout` in place: that pid still leads
    the process group the stop kills, and `timeout` with all it starts is in the scope."""
    unit = unit_name("0123456789abcdef", "r1")
    line = command_line("loadgen &", sudo=True, timeout=30, stoppable=True, env={MARK_VAR: "m"}, scope=unit)
    argv = shlex.split(line)
    run = argv.index("systemd-run")
    assert argv[:3] == ["sudo", "-n", "--"] and argv[3:5] == ["sh", "-c"] and argv[6] == "orch-run"
    assert (
        argv[run : run + 6]
        == scope_argv(unit)
        == [
            "systemd-run",
            "--scope",
            f"--unit={unit}",
            "--collect",
            "--quiet",
            "--",
        ]
    )
    assert run == 7 and argv[run + 6] == "timeout" and argv.index("env") > run
    assert argv[-2:] == ["-c", "loadgen &"]
    without = command_line("loadgen &", sudo=True, timeout=30, stoppable=True, env={MARK_VAR: "m"})
    assert "systemd-run" not in without and shlex.split(without) == argv[:run] + argv[run + 6 :]


def test_a_scope_name_that_is_no_unit_name_is_refused() -> None:
    for bad in ("--user", "orch repro.scope", "x;reboot.scope", "orch-repro-1.service", ""):
        try:
            scope_argv(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was taken for a scope's name")


@pytest.mark.process
def test_the_local_transport_runs_the_command_through_systemd_run_keeping_its_output_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in systemd-run on PATH records its arguments and execs what follows `--`, as the
    real one does once the scope exists."""
    fake = tmp_path / "bin" / "systemd-run"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\nwhile [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    unit = unit_name("00112233445566aa", "r1")
    res = LocalTransport("decode").run("echo out; echo err >&2; exit 3", check=False, scope=unit)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert res.command == "echo out; echo err >&2; exit 3"
    assert ["systemd-run", *(fake.parent / "args").read_text().split()[:5]] == scope_argv(unit)  # its own name is $0


# ---------------------------------------------------------------- pure: the probe's answer


def test_the_probes_answer_is_read_past_a_login_scripts_chatter() -> None:
    assert parse_probe("motd\norch-scope|yes|systemd 252 (252.38-1~deb12u1)\n") == Scoping(
        True, "systemd 252 (252.38-1~deb12u1)"
    )
    assert parse_probe("orch-scope|no|systemd is not PID 1\n") == Scoping(False, "systemd is not PID 1")
    refused = "orch-scope|no|systemd-run refused: Failed to connect to bus: No such file or directory\n"
    assert parse_probe(refused).usable is False
    assert parse_probe(refused).why == "systemd-run refused: Failed to connect to bus: No such file or directory"
    assert parse_probe("") == Scoping(False, "the host gave no answer")
    assert parse_probe("orch-scope|maybe|x\norch-scopes|yes|x\n") == Scoping(False, "the host gave no answer")
    assert len(parse_probe("orch-scope|no|" + "x" * 999).why) == 160


def test_a_host_that_cannot_be_asked_gets_the_mark_check(tmp_path: Path) -> None:
    b = bed(Reply(exit_code=255, stderr="sh: 1: Syntax error\n"))
    fact = host_fact(b, tmp_path)
    assert [c.scope for c in calls(b.transports["decode"], "fake-repro")] == [None, None]
    assert fact.startswith("mark only (cannot ask: exit code 255)")
