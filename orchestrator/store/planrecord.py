"""A live plan (core.steps.Plan) as its run records it: the manifest of a new run, its planned trials
and their digest, and the check that a rebuilt plan is the run's plan (`orch resume`).

Apart from store.manifest, which reads and writes run.json and plan.json and never needs a
`Plan`: whoever only loads a run (the reports, the index, the live status page) does not depend
on how plans are built. Only the code that starts or resumes a run imports this module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pydantic

from orchestrator import __version__
from orchestrator.core.inventory import Host, Inventory
from orchestrator.core.records import PlannedTrial, RunManifest
from orchestrator.core.steps import Plan
from orchestrator.errors import UsageError


def make_manifest(
    plan: Plan, inventory: Inventory, run_id: str, started: str, testbeds: Sequence[str] = ()
) -> RunManifest:
    """The manifest of a new run; `testbeds` names every testbed of a parallel run (default:
    the plan's one)."""
    m = plan.matrix
    redact_text = m.redactor.text
    names = list(testbeds) or [plan.testbed.name]
    metrics = {s.name: s.kind for s in m.repro.metrics} | {c.name: "number" for c in m.collect}
    units = {s.name: s.unit for s in m.repro.metrics if s.unit} | {c.name: c.unit for c in m.collect if c.unit}
    return RunManifest(
        run_id=run_id,
        name=m.name,
        description=m.description,
        orch_version=__version__,
        matrix_path=m.path,
        matrix_text=redact_text(m.text),
        matrix_sha256=m.sha256,
        inventory_path=inventory.path,
        inventory_text=redact_text(inventory.text),
        inventory_sha256=inventory.sha256,
        texts_redacted=redact_text(m.text) != m.text or redact_text(inventory.text) != inventory.text,
        secret_names=sorted(m.redactor.declared),
        gates=list(m.gates),
        testbed=",".join(names),
        testbeds=names,
        adaptive=m.adaptive is not None,
        hunt=m.hunt is not None,
        hunt_planned_numbers=m.hunt is not None,  # sweep/hunt.py: the first wave under plan.json's numbers
        seed=plan.seed,
        order=m.order,
        replicates=plan.replicates,
        factors={f.name: list(f.level_names) for f in m.factors},
        baseline=dict(m.baseline),
        metrics=metrics,
        metric_units=units,
        plan=planned_trials(plan),
        plan_trials=len(plan.steps),
        plan_sha256=digest_of(plan),
        hosts={role: _describe_host(h) for role, h in plan.testbed.hosts.items()},
        testbed_hosts=_every_testbed(inventory, names),
        started=started,
    )


def planned_trials(plan: Plan) -> list[PlannedTrial]:
    """The plan's trials as the manifest records them (built in one validation pass: a model
    per trial costs a second per 100,000 when made one by one)."""
    levels = {c: c.as_dict() for c in plan.cells}
    return _PLANNED.validate_python(
        [
            {
                "trial": t.index,
                "round": t.round,
                "cell": t.cell.id,
                "levels": levels.get(t.cell) or t.cell.as_dict(),
                "is_baseline": t.is_baseline,
            }
            for t in (s.trial for s in plan.steps)
        ]
    )


_PLANNED = pydantic.TypeAdapter(list[PlannedTrial])


def digest_of(plan: Plan) -> str:
    """store.manifest.plan_digest of a plan (spelled out: it runs on every resume, over every trial)."""
    text = "".join([f"{s.trial.index} {s.trial.cell.id}\n" for s in plan.steps])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_same_plan(run_dir: Path, manifest: RunManifest, plan: Plan) -> None:
    """`orch resume` goes on only with the plan the run started with: the same trials, cells
    and order (a different orch version, matrix or inventory could change them)."""
    if len(plan.steps) != manifest.plan_trials or digest_of(plan) != manifest.plan_sha256:
        raise UsageError(
            f"{run_dir}: the plan rebuilt from the matrix differs from the run's plan "
            f"({len(plan.steps)} trials now, {manifest.plan_trials} in the run)",
            hint="resume needs the same orch version, matrix and inventory",
        )


def _every_testbed(inventory: Inventory, names: Sequence[str]) -> dict[str, dict[str, dict[str, str]]]:
    """A parallel run's every testbed described (core.hostfacts: one per role hid a testbed's other
    GPUs); none for a run on one testbed, whose `hosts` says it all (nor for a name the inventory
    lacks: a manifest made for a benchmark's made-up testbeds)."""
    if len(names) < 2:
        return {}
    beds = [inventory.testbeds[n] for n in names if n in inventory.testbeds]
    return {tb.name: {role: _describe_host(h) for role, h in tb.hosts.items()} for tb in beds}


def _describe_host(h: Host) -> dict[str, str]:
    return {
        "address": h.ssh.host if h.ssh else "local",
        "transport": h.transport,
        "env_file": h.env_file,
        "dialect": h.dialect,
        "units": ", ".join(u.name for u in h.units),
        "health": h.health,
    }
