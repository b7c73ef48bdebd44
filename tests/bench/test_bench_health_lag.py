"""bench/bench_health_lag.py: reading the server's ready time (pure) and a smoke run against real
simulated servers restarted by orch's LocalServiceManager. Prints figures; no speed asserted."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_module, bench_output

lag = bench_module("bench_health_lag.py")


def test_ready_times_reads_only_ready_lines_in_order() -> None:
    log = (
        "-- orch: starting lag-decode --\n"
        "2026-05-09T07:00:00.250000Z [decode] sim-0.1 decode listening on 127.0.0.1:9 pid=1\n"
        "2026-05-09T07:00:01.500000Z [decode] ready\n"
        "2026-05-09T07:00:02.000000Z [decode] decode req=a/0 tool=ready batch=1\n"
        "2026-05-09T07:00:03.125000Z [decode] stopping\n"
        "2026-05-09T07:00:04.750000Z [decode] ready\n"
    )
    times = lag.ready_times(log)
    assert len(times) == 2
    assert times[1] - times[0] == pytest.approx(3.25)


def test_percentile_and_warmup_parsing() -> None:
    assert lag.percentile([0.5], 90) == 0.5
    assert lag.percentile([float(i) for i in range(1, 11)], 90) == pytest.approx(9.1)
    assert lag.parse_warmup("0.2:0.4") == (0.2, 0.4)
    assert lag.parse_warmup("0.3") == (0.3, 0.3)
    with pytest.raises(Exception, match="MIN:MAX"):
        lag.parse_warmup("2:1")


@pytest.mark.sim
def test_health_lag_bench_prints_its_figures() -> None:
    out = bench_output("bench_health_lag.py", "--restarts", "3", "--warmup", "0.1:0.3", timeout=300)
    assert "3 restarts of a simulated decode server" in out
    for label in ("first restart", "learned window"):
        m = re.search(
            rf"health detection lag, {label} \(\d+\): median (-?[0-9.]+) s, p90 (-?[0-9.]+) s, "
            r"min (-?[0-9.]+) s, max (-?[0-9.]+) s",
            out,
        )
        assert m, out
        median, p90, low, high = map(float, m.groups())
        assert low <= median <= p90 <= high
        assert low > -0.05  # wait_ready cannot see "ready" much before the server says it is ready
    assert re.search(r"learned / first-restart median lag: \d+\.\d\d", out), out
    wait = re.search(r"wait_ready returned after median ([0-9.]+) s", out)
    assert wait and float(wait[1]) >= 0.1  # it really waited for the warm-up
