"""Server metrics, GPU telemetry, `verify:` and `repro.warmup` in the trial loop, on the fakes:
per-trial numbers in the record, a failed scrape recorded as missing (the trial still counts), a
server reporting the wrong value voids the trial like an env mismatch, the warm-up runs before
the repro and is never counted, and a host without nvidia-smi is asked (and said so) once."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from fakes import METRICS, FakeBed, Reply, Role, make_bed, make_plan, remote_repro

from orchestrator.core import gpustat
from orchestrator.core.serverconf import SGLANG_NAMES, SMG_NAMES
from orchestrator.edges.metrics import MAX_BYTES, Snapshot, Telemetry
from orchestrator.sweep.runner import Runner, RunOptions

GRAPH = {
    "graph": {
        "levels": {
            "on": {"decode": {"SGLANG_EXTRA_ARGS": ""}},
            "off": {"decode": {"SGLANG_EXTRA_ARGS": "--disable-cuda-graph"}},
        }
    }
}
Extra = Callable[[httpx.Request], httpx.Response | None]


class Worker:
    """A worker's /metrics and /server_info: each scrape sees 5 more requests than the last."""

    def __init__(self, bed: FakeBed) -> None:
        self.bed, self.scrapes, self.lock = bed, 0, threading.Lock()

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
            n = 5 * self.scrapes
        return (
            "# TYPE sglang:num_requests_total counter\n"
            f'sglang:num_requests_total{{model_name="m"}} {n}\n'
            "# TYPE sglang:num_queue_reqs gauge\n"
            'sglang:num_queue_reqs{model_name="m"} 2\n'
            "# TYPE sglang:time_to_first_token_seconds histogram\n"
            f'sglang:time_to_first_token_seconds_bucket{{le="0.5",model_name="m"}} {n}\n'
            f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {n}\n'
            f'sglang:time_to_first_token_seconds_count{{model_name="m"}} {n}\n'
            f'sglang:time_to_first_token_seconds_sum{{model_name="m"}} {n * 0.1}\n'
        )

    def server_info(self) -> dict[str, Any]:
        """What the decode server applied: its live env's SGLANG_EXTRA_ARGS."""
        unit = next(iter(self.bed.managers["decode"].units))
        env = self.bed.managers["decode"].environ(unit) or {}
        return {"disable_cuda_graph": "--disable-cuda-graph" in env.get("SGLANG_EXTRA_ARGS", "")}


def client_for(bed: FakeBed, extra: Extra) -> httpx.Client:
    """The bed's health client, with `extra` answering first (None: fall through)."""

    def handler(request: httpx.Request) -> httpx.Response:
        got = extra(request)
        return got if got is not None else bed.client.send(request)

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0)


def serve(worker: Worker, broken_metrics: bool = False, info: dict[str, Any] | None = None) -> Extra:
    def extra(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/metrics":
            if broken_metrics:
                raise httpx.ReadTimeout("timed out", request=request)
            return httpx.Response(200, text=worker.metrics())
        if request.url.path == "/server_info":
            return httpx.Response(200, json=info if info is not None else worker.server_info())
        return None

    return extra


def decode_bed() -> FakeBed:
    bed = make_bed({"decode": Role("SGLANG_EXTRA_ARGS=\n")})
    bed.transports["decode"].script(gpustat.PROBE_COMMAND, exit_code=1)  # no nvidia-smi here
    return bed


def run(bed: FakeBed, client: httpx.Client, run_dir: Path, **matrix: Any) -> Any:
    plan = make_plan(bed, GRAPH, **matrix)
    options = RunOptions(run_id="fake-run", retry_backoff_s=0.0, infra_attempts=2)
    return Runner(plan, bed.deployment, run_dir, options, client=client).execute()


@contextlib.contextmanager
def telemetry_of(
    bed: FakeBed, factors: dict[str, Any], metrics: dict[str, Any], client: httpx.Client
) -> Iterator[Telemetry]:
    """The run's scrapers for a matrix of `factors` with `metrics:`, closed afterwards."""
    plan = make_plan(bed, factors, metrics=metrics)
    assert plan.matrix.server_metrics is not None
    telemetry = Telemetry(plan.matrix.server_metrics, bed.deployment, client)
    try:
        yield telemetry
    finally:
        telemetry.close()


def test_server_metrics_are_per_trial_numbers_in_the_record(tmp_path: Path) -> None:
    bed = decode_bed()
    worker = Worker(bed)
    result = run(bed, client_for(bed, serve(worker)), tmp_path / "run", replicates=2, metrics={})
    assert (result.completed, result.failed) == (4, 0)
    assert worker.scrapes == 8  # once before and once after each repro
    for record in result.records:
        m = record.metrics
        assert m["server.decode.sglang:num_requests_total.delta"].value == 5  # this trial's requests only
        assert m["server.decode.sglang:time_to_first_token_seconds.count"].value == 5
        assert m["server.decode.sglang:time_to_first_token_seconds.p50"].value == 0.25
        assert m["server.decode.sglang:num_queue_reqs.after"].value == 2
        assert m["score"].value == 0.5  # the repro's own metrics are unchanged


def test_a_failed_scrape_is_recorded_as_missing_and_the_trial_counts(tmp_path: Path) -> None:
    bed = decode_bed()
    result = run(bed, client_for(bed, serve(Worker(bed), broken_metrics=True)), tmp_path / "run", metrics={})
    assert (result.completed, result.failed) == (2, 0)
    for record in result.records:
        marker = record.metrics["server.decode.missing"]
        assert marker.value is None and "ReadTimeout" in marker.unit
        assert not [k for k in record.metrics if k.startswith("server.decode.sglang")]


def test_names_the_server_does_not_export_are_recorded_as_missing_with_why(tmp_path: Path) -> None:
    """A `names:` list the server exports none of left no trace at all: no value, no missing mark,
    and the report's Server metrics table without a word on the endpoint (the seventh new-user walk)."""
    bed = decode_bed()
    metrics = {"endpoints": {"decode": {"role": "decode", "names": ["sglang:no_such_metric_total"]}}}
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", metrics=metrics)
    assert (result.completed, result.failed) == (2, 0)  # never voids a trial
    for record in result.records:
        marker = record.metrics["server.decode.missing"]
        assert marker.value is None
        assert marker.unit == "the answer had none of the metrics its names: list (sglang:no_such_metric_total)"


def test_a_server_reporting_another_value_voids_the_trial_like_an_env_mismatch(tmp_path: Path) -> None:
    bed = decode_bed()
    verify = [{"role": "decode", "when": {"graph": "off"}, "expect": {"disable_cuda_graph": True}}]
    # the server ignores the flag: it always reports CUDA graph on
    client = client_for(bed, serve(Worker(bed), info={"disable_cuda_graph": False}))
    result = run(bed, client, tmp_path / "run", verify=verify, stop_after_repeated_failures=0)
    by_level = {r.levels["graph"]: r for r in result.records if r.attempt == 2 or r.status == "completed"}
    assert by_level["on"].status == "completed"  # the rule does not apply to this cell
    off = by_level["off"]
    assert (off.status, off.attempt, off.metrics) == ("failed", 2, {})  # void: retried, never data
    assert off.failure is not None and off.failure.kind == "infrastructure"
    assert off.failure.error == "ReportedMismatch"
    assert "field disable_cuda_graph is False, expected True" in off.failure.message
    assert "/server_info (verify[0])" in off.failure.message


def test_a_field_the_server_does_not_report_is_named_as_such_at_its_line(tmp_path: Path) -> None:
    """A misspelt `expect:` field voided every trial blaming the server ('the server did not apply
    the cell's setting') without a line of the matrix (the seventh new-user walk)."""
    bed = decode_bed()
    verify = [{"role": "decode", "when": {"graph": "off"}, "expect": {"disable_cuda_graphs": True}}]
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", verify=verify)
    [off] = [r for r in result.records if r.levels["graph"] == "off" and r.attempt == 2]
    assert off.failure is not None and off.failure.error == "ReportedMismatch"
    message = off.failure.message
    assert "field disable_cuda_graphs is missing, expected True" in message
    assert re.search(r"<fake matrix>:\d+: /server_info reports no field disable_cuda_graphs", message), message
    assert "did you mean disable_cuda_graph?" in message
    assert "did not apply" not in message


def test_a_server_reporting_the_cell_value_passes(tmp_path: Path) -> None:
    bed = decode_bed()
    verify = [{"role": "decode", "when": {"graph": "off"}, "expect": {"disable_cuda_graph": True}}]
    verify.append({"role": "decode", "when": {"graph": "on"}, "expect": {"disable_cuda_graph": False}})
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", verify=verify)
    assert (result.completed, result.failed) == (2, 0)


def test_the_warmup_runs_before_the_repro_and_is_never_counted(tmp_path: Path) -> None:
    bed = decode_bed()
    bed.transports["decode"].script(re.compile(r"^fake-warmup\b"), stdout="score=9.0 events=9/10\n")
    repro = {**remote_repro("decode"), "warmup": "fake-warmup --trial {trial}"}
    result = run(bed, bed.client, tmp_path / "run", repro=repro)
    assert (result.completed, result.failed) == (2, 0)
    commands = [c for c in bed.transports["decode"].commands() if c.startswith("fake-")]
    assert commands == [
        "fake-warmup --trial 0",
        "fake-repro --trial 0",
        "fake-warmup --trial 1",
        "fake-repro --trial 1",
    ]
    for record in result.records:
        assert record.warmup is not None and record.warmup.command.startswith("fake-warmup")
        assert (tmp_path / "run" / record.warmup.stdout_path).read_text() == "score=9.0 events=9/10\n"
        assert record.metrics["score"].value == 0.5 and record.metrics["events"].k == 3  # the repro's, not 9


def test_a_failed_warmup_voids_the_trial(tmp_path: Path) -> None:
    bed = decode_bed()
    bed.transports["decode"].script(re.compile(r"^fake-warmup\b"), exit_code=3, stderr="model not loaded\n")
    repro = {**remote_repro("decode"), "warmup": "fake-warmup"}
    result = run(bed, bed.client, tmp_path / "run", repro=repro, stop_after_repeated_failures=0)
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.error == "WarmupFailed"
        assert record.failure.kind == "infrastructure" and "model not loaded" in record.failure.detail
        assert not [c for c in bed.transports["decode"].commands() if c.startswith("fake-repro")]


def test_a_host_without_nvidia_smi_is_asked_once_and_says_so_once(tmp_path: Path) -> None:
    bed = decode_bed()
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", replicates=3, metrics={})
    assert result.completed == 6
    assert bed.transports["decode"].commands().count(gpustat.PROBE_COMMAND) == 1
    found = result.by_testbed[bed.deployment.testbed.name]  # what the run found on each host
    assert found["decode"]["gpu"] == "no nvidia-smi on this host: no GPU telemetry"
    assert not [k for r in result.records for k in r.metrics if k.startswith("gpu.")]


SMI = "0, {p}, {e}, 1000, 81559, 1980, 2619, 60, 90, 0x0000000000000000\n--xid--\n{x}\n"


def test_a_gpu_host_gets_its_telemetry_per_trial(tmp_path: Path) -> None:
    bed = decode_bed()
    readings = iter([SMI.format(p=300, e=1_000_000, x=0), SMI.format(p=400, e=1_500_000, x=1)] * 2)
    t = bed.transports["decode"]
    t.script(gpustat.PROBE_COMMAND, exit_code=0, stdout="/usr/bin/nvidia-smi\n")
    t.script(gpustat.QUERY_COMMAND, lambda text, argv: Reply(stdout=next(readings)))
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", metrics={})
    assert result.completed == 2
    assert result.by_testbed[bed.deployment.testbed.name]["decode"]["gpu"] == "nvidia-smi"
    for record in result.records:
        assert record.metrics["gpu.decode.energy_j"].value == 500.0
        assert record.metrics["gpu.decode.power_w"].value == 400.0
        assert record.metrics["gpu.decode.xid_errors"].value == 1


def test_endpoints_resolve_against_the_roles_health_urls() -> None:
    bed = make_bed({"decode": Role("A=1\n"), "router": Role("B=1\n")})
    metrics = {"endpoints": {"d": {"role": "decode"}, "r": {"role": "router", "port": 29000, "path": "/m"}}}
    with telemetry_of(bed, {"a": {"env": {"decode": "A"}, "levels": ["0", "1"]}}, metrics, bed.client) as telemetry:
        got = [(t.endpoint.name, t.url, t.endpoint.names) for t in telemetry.targets]
    assert got == [
        ("d", "http://decode.fake:30000/metrics", SGLANG_NAMES),  # the health URL's host and port
        ("r", "http://router.fake:29000/m", SMG_NAMES),  # the router's own port; smg_* names by default
    ]


def test_an_endpoint_on_its_own_port_of_an_ipv6_host_is_in_brackets() -> None:
    """`port:` replaces the health URL's port: on an IPv6 host the address keeps its brackets
    (`http://2001:db8::2:29000/m` reads as another address on no port)."""
    bed = make_bed({"decode": Role("A=1\n")})
    handle = bed.deployment.hosts["decode"]
    handle.host = dataclasses.replace(handle.host, health="http://[2001:db8::2]:30002/health")
    metrics = {"endpoints": {"d": {"role": "decode", "port": 29000, "path": "/m"}, "h": {"role": "decode"}}}
    with telemetry_of(bed, {"a": {"env": {"decode": "A"}, "levels": ["0", "1"]}}, metrics, bed.client) as telemetry:
        urls = sorted(t.url for t in telemetry.targets)
    assert urls == ["http://[2001:db8::2]:29000/m", "http://[2001:db8::2]:30002/metrics"]


def trickler(stop: threading.Event) -> tuple[int, threading.Thread]:
    """A loopback server that answers 200 and then sends its body one byte every 50 ms, forever:
    each read succeeds, so only a deadline over the whole scrape ends it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.1)

    def serve() -> None:
        conns = []
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                conns.append(conn)
            except TimeoutError:
                pass
            for c in conns:
                with contextlib.suppress(OSError):
                    c.sendall(b"#")
            time.sleep(0.05)
        for c in conns:
            c.close()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def test_a_scrape_that_never_finishes_is_missing_after_its_timeout() -> None:
    stop = threading.Event()
    port, thread = trickler(stop)
    bed = decode_bed()
    timeout_s = 0.25  # the server trickles for ever
    metrics = {"timeout": timeout_s, "gpu": False, "endpoints": {"slow": {"url": f"http://127.0.0.1:{port}/metrics"}}}
    try:
        with telemetry_of(bed, GRAPH, metrics, httpx.Client(trust_env=False)) as telemetry:
            t0 = time.monotonic()
            started = telemetry.begin()
            got = telemetry.finish(started).result(timeout=10)
            took = time.monotonic() - t0
    finally:
        stop.set()
        thread.join(5)
    assert f"no complete answer within {timeout_s:g} s" in got["server.slow.missing"].unit
    assert took < 2 * timeout_s + 1.7  # two rounds of at most ~timeout_s (a per-read timeout alone never ends)


class Rising(Worker):
    """A worker whose queue gauge is the number of scrapes so far: each sample reads a new value."""

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
        return f"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs {n}\n"


def test_gauges_sampled_while_the_repro_runs_give_its_mean_and_max(tmp_path: Path) -> None:
    """`sample_interval:` scrapes every endpoint while the repro runs; a gauge's numbers are then
    the mean and max of those samples, not its values before and after."""
    bed = decode_bed()
    worker = Rising(bed)
    metrics = {"sample_interval": 0.05, "gpu": False}
    with telemetry_of(bed, GRAPH, metrics, client_for(bed, serve(worker))) as telemetry:
        started = telemetry.begin()  # scrape 1, before the repro
        deadline = time.monotonic() + 10
        while worker.scrapes < 5 and time.monotonic() < deadline:  # the "repro": three samples or more
            time.sleep(0.01)
        got = telemetry.finish(started).result(timeout=10)
        after_stop = worker.scrapes
        time.sleep(0.2)
        assert worker.scrapes == after_stop  # the sampler stopped with the repro
    samples = list(range(2, after_stop))  # between the before scrape and the after one (the last)
    assert len(samples) >= 3
    gauge = "server.decode.sglang:num_queue_reqs"
    assert got[f"{gauge}.max"].value == max(samples)
    assert got[f"{gauge}.mean"].value == pytest.approx(sum(samples) / len(samples))
    assert f"{gauge}.after" not in got and f"{gauge}.before" not in got


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(exit_code=9, stderr="NVML: driver not loaded\n"), "nvidia-smi exited 9: NVML: driver not loaded"),
        (Reply(timeout=True), "timed out"),  # the command outlived GPU_TIMEOUT_S and was killed
    ],
)
def test_a_gpu_query_that_fails_leaves_the_trial_counting_and_says_why(
    tmp_path: Path, reply: Reply, reason: str
) -> None:
    bed = decode_bed()
    t = bed.transports["decode"]
    t.script(gpustat.PROBE_COMMAND, exit_code=0, stdout="/usr/bin/nvidia-smi\n")
    t.script(gpustat.QUERY_COMMAND, reply)
    result = run(bed, client_for(bed, serve(Worker(bed))), tmp_path / "run", metrics={})
    assert result.completed == 2
    for record in result.records:
        assert [k for k in record.metrics if k.startswith("gpu.")] == ["gpu.decode.missing"]
        assert reason in record.metrics["gpu.decode.missing"].unit


def one_scrape(answer: Callable[[httpx.Request], httpx.Response]) -> str:
    """The missing reason a decode endpoint answering so leaves in a trial's numbers."""
    bed = decode_bed()
    client = client_for(bed, lambda r: answer(r) if r.url.path == "/metrics" else None)
    with telemetry_of(bed, GRAPH, {"gpu": False}, client) as telemetry:
        got = telemetry.finish(telemetry.begin()).result(timeout=10)
    return got["server.decode.missing"].unit


def test_a_scrape_that_fails_is_missing_with_what_went_wrong() -> None:
    """The reason a table's blank cell is blank: the endpoint's status, an answer over the cap
    or one the parser refuses; never a bare "not scraped before"."""
    assert one_scrape(lambda r: httpx.Response(503, text="busy")) == "http://decode.fake:30000/metrics: HTTP 503"
    # too large and not 200: the status says more than the size
    big = "x" * (MAX_BYTES + 1)
    assert one_scrape(lambda r: httpx.Response(503, text=big)) == "http://decode.fake:30000/metrics: HTTP 503"
    assert f"more than {MAX_BYTES} bytes" in one_scrape(lambda r: httpx.Response(200, text=big))
    assert "not Prometheus text" in one_scrape(lambda r: httpx.Response(200, text="sglang:num_running_reqs{ 1\n"))


def test_a_gpu_reading_that_failed_on_either_side_of_the_repro_is_missing_with_why() -> None:
    good = gpustat.parse_reading(SMI.format(p=300, e=1_000_000, x=0))
    for before, after in (("nvidia-smi: timed out", good), (good, "nvidia-smi: exit 9")):
        got = Telemetry.values(Snapshot(gpus={"decode": before}), Snapshot(gpus={"decode": after}), {})
        assert list(got) == ["gpu.decode.missing"]
        assert got["gpu.decode.missing"].unit == (after if isinstance(after, str) else before)


class Idle(Worker):
    """A worker that served none of the repro's requests: its counter never moves."""

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
        return "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total 7\n"


def test_a_repro_that_reported_sessions_none_of_orchs_servers_counted_is_void(tmp_path: Path) -> None:
    bed = decode_bed()
    result = run(bed, client_for(bed, serve(Idle(bed))), tmp_path / "run", metrics={})
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.error == "ReproNotServed"
        assert "no request reached orch's servers during the repro, which reported 10 sessions" in str(
            record.failure.message
        )
        assert record.metrics == {}  # never data


def test_a_url_endpoint_counting_requests_does_not_vouch_for_the_repro(tmp_path: Path) -> None:
    """An endpoint given by `url:` may be any server (the one the repro reached, even): only the
    roles' own endpoints say whether orch's servers were served."""
    bed = decode_bed()
    busy, idle = Worker(bed), Idle(bed)

    def extra(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=(busy if request.url.host == "elsewhere.fake" else idle).metrics())
        return None

    endpoints = {"d": {"role": "decode"}, "far": {"url": "http://elsewhere.fake:9/metrics"}}
    result = run(bed, client_for(bed, extra), tmp_path / "run", metrics={"endpoints": endpoints, "gpu": False})
    assert (result.completed, result.failed) == (0, 2)
    assert {r.failure.error for r in result.records if r.failure} == {"ReproNotServed"}


def pd_bed() -> FakeBed:
    return make_bed({"decode": Role("SGLANG_EXTRA_ARGS=\n"), "prefill": Role("X=1\n")})


def test_a_worker_role_no_counter_watches_may_have_served_the_repro(tmp_path: Path) -> None:
    """Only decode measured, its counter still: the repro may have sent every request to prefill
    directly ({prefill_url}), a server of orch's that nobody counted; the trial is not void."""
    bed = pd_bed()
    endpoints = {"d": {"role": "decode"}}
    result = run(
        bed, client_for(bed, serve(Idle(bed))), tmp_path / "run", metrics={"endpoints": endpoints, "gpu": False}
    )
    assert (result.completed, result.failed) == (2, 0)


def test_every_worker_role_watched_and_still_is_void(tmp_path: Path) -> None:
    bed = pd_bed()
    result = run(bed, client_for(bed, serve(Idle(bed))), tmp_path / "run", metrics={"gpu": False})  # default: both
    assert (result.completed, result.failed) == (0, 2)
    assert {r.failure.error for r in result.records if r.failure} == {"ReproNotServed"}
    assert all(
        "the request counters of decode, prefill rose by 0" in str(r.failure.message)
        for r in result.records
        if r.failure
    )


def test_two_proportions_over_the_same_sessions_are_not_added_up_in_the_message(tmp_path: Path) -> None:
    bed = decode_bed()
    metrics = {**METRICS, "again": {"kind": "proportion", "regex": r"events=(?P<k>\d+)/(?P<n>\d+)"}}
    repro = {**remote_repro("decode"), "metrics": metrics}
    result = run(bed, client_for(bed, serve(Idle(bed))), tmp_path / "run", metrics={}, repro=repro)
    messages = {str(r.failure.message) for r in result.records if r.failure}
    assert len(messages) == 1 and "which reported 10 sessions" in messages.pop()  # was 20: 10 + 10


def test_a_repro_of_one_session_none_of_orchs_servers_counted_says_one_session(tmp_path: Path) -> None:
    """The void trial's reason read "which reported 1 sessions" for a one-session repro."""
    bed = decode_bed()
    bed.transports["decode"].script(re.compile(r"^fake-repro\b"), stdout="score=0.5 events=1/1\n")
    result = run(bed, client_for(bed, serve(Idle(bed))), tmp_path / "run", metrics={}, repro=remote_repro("decode"))
    messages = {str(r.failure.message) for r in result.records if r.failure}
    assert len(messages) == 1 and "during the repro, which reported 1 session (the request" in messages.pop()
