"""summary.json: what the reports index lists for a run, and how the index gets one rebuilt.

Why a module below both: render.py writes the summary beside a run's report and site.py reads it
back for the index. The index must also rebuild a missing or stale summary from the journal, which
takes the whole report build (pandas, the statistics); the caller passes that rebuild in (a
Rebuild, normally render.fresh_summary), so the index does not sit above the report build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pydantic

from orchestrator.core.records import RunManifest
from orchestrator.report.series import SeriesPoint


class RunSummary(pydantic.BaseModel):
    """What the reports index lists for a run: written as summary.json beside its index.html,
    so the index never rebuilds a report (seconds for a big run) nor reads one back."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    headline: str = ""
    adaptive: str = ""  # an adaptive run's sequential decisions (Report.adaptive), beside the result
    completed: int = 0
    planned: int | None = 0  # None for a hunt: its search decides its trials as it goes
    failed: int = 0  # failed attempts (retries included), as the report header counts them
    status: str = ""
    suspect: tuple[str, ...] = ()  # why the data is suspect (void/failed trials, drift, overdispersion)
    gates: int = 0  # gate checks (gate x cell) the matrix asked for
    gates_failed: tuple[str, ...] = ()  # `gate @ cell: why` for each failed check (orch run exits 3)
    group: str = ""  # runs of the same matrix and inventory share it (trends, nightly regressions)
    testbed: str = ""
    series: list[SeriesPoint] = []  # per cell and metric, per-trial numbers (report.series)
    # the report's own (Report.not_restored): the hosts left changed when summary.json was written,
    # from status.json, the one source; the index and the live views read status.json itself
    not_restored: tuple[str, ...] = ()
    restore_with: str = ""


# A run's summary rebuilt from its journal (run dir, its loaded manifest): render.fresh_summary.
Rebuild = Callable[[Path, RunManifest], RunSummary]
