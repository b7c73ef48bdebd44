"""hunt-handed.json, the list of every configuration a hunt handed out (store.hunthanded), without
processes. The fifteenth mutation round found it proven only by a simulator fault test: the
trial a killed controller was running is in no journal, and past a hunt's first wave its
configuration is in no plan, so without this list the resume and `orch restore` take that
trial's env file for someone else's edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.hunt_runs import small_hunt

from orchestrator.core.config import read_matrix
from orchestrator.core.matrix import hunt_cell
from orchestrator.store.hunthanded import handed_levels, write_handed
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.hunt import HuntSource
from orchestrator.sweep.runner import journaled_envs

REPO = Path(__file__).resolve().parents[2]


def _listed(run_dir: Path) -> list[dict[str, str]]:
    return json.loads(RunDir.of(run_dir).hunt_handed.read_text())["configurations"]


def test_each_configuration_is_listed_before_its_first_trial_is_handed_out(tmp_path: Path) -> None:
    matrix = small_hunt(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    source = HuntSource(matrix, run_dir=run_dir)
    first = source.next()
    assert first is not None
    assert _listed(run_dir) == [dict(first.trial.cell.levels)]  # on disk when the step is handed out
    steps = [first]
    while len(steps) < 12 and (step := source.next()) is not None:
        steps.append(step)
        assert dict(step.trial.cell.levels) in _listed(run_dir)
    handed = {tuple(sorted(s.trial.cell.levels)) for s in steps}
    listed = _listed(run_dir)
    assert len(listed) == len(handed) == len({tuple(sorted(c.items())) for c in listed})  # each once


def test_a_resumed_hunt_knows_what_the_killed_one_handed_out(tmp_path: Path) -> None:
    matrix = small_hunt(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    killed = HuntSource(matrix, run_dir=run_dir)
    for _ in range(3):
        assert killed.next() is not None
    resumed = HuntSource(matrix, run_dir=run_dir)
    assert resumed.handed == killed.handed and len(resumed.handed) >= 1
    assert HuntSource(matrix).handed == set()  # no run folder: nothing read, nothing written
    assert HuntSource(matrix).next() is not None and not (tmp_path / "hunt-handed.json").exists()


def test_the_list_is_read_back_as_text_levels_and_a_broken_one_lists_none(tmp_path: Path) -> None:
    write_handed(RunDir.of(tmp_path).hunt_handed, [{"overlap": "on", "cuda_graph": "off"}])
    assert handed_levels(tmp_path) == [{"overlap": "on", "cuda_graph": "off"}]
    assert handed_levels(None) == []
    for broken in ("not json", "[]", '{"configurations": 3}', '{"configurations": [1]}', '{"other": []}'):
        RunDir.of(tmp_path).hunt_handed.write_text(broken)
        assert handed_levels(tmp_path) == [], broken
    RunDir.of(tmp_path).hunt_handed.write_text('{"configurations": [{"overlap": true, "n": 3}]}')
    assert handed_levels(tmp_path) == [{"overlap": "True", "n": "3"}]
    assert handed_levels(tmp_path / "missing") == []


def test_the_way_back_judges_a_handed_out_configuration_as_the_runs_own(tmp_path: Path) -> None:
    """A configuration only the list names (its trial was running when the controller died) has
    its env among the run's own; a matrix that is not a hunt has none from the list."""
    matrix = small_hunt(tmp_path)
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    assert journaled_envs(matrix, run) == []  # no journal, no list
    assert matrix.hunt is not None
    config = next(c for c in range(1, 16) if c != matrix.hunt.config_of(dict(matrix.hunt.failing)))
    levels = dict(hunt_cell(matrix, config).levels)
    write_handed(run.hunt_handed, [levels])
    assert journaled_envs(matrix, run) == [hunt_cell(matrix, config).env]
    plain = read_matrix(REPO / "matrices" / "overlap_ablation.yaml")
    assert journaled_envs(plain, run) == []


@pytest.mark.parametrize("count", [1, 2])
def test_a_configuration_handed_out_again_is_not_listed_twice(tmp_path: Path, count: int) -> None:
    matrix = small_hunt(tmp_path)
    source = HuntSource(matrix, run_dir=tmp_path)
    config = 5
    for _ in range(count):
        source._note_handed(config)
    assert _listed(tmp_path) == [dict(hunt_cell(matrix, config).levels)]
