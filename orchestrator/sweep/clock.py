"""The sweep's wall-clock stamps (journal records, lock owners)."""

from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    """UTC, millisecond precision: journal lines sort and compare as text."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
