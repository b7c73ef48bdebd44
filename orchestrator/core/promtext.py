"""Prometheus text exposition -> typed samples (PURE: the parser does no I/O).

Parsed with prometheus-client's own parser, never by hand: the format has escapes, label
quoting, `_created` and `_total` conventions and comments a hand parser gets wrong. Series of
one metric are aggregated over their label sets (SGLang labels every series with the model,
tp/dp rank...): counters and histogram buckets are summed (Prometheus' `sum`), gauges averaged.
Only the families a caller keeps are built, so a node exporter's thousands of series cost little.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.errors import ScrapeError

MAX_TEXT = 8_000_000  # characters of one scrape (a busy node exporter is ~1 MB)
MAX_FAMILIES = 200  # kept families per endpoint: each becomes several numbers in every trial record
# Kept lines of one scrape (each series of a kept family is a line, with its HELP and TYPE): the
# parser costs ~40 us and ~0.5 KB a line, and runs before and after every repro and at each
# sample. A large SGLang or node exporter keeps a few thousand; 8 MB of one gauge's label sets is
# 210,000 (8.5 s and ~120 MB a parse: four such endpoints took a sweep past 1 GB).
MAX_KEPT_LINES = 20_000


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: (upper bound, count of observations <= bound), +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    total: float  # the `_sum` series


@dataclass(frozen=True)
class Scrape:
    """One scrape of one endpoint, aggregated per metric name (counters keep their `_total`)."""

    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    @property
    def names(self) -> int:
        return len(self.counters) + len(self.gauges) + len(self.histograms)


def name_filter(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate on metric names from shell-style globs (`sglang:*`, `smg_*`)."""
    compiled = [fnmatch.translate(p) for p in patterns]
    regex = re.compile("|".join(f"(?:{c})" for c in compiled)) if compiled else None
    return lambda name: bool(regex and regex.match(name))


SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_info", "_gcount", "_gsum")


def relevant_lines(text: str, keep: Callable[[str], bool], where: str = "scrape") -> str:
    """The lines of the families `keep` wants (their HELP/TYPE comments and samples), without the
    `_created` timestamps. Only a pre-filter on each line's metric name (values are still parsed
    by prometheus-client): its parser costs ~0.1 ms a line in pure Python, and a real server
    exposes hundreds of lines of which a sweep keeps a few dozen. The lines are visited one at a
    time (never a list of all of them: 8 MB of short lines is ~25 MB of str objects), and more
    than MAX_KEPT_LINES kept is a ScrapeError before the parser holds any."""
    kept: dict[str, bool] = {}

    def wanted(name: str) -> bool:
        got = kept.get(name)
        if got is None:
            bases = [name] + [name[: -len(s)] for s in SUFFIXES if name.endswith(s)]
            got = kept[name] = any(keep(b) or keep(b + "_total") for b in bases)
        return got

    out: list[str] = []
    for line in _lines(text):
        if line.startswith("#"):
            parts = line.split(None, 3)
            if not (len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and wanted(parts[2])):
                continue
        else:
            name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
            if not name or name.endswith("_created") or not wanted(name):
                continue
        if len(out) >= MAX_KEPT_LINES:
            raise ScrapeError(
                f"{where}: more than {MAX_KEPT_LINES:,} lines of the kept metrics (a line a series: narrow `names:`)"
            )
        out.append(line)
    return "\n".join(out) + "\n"


def _lines(text: str) -> Iterator[str]:
    """The non-empty lines of `text`, one at a time (split at \\n and \\r)."""
    for match in _LINE.finditer(text):
        yield match.group()


_LINE = re.compile(r"[^\r\n]+")


def parse(text: str, keep: Callable[[str], bool], where: str = "scrape") -> Scrape:
    """Parse exposition text, keeping the families whose name (or counter `_total` name) `keep`
    accepts. Raises ScrapeError on text the parser refuses or beyond the size caps."""
    if len(text) > MAX_TEXT:
        raise ScrapeError(f"{where}: {len(text)} characters of metrics, more than {MAX_TEXT}")
    text = relevant_lines(text, keep, where)
    counters: dict[str, list[float]] = {}
    gauges: dict[str, list[float]] = {}
    hists: dict[str, _HistAcc] = {}
    seen: set[str] = set()
    try:
        for family in text_string_to_metric_families(text):
            kind = family.type
            if kind == "counter":
                name = family.name + "_total"
                if keep(name) or keep(family.name):
                    _room(seen, name, where)
                    values = [s.value for s in family.samples if s.name.endswith("_total")]
                    counters.setdefault(name, []).extend(values)
            elif kind in ("gauge", "untyped", "unknown"):
                if keep(family.name):
                    _room(seen, family.name, where)
                    gauges.setdefault(family.name, []).extend(s.value for s in family.samples)
            elif kind == "histogram" and keep(family.name):
                _room(seen, family.name, where)
                acc = hists.setdefault(family.name, _HistAcc())
                for s in family.samples:
                    acc.add(family.name, s.name, s.labels, s.value)
    except ValueError as exc:
        raise ScrapeError(f"{where}: not Prometheus text: {exc}") from None
    return Scrape(
        counters={k: math.fsum(v) for k, v in counters.items() if v},
        gauges={k: math.fsum(v) / len(v) for k, v in gauges.items() if v},
        histograms={k: acc.build() for k, acc in hists.items()},
    )


def _room(seen: set[str], name: str, where: str) -> None:
    if name not in seen and len(seen) >= MAX_FAMILIES:
        raise ScrapeError(f"{where}: more than {MAX_FAMILIES} metric families kept (narrow `names:`)")
    seen.add(name)


class _HistAcc:
    """Sums the series of one histogram family over their label sets."""

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.count = 0.0
        self.total = 0.0

    def add(self, family: str, sample: str, labels: dict[str, str], value: float) -> None:
        if sample == family + "_bucket":
            bound = float(labels.get("le", "nan"))
            if not math.isnan(bound):
                self.buckets[bound] = self.buckets.get(bound, 0.0) + value
        elif sample == family + "_count":
            self.count += value
        elif sample == family + "_sum":
            self.total += value

    def build(self) -> Histogram:
        return Histogram(tuple(sorted(self.buckets.items())), self.count, self.total)
