"""Run directories: ids, the manifest (run.json), the stored plan (plan.json), and safe paths.

A run id becomes a directory name under the reports folder, so it is checked strictly: no
separators, no `..`, nothing a shell or a browser could misread.

The planned trials live in plan.json, written once beside run.json when the run directory is
created; run.json keeps their count and digest. So rewriting run.json (at the end of a run,
on restore) never rewrites 100,000 trials, and `orch resume` checks that the rebuilt plan is
the run's plan by comparing two digests, without loading the stored one.

Nothing here needs a live `Plan`: making a new run's manifest from one, and comparing a rebuilt
plan with a run's, is store.planrecord. So loading a run (reports, index, status page) does not
depend on how plans are built.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import pydantic
from pydantic_core import ErrorDetails

from orchestrator.core.bounded import MiB, bounded_or_why, read_bounded_bytes
from orchestrator.core.filewords import invalid_words, json_line
from orchestrator.core.records import PlanColumns, PlannedCell, PlannedTrial, RunManifest, valid_run_id
from orchestrator.errors import ConfigError, UsageError
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.rundir import JOURNAL, PLAN_JSON, RUN_JSON, STATUS_JSON, RunDir

PLAN_FILE = PLAN_JSON  # the name callers imported before store.rundir existed


def check_run_id(run_id: str) -> str:
    """A --run-id as given: core.records.valid_run_id's rule, as a usage error (exit 2)."""
    try:
        return valid_run_id(run_id)
    except ValueError:
        raise UsageError(
            f"invalid run id {run_id[:120]!r}", hint="letters, digits, '.', '_' and '-' only, no '..'"
        ) from None


def new_run_id(name: str, reports_dir: Path) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "run"
    run_id, n = f"{stamp}-{slug}", 1
    while (reports_dir / run_id).exists():
        n += 1
        run_id = f"{stamp}-{slug}-{n}"
    return run_id


def plan_digest(pairs: Iterable[tuple[int, str]]) -> str:
    """sha256 over one "trial cell" line per planned trial: equal digests, same trials in the
    same order. What run.json keeps and `orch resume` compares."""
    return hashlib.sha256("".join(f"{t} {c}\n" for t, c in pairs).encode("utf-8")).hexdigest()


def load_manifest(run_dir: Path, *, plan: bool = True) -> RunManifest:
    """A run's manifest, with its planned trials from plan.json (plan=False: without them, for
    callers that need only their count or digest; a big plan takes a second to load).
    Its declared secret names are in it (`manifest.redactor`), for whatever renders it later."""
    path = RunDir(run_dir).run_json
    if not path.is_file():
        raise _not_a_run(run_dir)
    manifest = _inline_counted(_validated(path, RunManifest))
    if plan and not manifest.plan and manifest.plan_trials:
        return manifest.model_copy(update={"plan": trials_of(load_plan(run_dir, manifest))})
    return manifest


def _not_a_run(run_dir: Path) -> UsageError:
    """Why run_dir is no run, with what to pass instead: a file of a run (its index.html, its
    run.json) was told it had "no run.json"; the reports folder got the generic example; a path not
    there at all (a typo) says so."""
    given = Path(run_dir)
    if given.is_file() and RunDir(given.parent).run_json.is_file():
        return UsageError(f"{run_dir}: a file of a run, not its folder", hint=f"pass the run's folder: {given.parent}")
    try:
        runs = sorted(d.name for d in given.iterdir() if RunDir(d).run_json.is_file()) if given.is_dir() else []
    except OSError:
        runs = []
    hint = "pass the folder `orch run` printed, e.g. reports/<run-id>"
    if not given.exists() and not given.is_symlink():  # a typo'd run id is no broken run
        return UsageError(f"{run_dir}: not a run directory: no such file or folder", hint=hint)
    if runs:
        hint = f"it holds runs: pass one of them, e.g. {given / runs[-1]}"
    return UsageError(f"{run_dir}: not a run directory (no run.json)", hint=hint)


def _inline_counted(manifest: RunManifest) -> RunManifest:
    """An inline plan (written before plan.json existed) gives its own count and digest."""
    if not manifest.plan:
        return manifest
    pairs = [(p.trial, p.cell) for p in manifest.plan]
    return manifest.model_copy(update={"plan_trials": len(pairs), "plan_sha256": plan_digest(pairs)})


RUN_FILES = (RUN_JSON, JOURNAL, STATUS_JSON)  # any of them, even damaged, makes a folder a run's


def holds_run(folder: str | Path) -> bool:
    """Is `folder` a run's, whole or damaged: does it hold a run.json, a journal or a status.json
    (of any kind: a FIFO named run.json is a damaged run, not nothing)? A folder with none of them
    (a user's notes/, a backup) is not a run, and no view lists it. Stats only, never opens."""
    return any(os.path.lexists(os.path.join(folder, name)) for name in RUN_FILES)


def manifest_or_why(run_dir: Path) -> RunManifest | str:
    """load_manifest(plan=False)'s reading, saying why run.json cannot be read ("missing", "over
    128 MiB", "not JSON at line 3 (...)", "not an orch run manifest (...)") instead of raising:
    the status views and the runs index list such a folder with that word, where the status
    views left it out (a sweep whose run.json was damaged vanished from `orch status`). Bounded
    as load_manifest is (a stat first: a FIFO never blocks, a huge file is never opened)."""
    data = bounded_or_why(RunDir(run_dir).run_json, _CAPS[RUN_JSON], RUN_JSON)
    if not isinstance(data, bytes):
        return "missing" if data is None else data
    try:
        return _inline_counted(RunManifest.model_validate_json(data))
    except pydantic.ValidationError as exc:
        return invalid_words(exc, "an orch run manifest", "; another orch version's?")


_PLANNED = pydantic.TypeAdapter(list[PlannedTrial])


def trials_of(columns: PlanColumns) -> list[PlannedTrial]:
    """One PlannedTrial per trial of plan.json, in one validation pass (~0.5 s per 100,000)."""
    cells = [{"cell": x.cell, "levels": x.levels, "is_baseline": x.is_baseline} for x in columns.cells]
    return _PLANNED.validate_python(
        [
            {"trial": t, "round": r, **cells[i]}
            for t, r, i in zip(columns.trial, columns.round, columns.cell, strict=False)
        ]
    )


def load_plan(run_dir: Path, manifest: RunManifest) -> PlanColumns:
    """The planned trials of a run (a manifest loaded with plan=False names how many): from
    plan.json, or from run.json's inline list for a run written before plan.json existed."""
    if manifest.plan:
        return columns_of(manifest.plan)
    path = RunDir(run_dir).plan_json
    if not path.is_file():
        raise ConfigError(
            "cannot read the run's planned trials: no such file",
            file=str(path),
            hint=f"run.json plans {manifest.plan_trials} trials, kept in this file; copy a run directory whole",
        )
    columns = _validated(path, PlanColumns)
    n = len(columns.trial)
    misfit = _misfit(columns)
    if misfit is not None:
        text = read_bounded_bytes(path, _CAPS.get(path.name, 16 * MiB)).decode("utf-8", "replace")
        raise ConfigError(
            "invalid plan: its columns do not line up",
            file=str(path),
            line=json_line(text, misfit),
            hint="the file was edited or damaged; it is written once and never changes",
        )
    if (n, plan_digest(columns.pairs())) != (manifest.plan_trials, manifest.plan_sha256):
        raise ConfigError(
            f"the plan ({n} trials) is not the one run.json describes "
            f"({manifest.plan_trials} trials, sha256 {manifest.plan_sha256[:12]})",
            file=str(path),
            hint="was it copied from another run?",
        )
    return columns


def _misfit(columns: PlanColumns) -> tuple[str | int, ...] | None:
    """Where plan.json's columns do not line up (a JSON path, for its line): a column of another
    length than `trial`, or a trial's cell index past the cells; None when they do."""
    n = len(columns.trial)
    for name, column in (("round", columns.round), ("cell", columns.cell)):
        if len(column) != n:
            return (name,)
    bad = next((k for k, i in enumerate(columns.cell) if not 0 <= i < len(columns.cells)), None)
    return None if bad is None else ("cell", bad)


def columns_of(trials: Sequence[PlannedTrial]) -> PlanColumns:
    """The columns of plan.json for a list of planned trials (the inverse of trials_of)."""
    cells: dict[tuple[str, tuple[tuple[str, str], ...], bool], int] = {}
    index = [cells.setdefault((p.cell, tuple(p.levels.items()), p.is_baseline), len(cells)) for p in trials]
    return PlanColumns(
        sha256=plan_digest((p.trial, p.cell) for p in trials),
        cells=[PlannedCell(cell=c, levels=dict(lv), is_baseline=b) for c, lv, b in cells],
        trial=[p.trial for p in trials],
        round=[p.round for p in trials],
        cell=index,
    )


def save_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """run.json, atomically; the planned trials go to plan.json, written only when the run
    directory has none (when it is created, or when a run directory from before plan.json is
    first rewritten), and before run.json: a run.json without its trials always has its
    plan.json. The plan never changes, so run.json rewrites (end of run, restore) stay small."""
    update: dict[str, object] = {"plan": []}
    files = RunDir(run_dir)
    stored = files.plan_json.exists()
    if manifest.plan and not (stored and manifest.plan_sha256):  # count and digest from the trials
        columns = columns_of(manifest.plan)
        update |= {"plan_trials": len(columns.trial), "plan_sha256": columns.sha256}
        if not stored:
            write_json_atomic(files.plan_json, columns)
    write_json_atomic(files.run_json, manifest.model_copy(update=update))


M = TypeVar("M", bound=pydantic.BaseModel)


# A run file is named by a user's path: a bounded read of a regular file, never /dev/zero or a
# FIFO. plan.json holds ~20 bytes a trial (10^6 trials at most); run.json two config files and
# host facts (an old run's inline plan ~100 bytes a trial).
_CAPS = {RUN_JSON: 128 * MiB, PLAN_JSON: 128 * MiB}


def _validated(path: Path, model: type[M]) -> M:
    data = read_bounded_bytes(path, _CAPS.get(path.name, 16 * MiB))
    try:
        return model.model_validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"invalid {_KIND.get(path.name, 'file')}: {first['msg']}",
            file=str(path),
            line=_line(data, first),
            path=where,
            hint="was it written by another orch version?",
        ) from None


_KIND = {RUN_JSON: "run manifest", PLAN_JSON: "plan"}


def _line(data: bytes, error: ErrorDetails) -> int | None:
    """The line of a run file's wrong field; of the object it is missing from when it is missing;
    of the document's start when the whole is of the wrong type (a list, a number). A file that is
    not JSON: pydantic's words name its line."""
    loc = tuple(error["loc"])
    if error["type"] == "missing":
        loc = loc[:-1]
    return None if error["type"] == "json_invalid" else json_line(data.decode("utf-8", "replace"), loc)
