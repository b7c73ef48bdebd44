"""hunt-handed.json: every configuration a hunt handed out, each written before its first trial
(sweep.hunt.HuntSource). Why: the trial a killed controller was running is in no journal, and
past a hunt's first wave its configuration is in no plan; without this list the resume and `orch
restore` that follow take that trial's env file for someone else's edit (sweep.drift).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.core import jsontext
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.rundir import RunDir


def write_handed(path: Path, configurations: list[dict[str, str]]) -> None:
    """The whole list, each configuration as its factors' levels (atomic, durable: a trial's env
    file is written only after it)."""
    write_json_atomic(path, {"configurations": configurations})


def handed_levels(run_dir: Path | None) -> list[dict[str, str]]:
    """The levels of every configuration hunt-handed.json lists; none without the file. A file
    that cannot be read lists none: a trial's env file is then judged as before the list existed
    (set aside by a restore, refused by a resume), the safe side of the doubt."""
    if run_dir is None:
        return []
    try:
        data = jsontext.loads(RunDir.of(run_dir).hunt_handed.read_text(encoding="utf-8"))
        return [{str(k): str(v) for k, v in levels.items()} for levels in data["configurations"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
