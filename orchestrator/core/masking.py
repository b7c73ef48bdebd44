"""PURE: a trial record as orch may store it, every free text passed through the run's Redactor.

The journal line is written once and served as it is (`orch serve` hands out journal.jsonl), so
what a repro printed (its output tail), the command it ran and the failure it caused are masked
before the record is written, not only when a report renders it. The env is masked by name
where the record is made (sweep.phases.redact_env)."""

from __future__ import annotations

from orchestrator.core.records import ReproOutcome, TrialRecord
from orchestrator.core.redact import Redactor

_OUTCOMES = ("repro", "warmup")  # the record's repro-like fields (warmup: a repro.warmup run)


def mask_record(record: TrialRecord, redactor: Redactor) -> TrialRecord:
    """The record with its command lines, output tails and failure texts masked."""
    text = redactor.text
    update: dict[str, object] = {}
    for name in _OUTCOMES:
        outcome = getattr(record, name, None)
        if isinstance(outcome, ReproOutcome):
            update[name] = outcome.model_copy(
                update={
                    "command": text(outcome.command),
                    "stdout_tail": text(outcome.stdout_tail),
                    "left_behind": [text(line) for line in outcome.left_behind],
                }
            )
    if record.failure is not None:
        update["failure"] = record.failure.model_copy(
            update={"message": text(record.failure.message), "detail": text(record.failure.detail)}
        )
    # a lost server scrape's or GPU reading's marker keeps why in its unit ("GET URL: refused"); a
    # unit written in the matrix is masked alike (it changes only where it holds a secret)
    units = {name: m.model_copy(update={"unit": text(m.unit)}) for name, m in record.metrics.items() if m.unit}
    if any(units[name].unit != record.metrics[name].unit for name in units):
        update["metrics"] = {**record.metrics, **units}
    return record.model_copy(update=update) if update else record
