"""Run directories: ids, the manifest (run.json), and safe paths.

A run id becomes a directory name under the reports folder, so it is checked strictly: no
separators, no `..`, nothing a shell or a browser could misread.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pydantic

from . import __version__
from .config import Inventory
from .errors import ConfigError, UsageError
from .journal import write_json_atomic
from .plan import Plan
from .redact import declare as declare_secrets, declared_names, redact_text
from .records import PlannedTrial, RunManifest

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id) or ".." in run_id:
        raise UsageError(f"invalid run id {run_id!r}", hint="letters, digits, '.', '_' and '-' only, no '..'")
    return run_id


def new_run_id(name: str, reports_dir: Path) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "run"
    run_id, n = f"{stamp}-{slug}", 1
    while (reports_dir / run_id).exists():
        n += 1
        run_id = f"{stamp}-{slug}-{n}"
    return run_id


def make_manifest(plan: Plan, inventory: Inventory, run_id: str, started: str) -> RunManifest:
    m = plan.matrix
    metrics = {s.name: s.kind for s in m.repro.metrics} | {c.name: "number" for c in m.collect}
    return RunManifest(
        run_id=run_id, name=m.name, description=m.description, orch_version=__version__,
        matrix_path=m.path, matrix_text=redact_text(m.text), matrix_sha256=m.sha256,
        inventory_path=inventory.path, inventory_text=redact_text(inventory.text),
        inventory_sha256=inventory.sha256,
        texts_redacted=redact_text(m.text) != m.text or redact_text(inventory.text) != inventory.text,
        secret_names=sorted(declared_names()), testbed=plan.testbed.name, seed=plan.seed,
        order=m.order, replicates=plan.replicates,
        factors={f.name: list(f.level_names) for f in m.factors}, baseline=dict(m.baseline),
        metrics=metrics,  # type: ignore[arg-type]
        plan=[PlannedTrial(trial=s.trial.index, round=s.trial.round, cell=s.trial.cell.id,
                           levels=s.trial.cell.as_dict(), is_baseline=s.trial.is_baseline)
              for s in plan.steps],
        hosts={role: _describe_host(h) for role, h in plan.testbed.hosts.items()},
        started=started,
    )


def _describe_host(h) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {
        "address": h.ssh.host if h.ssh else "local", "transport": h.transport,
        "env_file": h.env_file, "dialect": h.dialect, "units": ", ".join(u.name for u in h.units),
        "health": h.health,
    }


def load_manifest(run_dir: Path) -> RunManifest:
    """A run's manifest. Its declared secret names are redacted from then on in this process,
    whichever command loaded it (report, export, resume, restore, serve)."""
    path = run_dir / "run.json"
    if not path.is_file():
        raise UsageError(f"{run_dir}: not a run directory (no run.json)",
                         hint="pass the folder `orch run` printed, e.g. reports/<run-id>")
    try:
        manifest = RunManifest.model_validate_json(path.read_bytes())
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid run manifest: {first['msg']}", file=str(path), path=where,
                          hint="was it written by another orch version?") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    declare_secrets(manifest.secret_names)
    return manifest


def save_manifest(run_dir: Path, manifest: RunManifest) -> None:
    write_json_atomic(run_dir / "run.json", manifest)
