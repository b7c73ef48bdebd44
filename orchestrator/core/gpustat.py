"""GPU telemetry of one host from `nvidia-smi` and the kernel log (PURE: parsing and per-trial math).

The edge runs one command per host before and after the repro (QUERY_COMMAND): nvidia-smi's CSV
(no header, no units) and the count of `NVRM: Xid` lines in the kernel log since boot. The trial
gets the energy used (the driver's cumulative energy counter, in mJ, differenced), power, memory,
clocks and temperature after the repro, the throttle reasons seen (a bitmask, OR over GPUs and
both readings), and the XID errors logged during the trial (the count differenced).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.core.records import GPU_PREFIX, MetricValue
from orchestrator.errors import ScrapeError

FIELDS = (
    "index",
    "power.draw",
    "total_energy_consumption",
    "memory.used",
    "memory.total",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "utilization.gpu",
    "clocks_throttle_reasons.active",
)
XID_MARK = "--xid--"
PROBE_COMMAND = "command -v nvidia-smi"
QUERY_COMMAND = (
    f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv,noheader,nounits; echo {XID_MARK}; "
    "{ journalctl -k -b -q --no-pager 2>/dev/null || dmesg 2>/dev/null || echo NO_KERNEL_LOG; } "
    "| awk '/NVRM: Xid/ {n++} /^NO_KERNEL_LOG$/ {u=1} END {print u ? \"?\" : n+0}'"
)  # "?" when no kernel log is readable: the XID count is then left out, never reported as 0
PREFIX = GPU_PREFIX
MAX_GPUS = 64


@dataclass(frozen=True)
class GpuRow:
    index: int
    power_w: float | None
    energy_mj: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    temperature_c: float | None
    utilization_pct: float | None
    throttle_reasons: int | None  # bitmask (nvmlClocksEventReasons)


@dataclass(frozen=True)
class GpuReading:
    gpus: tuple[GpuRow, ...]
    xid_lines: int | None  # NVRM: Xid lines in the kernel log since boot (None: log not readable)


def parse_reading(text: str, where: str = "nvidia-smi") -> GpuReading:
    """QUERY_COMMAND's output -> one reading. Fields a GPU does not support print `[N/A]` or
    `[Not Supported]`: those are None, never a failure."""
    query, _, xid = text.partition(XID_MARK)
    rows = [_row(line, where) for line in query.splitlines() if line.strip()]
    if not rows:
        raise ScrapeError(f"{where}: no GPU rows in nvidia-smi's output", detail=text[-500:])
    if len(rows) > MAX_GPUS:
        raise ScrapeError(f"{where}: {len(rows)} GPU rows, more than {MAX_GPUS}")
    xid_text = xid.strip().splitlines()
    xid_count = int(xid_text[-1]) if xid_text and xid_text[-1].strip().isdigit() else None
    return GpuReading(tuple(rows), xid_count)


def _row(line: str, where: str) -> GpuRow:
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(FIELDS):
        raise ScrapeError(f"{where}: expected {len(FIELDS)} fields, got {len(cells)}: {line[:200]!r}")
    index = _number(cells[0])
    if index is None:
        raise ScrapeError(f"{where}: no GPU index in {line[:200]!r}")
    power, energy, used, total, sm, mem, temp, util = (_number(c) for c in cells[1:9])
    return GpuRow(int(index), power, energy, used, total, sm, mem, temp, util, _bitmask(cells[9]))


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:  # [N/A], [Not Supported], [Unknown Error]
        return None
    return value if math.isfinite(value) else None


def _bitmask(cell: str) -> int | None:
    try:
        return int(cell, 16) if cell.lower().startswith("0x") else int(cell)
    except ValueError:
        return None


def trial_values(role: str, before: GpuReading, after: GpuReading) -> dict[str, MetricValue]:
    """The numbers a host's GPUs contribute to a trial record (summed or worst over its GPUs)."""
    base = f"{PREFIX}{role}."
    out: dict[str, MetricValue] = {}
    start = {g.index: g.energy_mj for g in before.gpus}
    used = [g.energy_mj - e for g in after.gpus if g.energy_mj is not None and (e := start.get(g.index)) is not None]
    if used:
        out[base + "energy_j"] = _num(sum(max(0.0, u) for u in used) / 1000.0, "J")
    _put(out, base + "power_w", [g.power_w for g in after.gpus], sum, "W")
    _put(out, base + "memory_used_mib.max", [g.memory_used_mib for g in after.gpus], max, "MiB")
    _put(out, base + "sm_clock_mhz.min", [g.sm_clock_mhz for g in after.gpus], min, "MHz")
    _put(out, base + "mem_clock_mhz.min", [g.mem_clock_mhz for g in after.gpus], min, "MHz")
    _put(out, base + "temperature_c.max", [g.temperature_c for g in after.gpus], max, "C")
    _put(out, base + "utilization_pct.mean", [g.utilization_pct for g in after.gpus], _mean, "%")
    masks = [g.throttle_reasons for g in (*before.gpus, *after.gpus) if g.throttle_reasons is not None]
    if masks:
        combined = 0
        for m in masks:
            combined |= m
        out[base + "throttle_reasons"] = _num(float(combined))
    if before.xid_lines is not None and after.xid_lines is not None:
        out[base + "xid_errors"] = _num(float(max(0, after.xid_lines - before.xid_lines)))
    return out


def _put(
    out: dict[str, MetricValue],
    name: str,
    values: Sequence[float | None],
    how: Callable[[Sequence[float]], float],
    unit: str,
) -> None:
    known = [v for v in values if v is not None]
    if known:
        out[name] = _num(float(how(known)), unit)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _num(value: float, unit: str = "") -> MetricValue:
    """A finite number, or absent (a sum of huge readings can overflow; MetricValue refuses inf)."""
    return MetricValue(kind="number", value=round(value, 6) if math.isfinite(value) else None, unit=unit)
