"""Run directories: the manifest in run.json, the planned trials in plan.json (written once),
their count and digest in run.json, run directories from before plan.json, and damaged ones."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers.manifests import old_format, planned

from orchestrator.core.plan import make_plan
from orchestrator.core.records import PlannedTrial, RunManifest
from orchestrator.errors import ConfigError, UsageError
from orchestrator.store.manifest import (
    PLAN_FILE,
    columns_of,
    load_manifest,
    load_plan,
    plan_digest,
    save_manifest,
    trials_of,
)
from orchestrator.store.planrecord import check_same_plan, digest_of

REPO = Path(__file__).resolve().parent.parent


def run_dir_of(tmp_path: Path, manifest: RunManifest, name: str = "r1") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    save_manifest(run_dir, manifest)
    return run_dir


def test_manifest_records_the_plan_count_and_digest() -> None:
    plan, manifest = planned()
    assert len(manifest.plan) == manifest.plan_trials == len(plan.steps) == 24
    assert [(p.trial, p.round, p.cell, p.is_baseline) for p in manifest.plan] == [
        (s.trial.index, s.trial.round, s.trial.cell.id, s.trial.is_baseline) for s in plan.steps
    ]
    assert manifest.plan[0].levels == plan.steps[0].trial.cell.as_dict()
    assert manifest.plan_sha256 == digest_of(plan) == plan_digest((p.trial, p.cell) for p in manifest.plan)


def test_the_stored_plan_round_trips(tmp_path: Path) -> None:
    _, manifest = planned()
    run_dir = run_dir_of(tmp_path, manifest)
    assert load_manifest(run_dir) == manifest
    head = json.loads((run_dir / "run.json").read_text())
    assert head["plan"] == [] and head["plan_trials"] == 24 and head["plan_sha256"] == manifest.plan_sha256
    stored = json.loads((run_dir / PLAN_FILE).read_text())
    assert len(stored["cells"]) == 8 and len(stored["trial"]) == len(stored["round"]) == len(stored["cell"]) == 24


def test_without_the_plan_a_manifest_keeps_its_count_and_digest(tmp_path: Path) -> None:
    _, manifest = planned()
    light = load_manifest(run_dir_of(tmp_path, manifest), plan=False)
    assert light.plan == [] and (light.plan_trials, light.plan_sha256) == (24, manifest.plan_sha256)
    assert light == manifest.model_copy(update={"plan": []})


def test_plan_json_is_written_once_and_run_json_rewrites_leave_it(tmp_path: Path) -> None:
    _, manifest = planned()
    run_dir = run_dir_of(tmp_path, manifest)
    before = (run_dir / PLAN_FILE).stat()
    save_manifest(run_dir, load_manifest(run_dir, plan=False).model_copy(update={"status": "completed"}))
    save_manifest(run_dir, manifest.model_copy(update={"status": "interrupted"}))
    after = (run_dir / PLAN_FILE).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert load_manifest(run_dir) == manifest.model_copy(update={"status": "interrupted"})
    assert sorted(p.name for p in run_dir.iterdir()) == [PLAN_FILE, "run.json"]  # no temp files


def test_pairs_for_a_live_view_without_a_model_per_trial(tmp_path: Path) -> None:
    _, manifest = planned()
    run_dir = run_dir_of(tmp_path, manifest)
    light = load_manifest(run_dir, plan=False)
    assert load_plan(run_dir, light).pairs() == [(p.trial, p.cell) for p in manifest.plan]


def test_an_old_format_manifest_still_loads_and_moves_its_plan_out_when_rewritten(tmp_path: Path) -> None:
    plan, manifest = planned()
    run_dir = old_format(tmp_path, manifest)
    for loaded in (load_manifest(run_dir), load_manifest(run_dir, plan=False)):
        assert loaded.plan == manifest.plan  # inline: there is nowhere else to read it from
        assert (loaded.plan_trials, loaded.plan_sha256) == (24, digest_of(plan))
    check_same_plan(run_dir, load_manifest(run_dir, plan=False), plan)  # resumable as before
    save_manifest(run_dir, load_manifest(run_dir, plan=False).model_copy(update={"status": "completed"}))
    assert json.loads((run_dir / "run.json").read_text())["plan"] == []
    assert load_manifest(run_dir) == manifest.model_copy(update={"status": "completed"})


def test_a_manifest_built_by_hand_gets_its_count_and_digest_when_saved(tmp_path: Path) -> None:
    _, manifest = planned()
    bare = manifest.model_copy(update={"plan_trials": 0, "plan_sha256": ""})
    run_dir = run_dir_of(tmp_path, bare)
    assert load_manifest(run_dir) == manifest
    save_manifest(run_dir, bare)  # plan.json exists: run.json still gets the count and digest
    assert load_manifest(run_dir, plan=False).plan_sha256 == manifest.plan_sha256


def test_a_missing_plan_json_is_a_clear_error(tmp_path: Path) -> None:
    _, manifest = planned()
    run_dir = run_dir_of(tmp_path, manifest)
    (run_dir / PLAN_FILE).unlink()
    with pytest.raises(ConfigError) as err:
        load_manifest(run_dir)
    assert err.value.exit_code == 2
    assert str(err.value) == (
        f"{run_dir / PLAN_FILE}: cannot read the run's planned trials: no such file "
        "(run.json plans 24 trials, kept in this file; copy a run directory whole)"
    )
    assert load_manifest(run_dir, plan=False).plan_trials == 24  # resume and restore need only run.json


def test_the_plan_of_another_run_is_refused(tmp_path: Path) -> None:
    run_dir = run_dir_of(tmp_path, planned(seed=1)[1])
    other = run_dir_of(tmp_path, planned(seed=2)[1], "r2")
    shutil.copy(other / PLAN_FILE, run_dir / PLAN_FILE)
    with pytest.raises(
        ConfigError,
        match=r"plan.json: the plan \(24 trials\) is not the one run.json describes "
        r"\(24 trials, sha256 [0-9a-f]{12}\) \(was it copied from another run\?\)",
    ):
        load_manifest(run_dir)


@pytest.mark.parametrize(
    "damage,line,message",
    [
        # columns that do not line up, and a field of the wrong shape: its line (the file is one line here)
        (lambda d: {**d, "round": d["round"][:-1]}, ":1", "invalid plan: its columns do not line up"),
        (lambda d: {**d, "cell": [99] + d["cell"][1:]}, ":1", "invalid plan: its columns do not line up"),
        (lambda d: {**d, "trial": "0 1 2"}, ":1", "trial: invalid plan: Input should be a valid array"),
        (lambda d: {**d, "extra": 1}, ":1", "extra: invalid plan: Extra inputs are not permitted"),
    ],
)
def test_a_damaged_plan_json_is_a_clear_error(tmp_path: Path, damage, line, message) -> None:  # type: ignore[no-untyped-def]
    run_dir = run_dir_of(tmp_path, planned()[1])
    path = run_dir / PLAN_FILE
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    with pytest.raises(ConfigError) as err:
        load_manifest(run_dir)
    assert str(err.value).startswith(f"{path}{line}: ") and message in str(err.value)
    assert err.value.exit_code == 2


def test_not_json_at_all(tmp_path: Path) -> None:
    run_dir = run_dir_of(tmp_path, planned()[1])
    (run_dir / PLAN_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match=r"plan.json: invalid plan: .*\(was it written by another orch version\?\)"):
        load_manifest(run_dir)


def test_columns_and_trials_are_inverses() -> None:
    trials = [
        PlannedTrial(trial=0, round=0, cell="a=1", levels={"a": "1"}, is_baseline=True),
        PlannedTrial(trial=5, round=0, cell="a=2", levels={"a": "2"}),
        PlannedTrial(trial=2, round=1, cell="a=1", levels={"a": "1"}),  # same cell, not marked baseline
        PlannedTrial(trial=3, round=1, cell="a=1", levels={"a": "1"}, is_baseline=True),
    ]
    columns = columns_of(trials)
    assert len(columns.cells) == 3 and columns.cell == [0, 1, 2, 0]
    assert trials_of(columns) == trials
    assert columns.pairs() == [(0, "a=1"), (5, "a=2"), (2, "a=1"), (3, "a=1")]
    assert columns.sha256 == plan_digest(columns.pairs())


def test_the_digest_covers_order_and_cells() -> None:
    base = [(0, "a=1"), (1, "a=2")]
    assert plan_digest(base) == plan_digest(list(base))
    assert plan_digest(base) != plan_digest(base[::-1])
    assert plan_digest(base) != plan_digest([(0, "a=1"), (1, "a=3")])
    assert plan_digest(base) != plan_digest(base[:1])


def test_resume_check_accepts_the_same_plan_and_refuses_another(tmp_path: Path) -> None:
    plan, manifest = planned(seed=1)
    run_dir = run_dir_of(tmp_path, manifest)
    stored = load_manifest(run_dir, plan=False)
    check_same_plan(run_dir, stored, make_plan(plan.matrix, plan.testbed, 1, 3))  # rebuilt: the same
    with pytest.raises(UsageError) as err:
        check_same_plan(run_dir, stored, make_plan(plan.matrix, plan.testbed, 2, 3))
    assert err.value.exit_code == 2
    assert str(err.value) == (
        f"{run_dir}: the plan rebuilt from the matrix differs from the run's plan "
        "(24 trials now, 24 in the run) "
        "(resume needs the same orch version, matrix and inventory)"
    )
    with pytest.raises(UsageError, match=r"\(32 trials now, 24 in the run\)"):
        check_same_plan(run_dir, stored, make_plan(plan.matrix, plan.testbed, 1, 4))


def test_files_are_replaced_atomically_and_readable(tmp_path: Path) -> None:
    run_dir = run_dir_of(tmp_path, planned()[1])
    assert oct((run_dir / PLAN_FILE).stat().st_mode & 0o777) == oct(0o644)
    assert not [p for p in os.listdir(run_dir) if p.startswith(".")]
