"""Each cell runs on exactly its own configuration (issue 12), on the fakes: the original env file
plus the cell's assignments, nothing an earlier cell wrote; restore restarts only what may run on
a non-original env; preflight refuses a deployment whose live env or health is not what orch
reads, before any edit."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeBed, FakeServiceManager, FakeUnit, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.steps import Plan
from orchestrator.edges.preflight import preflight
from orchestrator.errors import PreflightError

DECODE_ENV = "# decode\nPORT=8000\nOTHER=keep\n"
DEMO = {"levels": {"default": {}, "x": {"decode": {"DEMO_VALUE": "x"}}}}


def decode_bed(env: str = DECODE_ENV, **unit: Any) -> FakeBed:
    return make_bed({"decode": Role(env, [FakeUnit("decode-server", **unit)])})


def demo_plan(bed: FakeBed, replicates: int = 2, **matrix: Any) -> Plan:
    return make_plan(bed, {"demo": DEMO}, replicates=replicates, **matrix)


def test_a_baseline_after_an_x_cell_runs_on_exactly_the_baseline_env(tmp_path: Path) -> None:
    bed = decode_bed()
    plan = demo_plan(bed)
    assert [s.trial.cell.id for s in plan.steps] == ["demo=default", "demo=x", "demo=default", "demo=x"]
    assert [s.changed_roles for s in plan.steps] == [(), ("decode",), ("decode",), ("decode",)]
    seen: list[tuple[bytes, dict[str, str] | None]] = []
    manager = bed.managers["decode"]
    original_repro = manager.transport.run

    def spy(*args: Any, **kwargs: Any) -> Any:  # the repro runs on decode: see the host then
        if "fake-repro" in str(args[0]):
            seen.append((bed.file("decode"), manager.environ("decode-server")))
        return original_repro(*args, **kwargs)

    manager.transport.run = spy  # type: ignore[method-assign]
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0)
    assert len(seen) == 4
    for (file, live), step in zip(seen, plan.steps, strict=True):
        assert live is not None
        if step.trial.is_baseline:
            assert file == bed.originals["decode"]  # byte for byte
            assert "DEMO_VALUE" not in live
        else:
            assert file == DECODE_ENV.encode() + b"DEMO_VALUE=x\n"
            assert live["DEMO_VALUE"] == "x"
        assert (live["PORT"], live["OTHER"]) == ("8000", "keep")
    baseline_record = result.records[2]
    assert baseline_record.is_baseline and baseline_record.env == {}  # the journal shows the cell's own
    assert result.records[1].env == {"decode": {"DEMO_VALUE": "x"}}
    assert bed.file("decode") == bed.originals["decode"]


class PortCheckingManager(FakeServiceManager):
    """A server that refuses to start on a PORT that is not a number (as a real one would)."""

    def _start(self, u: FakeUnit, when: float, *, log: bool = True) -> None:
        super()._start(u, when, log=log)
        if u.env is not None and not u.env.get("PORT", "0").isdigit():
            u.failed, u.pid, u.env = True, None, None


def test_a_broken_levels_value_does_not_leak_into_the_next_cell(tmp_path: Path) -> None:
    bed = decode_bed()
    handle = bed.deployment.hosts["decode"]
    handle.services = bed.managers["decode"] = PortCheckingManager(
        bed.transports["decode"], handle.host.env_file, "systemd", [FakeUnit("decode-server")], handle.host.label
    )
    factors = {
        "port": {"levels": {"ok": {}, "broken": {"decode": {"PORT": "notaport"}}}},
        "other": {"levels": {"keep": {}, "new": {"decode": {"OTHER": "new"}}}},
    }
    # the product in declared order puts a healthy cell right after a broken one
    plan = make_plan(bed, {"other": factors["other"], "port": factors["port"]}, replicates=1)
    ids = [s.trial.cell.id for s in plan.steps]
    assert ids == ["other=keep,port=ok", "other=keep,port=broken", "other=new,port=ok", "other=new,port=broken"]
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1).execute()
    statuses = [r.status for r in result.records]
    assert statuses == ["completed", "failed", "completed", "failed"]
    healthy = result.records[2]  # right after the broken cell
    assert healthy.env == {"decode": {"OTHER": "new"}}
    assert bed.file("decode") == bed.originals["decode"]


def test_restore_restarts_nothing_when_the_last_cell_was_the_baseline(tmp_path: Path) -> None:
    bed = decode_bed(active=True)
    levels = {"x": DEMO["levels"]["x"], "default": {}}
    plan = make_plan(bed, {"demo": {"levels": levels}}, replicates=1, baseline={"demo": "default"})
    assert [s.trial.cell.id for s in plan.steps] == ["demo=x", "demo=default"]
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0)
    assert [r.restarted for r in result.records] == [["decode:decode-server"]] * 2
    # x: one restart; back to the baseline: one more; restore: none (the file is already original)
    assert bed.managers["decode"].restarts() == ["decode-server", "decode-server"]
    assert bed.file("decode") == bed.originals["decode"]
    assert bed.states() == {"decode:decode-server": True}
    assert "DEMO_VALUE" not in (bed.managers["decode"].environ("decode-server") or {"DEMO_VALUE": "?"})


def test_restore_restarts_a_unit_left_on_a_cells_env(tmp_path: Path) -> None:
    bed = decode_bed(active=True)
    plan = demo_plan(bed, replicates=1)  # default, then x: the last cell leaves DEMO_VALUE=x
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0)
    assert bed.managers["decode"].restarts() == ["decode-server", "decode-server"]  # x, then restore
    assert "DEMO_VALUE" not in (bed.managers["decode"].environ("decode-server") or {"DEMO_VALUE": "?"})
    assert bed.file("decode") == bed.originals["decode"]


def test_a_unit_inactive_before_the_run_is_stopped_at_restore(tmp_path: Path) -> None:
    bed = decode_bed()  # inactive: orch starts it, and stops it at the end
    result = runner_for(bed, demo_plan(bed, replicates=1), tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0)
    assert bed.states() == {"decode:decode-server": False}


# ----------------------------------------------------------------------------- preflight
@pytest.fixture(autouse=True)
def fake_names_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake hosts (decode.fake) resolve, without asking a DNS server."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])


def test_preflight_passes_on_a_deployment_as_orch_reads_it() -> None:
    bed = decode_bed(active=True, base_env={"PATH": "/usr/bin", "SET_BY_UNIT": "1"})
    assert preflight(bed.deployment, demo_plan(bed), client=bed.client) == []


def test_preflight_skips_inactive_units() -> None:
    bed = make_bed(
        {"decode": Role("export DECODE_FLAG=0\n", [FakeUnit("decode-server", reads_as="systemd")], dialect="shell")}
    )
    preflight(bed.deployment, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), client=bed.client)


def test_preflight_refuses_a_dialect_mismatch_naming_host_and_unit() -> None:
    # dialect: shell, but the unit reads the file as systemd's EnvironmentFile= (drops `export`)
    bed = make_bed(
        {
            "decode": Role(
                "export DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True, reads_as="systemd")], dialect="shell"
            )
        }
    )
    before = bed.file("decode")
    with pytest.raises(PreflightError) as caught:
        preflight(bed.deployment, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), client=bed.client)
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "decode.fake" in text and "decode-server" in text
    assert "DECODE_FLAG is unset in the live process" in text and "'0'" in text and "dialect" in text
    assert bed.file("decode") == before and bed.managers["decode"].restarts() == []


def test_preflight_refuses_a_crlf_shell_file_the_matrix_edits() -> None:
    """bash keeps a CRLF line's \\r in its value, so every value orch writes there would reach
    the server as `value\\r` and fail every trial's check: refused before any edit (exit 2)."""
    bed = make_bed({"decode": Role("export DECODE_FLAG=0\r\n", [FakeUnit("decode-server")], dialect="shell")})
    before = bed.file("decode")
    with pytest.raises(PreflightError, match="CRLF line endings in a shell-dialect env file") as caught:
        preflight(bed.deployment, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), client=bed.client)
    assert caught.value.exit_code == 2 and "dos2unix" in str(caught.value) and bed.file("decode") == before


def test_preflight_refuses_an_env_file_too_large_to_parse_naming_host_and_file() -> None:
    """Parsing an env file holds ~170 bytes a byte and takes seconds a MiB, and preflight edits it
    once per distinct cell: an 8 MB file took 1.3 GB and 26 s a parse (64 MiB passed the read cap).
    Refused at its size, before any parse and any edit (exit 2)."""
    big = "# decode\n" + "FLAG_%d=1\n" * 60_000 % tuple(range(60_000))
    bed = make_bed({"decode": Role(big, [FakeUnit("decode-server")])})
    before = bed.file("decode")
    with pytest.raises(PreflightError) as caught:
        preflight(bed.deployment, demo_plan(bed), client=bed.client)
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "decode.fake" in text and "/etc/orch/decode.env" in text and "768,899 characters" in text
    assert bed.file("decode") == before and bed.managers["decode"].restarts() == []


def test_preflight_refuses_a_cell_whose_edit_makes_the_file_too_large_to_read_back() -> None:
    """A 200 KB file and a 100 KB value (each allowed) make a file orch could not read back."""
    bed = decode_bed(env="# decode\n" + "#" * 200_000 + "\nPORT=8000\n")
    big = {"levels": {"default": {}, "x": {"decode": {"DEMO_VALUE": "x" * 100_000}}}}
    with pytest.raises(PreflightError, match=r"decode\.env: the file holds 300,0\d\d characters, larger than 256 KiB"):
        preflight(bed.deployment, make_plan(bed, {"big": big}), client=bed.client)
    assert bed.managers["decode"].restarts() == []


def test_preflight_refuses_an_unhealthy_url_naming_host_and_unit() -> None:
    bed = decode_bed(active=True, ready_after_s=3600.0)  # runs, but answers 503 "loading"
    with pytest.raises(PreflightError) as caught:
        preflight(bed.deployment, demo_plan(bed), client=bed.client)
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "decode.fake" in text and "decode-server" in text and "HTTP 503" in text and "/health" in text
    assert bed.managers["decode"].restarts() == []


def test_preflight_ignores_variables_the_unit_sets_itself_but_not_a_changed_file() -> None:
    bed = decode_bed(active=True, base_env={"PATH": "/usr/bin", "OTHER": "set-by-unit"})
    # the unit's own OTHER is overridden by the file at start, as systemd does: no difference
    preflight(bed.deployment, demo_plan(bed), client=bed.client)
    bed.transports["decode"].files[bed.env_file("decode")] = b"PORT=9000\n"  # edited since the start
    with pytest.raises(PreflightError, match="PORT is '8000' in the live process, the env file gives '9000'"):
        preflight(bed.deployment, demo_plan(bed), client=bed.client)


# ----------------------------------------------------------------------------- messages
def test_the_export_line_warning_does_not_claim_a_plainly_set_variable_is_unset() -> None:
    from orchestrator.core.envfile import lint

    assert lint("export A=1\nA=2\nexport B=3\n", "systemd") == [
        "line 1: systemd ignores `export` lines (this line does not set A; line 2 does)",
        "line 3: systemd ignores `export` lines (B is not set for the unit)",
    ]


def ssh_transport(port: int = 22) -> Any:
    from orchestrator.edges.transport.ssh import SshTransport

    return SshTransport("decode", "10.9.0.4", port=port, key_filename="/k/id", known_hosts="/k/known")


def test_the_changed_host_key_hint_names_the_inventorys_known_hosts_file() -> None:
    import paramiko
    from paramiko.ssh_exception import BadHostKeyException

    from orchestrator.edges.transport.ssh import connect_error_message

    a, b = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    text = connect_error_message(BadHostKeyException("10.9.0.4", b, a), ssh_transport())
    assert "`ssh-keygen -R 10.9.0.4 -f /k/known`" in text
    text = connect_error_message(BadHostKeyException("10.9.0.4", b, a), ssh_transport(2222))
    assert "`ssh-keygen -R '[10.9.0.4]:2222' -f /k/known`" in text  # how known_hosts names a port


def test_a_refused_account_is_not_a_key_problem() -> None:
    from paramiko.ssh_exception import AuthenticationException, PartialAuthentication

    from orchestrator.edges.transport.ssh import connect_error_message

    t = ssh_transport()
    hung_up = connect_error_message(AuthenticationException("Authentication failed: transport shut down or saw EOF"), t)
    assert hung_up.startswith("login refused for root: the server closed the connection during authentication")
    assert "locked or expired" in hung_up and "`key:`" not in hung_up
    partial = connect_error_message(PartialAuthentication(["password"]), t)
    assert partial == (
        "authentication failed for root: the key was accepted but the server also requires password "
        "(orch logs in with a key only: relax AuthenticationMethods for this user)"
    )
    assert connect_error_message(AuthenticationException("Authentication timeout."), t).startswith(
        "authentication failed for root: no answer within 10 s"
    )
    assert connect_error_message(AuthenticationException("Authentication failed."), t) == (
        "authentication failed for root (check `key:`; or the account is locked or expired: see sshd's log)"
    )


def test_restore_starts_an_originally_active_unit_that_went_down_on_the_original_env(tmp_path: Path) -> None:
    bed = decode_bed(active=True)
    levels = {"x": DEMO["levels"]["x"], "default": {}}
    plan = make_plan(bed, {"demo": {"levels": levels}}, replicates=1, baseline={"demo": "default"})
    runner = runner_for(bed, plan, tmp_path / "run")
    original_collect, calls = runner.repro.collect_logs, []

    def die_after_last(trial: Any, since: float, quiet: bool = False, **kwargs: Any) -> Any:
        got = original_collect(trial, since, quiet, **kwargs)
        calls.append(trial)
        if len(calls) == 2:  # the baseline, last: the unit dies after its trial
            bed.managers["decode"].stop("decode-server")
        return got

    runner.repro.collect_logs = die_after_last
    result = runner.execute()
    assert (result.completed, result.failed) == (2, 0)
    assert bed.states() == {"decode:decode-server": True}  # started again at restore
    assert bed.managers["decode"].restarts() == ["decode-server"] * 3


def test_verification_checks_the_keys_a_cell_leaves_original(tmp_path: Path) -> None:
    """A baseline trial assigns nothing, yet its live process must not hold DEMO_VALUE: a unit
    found holding one (started on an older file) is restarted once and checked again."""
    bed = decode_bed(active=True)
    bed.unit("decode").env = {**(bed.unit("decode").env or {}), "DEMO_VALUE": "stale"}
    result = runner_for(bed, demo_plan(bed, replicates=1), tmp_path / "run").execute()
    first = result.records[0]
    assert (first.cell, first.status) == ("demo=default", "completed")
    assert first.restarted == ["decode:decode-server"]  # found stale by verification, restarted
    assert bed.managers["decode"].restarts()[0] == "decode-server"
