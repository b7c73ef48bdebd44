"""Server metrics and GPU telemetry around one trial's repro (EDGE).

Before the measured repro every Prometheus endpoint of the matrix's `metrics:` is scraped, and
every GPU host read (nvidia-smi + kernel-log XID count), all at once on a pool kept for the run;
while the repro runs, gauges may be sampled every `sample_interval`; after it, everything is read
again and the differences become the trial's numbers (core.servermetrics, core.gpustat). A scrape
that fails or times out (`timeout`, 2 s by default) is recorded as missing: it never voids the
trial and never holds it up longer than its timeout. Whether a host has nvidia-smi is asked once
per run; a host without one says so once (in the run's provenance), and is never asked again.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from orchestrator.core import gpustat, servermetrics
from orchestrator.core.endpoints import host_port
from orchestrator.core.promtext import Scrape, name_filter, parse
from orchestrator.core.records import MetricValue
from orchestrator.core.serverconf import ROUTER_ROLE, Endpoint, ServerMetrics
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.httpread import HttpAnswerError, request
from orchestrator.errors import OrchError, ScrapeError

MAX_BYTES = 8_000_000  # one scrape's body
GPU_TIMEOUT_S = 10.0
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"  # the text format, never protobuf or OpenMetrics
NO_GPU = "no nvidia-smi on this host: no GPU telemetry"


@dataclass(frozen=True)
class Target:
    endpoint: Endpoint
    url: str
    keep: Callable[[str], bool]


@dataclass
class Snapshot:
    """One round of readings: endpoint -> Scrape or the reason it failed; GPU host -> reading."""

    scrapes: dict[str, Scrape | str] = field(default_factory=dict)
    gpus: dict[str, gpustat.GpuReading | str] = field(default_factory=dict)


@dataclass
class Started:
    """What Telemetry.begin took before the repro: the scrapes, the GPU readings under way, the sampler."""

    scrapes: dict[str, Future[Scrape | str]]  # fetched before the repro, parsed while it runs
    gpus: dict[str, Future[gpustat.GpuReading | str]]
    sampler: Sampler | None


class Sampler:
    """Scrapes every endpoint each `interval` seconds until stopped (gauges during the repro)."""

    def __init__(self, telemetry: Telemetry, interval: float) -> None:
        self.telemetry, self.interval = telemetry, interval
        self.samples: dict[str, list[Scrape]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for name, got in self.telemetry.scrape_all().items():
                if isinstance(got, Scrape):
                    self.samples.setdefault(name, []).append(got)

    def stop(self) -> dict[str, list[Scrape]]:
        self._stop.set()
        self._thread.join(timeout=self.telemetry.config.timeout_s + 1.0)  # a scrape in flight ends at its timeout
        return self.samples


class Telemetry:
    """The run's scrapers: endpoints resolved against the deployment, a pool kept across trials."""

    def __init__(self, config: ServerMetrics, deployment: Deployment, client: httpx.Client) -> None:
        self.config, self.deployment, self.client = config, deployment, client
        roles = list(dict.fromkeys(h.role for h in deployment.hosts.values()))
        self.targets = [t for e in config.resolved(roles) for t in _targets(e, deployment)]
        self.gpu_hosts: dict[str, HostHandle] | None = None  # machine -> handle; None: not probed yet
        self.pool = ThreadPoolExecutor(max_workers=max(2, len(self.targets) + len(deployment.hosts)))

    # -- once per run

    def describe(self) -> dict[str, dict[str, str]]:
        """Ask each machine once whether it has nvidia-smi; role -> provenance lines."""
        if self.gpu_hosts is not None or not self.config.gpu:
            self.gpu_hosts = self.gpu_hosts or {}
            return {}
        machines: dict[str, HostHandle] = {}
        for handle in self.deployment.hosts.values():
            machines.setdefault(_machine(handle), handle)
        found = dict(zip(machines, self.pool.map(_has_nvidia_smi, machines.values()), strict=True))
        self.gpu_hosts = {m: h for m, h in machines.items() if found[m]}
        return {host_key(h): {"gpu": "nvidia-smi" if found[m] else NO_GPU} for m, h in machines.items()}

    # -- per trial

    def scrape_all(self) -> dict[str, Scrape | str]:
        futures = {t.endpoint.name: self.pool.submit(self._scrape, t) for t in self.targets}
        return {name: f.result() for name, f in futures.items()}

    def snapshot(self) -> Snapshot:
        """Every endpoint and GPU host at once; failures are kept as their reasons."""
        return self._collect(self._submit_gpus())

    def begin(self) -> Started:
        """Just before the measured repro: every endpoint fetched (the caller waits: a counter must
        not see the repro's first request) and parsed in the background (the parser is the costly
        part), the GPU hosts read in the background (nvidia-smi takes tens of ms; the energy counter
        read as the repro starts is as good), gauges sampled."""
        gpus = self._submit_gpus()
        first, rest = self.targets[:1], self.targets[1:]  # the first one here: one thread handoff less
        fetched = {t.endpoint.name: (t, self.pool.submit(self._fetch, t)) for t in rest}
        texts = {t.endpoint.name: (t, self._fetch(t)) for t in first}
        texts.update({name: (t, f.result()) for name, (t, f) in fetched.items()})
        scrapes = {name: self.pool.submit(self._parse, t, got) for name, (t, got) in texts.items()}
        return Started(scrapes, gpus, self.sampler())

    def finish(self, started: Started) -> Future[dict[str, MetricValue]]:
        """Right after the repro: the sampler stopped, the after round and the numbers computed in
        the background (the trial's log collection runs meanwhile)."""
        samples = started.sampler.stop() if started.sampler is not None else {}

        def numbers() -> dict[str, MetricValue]:
            before = Snapshot(
                {k: f.result() for k, f in started.scrapes.items()}, {k: f.result() for k, f in started.gpus.items()}
            )
            return self.values(before, self.none_kept_as_missing(self.snapshot()), samples)

        return self.pool.submit(numbers)

    def none_kept_as_missing(self, after: Snapshot) -> Snapshot:
        """An endpoint whose answer after the repro had none of its `names:` as missing, with why:
        a misspelt or unexported name otherwise leaves no trace (the before round may precede a
        metric's first observation, so only the after round is held to it)."""
        names = {t.endpoint.name: t.endpoint.names for t in self.targets}
        scrapes: dict[str, Scrape | str] = {
            k: (f"the answer had none of the metrics its names: list ({', '.join(names[k])})"[:200])
            if isinstance(v, Scrape) and v.names == 0 and k in names
            else v
            for k, v in after.scrapes.items()
        }
        return Snapshot(scrapes, after.gpus)

    def sampler(self) -> Sampler | None:
        """A sampler of gauges for a caller that scrapes with snapshot() (begin() starts its own)."""
        interval = self.config.sample_interval_s
        return Sampler(self, interval) if interval and self.targets else None

    def _submit_gpus(self) -> dict[str, Future[gpustat.GpuReading | str]]:
        return {host_key(h): self.pool.submit(_read_gpu, h) for h in (self.gpu_hosts or {}).values()}

    def _collect(self, gpus: dict[str, Future[gpustat.GpuReading | str]]) -> Snapshot:
        scrapes = {t.endpoint.name: self.pool.submit(self._scrape, t) for t in self.targets}
        return Snapshot({k: f.result() for k, f in scrapes.items()}, {k: f.result() for k, f in gpus.items()})

    @staticmethod
    def values(before: Snapshot, after: Snapshot, samples: dict[str, list[Scrape]]) -> dict[str, MetricValue]:
        """The trial's numbers: deltas, quantiles, summaries; a failed reading as missing."""
        out: dict[str, MetricValue] = {}
        for name, got in after.scrapes.items():
            start = before.scrapes.get(name)
            if isinstance(start, str) or isinstance(got, str) or start is None:
                reason = got if isinstance(got, str) else start if isinstance(start, str) else "not scraped before"
                out.update(servermetrics.missing(name, reason))
                continue
            out.update(servermetrics.trial_values(name, start, got, samples.get(name, ())))
        for role, reading in after.gpus.items():
            start_gpu = before.gpus.get(role)
            if isinstance(reading, gpustat.GpuReading) and isinstance(start_gpu, gpustat.GpuReading):
                out.update(gpustat.trial_values(role, start_gpu, reading))
            else:
                why = reading if isinstance(reading, str) else start_gpu if isinstance(start_gpu, str) else "no reading"
                out[f"{gpustat.PREFIX}{role}.missing"] = MetricValue(kind="number", value=None, unit=why[:200])
        return out

    @property
    def role_endpoints(self) -> list[str]:
        """The endpoints of orch's own servers: a role's (a `url:` endpoint may be any server)."""
        return [t.endpoint.name for t in self.targets if t.endpoint.role is not None]

    def requests_counted(self, values: dict[str, MetricValue]) -> float | None:
        """The requests orch's servers counted during the repro (core.servermetrics); None when a
        worker role's requests were not counted (the repro may have sent its requests there)."""
        endpoints_of: dict[str, list[str]] = {h.role: [] for h in self.deployment.hosts.values()}
        for t in self.targets:
            if t.endpoint.role is not None:
                endpoints_of.setdefault(t.endpoint.role, []).append(t.endpoint.name)
        if servermetrics.unwatched_roles(values, endpoints_of, ROUTER_ROLE):
            return None
        return servermetrics.requests_counted(values, self.role_endpoints)

    def _scrape(self, target: Target) -> Scrape | str:
        return self._parse(target, self._fetch(target))

    @staticmethod
    def _parse(target: Target, got: tuple[str | None, str]) -> Scrape | str:
        text, reason = got
        if text is None:
            return reason
        try:
            return parse(text, target.keep, where=target.url)
        except ScrapeError as exc:
            return str(exc)[:300]

    def _fetch(self, target: Target) -> tuple[str | None, str]:
        """One endpoint's text, or None and why, within `timeout` in all (httpx's timeout is per
        read: a server that trickles its answer is cut off at the deadline), refused above
        MAX_BYTES, and never decompressed (edges.httpread: a gzip bomb stays a few KB)."""
        url = target.url
        try:
            answer = request(
                self.client,
                "GET",
                url,
                deadline_s=self.config.timeout_s,
                max_bytes=MAX_BYTES,
                headers={"Accept": ACCEPT},
            )
        except HttpAnswerError as exc:
            if exc.status is not None and exc.status != 200:  # the status says more than the size
                return None, f"{url}: HTTP {exc.status}"
            return None, str(exc)[:300]
        except httpx.HTTPError as exc:
            return None, f"{url}: {type(exc).__name__}: {exc}"[:300]
        if answer.status != 200:
            return None, f"{url}: HTTP {answer.status}"
        return answer.text, ""  # the text format is UTF-8

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _targets(e: Endpoint, deployment: Deployment) -> list[Target]:
    """A URL endpoint's one target; a role endpoint's one per serving host of the role (several
    instances of a role: `<name>@<host key>` each; nodes above rank 0 of an instance serve nothing)."""
    keep = name_filter(e.names)
    if e.url is not None:
        return [Target(e, e.url, keep)]
    hosts = [h for h in deployment.hosts.values() if h.role == e.role and serves(h)]
    out = []
    for h in hosts:
        health = urlsplit(h.host.health)  # tunnelled where the host's health is
        netloc = health.netloc if e.port is None else host_port(health.hostname or "", e.port)  # [IPv6]
        named = e if len(hosts) == 1 else dataclasses.replace(e, name=f"{e.name}@{host_key(h)}")
        out.append(Target(named, f"{health.scheme}://{netloc}{e.path}", keep))
    return out


def serves(h: HostHandle) -> bool:
    """Whether a host's own ports answer (not a node above rank 0 of a multi-node instance)."""
    return getattr(h.host, "rank", 0) == 0


def host_key(h: HostHandle) -> str:
    """The host's key in the deployment (its role, for a role of one host)."""
    return str(getattr(h.host, "key", h.role))


def _machine(handle: HostHandle) -> str:
    ssh = handle.host.ssh
    return f"ssh:{ssh.host}:{ssh.port}" if handle.host.transport != "local" and ssh else "local"


def _has_nvidia_smi(handle: HostHandle) -> bool:
    try:
        return handle.transport.run(gpustat.PROBE_COMMAND, timeout=GPU_TIMEOUT_S, check=False).ok
    except OrchError:
        return False


def _read_gpu(handle: HostHandle) -> gpustat.GpuReading | str:
    try:
        res = handle.transport.run(gpustat.QUERY_COMMAND, timeout=GPU_TIMEOUT_S, check=False)
        if not res.ok:
            return f"{handle.host.label}: nvidia-smi exited {res.exit_code}: {res.stderr.strip()[-200:]}"
        return gpustat.parse_reading(res.stdout, where=f"{handle.host.label}: nvidia-smi")
    except OrchError as exc:
        return str(exc)[:300]
