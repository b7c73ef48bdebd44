"""Runner behaviour on the fakes (tests/fakes.py): retries, restore, verification, interrupts,
restart waves, fail-fast and deadlines, with no process and no socket (the controller-side
repro test starts one `python -c`). The real edges are proven by the sim and testbed tiers;
these pin what the runner decides, in well under a second each."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import (
    METRICS,
    REPRO_OUTPUT,
    FakeBed,
    FakeUnit,
    Reply,
    Role,
    flag,
    make_bed,
    make_plan,
    remote_repro,
    runner_for,
)

from orchestrator.core.envfile import read_values
from orchestrator.core.steps import Plan
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import LockError
from orchestrator.store.rundir import BackupDir
from orchestrator.sweep import phases
from orchestrator.sweep.hosts import HostGuard, host_backup_path
from orchestrator.sweep.progress import QuietProgress
from orchestrator.sweep.runner import RunResult

RUN_ID = "fake-run"


def two_roles(**decode: Any) -> FakeBed:
    """prefill (running before the run) and decode (stopped before the run, started by orch)."""
    return make_bed(
        {
            "prefill": Role("PREFILL_FLAG=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("# decode\nDECODE_FLAG=0\n", [FakeUnit("decode-server", **decode)], after=["prefill"]),
        }
    )


def decode_plan(bed: FakeBed, replicates: int = 2, **matrix: Any) -> Plan:
    return make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=replicates, **matrix)


def assert_restored(bed: FakeBed, before: dict[str, bool]) -> None:
    """Env files byte-identical, units in their original state, host backups and locks gone."""
    for role in bed.deployment.hosts:
        assert bed.file(role) == bed.originals[role], role
        assert set(bed.transports[role].files) == {bed.env_file(role)}, role  # no backup, no lock left
    assert bed.states() == before
    assert bed.refused() == []


def test_a_clean_sweep_runs_every_trial_extracts_metrics_and_restores(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()
    result = runner_for(bed, decode_plan(bed), tmp_path / "run").execute()
    assert isinstance(result, RunResult)
    assert (result.completed, result.failed, result.interrupted) == (4, 0, False)
    for record in result.records:
        assert record.status == "completed"
        assert record.metrics["score"].value == 0.5
        assert (record.metrics["events"].k, record.metrics["events"].n) == (3, 10)
    assert_restored(bed, before)


@pytest.mark.process
def test_the_controller_repro_is_run_and_its_metrics_extracted(tmp_path: Path) -> None:
    bed = two_roles()
    command = f"{sys.executable} -c \"print('score=0.25 events=1/4')\""
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, repro={"command": command, "metrics": METRICS})
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert result.completed == 2
    for record in result.records:
        assert record.metrics["score"].value == 0.25
        assert (record.metrics["events"].k, record.metrics["events"].n) == (1, 4)
        assert (tmp_path / "run" / record.repro.stdout_path).read_text() == "score=0.25 events=1/4\n"


def test_an_infrastructure_failure_is_retried_then_succeeds(tmp_path: Path) -> None:
    bed = two_roles(fail_starts=1)  # the first start of decode fails, the second works
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run", infra_attempts=2).execute()
    first = result.records[0]
    assert (first.status, first.attempt) == ("completed", 2)
    assert bed.managers["decode"].restarts()[:2] == ["decode-server", "decode-server"]


def test_an_infrastructure_failure_is_recorded_failed_after_infra_attempts(tmp_path: Path) -> None:
    bed = two_roles(fail_starts=10**6)
    before = bed.states()
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run", infra_attempts=3).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert (record.status, record.attempt) == ("failed", 3)
        assert record.failure is not None and record.failure.kind == "infrastructure"
        assert record.failure.error == "ServiceError" and "decode-server" in record.failure.message
        assert record.metrics == {}
    assert len(bed.managers["decode"].restarts()) >= 6  # 3 attempts x 2 trials
    bed.unit("decode").fail_starts = 0
    assert_restored(bed, before)


def test_restore_after_a_failed_sweep_puts_files_and_units_back(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()
    bed.transports["prefill"].script("fake-repro --trial 2", exit_code=3, stderr="boom\n")
    plan = make_plan(bed, {"p": flag("prefill", "PREFILL_FLAG"), "d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run").execute()
    failed = [r for r in result.records if r.status == "failed"]
    assert len(failed) == 1 and failed[0].failure.kind == "workload"
    assert "exited with code 3" in failed[0].failure.message
    assert result.not_restored == []
    assert_restored(bed, before)
    assert bed.managers["prefill"].restarts()[-1] == "prefill-server"  # restarted on its original file
    assert bed.unit("prefill").env["PREFILL_FLAG"] == "0"  # type: ignore[index]


def test_the_restore_removes_a_killed_writes_temp_file_beside_the_env_file(tmp_path: Path) -> None:
    """A controller killed between an env write's temp file and its rename leaves the temp file
    (the env file itself is old or new, never torn); the next restore removes it."""
    bed = two_roles()
    before = bed.states()
    leftover = bed.env_file("decode").rpartition("/")
    bed.transports["decode"].files[f"{leftover[0]}/.{leftover[2]}.orch-k1ll3d"] = b"DECODE_FL"
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run").execute()
    assert result.not_restored == []
    assert_restored(bed, before)  # only the env file is left on each host


def test_discarding_an_incomplete_backup_removes_the_copy_being_written(tmp_path: Path) -> None:
    """Killed during its backup (`orch restore` then discards it): the host-side copy and the
    temp file of the copy being written go; the env file and other runs' files stay."""
    bed = two_roles()
    files = bed.transports["decode"].files
    env = bed.env_file("decode")
    folder, _, name = env.rpartition("/")
    files[f"{env}.orch-backup-r1"] = files[f"{env}.orch-backup-r0"] = b"DECODE_FLAG=0\n"
    files[f"{folder}/.{name}.orch-backup-r1.orch-k1ll3d"] = b"DECODE_"
    HostGuard(bed.deployment, BackupDir(tmp_path / "backup"), "r1", QuietProgress()).discard_host_backups()
    assert set(files) == {env, f"{env}.orch-backup-r0"}
    assert bed.refused() == []


def test_ctrl_c_mid_sweep_stops_and_restores(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()

    def interrupt(text: str, argv: object) -> Reply:
        raise KeyboardInterrupt

    bed.transports["prefill"].script("fake-repro --trial 1", interrupt)
    result = runner_for(bed, decode_plan(bed), tmp_path / "run").execute()
    assert result.interrupted and not result.deadline_reached
    assert [r.trial for r in result.records] == [0]  # trial 1 never finished
    assert result.not_restored == []
    assert_restored(bed, before)


def test_a_live_env_that_ignores_export_lines_voids_the_trial(tmp_path: Path) -> None:
    """The file says `export DECODE_FLAG=1` (shell dialect), but the unit's reader is systemd's,
    which drops export lines: the process never got the value, so the trial is no data."""
    bed = make_bed(
        {"decode": Role("export DECODE_FLAG=0\n", [FakeUnit("decode-server", reads_as="systemd")], dialect="shell")}
    )
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ["1", "2"])})
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record, want in zip(result.records, ["1", "2"], strict=True):
        assert record.status == "failed" and record.failure is not None
        assert record.failure.error == "VerificationError"
        assert f"DECODE_FLAG is unset in the live process, expected '{want}'" in record.failure.message
        assert "export" in record.failure.message  # the hint names the cause
        assert record.metrics == {}
    assert bed.file("decode") == b"export DECODE_FLAG=0\n"  # restored


def test_a_live_value_a_drop_in_overrides_names_the_drop_in(tmp_path: Path) -> None:
    """A drop-in (or another EnvironmentFile=) that sets the flag after orch's file: preflight says
    so with `systemctl cat`; a mid-sweep verification that finds the same said nothing of it."""
    unit = FakeUnit("decode-server", drop_in={"DECODE_FLAG": "0"})
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [unit])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ["1", "2"])})
    records = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute().records
    for record, want in zip(sorted(records, key=lambda r: r.cell), ["1", "2"], strict=True):
        assert record.failure is not None and record.failure.error == "VerificationError"
        message = record.failure.message
        assert f"DECODE_FLAG is '0' in the live process, expected '{want}'" in message
        assert "a drop-in, or another EnvironmentFile= or Environment= of the unit, may set DECODE_FLAG" in message
        assert "systemctl cat decode-server" in message and "export" not in message


def test_the_drop_in_hint_only_where_a_drop_in_can_be_the_cause(tmp_path: Path) -> None:
    """dialect shell: the wrapper sources the file over the unit's Environment=, so a value the
    file sets and the process does not hold is the wrapper's doing, not a drop-in's."""
    unit = FakeUnit("decode-server", drop_in={"DECODE_FLAG": "0"})
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [unit], dialect="shell")})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ["1", "2"])})
    records = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute().records
    assert len(records) == 2
    for record in records:
        assert record.failure is not None
        assert "DECODE_FLAG is '0' in the live process, expected" in record.failure.message
        assert "drop-in" not in record.failure.message


def test_a_crash_looping_unit_fails_the_wait_quickly(tmp_path: Path) -> None:
    bed = make_bed(
        {"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", crash_loops=True)], health_timeout_s=30)}
    )
    started = time.monotonic()
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run", infra_attempts=1).execute()
    assert time.monotonic() - started < 5  # far below the 30 s health timeout
    for record in result.records:
        assert record.status == "failed" and record.failure is not None
        assert record.failure.error == "ServiceError" and "crash-looping" in record.failure.message


def test_a_unit_slow_to_become_ready_is_waited_for(tmp_path: Path) -> None:
    # readiness after 3 probes, not after a time: the waiter started late on a busy machine still
    # has to ask until the unit says ready (a 0.2 s readiness here once looked like no wait at all)
    bed = two_roles(ready_after_probes=3)
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run").execute()
    assert result.completed == 2
    assert bed.unit("decode").starts == 2 and bed.unit("decode").loading_answers == 3  # the last start's
    assert all(r.health_wait_s["decode"] > 0 for r in result.records)


def three_roles() -> FakeBed:
    """A PD deployment, all running: the router follows both workers, decode follows prefill."""
    return make_bed(
        {
            "router": Role("R=0\n", [FakeUnit("router-server", active=True)], after=["prefill", "decode"]),
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("D=0\n", [FakeUnit("decode-server", active=True)], after=["prefill"]),
        }
    )


def test_only_units_whose_env_changed_restart(tmp_path: Path) -> None:
    bed = three_roles()
    result = runner_for(bed, make_plan(bed, {"p": flag("prefill", "P")}), tmp_path / "run").execute()
    assert [r.restarted for r in result.records] == [[], ["prefill:prefill-server"]]  # 0 is the original
    assert bed.managers["decode"].restarts() == [] and bed.managers["router"].restarts() == []


def test_restart_waves_follow_after_order(tmp_path: Path) -> None:
    bed = three_roles()
    every = {"env": {"prefill": "P", "decode": "D", "router": "R"}, "levels": ["0", "1"]}
    result = runner_for(bed, make_plan(bed, {"all": every}), tmp_path / "run").execute()
    assert result.records[1].restarted == ["prefill:prefill-server", "decode:decode-server", "router:router-server"]
    calls = sorted((c.seq, role) for role, m in bed.managers.items() for c in m.calls if c.op == "restart")
    assert [role for _, role in calls][:3] == ["prefill", "decode", "router"]


def test_fail_fast_stops_at_the_first_failed_trial(tmp_path: Path) -> None:
    bed = two_roles()
    bed.transports["prefill"].script("fake-repro --trial 1", exit_code=1)
    before = bed.states()
    result = runner_for(bed, decode_plan(bed), tmp_path / "run", fail_fast=True).execute()
    assert [(r.trial, r.status) for r in result.records] == [(0, "completed"), (1, "failed")]
    assert (result.completed, result.failed) == (1, 1)
    assert_restored(bed, before)


def test_a_deadline_in_the_past_stops_before_the_first_trial(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()
    result = runner_for(bed, decode_plan(bed), tmp_path / "run", deadline=time.time() - 1).execute()
    assert result.interrupted and result.deadline_reached
    assert result.records == [] and result.completed == 0
    assert not any("fake-repro" in c for c in bed.transports["prefill"].commands())
    assert bed.restarts() == []
    assert_restored(bed, before)


def test_a_repro_that_times_out_is_a_workload_failure_not_retried(tmp_path: Path) -> None:
    bed = two_roles()
    bed.transports["prefill"].script("fake-repro --trial 0", timeout=True)
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run", infra_attempts=3).execute()
    first = result.records[0]
    assert (first.status, first.attempt) == ("failed", 1)
    assert first.failure is not None and first.failure.kind == "workload"
    assert "timed out" in first.failure.message


def test_restore_is_callable_again_and_changes_nothing_after_a_clean_run(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()
    runner = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run")
    runner.execute()
    restarts = bed.restarts()
    assert runner.restore() == []
    assert bed.restarts() == restarts  # files already original: nothing to restart
    assert_restored(bed, before)


def test_a_unit_that_dies_during_warm_up_fails_the_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "ALIVE_EVERY_S", 0.1)  # seen at the next alive check (shipped: every 0.3 s)
    attempts = 1
    bed = two_roles(dies_after_s=0.05, ready_after_s=1.0)
    started = time.monotonic()
    run = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run", infra_attempts=attempts, fail_fast=True)
    result = run.execute()
    assert time.monotonic() - started < 8
    record = result.records[0]
    assert (record.status, record.attempt) == ("failed", attempts)
    assert record.failure is not None and "not running" in record.failure.message


def test_a_testbed_locked_by_another_run_is_refused_before_any_edit(tmp_path: Path) -> None:
    bed = two_roles()
    before = bed.states()
    other = TestbedLock.for_run(bed.deployment, "other-run", "2026-01-01T00:00:00")
    other.acquire()
    with pytest.raises(LockError, match="locked .* by run other-run"):
        runner_for(bed, decode_plan(bed), tmp_path / "run").execute()
    other.release()
    assert bed.restarts() == [] and not any(c.op == "write" for t in bed.transports.values() for c in t.calls)
    assert_restored(bed, before)


def test_a_lock_taken_by_the_caller_is_used_and_released(tmp_path: Path) -> None:
    bed = two_roles()
    lock = TestbedLock.for_run(bed.deployment, RUN_ID, "2026-01-01T00:00:00")
    lock.acquire()
    result = runner_for(bed, decode_plan(bed, replicates=1), tmp_path / "run").execute(lock=lock)
    assert result.completed == 2
    assert lock.held == []  # released by the runner
    assert_restored(bed, bed.states())


def test_a_running_unit_with_stale_values_is_restarted_once_and_verified(tmp_path: Path) -> None:
    """The file already says P=0, so trial 0 edits nothing; but the live process started when it
    said P=1. The first trial verifies every unit, finds the stale value and restarts it."""
    bed = make_bed({"prefill": Role("P=1\n", [FakeUnit("prefill-server", active=True)])})
    bed.transports["prefill"].files[bed.env_file("prefill")] = b"P=0\n"
    result = runner_for(bed, make_plan(bed, {"p": flag("prefill", "P")}), tmp_path / "run").execute()
    assert [(r.status, r.restarted) for r in result.records] == [
        ("completed", ["prefill:prefill-server"]),
        ("completed", ["prefill:prefill-server"]),
    ]
    assert bed.managers["prefill"].restarts()[:1] == ["prefill-server"]


def test_collectors_count_log_lines_and_parse_a_commands_number(tmp_path: Path) -> None:
    bed = two_roles(log_lines=("ANOMALY a", "fine", "ANOMALY b"))
    bed.transports["decode"].script("count-things", stdout="7 things\n")
    collect = {
        "anomalies": {"role": "decode", "pattern": "ANOMALY"},
        "things": {"role": "decode", "command": "count-things"},
    }
    result = runner_for(bed, decode_plan(bed, replicates=1, collect=collect), tmp_path / "run").execute()
    for record in result.records:  # decode restarts in both trials: its start logs fall in each
        assert record.metrics["anomalies"].value == 2
        assert record.metrics["things"].value == 7
        log = (tmp_path / "run" / record.logs["decode:decode-server"]).read_text()
        assert "ANOMALY a" in log


def test_a_server_that_never_becomes_ready_times_out_and_is_retried(tmp_path: Path) -> None:
    bed = make_bed({"decode": Role("D=0\n", [FakeUnit("decode-server", ready_after_s=60)], health_timeout_s=0.2)})
    plan = make_plan(bed, {"d": flag("decode", "D")})
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2, fail_fast=True).execute()
    assert len(result.records) == 1
    for record in result.records:
        assert (record.status, record.attempt) == ("failed", 2)
        assert record.failure is not None and record.failure.error == "HealthTimeout"
        assert "not ready after 0.2 s (last answer: 503 loading)" in record.failure.message


def test_a_resumed_run_puts_the_host_side_backup_back_before_its_first_edit(tmp_path: Path) -> None:
    """Ctrl-C restores the hosts and removes their host-side backups; `orch resume` then edits
    again. A kill -9 of the resumed controller must still leave the run findable from the hosts
    (sweep.hosts.unrestored_runs), so the resume writes the copies back before any edit."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plan = decode_plan(bed)
    files, env = bed.transports["decode"].files, bed.env_file("decode")
    backup = host_backup_path(env, RUN_ID)
    first_edit = next(s.trial.index for s in plan.steps if s.env.get("decode", {}).get("DECODE_FLAG") == "1")
    repro = f"fake-repro --trial {first_edit}"
    seen: list[tuple[bytes, bool]] = []

    def ctrl_c(text: str, argv: object) -> Reply:
        raise KeyboardInterrupt

    bed.transports["decode"].script(repro, ctrl_c, times=1)
    first = runner_for(bed, plan, tmp_path / "run").execute()
    assert first.interrupted and files[env] == b"DECODE_FLAG=0\n" and backup not in files

    def look(text: str, argv: object) -> Reply:
        seen.append((files[env], backup in files))
        return Reply(stdout=REPRO_OUTPUT)

    bed.transports["decode"].script(repro, look, times=1)
    done = {r.trial for r in first.records}
    resumed = runner_for(bed, plan, tmp_path / "run").execute(done, resume=True)
    assert not resumed.interrupted
    assert seen == [(b"DECODE_FLAG=1\n", True)]  # the cell on the host, and the way back beside it
    assert files[env] == b"DECODE_FLAG=0\n" and backup not in files  # restored and tidied at the end


def test_a_unit_whose_file_was_written_restarts_after_a_failed_restart_wave(tmp_path: Path) -> None:
    """decode's restart (wave 0) fails after both files were written, so the router (wave 1,
    `after: [decode]`) still runs the previous env. The retry finds both files as the cell wants:
    it must still restart the router, as nothing else would notice with verify_env off."""
    decode = FakeUnit("decode-server", active=True)
    bed = make_bed(
        {
            "decode": Role("D=0\n", [decode]),
            "router": Role("POLICY=rr\n", [FakeUnit("router-server", active=True)], after=["decode"], verify_env=False),
            "client": Role("C=1\n", ["client-server"]),
        }
    )
    levels = {
        "a": {"decode": {"D": "1"}, "router": {"POLICY": "cache_aware"}},
        "b": {"decode": {"D": "2"}, "router": {"POLICY": "random"}},
    }
    plan = make_plan(bed, {"mode": {"levels": levels}}, repro=remote_repro("client"))
    decode.fail_starts = 1  # orch's first restart of decode fails
    seen: list[tuple[str | None, str]] = []

    def repro(text: str, argv: object) -> Reply:
        live = bed.managers["router"].environ("router-server") or {}
        seen.append((live.get("POLICY"), read_values(bed.file("router").decode(), "systemd")["POLICY"]))
        return Reply(stdout=REPRO_OUTPUT)

    bed.transports["client"].script(re.compile(r"^fake-repro\b"), repro)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2).execute()
    assert result.completed == 2, [r.failure for r in result.records]
    assert len(seen) == 2 and all(live == on_file for live, on_file in seen), seen
