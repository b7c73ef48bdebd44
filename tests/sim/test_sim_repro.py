"""The repro client against a real simulated deployment: output format, the DSV4 finding
(corruption only with all three flags on), and the anomaly canary moving with index-K dtype."""

from __future__ import annotations

import re

import pytest

from orchestrator.sim import model
from orchestrator.sim.flags import SimConfig

from .helpers import Sim, free_port, run_repro

pytestmark = pytest.mark.sim

WALL = re.compile(r"^wall=(\d+\.\d)s counts=(\{.*\})$", re.M)
CORRUPTION = re.compile(
    r"^CORRUPTION sessions: (\d+)/(\d+) = (\d+)%  \(leak=(\d+) no_tool=(\d+) error=(\d+) "
    r"ok-ish\[done/maxrounds\]=(\d+)\)$",
    re.M,
)
THROUGHPUT = re.compile(r"^THROUGHPUT req/s=(\d+\.\d) p50_latency_ms=(\d+\.\d) p99_latency_ms=(\d+\.\d)$", re.M)

ALL_ON = {"SGLANG_DSV4_BF16_INDEX_K": "1", "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1", "SIM_SEED": "3"}
SESSIONS = 150  # 450 requests per config: the bounds below fail with real effects, not by chance


def corruption(stdout: str) -> tuple[int, int, int]:
    """(corrupted sessions, sessions, errors)"""
    m = CORRUPTION.search(stdout)
    assert m, stdout
    return int(m[1]), int(m[2]), int(m[6])


def test_output_has_the_real_repro_format(sim: Sim) -> None:
    _, _, router = sim.deployment(ALL_ON)
    done = run_repro(
        router.url,
        "--sessions",
        "40",
        "--rounds",
        "3",
        "--context",
        "300",
        "--max-tokens",
        "1800",
        "--timeout",
        "240",
        "--seed",
        "11",
    )
    assert done.returncode == 0, done.stderr
    wall, counts = WALL.search(done.stdout).groups()  # type: ignore[union-attr]
    m = CORRUPTION.search(done.stdout)
    assert m, done.stdout
    k, n, pct, leak, no_tool, error, okish = map(int, m.groups())
    assert n == 40 and k == leak + no_tool + error and okish == n - k and error == 0
    assert pct == round(100 * k / n)
    assert sum(int(v) for v in re.findall(r": (\d+)", counts)) == 40
    rate, p50, p99 = map(float, THROUGHPUT.search(done.stdout).groups())  # type: ignore[union-attr]
    assert rate > 0 and 0 < p50 <= p99
    assert float(wall) < 10  # 40 x 3 rounds: about a second, even on a busy CI machine


def test_same_seeds_give_the_same_outcome(sim: Sim) -> None:
    _, _, router = sim.deployment(ALL_ON)
    runs = [run_repro(router.url, "--sessions", "60", "--seed", "5") for _ in range(2)]
    assert CORRUPTION.search(runs[0].stdout)[0] == CORRUPTION.search(runs[1].stdout)[0]  # type: ignore[index]


@pytest.mark.parametrize(
    "name, env, low, high",
    [
        ("all on", {}, 0.08, 0.30),
        ("overlap off", {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0"}, 0.0, 0.04),
        ("cuda graph off", {"SGLANG_EXTRA_ARGS": "--disable-cuda-graph"}, 0.0, 0.04),
        ("fp8 index-K", {"SGLANG_DSV4_BF16_INDEX_K": "0"}, 0.0, 0.04),
        ("overlap 'off' is ignored", {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "off"}, 0.08, 0.30),
        ("one request at a time", {"SGLANG_EXTRA_ARGS": "--max-running-requests 1"}, 0.0, 0.04),
    ],
)
def test_corruption_needs_all_three_flags_and_a_batch(
    sim: Sim, name: str, env: dict[str, str], low: float, high: float
) -> None:
    _, _, router = sim.deployment({**ALL_ON, **env})
    args = ["--sessions", "40" if "one request" in name else str(SESSIONS), "--seed", "21"]
    done = run_repro(router.url, *args)
    assert done.returncode == 0, done.stderr
    k, n, errors = corruption(done.stdout)
    assert errors == 0, done.stdout
    assert low <= k / n <= high, f"{name}: {k}/{n}"


def test_anomaly_counts_move_with_index_k_not_with_corruption(sim: Sim) -> None:
    per_request = {}
    for dtype, flag in (("bf16", "1"), ("fp8", "0")):
        _, decode, router = sim.deployment({**ALL_ON, "SGLANG_DSV4_BF16_INDEX_K": flag})
        done = run_repro(router.url, "--sessions", "40", "--seed", "8")
        assert done.returncode == 0
        log = decode.text()
        requests = log.count("decode req=")
        anomalies = sum("ANOMALY" in line for line in log.splitlines())
        assert 100 <= requests <= 120  # a corrupted session stops at its first bad answer
        per_request[dtype] = anomalies / requests
    # canary: 320 vs 997 over 120 requests (2.7 vs 8.3 per request)
    assert 2.0 <= per_request["bf16"] <= 3.4 and 7.3 <= per_request["fp8"] <= 9.3, per_request


def test_graph_batch_size_moves_decode_latency(sim: Sim) -> None:
    """The second example matrix sweeps --cuda-graph-max-bs: batches above it run eagerly.

    Checked request by request in decode's log, not on the latency median: how many of the
    sessions overlap depends on the machine's load (on a busy CI machine most requests ran in
    batches of 4 or fewer, and the median moved 13%, not 30%). The graphed and the eager latency
    ranges do not overlap at any batch the sessions can make, so a request's latency says how it
    ran; its logged batch (the larger of the batch it started and ended in, at least the one its
    latency was drawn for) says how it had to."""
    sessions = 32
    graphed = SimConfig(  # ALL_ON's flags, max-bs 64 as below
        "decode", bf16_index_k=True, multi_stream_overlap=True, cuda_graph=True, cuda_graph_max_bs=64
    )
    graphed_max = 1000 * model.decode_latency_s(graphed, sessions, 1.0)  # the largest batch, the largest jitter
    eager_min = 1000 * model.decode_latency_s(graphed._replace(cuda_graph=False), 1, 0.0)  # alone, the least jitter
    assert graphed_max < eager_min  # the premise: a latency tells a graph replay from an eager step
    requests = {}
    for bs in ("4", "64"):
        _, decode, router = sim.deployment({**ALL_ON, "SGLANG_EXTRA_ARGS": f"--cuda-graph-max-bs {bs}"})
        done = run_repro(router.url, "--sessions", str(sessions), "--seed", "2")
        assert done.returncode == 0, done.stderr
        found = re.findall(r"decode req=\S+ tool=\S+ batch=(\d+) graphed=\w+ latency_ms=(\d+\.\d)", decode.text())
        requests[bs] = [(int(batch), float(ms)) for batch, ms in found]
        assert len(requests[bs]) >= sessions, decode.text()[-2000:]
        assert all(ms < graphed_max or ms > eager_min for _, ms in requests[bs]), requests[bs]
    # max-bs 64: batches of 32 at most, so every request replayed a graph
    assert all(ms < graphed_max for _, ms in requests["64"]), requests["64"]
    # max-bs 4: a request in batches of 4 or fewer replayed a graph; one that ran eagerly was in a
    # batch above 4; and some did (the sessions overlapped): the flag took effect
    assert all(ms < graphed_max for batch, ms in requests["4"] if batch <= 4), requests["4"]
    eager = [(batch, ms) for batch, ms in requests["4"] if ms > eager_min]
    assert eager and all(batch > 4 for batch, _ in eager), requests["4"]


def test_unreachable_router_exits_non_zero() -> None:
    done = run_repro(f"http://127.0.0.1:{free_port()}", "--sessions", "2", "--timeout", "5")
    assert done.returncode == 3
    assert "router unreachable" in done.stderr and "CORRUPTION" not in done.stdout
