"""The commands a sweep runs for its matrix (the repro, its warm-up, collectors) with their
{placeholders} filled in: one module for the trial loop (sweep.phases) and for the check, before
any host is touched, that each filled-in command can run at all (sweep.prepare). It imports no
more than core.model, so the trial loop's import chain stays as short as it was."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping

from orchestrator.core.inventory import Testbed
from orchestrator.core.model import Trial


def render_command(template: str, values: dict[str, str]) -> str:
    """Fill {placeholders}, shell-quoting every value (commands run through /bin/sh)."""
    return template.format_map({k: shlex.quote(v) for k, v in values.items()})


def command_values(
    seed: int, testbed: Testbed, run_dir: str, trial_dir: str, trial: Trial | None, client: Mapping[str, str]
) -> dict[str, str]:
    """What each placeholder means for one trial (`trial` None: a collector's, which has no cell;
    `client`: what the cell's client factors fill, e.g. {concurrency: "32"}). The folders are
    absolute: the repro runs inside the run folder, where a relative `--out` names nothing."""
    values = {
        "run_dir": os.path.abspath(run_dir),
        "trial_dir": os.path.abspath(trial_dir),
        "seed": str(seed),
        "python": sys.executable,
        "testbed": testbed.name,
    }
    if trial is not None:
        values.update(
            cell=trial.cell.id,
            trial=str(trial.index),
            round=str(trial.round),
            trial_seed=str((seed * 1_000_003 + trial.index) % 2**31),
        )
        values.update(client)
    for role in testbed.roles:
        values[f"{role}_url"] = testbed.first(role).url
    return values
