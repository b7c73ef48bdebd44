"""The report's server-metrics table: per cell, the median over its completed trials of each
server metric (core.servermetrics) and GPU reading (core.gpustat).

Descriptive only: these numbers explain a cell (its throughput, TTFT quantiles, queue depth,
power) and are never tested, so they add no findings and leave every finding's multiplicity
correction as it was. The ones a reader looks at first lead the table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from orchestrator.core.records import lost_reading, scraped
from orchestrator.report.model import ServerRow, ServerTable
from orchestrator.store.journal import TrialRow

FIRST = (  # the order a reader wants: throughput, TTFT, queue depth, then the rest
    "gen_throughput",
    "num_requests_total",
    "time_to_first_token_seconds.p50",
    "time_to_first_token_seconds.p90",
    "time_to_first_token_seconds.p99",
    "num_queue_reqs",
    "num_running_reqs",
    "e2e_request_latency_seconds.p50",
    "e2e_request_latency_seconds.p99",
)
MAX_ROWS = 300


def server_table(data: Sequence[TrialRow]) -> ServerTable | None:
    """None when no trial carries a server metric (the matrix has no `metrics:`)."""
    values: dict[str, dict[str, list[float]]] = {}
    missing: dict[str, int] = {}
    for row in data:
        gap = False
        for point in row.metrics:
            if not scraped(point.name):
                continue
            if lost_reading(point.name):
                gap = True
            elif point.value is not None:
                values.setdefault(point.name, {}).setdefault(row.cell, []).append(float(point.value))
        if gap:
            missing[row.cell] = missing.get(row.cell, 0) + 1
    if not values and not missing:
        return None
    names = sorted(values, key=_order)[:MAX_ROWS]
    rows = [
        ServerRow(
            metric=name,
            unit=_unit(name),
            median={cell: statistics.median(v) for cell, v in values[name].items()},
            trials={cell: len(v) for cell, v in values[name].items()},
        )
        for name in names
    ]
    return ServerTable(rows=rows, missing=missing)


def _order(name: str) -> tuple[int, str]:
    rank = next((i for i, key in enumerate(FIRST) if key in name), len(FIRST))
    return rank, name


def _unit(name: str) -> str:
    if "_seconds." in name and not name.endswith((".count", ".delta")):
        return "s"
    for suffix, unit in (("energy_j", "J"), ("power_w", "W"), ("_mib", "MiB"), ("_mhz", "MHz"), ("_c.", "°C")):
        if suffix in name:
            return unit
    if "gen_throughput" in name:
        return "tok/s"
    return ""
