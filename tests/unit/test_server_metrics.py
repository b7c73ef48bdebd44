"""Server metrics and GPU telemetry, the pure part: Prometheus text -> samples (prometheus-client's
parser), counters -> per-trial deltas, histograms -> quantiles of bucket deltas, gauges ->
summaries; nvidia-smi CSV + kernel-log XID count -> per-trial numbers; `verify:` field checks;
and the config shapes' errors (file:line)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fakes import make_matrix

from orchestrator.core import gpustat
from orchestrator.core.promtext import Histogram, Scrape, name_filter, parse, relevant_lines
from orchestrator.core.records import MetricValue
from orchestrator.core.serverconf import SGLANG_NAMES, VerifyRule, reported_mismatch
from orchestrator.core.servermetrics import (
    bucket_deltas,
    counter_delta,
    missing,
    quantile,
    requests_counted,
    trial_values,
    unwatched_roles,
)
from orchestrator.errors import MISSING, ConfigError, ReportedMismatch, ScrapeError, VerificationError

KEEP_SGLANG = name_filter(SGLANG_NAMES)


def exposition(requests: float, ttft_buckets: dict[str, float], running: float, rank_running: float = 0.0) -> str:
    """What an SGLang worker (two tp ranks for the gauge) prints, in the text format."""
    lines = [
        "# HELP sglang:num_requests_total Number of requests processed.",
        "# TYPE sglang:num_requests_total counter",
        f'sglang:num_requests_total{{model_name="m"}} {requests}',
        'sglang:num_requests_created{model_name="m"} 1.7e9',
        "# TYPE sglang:num_running_reqs gauge",
        f'sglang:num_running_reqs{{model_name="m",tp_rank="0"}} {running}',
        f'sglang:num_running_reqs{{model_name="m",tp_rank="1"}} {rank_running}',
        "# TYPE sglang:time_to_first_token_seconds histogram",
    ]
    total = ttft_buckets["+Inf"]
    for le, count in ttft_buckets.items():
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{le="{le}",model_name="m"}} {count}')
    lines += [
        f'sglang:time_to_first_token_seconds_count{{model_name="m"}} {total}',
        f'sglang:time_to_first_token_seconds_sum{{model_name="m"}} {total * 0.3}',
        "# TYPE node_cpu_seconds_total counter",
        'node_cpu_seconds_total{cpu="0",mode="idle"} 99',
    ]
    return "\n".join(lines) + "\n"


def test_parse_aggregates_series_and_keeps_only_the_asked_names() -> None:
    text = exposition(10, {"0.1": 2, "0.5": 6, "1.0": 9, "+Inf": 10}, running=4, rank_running=2)
    got = parse(text, KEEP_SGLANG)
    assert got.counters == {"sglang:num_requests_total": 10.0}  # _created is not the counter
    assert got.gauges == {"sglang:num_running_reqs": 3.0}  # the mean over the two ranks
    hist = got.histograms["sglang:time_to_first_token_seconds"]
    assert hist.buckets == ((0.1, 2.0), (0.5, 6.0), (1.0, 9.0), (math.inf, 10.0))
    assert (hist.count, round(hist.total, 6)) == (10.0, 3.0)
    assert "node_cpu_seconds_total" not in got.counters  # not asked for


def test_only_the_kept_families_reach_the_parser() -> None:
    text = exposition(10, {"0.1": 2, "+Inf": 10}, running=4)
    kept = relevant_lines(text, KEEP_SGLANG)
    assert "node_cpu_seconds_total" not in kept and "_created" not in kept  # dropped before parsing
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in kept and 'le="+Inf"' in kept
    assert parse(kept, KEEP_SGLANG) == parse(text, KEEP_SGLANG)


def test_a_scrape_of_millions_of_kept_series_is_refused_before_the_parser_holds_them() -> None:
    """Red team: an endpoint answering 8 MB of one kept gauge's series (210,000 label sets) cost
    8.5 s of CPU and ~120 MB per parse, per scrape, before and after each repro and at every
    sample; four such endpoints took `orch run` to 1.09 GB and a 0.1 s repro to ~45 s a trial.
    Past MAX_KEPT_LINES kept lines the scrape is refused (recorded missing, saying why)."""
    import tracemalloc

    from orchestrator.core.promtext import MAX_KEPT_LINES

    lines = [f'sglang:num_running_reqs{{w="{i}"}} 1' for i in range(210_000)]
    text = "# TYPE sglang:num_running_reqs gauge\n" + "\n".join(lines) + "\n"
    assert len(text) < 8_000_000  # what one scrape may read
    tracemalloc.start()
    try:
        with pytest.raises(ScrapeError, match=f"more than {MAX_KEPT_LINES:,} lines of the kept metrics"):
            parse(text, KEEP_SGLANG, where="http://x/metrics")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak:,} bytes to refuse it"
    at_cap = "# TYPE sglang:num_running_reqs gauge\n" + "\n".join(lines[: MAX_KEPT_LINES - 1]) + "\n"
    assert parse(at_cap, KEEP_SGLANG).gauges == {"sglang:num_running_reqs": 1.0}  # a big real one still reads


def test_parse_refuses_what_is_not_prometheus_text() -> None:
    with pytest.raises(ScrapeError, match="not Prometheus text"):
        parse('sglang:num_running_reqs{model_name="m" 3\n', KEEP_SGLANG, where="http://x/metrics")


def test_counter_delta_and_reset() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(10, 4) == 4  # the server restarted: it counted 4 since


def test_quantiles_come_from_bucket_deltas_not_the_cumulative_histogram() -> None:
    before = Histogram(((0.1, 100.0), (1.0, 100.0), (10.0, 100.0), (math.inf, 100.0)), 100.0, 5.0)
    after = Histogram(((0.1, 100.0), (1.0, 110.0), (10.0, 120.0), (math.inf, 120.0)), 120.0, 65.0)
    delta = bucket_deltas(before, after)
    assert delta.buckets == ((0.1, 0.0), (1.0, 10.0), (10.0, 20.0), (math.inf, 20.0))
    assert quantile(0.5, delta) == pytest.approx(1.0)  # rank 10 of 20: the top of (0.1, 1]
    assert quantile(0.9, delta) == pytest.approx(1.0 + 9.0 * (18 - 10) / 10)  # interpolated in (1, 10]
    assert quantile(0.5, after) == pytest.approx(0.06)  # the cumulative one: mostly the 100 requests before


def test_a_histogram_first_seen_or_reset_during_the_repro_counts_from_zero() -> None:
    """As counters do: a histogram absent before the repro (its first observation made the
    series), or whose count went down (the server restarted), is all the trial's."""
    before = Histogram(((1.0, 50.0), (math.inf, 60.0)), 60.0, 30.0)
    after = Histogram(((1.0, 3.0), (math.inf, 4.0)), 4.0, 2.5)
    assert bucket_deltas(None, after) == after
    assert bucket_deltas(before, after) == after  # not 0 (clamped) in every bucket and -56 observations
    got = trial_values("decode", Scrape(histograms={"h_seconds": before}), Scrape(histograms={"h_seconds": after}))
    assert (got["server.decode.h_seconds.count"].value, got["server.decode.h_seconds.mean"].value) == (4.0, 0.625)


def test_quantile_edge_cases_follow_prometheus() -> None:
    inf_only = Histogram(((1.0, 0.0), (math.inf, 5.0)), 5.0, 50.0)
    assert quantile(0.5, inf_only) == 1.0  # in the +Inf bucket: the last finite bound
    assert quantile(0.5, Histogram(((1.0, 0.0), (math.inf, 0.0)), 0.0, 0.0)) is None  # nothing observed
    assert quantile(0.5, Histogram(((1.0, 3.0),), 3.0, 1.0)) is None  # no +Inf bucket: not a histogram
    assert quantile(0.5, Histogram(((0.0, 4.0), (math.inf, 4.0)), 4.0, 0.0)) == 0.0


def test_trial_values_deltas_quantiles_and_gauge_summaries() -> None:
    before = parse(exposition(10, {"0.1": 2, "0.5": 6, "1.0": 9, "+Inf": 10}, running=0), KEEP_SGLANG)
    after = parse(exposition(30, {"0.1": 2, "0.5": 26, "1.0": 29, "+Inf": 30}, running=1), KEEP_SGLANG)
    during = [Scrape(gauges={"sglang:num_running_reqs": v}) for v in (4.0, 8.0, 6.0)]
    got = trial_values("decode", before, after, during)
    assert got["server.decode.sglang:num_requests_total.delta"].value == 20
    ttft = "server.decode.sglang:time_to_first_token_seconds"
    assert got[f"{ttft}.count"].value == 20
    assert got[f"{ttft}.p50"].value == pytest.approx(0.1 + 0.4 * 10 / 20)
    assert got[f"{ttft}.p50"].unit == "s"
    assert got[f"{ttft}.mean"].value == pytest.approx(0.3)
    assert got["server.decode.sglang:num_running_reqs.mean"].value == 6.0
    assert got["server.decode.sglang:num_running_reqs.max"].value == 8.0
    no_samples = trial_values("decode", before, after)
    assert no_samples["server.decode.sglang:num_running_reqs.before"].value == 0.0
    assert no_samples["server.decode.sglang:num_running_reqs.after"].value == 0.5  # mean of ranks 1 and 0


def test_a_missing_scrape_is_one_marker_with_its_reason() -> None:
    got = missing("decode", "http://d/metrics: ConnectError: refused")
    assert list(got) == ["server.decode.missing"]
    assert got["server.decode.missing"].value is None and "refused" in got["server.decode.missing"].unit
    long = missing("decode", "x" * 199 + "yz" + "z" * 300)["server.decode.missing"].unit
    assert long == "x" * 199 + "y"  # a reason is cut to 200 characters in every trial record


# ---------------------------------------------------------------------------- GPU telemetry
SMI_BEFORE = """0, 310.52, 123456789, 70000, 81559, 1980, 2619, 61, 97, 0x0000000000000000
1, 305.10, 223456789, 69000, 81559, 1965, 2619, 63, 95, 0x0000000000000004
--xid--
2
"""
SMI_AFTER = """0, 402.00, 123556789, 71000, 81559, 1410, 2619, 77, 99, 0x0000000000000020
1, [N/A], 223496789, 69500, 81559, 1965, 2619, 70, 98, 0x0000000000000000
--xid--
3
"""


def test_nvidia_smi_readings_become_per_trial_numbers() -> None:
    before, after = gpustat.parse_reading(SMI_BEFORE), gpustat.parse_reading(SMI_AFTER)
    assert [g.index for g in after.gpus] == [0, 1]
    assert after.gpus[1].power_w is None  # [N/A] is unknown, not a failure
    got = gpustat.trial_values("decode", before, after)
    assert got["gpu.decode.energy_j"].value == pytest.approx((100000 + 40000) / 1000)
    assert got["gpu.decode.power_w"].value == 402.0
    assert got["gpu.decode.memory_used_mib.max"].value == 71000
    assert got["gpu.decode.sm_clock_mhz.min"].value == 1410
    assert got["gpu.decode.temperature_c.max"].value == 77
    assert got["gpu.decode.throttle_reasons"].value == 0x24  # HW slowdown (0x20) | SW power cap (0x4)
    assert got["gpu.decode.xid_errors"].value == 1


def test_nvidia_smi_output_that_is_not_the_query_is_refused() -> None:
    with pytest.raises(ScrapeError, match="no GPU rows"):
        gpustat.parse_reading("--xid--\n0\n")
    with pytest.raises(ScrapeError, match="expected 10 fields"):
        gpustat.parse_reading("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")


def test_an_unreadable_kernel_log_leaves_xid_out() -> None:
    before = gpustat.parse_reading(SMI_BEFORE.replace("\n2\n", "\n?\n"))  # the query prints ? then
    assert before.xid_lines is None
    assert "gpu.decode.xid_errors" not in gpustat.trial_values("decode", before, gpustat.parse_reading(SMI_AFTER))


# ---------------------------------------------------------------------------- verify: rules
RULE = VerifyRule("verify[0]", "decode", "/server_info", {}, (("disable_cuda_graph", True), ("flags.max_bs", 64)))


def test_reported_fields_are_compared_with_their_types() -> None:
    assert reported_mismatch({"disable_cuda_graph": True, "flags": {"max_bs": 64.0}}, RULE) is None
    assert reported_mismatch({"disable_cuda_graph": 1, "flags": {"max_bs": 64}}, RULE) == (
        "disable_cuda_graph",
        True,
        1,
    )
    assert reported_mismatch({"disable_cuda_graph": True, "flags": {}}, RULE) == ("flags.max_bs", 64, MISSING)
    assert reported_mismatch({"disable_cuda_graph": True, "flags": {"max_bs": "64"}}, RULE) == (
        "flags.max_bs",
        64,
        "64",
    )


def test_the_mismatch_error_names_field_expected_and_actual() -> None:
    exc = ReportedMismatch("decode.fake: /server_info (verify[0])", "disable_cuda_graph", True, False)
    assert isinstance(exc, VerificationError)
    assert (exc.field, exc.expected, exc.actual) == ("disable_cuda_graph", True, False)
    assert "field disable_cuda_graph is False, expected True" in str(exc)
    assert "is missing" in str(ReportedMismatch("x", "f", 1, MISSING))


# ---------------------------------------------------------------------------- config
FACTORS = {
    "graph": {
        "levels": {
            "on": {"decode": {"SGLANG_EXTRA_ARGS": ""}},
            "off": {"decode": {"SGLANG_EXTRA_ARGS": "--disable-cuda-graph"}},
        }
    }
}


def test_config_builds_metrics_verify_and_warmup() -> None:
    m = make_matrix(
        FACTORS,
        repro={"command": "run", "warmup": "warm {trial}", "metrics": {"x": {"regex": "x=(\\d+)"}}},
        metrics={
            "sample_interval": 0.5,
            "endpoints": {"router": {"url": "http://r:29000/metrics", "names": ["smg_*"]}},
        },
        verify=[{"role": "decode", "when": {"graph": "off"}, "expect": {"disable_cuda_graph": True}}],
    )
    assert m.repro.warmup == "warm {trial}"
    assert m.server_metrics is not None and m.server_metrics.sample_interval_s == 0.5
    (endpoint,) = m.server_metrics.resolved(["decode", "router"])
    assert (endpoint.url, endpoint.names) == ("http://r:29000/metrics", ("smg_*",))
    assert m.verify[0].when == {"graph": "off"} and m.verify[0].expect == (("disable_cuda_graph", True),)
    default = make_matrix(FACTORS, metrics={}).server_metrics
    assert default is not None
    assert [(e.name, e.path, e.names) for e in default.resolved(["prefill", "decode", "router"])] == [
        ("prefill", "/metrics", SGLANG_NAMES),
        ("decode", "/metrics", SGLANG_NAMES),
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"metrics": {"endpoints": {"d": {"role": "decode", "url": "http://x/metrics"}}}}, "exactly one of `role:`"),
        ({"metrics": {"endpoints": {"d": {"url": "ftp://x/metrics"}}}}, r"not an http\(s\) URL"),
        ({"metrics": {"endpoints": {"d": {"url": "http://[::1/metrics"}}}}, r"not an http\(s\) URL"),
        ({"metrics": {"endpoints": {"d": {"url": "http://h:99999/metrics"}}}}, r"not an http\(s\) URL"),
        ({"metrics": {"sample_interval": 0.001}}, "sample_interval"),
        ({"metrics": {"endpoints": {"d": {"url": "http://x:1/metrics", "port": 9}}}}, "`port:` goes with `role:`"),
        ({"verify": [{"role": "decode", "when": {"graph": "maybe"}, "expect": {"a": 1}}]}, "'maybe' is not a level"),
        ({"verify": [{"role": "decode", "when": {"nope": "x"}, "expect": {"a": 1}}]}, "no factor 'nope'"),
        ({"verify": [{"role": "decode", "expect": {"a b": 1}}]}, "invalid field"),
        ({"verify": [{"role": "decode", "expect": {}}]}, "expect"),
        # a path that is no path: each bad character alone, and the leading slash alone
        ({"metrics": {"endpoints": {"d": {"role": "decode", "path": "metrics"}}}}, "invalid path 'metrics'"),
        ({"metrics": {"endpoints": {"d": {"role": "decode", "path": "/m x"}}}}, "invalid path '/m x'"),
        ({"metrics": {"endpoints": {"d": {"role": "decode", "path": "/m#x"}}}}, "invalid path '/m#x'"),
        ({"verify": [{"role": "decode", "path": "server_info", "expect": {"a": 1}}]}, "invalid path 'server_info'"),
        ({"verify": [{"role": "decode", "path": "/info?x=1", "expect": {"a": 1}}]}, r"invalid path '/info\?x=1'"),
        ({"verify": [{"role": "decode", "path": "/a b", "expect": {"a": 1}}]}, "invalid path '/a b'"),
        ({"metrics": {"sample_interval": 3600.5}}, "sample_interval"),
        ({"metrics": {"endpoints": {"d": {"role": "decode", "names": ["n"] * 201}}}}, "names"),
    ],
)
def test_config_errors_name_the_key(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        make_matrix(FACTORS, **extra)
    assert "<fake matrix>:" in str(info.value)


def test_the_bounds_themselves_are_allowed() -> None:
    m = make_matrix(
        FACTORS,
        metrics={
            "sample_interval": 3600,
            "endpoints": {"d": {"role": "decode", "names": [f"n{i}" for i in range(200)]}},
        },
    )
    assert m.server_metrics is not None and m.server_metrics.sample_interval_s == 3600
    assert len(m.server_metrics.resolved(["decode"])[0].names) == 200
    assert make_matrix(FACTORS, metrics={"sample_interval": 0.05}).server_metrics is not None


def test_roles_are_checked_against_the_inventory(tmp_path: Path) -> None:
    from fakes import Role, make_bed

    from orchestrator.core.config import check_against_inventory

    bed = make_bed({"decode": Role("A=1\n")})
    for extra, where in [
        ({"metrics": {"endpoints": {"p": {"role": "prefill"}}}}, "metrics.endpoints.p.role"),
        ({"verify": [{"role": "prefill", "expect": {"a": 1}}]}, "verify[0].role"),
    ]:
        with pytest.raises(ConfigError, match="role 'prefill' is not in the inventory") as info:
            check_against_inventory(make_matrix(FACTORS, **extra), bed.deployment.testbed)
        assert where in str(info.value)


def test_the_simulators_exposition_parses_back_to_what_it_observed() -> None:
    from orchestrator.sim.flags import SimConfig
    from orchestrator.sim.metrics import WorkerMetrics

    class Engine:
        running: dict[int, str] = {1: "{}", 2: "{}"}

        def _enter(self, arguments_json: str) -> tuple[int, int]:
            return 0, 0

    metrics = WorkerMetrics(SimConfig(role="decode"), Engine())
    for seconds in (0.003, 0.004, 0.3):
        metrics._observe(0.0, seconds, 400, 40)
    got = parse(metrics.exposition().decode(), KEEP_SGLANG)
    assert got.counters["sglang:num_requests_total"] == 3 and got.counters["sglang:prompt_tokens_total"] == 300
    assert got.gauges["sglang:num_running_reqs"] == 2
    e2e = got.histograms["sglang:e2e_request_latency_seconds"]
    assert (e2e.count, round(e2e.total, 6)) == (3, 0.307)
    assert dict(e2e.buckets)[0.005] == 2 and dict(e2e.buckets)[0.4] == 3 and e2e.buckets[-1] == (math.inf, 3)


def test_requests_counted_sums_the_request_counters_of_the_endpoints_it_is_given() -> None:
    def num(value: float | None) -> MetricValue:
        return MetricValue(kind="number", value=value)

    values = {
        "server.decode.sglang:num_requests_total.delta": num(0),
        "server.router.smg_router_requests_total.delta": num(3),
        "server.far.sglang:num_requests_total.delta": num(40),  # not asked about
        "server.decode.sglang:prompt_tokens_total.delta": num(900),  # not a request counter
    }
    assert requests_counted(values, ["decode", "router"]) == 3
    assert requests_counted(values, ["decode"]) == 0
    assert requests_counted(values, ["prefill"]) is None  # no request counter kept: cannot tell
    lost = {**values, "server.router.missing": MetricValue(kind="number", value=None, unit="HTTP 503")}
    assert requests_counted(lost, ["decode", "router"]) is None  # the requests may have gone where no one looked


def test_a_worker_role_without_a_request_counter_is_unwatched_the_router_may_be() -> None:
    counted = MetricValue(kind="number", value=0)
    values = {"server.d.sglang:num_requests_total.delta": counted, "server.p.sglang:prompt_tokens_total.delta": counted}
    endpoints_of = {"decode": ["d"], "prefill": ["p"], "router": [], "lb": []}
    assert unwatched_roles(values, endpoints_of, "router") == ["prefill", "lb"]  # p keeps no request counter
