"""session: the run directory appears whole (run.json and plan.json) or not at all, and
`orch resume` checks the rebuilt plan against the run's digest before it connects to any host."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
from pathlib import Path

import pytest
from helpers.manifests import old_format, planned

from orchestrator.core.records import RunManifest
from orchestrator.errors import LockError, UsageError
from orchestrator.store import manifest as runs
from orchestrator.store.manifest import PLAN_FILE, load_manifest, save_manifest
from orchestrator.store.runlock import run_lock
from orchestrator.sweep import api, session
from orchestrator.sweep.progress import QuietProgress


class Connected(Exception):
    """Raised by the fake connect: resume got past every check."""


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(testbed):  # type: ignore[no-untyped-def]
        raise Connected(testbed.name)

    monkeypatch.setattr(session, "connect", connect)


def resume(run_dir: Path) -> None:
    api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)


def test_the_run_directory_holds_run_json_and_plan_json(tmp_path: Path) -> None:
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r1"]  # no staging folder left
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == [PLAN_FILE, "run.json"]
    assert load_manifest(tmp_path / "r1") == manifest


def test_a_failure_while_creating_leaves_no_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, manifest = planned()
    real = runs.write_json_atomic

    def fail_on_run_json(path: Path, model) -> None:  # type: ignore[no-untyped-def]
        if path.name == "run.json":
            raise OSError("disk full")  # after plan.json was written
        real(path, model)

    monkeypatch.setattr(runs, "write_json_atomic", fail_on_run_json)
    with pytest.raises(OSError, match="disk full"):
        session.create_run_dir(tmp_path / "r1", manifest)
    assert list(tmp_path.iterdir()) == []  # neither the run directory nor its staging folder


def test_resume_goes_on_with_the_same_plan(tmp_path: Path, no_hosts: None) -> None:
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    (tmp_path / "r1" / PLAN_FILE).unlink()  # resume reads only run.json's digest, not the trials
    with pytest.raises(Connected):
        resume(tmp_path / "r1")


def test_resume_refuses_a_changed_plan_before_touching_a_host(tmp_path: Path, no_hosts: None) -> None:
    """The matrix and inventory are unchanged, but the run's seed gives another order (as a
    different orch version might): refused with one clear error, exit 2."""
    _, manifest = planned(seed=1)
    session.create_run_dir(tmp_path / "r1", manifest.model_copy(update={"seed": 2}))
    with pytest.raises(UsageError) as err:
        resume(tmp_path / "r1")
    assert err.value.exit_code == 2
    assert "the plan rebuilt from the matrix differs from the run's plan" in str(err.value)
    assert "(resume needs the same orch version, matrix and inventory)" in str(err.value)


def test_resume_of_a_run_directory_from_before_plan_json(tmp_path: Path, no_hosts: None) -> None:
    _, manifest = planned()
    run_dir = old_format(tmp_path, manifest)
    with pytest.raises(Connected):
        resume(run_dir)
    (tmp_path / "x").mkdir()
    changed = old_format(tmp_path / "x", manifest.model_copy(update={"seed": 2}))
    with pytest.raises(UsageError, match="differs from the run's plan"):
        resume(changed)


def test_resume_keeps_plan_json_as_it_was(tmp_path: Path, no_hosts: None) -> None:
    """What resume writes back into run.json (at the end of the run) leaves plan.json alone."""
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    before = (tmp_path / "r1" / PLAN_FILE).read_bytes()
    light = load_manifest(tmp_path / "r1", plan=False)
    save_manifest(tmp_path / "r1", light.model_copy(update={"status": "completed"}))
    assert (tmp_path / "r1" / PLAN_FILE).read_bytes() == before
    head = RunManifest.model_validate(json.loads((tmp_path / "r1" / "run.json").read_text()))
    assert (head.plan, head.plan_trials, head.status) == ([], 24, "completed")


def test_resume_refuses_a_run_another_process_is_running_before_touching_its_journal(
    tmp_path: Path, no_hosts: None
) -> None:
    """A run's controller holds its folder (store.runlock); a second `orch resume` beside it must
    not repair the journal's "torn" tail, which may be the line that controller is appending."""
    _, manifest = planned()
    run_dir = tmp_path / "r1"
    session.create_run_dir(run_dir, manifest)
    journal = run_dir / "journal.jsonl"
    journal.write_bytes(b'{"type": "trial", "tri')  # an append in flight, as a reader sees it
    held = rf"pid {os.getpid()} on {re.escape(socket.gethostname())} is running this run right now"
    with run_lock(run_dir), pytest.raises(LockError, match=held):
        resume(run_dir)
    assert journal.read_bytes() == b'{"type": "trial", "tri'
    with pytest.raises(Connected):  # once that process is gone, the resume goes on
        resume(run_dir)


def test_the_run_lock_is_one_holder_at_a_time_and_free_again_after(tmp_path: Path) -> None:
    with run_lock(tmp_path):
        with pytest.raises(LockError), run_lock(tmp_path):
            pass
    with run_lock(tmp_path):  # released on exit (the kernel also drops it when its holder dies)
        pass


@pytest.mark.parametrize(("stored", "asked", "attempts"), [(4, None, 5), (4, 0, 1), (None, None, 2)])
def test_a_resume_retries_as_the_run_was_started_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: int | None, asked: int | None, attempts: int
) -> None:
    """An interrupted run must not fail or retry its trials differently from an uninterrupted
    one: the run's --retries is in run.json (None: an older run.json, the default of 1)."""
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest.model_copy(update={"retries": stored}))
    seen: list[int] = []

    def execute(plan, deployments, run_dir, options, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(options.infra_attempts)
        raise Connected("execute")

    monkeypatch.setattr(session, "connected", lambda testbeds: contextlib.nullcontext([]))
    monkeypatch.setattr(api, "execute", execute)
    with pytest.raises(Connected):
        api.resume(api.ResumeRequest(tmp_path / "r1", retries=asked), lambda s: QuietProgress(), warn=lambda m: None)
    assert seen == [attempts]
