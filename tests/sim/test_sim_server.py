"""The simulated servers as real processes on loopback: warm-up, readiness, start failures,
flag parsing as seen from outside, start-up time, clean stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import SERVER, Sim, get, wait_until

pytestmark = pytest.mark.sim


def test_worker_health_is_503_while_warming_then_200(sim: Sim) -> None:
    decode = sim.start("decode", {"SIM_WARMUP_S": "0.6"})
    t0 = time.monotonic()
    assert get(decode.url + "/health") == (503, {"status": "warming_up"})
    status, info = get(decode.url + "/get_server_info")  # answers before warm-up, like SGLang
    assert status == 200 and info["role"] == "decode" and info["version"] == "sim-0.1"
    wait_until(lambda: get(decode.url + "/health")[0] == 200, timeout=5)
    assert time.monotonic() - t0 >= 0.4  # warm-up runs from the moment the port opened
    assert get(decode.url + "/health") == (200, {"status": "ok"})
    assert "ready" in decode.text().splitlines()[-1]


def test_never_ready_stays_503(sim: Sim) -> None:
    decode = sim.start("decode", {"SIM_WARMUP_S": "0", "SIM_NEVER_READY": "1"})
    time.sleep(0.3)
    assert get(decode.url + "/health")[0] == 503
    assert decode.proc.poll() is None


def test_router_health_lies_but_readiness_waits_for_both_workers(sim: Sim) -> None:
    prefill = sim.spawn("prefill", {"SIM_WARMUP_S": "0.5"})
    decode = sim.spawn("decode", {"SIM_WARMUP_S": "0.5"})
    router = sim.start("router", extra=("--prefill-url", prefill.url, "--decode-url", decode.url))
    assert get(router.url + "/health")[0] == 200  # even with no healthy worker
    status, body = get(router.url + "/readiness")
    assert status == 503 and body["status"] == "not_ready" and body["reason"]
    wait_until(lambda: get(router.url + "/readiness")[0] == 200, timeout=10)
    assert get(prefill.url + "/health")[0] == 200 and get(decode.url + "/health")[0] == 200


def test_readiness_names_the_worker_that_is_down(sim: Sim) -> None:
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"})
    decode = sim.start("decode", {"SIM_WARMUP_S": "30"})
    router = sim.start("router", extra=("--prefill-url", prefill.url, "--decode-url", decode.url))
    wait_until(lambda: get(prefill.url + "/health")[0] == 200, timeout=5)
    status, body = get(router.url + "/readiness")
    assert status == 503 and "decode" in str(body["reason"]) and "503" in str(body["reason"])


def test_fail_start_exits_1_at_once(sim: Sim) -> None:
    server = sim.spawn("decode", {"SIM_FAIL_START": "1"})
    assert server.proc.wait(5) == 1
    assert "SIM_FAIL_START" in server.text()


@pytest.mark.parametrize("extra", ["--enable-foo", "--cuda-graph-max-bs x"])
def test_unknown_or_bad_extra_args_exit_2(sim: Sim, extra: str) -> None:
    server = sim.spawn("decode", {"SGLANG_EXTRA_ARGS": extra})
    assert server.proc.wait(5) == 2
    assert "error:" in server.text()


def test_overlap_off_is_ignored_with_a_warning_in_the_log(sim: Sim) -> None:
    decode = sim.start("decode", {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "off", "SIM_WARMUP_S": "0"})
    info = get(decode.url + "/get_server_info")[1]
    assert info["flags"]["multi_stream_overlap"] is True  # type: ignore[index]
    assert "'off' is not a valid boolean" in decode.text()
    assert "multi_stream_overlap=True" in decode.text()


def test_effective_flags_are_reported(sim: Sim) -> None:
    decode = sim.start(
        "decode",
        {
            "SGLANG_DSV4_BF16_INDEX_K": "y",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0",
            "SGLANG_EXTRA_ARGS": "--disable-cuda-graph --cuda-graph-max-bs 16",
        },
    )
    flags = get(decode.url + "/get_server_info")[1]["flags"]
    assert flags == {
        "bf16_index_k": True,
        "multi_stream_overlap": False,
        "cuda_graph": False,  # type: ignore[comparison-overlap]
        "cuda_graph_max_bs": 16,
        "max_running_requests": None,
        "warmup_s": 1.0,
        "seed": 0,
    }


def test_server_starts_on_the_standard_library_alone() -> None:
    """A restart in a sweep waits for the server's start: its module loads nothing but the
    standard library and orchestrator.sim (Prometheus' client is imported by a background thread
    after the port is open). How fast that is, is bench/bench_health_lag.py's business."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"  # the interpreter's own start-up (site hooks) is not the server's
        "import orchestrator.sim.server\n"
        "tops = {name.split('.')[0] for name in set(sys.modules) - before}\n"
        "print(sorted(t for t in tops if t not in sys.stdlib_module_names and t not in ('orchestrator', '__main__')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]", out


def test_sigterm_stops_cleanly(sim: Sim) -> None:
    decode = sim.start("decode", {"SIM_WARMUP_S": "0"})
    wait_until(lambda: get(decode.url + "/health")[0] == 200, timeout=10)  # "ready" is logged by then
    decode.proc.terminate()
    assert decode.proc.wait(5) == 0
    assert decode.text().splitlines()[-1].endswith("stopping")


def test_a_prefill_with_its_bootstrap_port_stops_cleanly_too(sim: Sim) -> None:
    """Its bootstrap port is served from a second thread, which must not keep the process alive
    once SIGTERM ends the main one (systemd would wait out TimeoutStopSec, then SIGKILL)."""
    from helpers.netutil import free_ports

    (port,) = free_ports(1)
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"}, extra=("--disaggregation-bootstrap-port", str(port)))
    wait_until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=10)
    prefill.proc.terminate()
    assert prefill.proc.wait(5) == 0
    assert prefill.text().splitlines()[-1].endswith("stopping")


def test_only_the_main_thread_takes_a_stop_signal(sim: Sim) -> None:
    """SIGTERM and SIGINT are blocked in every thread (servers, warm-up, requests) and taken by the
    main thread's sigwait: a signal the kernel gave a server thread could not wake a main thread
    waiting for it, and one whose handler raised wherever the main thread was cut socketserver's
    accept in two (a traceback on the log, once in CI)."""
    from helpers.netutil import free_ports

    (port,) = free_ports(1)
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"}, extra=("--disaggregation-bootstrap-port", str(port)))
    wait_until(lambda: get(prefill.url + "/health")[0] == 200, timeout=10)
    masks = {}
    for status in Path(f"/proc/{prefill.proc.pid}/task").glob("*/status"):
        fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        masks[status.parent.name] = int(fields["SigBlk"], 16)
    stop = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGINT - 1))
    main = masks.pop(str(prefill.proc.pid))  # in sigwait, the kernel opens the waited ones to it alone
    assert main & stop == 0 and len(masks) >= 2, masks  # two serve loops at least
    assert all(mask & stop == stop for mask in masks.values()), masks
    prefill.proc.send_signal(signal.SIGINT)  # Ctrl-C in a terminal stops it the same way
    assert prefill.proc.wait(5) == 0
    assert prefill.text().splitlines()[-1].endswith("stopping")


def test_router_needs_worker_urls() -> None:
    done = subprocess.run([*SERVER, "--role", "router", "--port", "0"], capture_output=True, text=True, timeout=10)
    assert done.returncode == 2 and "--prefill-url" in done.stderr
