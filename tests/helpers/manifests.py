"""Planned runs and their manifests, as the run-folder tests build them (tests/test_runs.py,
tests/test_session_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.records import RunManifest
from orchestrator.core.steps import Plan
from orchestrator.store.planrecord import make_manifest

REPO = Path(__file__).resolve().parents[2]


def planned(seed: int = 1, replicates: int = 3) -> tuple[Plan, RunManifest]:
    matrix = read_matrix(REPO / "matrices/overlap_ablation.yaml")
    inventory = read_inventory(REPO / "inventory/local.yaml")
    plan = make_plan(matrix, inventory.testbed(None), seed, replicates)
    return plan, make_manifest(plan, inventory, "r1", "2026-05-09T07:00:00.000+00:00")


def old_format(tmp_path: Path, manifest: RunManifest) -> Path:
    """A run directory as orch wrote it before plan.json: every planned trial inline in run.json,
    no count or digest fields."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    data = json.loads(manifest.model_dump_json())
    del data["plan_trials"], data["plan_sha256"]
    (run_dir / "run.json").write_text(json.dumps(data, indent=2))
    return run_dir
