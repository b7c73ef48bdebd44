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
    return record.model_copy(update=update) if update else record
