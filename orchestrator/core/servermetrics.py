"""Per-trial server metrics from scrapes before, during and after the repro (PURE).

A server's counters and histograms are cumulative since it started, so only differences between
a scrape just before the measured repro and one just after it belong to the trial: counters
become deltas, histograms quantiles of their bucket deltas (what Prometheus' `histogram_quantile`
over `increase(..._bucket)` computes), gauges summaries (mean/max of the samples taken during the
repro, else the values before and after). A counter that went down was reset (the server
restarted mid-trial): its after value is the increase, as in Prometheus' `increase`.

Names in the trial record: `server.<endpoint>.<metric>.<stat>`, e.g.
`server.decode.sglang:time_to_first_token_seconds.p90`; `<metric>` keeps Prometheus' name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from orchestrator.core.promtext import Histogram, Scrape
from orchestrator.core.records import SERVER_PREFIX, MetricValue

PREFIX = SERVER_PREFIX
QUANTILES = (0.5, 0.9, 0.99)
# the counters of requests served: an SGLang worker's (finished generate/chat requests; health
# checks are GETs) and the SGLang router's (every request it routed)
REQUEST_COUNTERS = ("sglang:num_requests_total", "smg_router_requests_total")


def counter_delta(before: float, after: float) -> float:
    """The increase of a counter over the trial (a reset counts from zero)."""
    return after - before if after >= before else after


def bucket_deltas(before: Histogram | None, after: Histogram) -> Histogram:
    """The observations made between two scrapes of one histogram (a reset counts from zero)."""
    if before is None or after.count < before.count:
        return after
    old = dict(before.buckets)
    buckets = tuple((le, max(0.0, c - old.get(le, 0.0))) for le, c in after.buckets)
    return Histogram(buckets, after.count - before.count, after.total - before.total)


def quantile(q: float, hist: Histogram) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q*n;
    the +Inf bucket answers its lower bound; None without observations."""
    buckets = [b for b in hist.buckets if not math.isnan(b[0])]
    if not buckets or buckets[-1][0] != math.inf:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == math.inf:
                return lower_bound if len(buckets) > 1 else None
            if bound <= 0 or count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return buckets[-2][0] if len(buckets) > 1 else None


def trial_values(
    endpoint: str, before: Scrape, after: Scrape, samples: Sequence[Scrape] = ()
) -> dict[str, MetricValue]:
    """The numbers one endpoint contributes to a trial record."""
    out: dict[str, MetricValue] = {}
    base = f"{PREFIX}{endpoint}."
    for name, value in after.counters.items():  # a series first seen after the repro started at 0
        out[f"{base}{name}.delta"] = _num(counter_delta(before.counters.get(name, 0.0), value))
    for name, hist in after.histograms.items():
        delta = bucket_deltas(before.histograms.get(name), hist)
        unit = "s" if name.endswith("_seconds") else ""
        out[f"{base}{name}.count"] = _num(delta.count)
        if delta.count > 0:
            out[f"{base}{name}.mean"] = _num(delta.total / delta.count, unit)
        for q in QUANTILES:
            got = quantile(q, delta)
            if got is not None:
                out[f"{base}{name}.p{q * 100:g}"] = _num(got, unit)
    for name, value in after.gauges.items():
        during = [s.gauges[name] for s in samples if name in s.gauges]
        if during:
            out[f"{base}{name}.mean"] = _num(math.fsum(during) / len(during))
            out[f"{base}{name}.max"] = _num(max(during))
        else:
            if name in before.gauges:
                out[f"{base}{name}.before"] = _num(before.gauges[name])
            out[f"{base}{name}.after"] = _num(value)
    return out


def missing(endpoint: str, reason: str) -> dict[str, MetricValue]:
    """A failed scrape: one marker in the record (value absent, the reason as its unit), so the
    trial still counts and the report can say which endpoint was not measured."""
    return {f"{PREFIX}{endpoint}.missing": MetricValue(kind="number", value=None, unit=reason[:200])}


def requests_counted(values: Mapping[str, MetricValue], endpoints: Iterable[str]) -> float | None:
    """How many requests these endpoints (orch's own servers) counted during the repro: the sum of
    their request counters' deltas; None when that cannot be told: an endpoint not measured (a
    failed scrape: the requests may have gone there) or no request counter kept by any."""
    total, seen = 0.0, False
    for endpoint in endpoints:
        if f"{PREFIX}{endpoint}.missing" in values:
            return None
        for counter in REQUEST_COUNTERS:
            got = values.get(f"{PREFIX}{endpoint}.{counter}.delta")
            if got is not None and got.value is not None:
                total, seen = total + got.value, True
    return total if seen else None


def unwatched_roles(
    values: Mapping[str, MetricValue], endpoints_of: Mapping[str, Iterable[str]], router_role: str
) -> list[str]:
    """The roles a repro could send requests to that no request counter watched: a worker role none
    of whose endpoints counted requests (not measured, or no counter kept). A repro may address a
    worker directly (`{prefill_url}`), so a zero elsewhere does not say it went astray. The router
    may go unwatched: what it routes reaches the workers, whose counters see it."""
    return [
        role
        for role, endpoints in endpoints_of.items()
        if role != router_role and requests_counted(values, list(endpoints)) is None
    ]


def is_server_metric(name: str) -> bool:
    return name.startswith(PREFIX)


def _num(value: float, unit: str = "") -> MetricValue:
    return MetricValue(kind="number", value=round(value, 9) if math.isfinite(value) else None, unit=unit)
