"""A repro on a host (`repro.on: ROLE`) orphaned by a kill -9 of the controller: its trial folder
records where it runs (testbed, host key, mark, scope) from before it starts until its own leftover
check ran, and resume and restore stop it there (sweep.orphans), one note per repro, in the local
repro's wording. A host that cannot be looked at is said and keeps the record. On the fakes; the
kill -9 itself is tests/remote/test_repro_orphan_ssh.py."""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import (
    REPRO_OUTPUT,
    FakeBed,
    FakeTransport,
    FakeUnit,
    Reply,
    Role,
    flag,
    make_bed,
    make_plan,
    remote_repro,
    runner_for,
)

from orchestrator.core.redact import REDACTED, Redactor
from orchestrator.edges.leftovers import KILL_ROUNDS, MARK_VAR
from orchestrator.edges.remote_leftovers import SCRIPT as LEFT_SCRIPT
from orchestrator.edges.remote_scope import PROBE, unit_name
from orchestrator.errors import TransportError
from orchestrator.store import remoterepro
from orchestrator.store.remoterepro import RemoteRepro
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.orphans import stop_orphaned_remote_repros

MARK = "0123456789abcdef"


def bed() -> FakeBed:
    return make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("D=0\n", [FakeUnit("decode-server", active=True)], after=["prefill"]),
        }
    )


def run_sweep(b: FakeBed, run_dir: Path, **options: object):  # type: ignore[no-untyped-def]
    plan = make_plan(b, {"d": flag("decode", "D")}, repro=remote_repro("decode"), stop_after_repeated_failures=0)
    return runner_for(b, plan, run_dir, **options).execute()


def checks(t: FakeTransport) -> list[list[str]]:
    """The argv of each leftover check run on `t`."""
    return [shlex.split(c.target) for c in t.calls if c.op == "run" and "orch-left" in c.target]


# ---------------------------------------------------------------- the record's life


def test_a_remote_repro_is_recorded_while_it_runs_and_forgotten_once_its_check_ran(tmp_path: Path) -> None:
    b = bed()
    decode = b.transports["decode"]
    decode.script(PROBE_ARGV, Reply(stdout="orch-scope|yes|systemd 252\n"))  # a host with scopes
    seen: list[tuple[dict[str, object], str | None]] = []

    def repro(text: str, argv: Sequence[str] | None) -> Reply:
        folder = tmp_path / "run" / "trials" / re.search(r"--trial (\d+)", text).group(1).zfill(4)  # type: ignore[union-attr]
        # this repro's own call: not the last one made on decode, which may be a check running beside it
        call = [c for c in decode.calls if c.op == "run" and c.target == text][-1]
        seen.append((json.loads((folder / "repro.remote").read_text()), call.env[MARK_VAR]))  # type: ignore[index]
        return Reply(stdout=REPRO_OUTPUT)

    decode.script(re.compile(r"^fake-repro\b"), repro)
    result = run_sweep(b, tmp_path / "run")
    assert (result.completed, result.failed) == (2, 0), [r.failure for r in result.records]
    assert len(seen) == 2
    for record, mark in seen:
        assert record == {
            "testbed": b.deployment.testbed.name,
            "host": "decode",
            "mark": mark,
            "scope": unit_name(str(mark), "fake-run"),
        }
    assert not list((tmp_path / "run").glob("trials/*/repro.remote"))  # each check ran: nothing kept


def test_a_host_whose_check_fails_keeps_the_record_for_resume_and_restore(tmp_path: Path) -> None:
    b = bed()
    b.transports["decode"].script(("sh", "-c", LEFT_SCRIPT), Reply(3, stderr="orch-left: base64 not found\n"))
    result = run_sweep(b, tmp_path / "run", infra_attempts=1)
    assert result.failed == 2
    kept = sorted(p.parent.name for p in (tmp_path / "run").glob("trials/*/repro.remote"))
    assert kept == ["0000", "0001"]  # what each left is unknown: resume and restore look again


def test_a_repro_cut_short_by_a_lost_host_is_forgotten_once_its_check_ran(tmp_path: Path) -> None:
    b = bed()

    def lost(text: str, argv: Sequence[str] | None) -> Reply:
        raise TransportError("decode", "connection lost while running the repro")

    b.transports["decode"].script(re.compile(r"^fake-repro --trial 0\b"), lost)
    result = run_sweep(b, tmp_path / "run", infra_attempts=1)
    assert result.failed == 1 and result.completed == 1
    assert len(checks(b.transports["decode"])) == 2  # the lost repro's check ran too
    assert not list((tmp_path / "run").glob("trials/*/repro.remote"))


# ---------------------------------------------------------------- resume and restore's stop

PROBE_ARGV = ("sh", "-c", PROBE)


def recorded_in(run_dir: Path, trial: str, repro: RemoteRepro) -> Path:
    folder = RunDir(run_dir).trials / trial
    folder.mkdir(parents=True)
    t = RunDir(run_dir).trial(int(trial))
    remoterepro.record(t, repro)
    assert remoterepro.recorded(t) == repro
    return t.repro_remote


@pytest.mark.parametrize("scope", [unit_name(MARK, "r1"), f"orch-repro-{MARK}.scope"], ids=["run-mark", "mark"])
def test_an_orphaned_remote_repro_is_stopped_on_its_host_with_one_note(scope: str, tmp_path: Path) -> None:
    """A record names its scope by run and mark, or, written before scope names held the run, by
    the mark alone: either is the repro's own unit."""
    b = bed()
    decode = b.transports["decode"]
    record = recorded_in(tmp_path, "0003", RemoteRepro(b.deployment.testbed.name, "decode", MARK, scope))
    decode.script(("sh", "-c", LEFT_SCRIPT), Reply(stdout="left|4242|c2xlZXAAMzAwAA==\n"))  # sleep 300
    notes = stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor())
    label = b.deployment.hosts["decode"].host.label
    assert notes == [
        f"trial 0003: stopped its repro on {label} (pid 4242 (sleep 300)), left running by a controller that was killed"
    ]
    [argv] = checks(decode)
    assert f"{MARK_VAR}={MARK}" in argv and argv[-1] == scope  # its mark and its scope, no settle time
    assert not checks(b.transports["prefill"])
    assert not record.exists()
    assert stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor()) == []  # once


def test_a_secret_on_a_stopped_command_line_is_masked_in_the_note(tmp_path: Path) -> None:
    b = bed()
    recorded_in(tmp_path, "0005", RemoteRepro(b.deployment.testbed.name, "decode", MARK, None))
    cmdline = b"loadgen\0--rate\0005\0BENCH_TOKEN=hunter22xyz\0"
    b.transports["decode"].script(
        ("sh", "-c", LEFT_SCRIPT), Reply(stdout=f"left|77|{base64.b64encode(cmdline).decode()}\n")
    )
    [note] = stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor.for_names(["BENCH_TOKEN"]))
    assert "hunter22xyz" not in note and f"BENCH_TOKEN={REDACTED}" in note, note
    assert note.startswith("trial 0005: stopped its repro on ") and "pid 77 (loadgen --rate 5 BENCH_TOKEN=" in note


def test_a_recorded_repro_that_ended_by_itself_is_forgotten_without_a_note(tmp_path: Path) -> None:
    b = bed()
    record = recorded_in(tmp_path, "0000", RemoteRepro(b.deployment.testbed.name, "decode", MARK, None))
    assert stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor()) == []
    [argv] = checks(b.transports["decode"])
    assert argv[-1] == str(KILL_ROUNDS)  # no scope: the argv ends with the kill rounds
    assert not record.exists()


def test_a_host_that_cannot_be_reached_is_said_and_keeps_the_record(tmp_path: Path) -> None:
    b = bed()
    record = recorded_in(tmp_path, "0001", RemoteRepro(b.deployment.testbed.name, "decode", MARK, None))

    def down(text: str, argv: Sequence[str] | None) -> Reply:
        raise TransportError("decode (10.0.0.2:22)", "connection lost")

    b.transports["decode"].script(("sh", "-c", LEFT_SCRIPT), down)
    [note] = stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor())
    label = b.deployment.hosts["decode"].host.label
    assert note.startswith(
        f"trial 0001: cannot stop its repro on {label}, left running by a controller that was killed: "
    )
    assert "connection lost" in note and note.endswith("(the next resume or restore tries again)")
    assert record.exists()
    b.transports["decode"].script(("sh", "-c", LEFT_SCRIPT), Reply())  # back: the next try forgets it
    assert stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor()) == []
    assert not record.exists()


def test_another_testbeds_repro_is_left_to_its_own_restore(tmp_path: Path) -> None:
    b = bed()
    record = recorded_in(tmp_path, "0002", RemoteRepro("other-testbed", "decode", MARK, None))
    assert stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor()) == []
    assert not checks(b.transports["decode"]) and record.exists()


def test_a_record_not_written_by_orch_stops_nothing(tmp_path: Path) -> None:
    """A scope other than the mark's own unit (a hand-edited record) would make orch kill another
    unit: such a record is not trusted, and dropped."""
    b = bed()
    record = recorded_in(tmp_path, "0004", RemoteRepro(b.deployment.testbed.name, "decode", MARK, None))
    for text in (
        json.dumps({"testbed": b.deployment.testbed.name, "host": "decode", "mark": MARK, "scope": "sshd.service"}),
        *(
            json.dumps({"testbed": b.deployment.testbed.name, "host": "decode", "mark": MARK, "scope": scope})
            for scope in (f"orch-repro-{'0' * 12}-{'f' * 16}.scope", f"orch-repro-{'0' * 11}-{MARK}.scope")
        ),
        json.dumps({"testbed": b.deployment.testbed.name, "host": "decode", "mark": "x; reboot", "scope": None}),
        "not json",
    ):
        record.write_text(text)
        assert stop_orphaned_remote_repros(tmp_path, [b.deployment], Redactor()) == []
        assert not record.exists()
    assert not checks(b.transports["decode"])
