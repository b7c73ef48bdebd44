"""store.manifest: a --run-id as given (checked, returned as is, a hostile one quoted short), and a
new run id beside runs of the same second. Mutation survivors of store/manifest.py
(bench/README.md, round ten): its tests reached these only through commands that give neither."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.store import manifest
from orchestrator.store.manifest import check_run_id, new_run_id


def test_a_valid_run_id_is_returned_as_given() -> None:
    assert check_run_id("2026-12-06_r1.b") == "2026-12-06_r1.b"


def test_an_invalid_run_id_is_a_usage_error_quoting_at_most_120_characters() -> None:
    bad = "../" + "x" * 300
    with pytest.raises(UsageError) as info:
        check_run_id(bad)
    assert str(info.value) == (f"invalid run id {bad[:120]!r} (letters, digits, '.', '_' and '-' only, no '..')")
    assert info.value.exit_code == 2


class _Frozen(datetime):
    @classmethod
    def now(cls, tz: object = None) -> _Frozen:  # type: ignore[override]
        return cls(2026, 12, 6, 18, 0, 0, tzinfo=timezone.utc)


def test_a_new_run_id_beside_runs_of_the_same_second_is_numbered_from_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest, "datetime", _Frozen)
    assert new_run_id("my matrix", tmp_path) == "20261206-180000-my-matrix"
    (tmp_path / "20261206-180000-my-matrix").mkdir()
    assert new_run_id("my matrix", tmp_path) == "20261206-180000-my-matrix-2"
    (tmp_path / "20261206-180000-my-matrix-2").mkdir()
    assert new_run_id("my matrix", tmp_path) == "20261206-180000-my-matrix-3"
    assert new_run_id("../..", tmp_path) == "20261206-180000-run"  # nothing left of the name


def _run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text("{}")
    return folder


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            "typo",
            "{p}: not a run directory: no such file or folder (pass the folder `orch run` printed, "
            "e.g. reports/<run-id>)",
        ),
        ("empty", "{p}: not a run directory (no run.json) (pass the folder `orch run` printed, e.g. reports/<run-id>)"),
        ("reports", "{p}: not a run directory (no run.json) (it holds runs: pass one of them, e.g. {p}/r2)"),
        ("reports/r2/run.json", "{p}: a file of a run, not its folder (pass the run's folder: {p.parent})"),
    ],
)
def test_what_is_no_run_folder_is_said_with_what_to_pass(tmp_path: Path, given: str, said: str) -> None:
    _run(tmp_path / "reports" / "r1")
    _run(tmp_path / "reports" / "r2")
    (tmp_path / "empty").mkdir()
    path = tmp_path / given
    with pytest.raises(UsageError) as info:
        manifest.load_manifest(path)
    assert str(info.value) == said.format(p=path)


def test_a_field_missing_from_a_nested_object_is_said_at_that_objects_line(tmp_path: Path) -> None:
    """plan.json's second cell lacks its name: the error is at the line that cell's object starts on
    (line 5), not at the document's start."""
    from orchestrator.core.records import PlanColumns
    from orchestrator.errors import ConfigError

    path = tmp_path / "plan.json"
    path.write_text(
        '{\n"sha256": "x",\n"cells": [\n{"cell": "c0", "levels": {}},\n{"levels": {}}\n],\n'
        '"trial": [0, 1], "round": [0, 0], "cell": [0, 1]\n}\n'
    )
    with pytest.raises(ConfigError) as info:
        manifest._validated(path, PlanColumns)
    assert info.value.line == 5 and info.value.path == "cells.1.cell", (info.value.line, info.value.path)
