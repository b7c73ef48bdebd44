"""A trial counts only if orch's own processes served it (issue 12), on the fakes: a stranger on a
health port after a restart, or a unit that restarts or dies during the repro, voids the trial
(an infrastructure failure naming the process, retried, never data); preflight refuses a port
held by a stranger before any edit."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes import REPRO_OUTPUT, FakeBed, FakeUnit, Reply, Role, flag, health_client, make_bed, make_plan, runner_for

from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Plan
from orchestrator.edges.identity import Holder, PortScan
from orchestrator.edges.preflight import preflight
from orchestrator.errors import PreflightError, ServiceError, TransportError
from orchestrator.store.journal import read_journal

STRANGER = Holder(4242, 30000, 1000, "python3 -m http.server 30000", (4242, 1))


def bed_of_one(**unit: Any) -> FakeBed:
    return make_bed({"prefill": Role("FLAG=0\n", [FakeUnit("prefill-server", **unit)])})


def plan_of(bed: FakeBed, replicates: int = 1) -> Plan:
    return make_plan(bed, {"f": flag("prefill", "FLAG")}, replicates=replicates)


def test_a_stranger_answering_after_a_restart_voids_every_attempt_naming_it(tmp_path: Path) -> None:
    bed = bed_of_one()
    bed.managers["prefill"].strangers[30000] = STRANGER  # the unit's port answers, from someone else
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=2).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert (record.status, record.attempt) == ("failed", 2)  # retried, then given up
        assert record.failure is not None and record.failure.kind == "infrastructure"
        assert record.failure.error == "IdentityError"
        assert "port 30000 is served by pid 4242 (python3 -m http.server 30000, user alice)" in record.failure.message
        assert "not by unit prefill-server (pid " in record.failure.message
        assert record.metrics == {}  # never data
    assert bed.file("prefill") == bed.originals["prefill"]


def test_a_stranger_that_leaves_lets_the_retry_count(tmp_path: Path) -> None:
    bed = bed_of_one()
    manager = bed.managers["prefill"]
    manager.strangers[30000] = STRANGER
    original = manager.port_scan

    def scan_then_leave(ports: Any, units: Any) -> Any:
        got = original(ports, units)
        manager.strangers.clear()  # e.g. an old process that finally released the port
        return got

    manager.port_scan = scan_then_leave  # type: ignore[method-assign]
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=2).execute()
    first = result.records[0]
    assert (first.status, first.attempt) == ("completed", 2)
    assert first.metrics["score"].value == 0.5


def scanned(bed: FakeBed) -> threading.Event:
    """Set each time orch has checked who serves prefill's ports (the check runs beside the
    repro): what the repro does after waiting on it happens after the restart's identity was
    taken, as a unit dying or restarting minutes into a real repro does."""
    manager, event = bed.managers["prefill"], threading.Event()
    original = manager.port_scan

    def port_scan(ports: Any, units: Any) -> Any:
        got = original(ports, units)
        event.set()
        return got

    manager.port_scan = port_scan  # type: ignore[method-assign]
    return event


def during_repro(bed: FakeBed, action: Callable[[], None], times: int) -> None:
    """The repro (on prefill's host) does `action` to the unit under it, `times` times."""
    done = scanned(bed)

    def repro(text: str, argv: Any) -> Reply:
        assert done.wait(5), "orch never checked who serves the port"
        done.clear()
        action()
        return Reply(0, REPRO_OUTPUT)

    bed.transports["prefill"].script(re.compile(r"^fake-repro\b"), repro, times=times)


def restart_during_repro(bed: FakeBed, times: int) -> None:
    during_repro(bed, lambda: bed.managers["prefill"].restart("prefill-server"), times)


def test_a_unit_restarted_during_the_repro_voids_the_trial(tmp_path: Path) -> None:
    bed = bed_of_one()
    restart_during_repro(bed, times=10)
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=1).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.error == "IdentityError"
        assert re.search(r"unit prefill-server restarted during the repro \(pid \d+ -> \d+\)", record.failure.message)
        assert record.repro is not None and record.metrics == {}


def test_a_void_trial_is_retried_and_counts_when_the_unit_stays_up(tmp_path: Path) -> None:
    bed = bed_of_one()
    restart_during_repro(bed, times=1)
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=2).execute()
    assert [(r.status, r.attempt) for r in result.records] == [("completed", 2), ("completed", 1)]


def test_a_unit_that_dies_during_the_repro_voids_the_trial(tmp_path: Path) -> None:
    bed = bed_of_one()
    during_repro(bed, lambda: bed.managers["prefill"].stop("prefill-server"), times=1)
    result = runner_for(bed, plan_of(bed, replicates=1), tmp_path / "run", infra_attempts=1).execute()
    record = result.records[0]
    assert record.failure is not None and record.failure.error == "IdentityError"
    assert re.search(r"unit prefill-server died during the repro \(pid \d+ is gone\)", record.failure.message)


def test_a_unit_the_trial_did_not_restart_dying_during_the_repro_voids_it(tmp_path: Path) -> None:
    """prefill serves every trial, though a decode-only factor never restarts it: when it dies
    while trial 2's repro runs, that trial is not data (its ids were read beside the repro)."""
    bed = make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("FLAG=0\n", [FakeUnit("decode-server")]),
        }
    )
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=1)
    prefill, read = bed.managers["prefill"], threading.Event()
    original, second_trial = prefill.unit_ids, plan.steps[1].trial.index

    def unit_ids(units: Any) -> Any:
        got = original(units)
        if len(bed.managers["decode"].restarts()) >= 2:  # the read beside the second trial's repro
            read.set()
        return got

    prefill.unit_ids = unit_ids  # type: ignore[method-assign]

    def repro(text: str, argv: Any) -> Reply:
        if text.endswith(f"--trial {second_trial}"):  # the first checks every role; this one restarts decode only
            assert read.wait(5), "orch never read the untouched prefill's unit ids"
            prefill.stop("prefill-server")
        return Reply(0, REPRO_OUTPUT)

    bed.transports["prefill"].script(re.compile(r"^fake-repro\b"), repro)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first, second = result.records
    assert first.status == "completed"
    assert second.failure is not None and second.failure.error == "IdentityError"
    assert re.search(r"unit prefill-server died during the repro \(pid \d+ is gone\)", second.failure.message)


@pytest.fixture(autouse=True)
def resolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake hosts' names (prefill.fake) resolve, as in test_cell_env."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])


def test_preflight_refuses_a_port_held_by_a_stranger_before_any_edit() -> None:
    bed = bed_of_one()
    bed.managers["prefill"].strangers[30000] = STRANGER
    with pytest.raises(PreflightError) as info:
        preflight(bed.deployment, plan_of(bed), client=bed.client)
    message = str(info.value)
    assert message.startswith("prefill (prefill.fake:22): port 30000")
    assert "port 30000 is held by pid 4242 (python3 -m http.server 30000, user alice)" in message
    assert "not by unit prefill-server (not running)" in message
    assert "stop it, or point the inventory at another port" in message
    assert info.value.exit_code == 2
    assert [c.op for c in bed.transports["prefill"].calls].count("write") == 0


def test_preflight_accepts_the_units_own_listener() -> None:
    bed = bed_of_one(active=True)
    preflight(bed.deployment, plan_of(bed), client=bed.client)


# ---------------------------------------------------------------- units the trial did not restart
def decode_bed() -> FakeBed:
    """prefill runs from before the run and serves every trial; a decode-only factor never restarts it."""
    return make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role("FLAG=0\n", [FakeUnit("decode-server")]),
        }
    )


def between_trials(bed: FakeBed, action: Callable[[], None]) -> None:
    """`action` runs once, when decode restarts for the second trial: after the first trial was
    journaled, before anything of the second one is checked (as an auditor's kill -9 would)."""
    decode, original = bed.managers["decode"], bed.managers["decode"].restart

    def restart(unit: str) -> float:
        if len(decode.restarts()) == 1:
            action()
        return original(unit)

    decode.restart = restart  # type: ignore[method-assign]


def stranger_answers(bed: FakeBed, role: str, on: threading.Event) -> httpx.Client:
    """The bed's health client, except that once `on` is set a stranger answers 200 JSON to every
    request for `role`'s URL (its unit running or not), as a server on the freed port does."""
    inner, origin = health_client(bed.deployment, bed.managers), bed.deployment.hosts[role].host.url

    def handler(request: httpx.Request) -> httpx.Response:
        if on.is_set() and str(request.url).startswith(origin):
            return httpx.Response(200, json={"status": "ok"})
        got = inner.send(request)
        return httpx.Response(got.status_code, content=got.content, headers=got.headers)

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)


def test_a_unit_not_restarted_that_died_between_trials_under_a_stranger_voids_the_trial(tmp_path: Path) -> None:
    """The auditor's case: prefill (not restarted by a decode-only trial) is killed after trial 0
    and a stranger answers its port at once. The trial is void (a unit expected active has no
    process), retried, and never data, however fast the stranger's 200 comes."""
    bed, on = decode_bed(), threading.Event()
    bed.client = stranger_answers(bed, "prefill", on)

    def kill_and_squat() -> None:
        bed.managers["prefill"].stop("prefill-server")
        bed.managers["prefill"].strangers[30000] = STRANGER
        on.set()

    between_trials(bed, kill_and_squat)
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2).execute()
    first, second = result.records
    assert first.status == "completed"
    assert (second.status, second.attempt) == ("failed", 2)  # retried, then given up: never data
    assert second.failure is not None and second.failure.kind == "infrastructure" and second.metrics == {}
    assert "port 30000 is served by pid 4242" in second.failure.message  # the retry restarted prefill: the stranger
    attempts = [r for r in read_journal(tmp_path / "run" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    one = next(r for r in attempts if r.trial == second.trial and r.attempt == 1)
    assert one.failure is not None and one.failure.error == "IdentityError"
    assert re.search(r"unit prefill-server is not running", one.failure.message), one.failure.message


def test_a_unit_not_restarted_whose_process_changed_between_trials_voids_the_trial(tmp_path: Path) -> None:
    """prefill restarted behind orch's back between two trials (systemd's Restart=, someone's
    systemctl): the trial that did not restart it did not get the process the last one checked."""
    bed = decode_bed()
    between_trials(bed, lambda: bed.managers["prefill"].restart("prefill-server"))
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first, second = result.records
    assert first.status == "completed"
    assert second.failure is not None and second.failure.error == "IdentityError" and second.metrics == {}
    assert re.search(
        r"unit prefill-server changed process since the last trial \(pid \d+ -> \d+\)", second.failure.message
    ), second.failure.message


def test_a_stranger_joining_a_port_of_a_unit_not_restarted_during_the_repro_voids_it(tmp_path: Path) -> None:
    """After the repro every role's ports are scanned again: a stranger that took one of them
    beside the unit (another address, SO_REUSEPORT) while the repro ran served part of it."""
    bed = decode_bed()
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=1)
    second_trial = plan.steps[1].trial.index

    def repro(text: str, argv: Any) -> Reply:
        if text.endswith(f"--trial {second_trial}"):
            bed.managers["prefill"].strangers[30000] = STRANGER
        return Reply(0, REPRO_OUTPUT)

    bed.transports["prefill"].script(re.compile(r"^fake-repro\b"), repro)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    first, second = result.records
    assert first.status == "completed"
    assert second.failure is not None and second.failure.error == "IdentityError" and second.metrics == {}
    assert "port 30000 is served by pid 4242" in second.failure.message


def test_every_role_is_scanned_before_and_after_each_repro(tmp_path: Path) -> None:
    """Who serves each role's ports is checked every trial, restarted or not: beside the repro and
    again after it (a stranger on the port of a unit the trial did not restart voids it too)."""
    bed = decode_bed()
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=2)
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert result.completed == 4
    for role in ("prefill", "decode"):
        assert len([c for c in bed.managers[role].calls if c.op == "port_scan"]) == 2 * 4, role


# ---------------------------------------------------------------- what a retry restarts
def test_a_retry_after_a_stranger_held_a_port_restarts_that_role_alone(tmp_path: Path) -> None:
    """A stranger took prefill's port between trials: prefill's server runs on, holding no port
    (it lost it, as a server whose listener died does). The trial is void; then the stranger
    leaves. Only a fresh start binds the port again, so the retry restarts prefill, and only
    prefill (decode, whose env the trial edits, is not the problem). Before, the retry restarted
    nothing and waited on a server that answers nobody: it timed out and the trial failed."""
    bed = make_bed(
        {
            "prefill": Role("P=0\n", [FakeUnit("prefill-server", active=True)], health_timeout_s=0.5),
            "decode": Role("FLAG=0\n", [FakeUnit("decode-server")]),
        }
    )
    prefill, portless = bed.managers["prefill"], threading.Event()  # set: prefill's server holds no port
    scan, restart, inner = prefill.port_scan, prefill.restart, bed.client
    url = bed.deployment.hosts["prefill"].host.url

    def squat() -> None:
        prefill.strangers[30000] = STRANGER
        portless.set()

    def port_scan(ports: Any, units: Any) -> Any:
        got, ids = scan(ports, units)
        if prefill.strangers:
            prefill.strangers.clear()  # seen once, then gone (an old process that finally exits)
        elif portless.is_set():
            got = PortScan((), (), got.users)  # nobody listens there now
        return got, ids

    def fresh_start(unit: str) -> float:
        portless.clear()
        return restart(unit)

    def handler(request: httpx.Request) -> httpx.Response:
        if str(request.url).startswith(url) and portless.is_set():
            if not prefill.strangers:
                raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
            return httpx.Response(200, json={"status": "ok"})  # the stranger answers
        got = inner.send(request)
        return httpx.Response(got.status_code, content=got.content, headers=got.headers)

    prefill.port_scan, prefill.restart = port_scan, fresh_start  # type: ignore[method-assign]
    bed.client = httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)
    between_trials(bed, squat)
    plan = make_plan(bed, {"f": flag("decode", "FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2).execute()
    attempts = [r for r in read_journal(tmp_path / "run" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    void = attempts[1]
    assert void.failure is not None and void.failure.error == "IdentityError"
    assert "port 30000 is served by pid 4242" in void.failure.message
    second = result.records[1]
    assert (second.status, second.attempt) == ("completed", 2), second.failure
    assert second.restarted == ["prefill:prefill-server"]


def test_a_stranger_that_took_the_port_of_a_unit_gone_before_its_check_is_named_not_the_check(tmp_path: Path) -> None:
    """The second trial's unit dies after its ids were read (a stranger got its port first:
    'Address already in use') and before the live-env check beside the repro: that check finds
    no live process, the identity check finds the stranger. Both void the trial; the record names
    the stranger, which explains the other (a loaded CI machine gave 'no live process to verify')."""
    bed = bed_of_one()
    manager = bed.managers["prefill"]
    original_environ, original_scan = manager.environ, manager.port_scan
    taken = threading.Event()

    def environ(unit: str) -> Any:
        if len(manager.restarts()) >= 2:  # the second trial, checked beside its repro
            manager.stop(unit)
            manager.strangers[30000] = STRANGER
            taken.set()
        return original_environ(unit)

    def port_scan(ports: Any, units: Any) -> Any:
        if len(manager.restarts()) >= 2:
            assert taken.wait(5), "the live-env check never ran beside the repro"
        return original_scan(ports, units)

    manager.environ = environ  # type: ignore[method-assign]
    manager.port_scan = port_scan  # type: ignore[method-assign]
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=1).execute()
    first, second = result.records
    assert first.status == "completed"
    assert second.failure is not None and second.failure.error == "IdentityError", second.failure
    assert "port 30000 is served by pid 4242 (python3 -m http.server 30000, user alice)" in second.failure.message
    assert second.metrics == {}


@pytest.mark.parametrize("seen", ["no process", "environ unreadable"])
def test_a_stranger_that_took_the_port_is_named_when_the_check_before_the_repro_fails(
    tmp_path: Path, seen: str
) -> None:
    """The first trial (and one after a failure) checks every unit's live env BEFORE the repro. Its
    unit died meanwhile (a stranger got its port: 'Address already in use'), so that check finds
    no live process, or (the process dying as it was read) an environ it cannot read. The record
    names the stranger, which explains both (the testbed's stranger test got 'permission denied
    (connect as root ...)', as root, on a retry after a failure)."""
    bed = bed_of_one()
    manager = bed.managers["prefill"]
    original_environ = manager.environ

    def environ(unit: str) -> Any:
        manager.stop(unit)
        manager.strangers[30000] = STRANGER
        if seen == "environ unreadable":
            raise ServiceError("prefill", unit, "cannot read /proc/361/environ: permission denied")
        return original_environ(unit)

    manager.environ = environ  # type: ignore[method-assign]
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=1).execute()
    first = result.records[0]
    assert first.failure is not None and first.failure.error == "IdentityError", first.failure
    assert "port 30000 is served by pid 4242 (python3 -m http.server 30000, user alice)" in first.failure.message
    assert first.metrics == {} and first.repro is None  # the repro never ran


def test_when_the_port_scan_fails_too_the_check_before_the_repro_is_what_the_record_says(tmp_path: Path) -> None:
    """The scan that would name a stranger cannot be made (the host stopped answering): the record
    keeps the live-env check's own failure, not the scan's."""
    bed = bed_of_one()
    manager = bed.managers["prefill"]
    original_environ = manager.environ

    def environ(unit: str) -> Any:
        manager.stop(unit)
        return original_environ(unit)

    def port_scan(ports: Any, units: Any) -> Any:
        raise TransportError("prefill", "connection lost while scanning its ports")

    manager.environ = environ  # type: ignore[method-assign]
    manager.port_scan = port_scan  # type: ignore[method-assign]
    result = runner_for(bed, plan_of(bed), tmp_path / "run", infra_attempts=1).execute()
    first = result.records[0]
    assert first.failure is not None and first.failure.error == "VerificationError", first.failure
    assert "no live process to verify" in first.failure.message
