"""The simulated workers speak the worker API the real PD router calls: both endpoint
generations, /get_load, /generate and chat with bootstrap fields, a prefill bootstrap port, and
the router's HTTP/2 probe on a plain HTTP/1 port (answered and closed, never a hang or a crash)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from helpers.netutil import exchange

from orchestrator.sim import protocol

from .helpers import Sim, free_port, get, wait_until

pytestmark = pytest.mark.sim

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS


def post(url: str, payload: object) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http2_probe_is_answered_and_closed_and_the_server_keeps_serving(sim: Sim) -> None:
    decode = sim.start("decode", {"SIM_WARMUP_S": "0"})
    started = time.monotonic()
    data = exchange(decode.port, H2_PREFACE, timeout=3)  # returns once the server closed the connection
    assert time.monotonic() - started < 2
    # sim.http1 refuses HTTP/2.0 with a 505 answer and closes the connection
    assert b"505" in data and b"Invalid HTTP version" in data, data[:200]
    wait_until(lambda: get(decode.url + "/health")[0] == 200, timeout=5)
    assert decode.proc.poll() is None


def test_both_endpoint_generations_and_load(sim: Sim) -> None:
    bootstrap = free_port()
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"}, extra=("--disaggregation-bootstrap-port", str(bootstrap)))
    for path in ("/server_info", "/get_server_info"):
        status, info = get(prefill.url + path)
        assert status == 200 and info["disaggregation_mode"] == "prefill"
        assert info["disaggregation_bootstrap_port"] == bootstrap and info["disable_cuda_graph"] is False
    for path in ("/model_info", "/get_model_info"):
        status, info = get(prefill.url + path)
        assert status == 200 and info["is_generation"] is True and "model_path" not in info
    status, load = get(prefill.url + "/get_load")
    assert status == 200 and isinstance(load, list) and load[0]["num_reqs"] == 0
    assert get(f"http://127.0.0.1:{bootstrap}/route")[0] == 200  # the bootstrap port is really open


def test_generate_and_chat_accept_bootstrap_fields_on_both_roles(sim: Sim) -> None:
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"})
    decode = sim.start("decode", {"SIM_WARMUP_S": "0"})
    wait_until(lambda: get(decode.url + "/health")[0] == 200 and get(prefill.url + "/health")[0] == 200, 5)
    boot = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 12345}
    gen = {"text": "hi", "sampling_params": {"max_new_tokens": 3}, **boot}
    status, body = post(decode.url + "/generate", gen)
    assert status == 200 and body["meta_info"]["completion_tokens"] == 3  # type: ignore[index]
    assert post(prefill.url + "/generate", gen)[0] == 200
    ask = protocol.ToolAsk("s1", 1, 1, "grep", '{"path":"/srv"}')
    chat = {"metadata": {"session_id": "s1"}, "messages": [{"role": "user", "content": ask.instruction()}], **boot}
    status, body = post(decode.url + "/v1/chat/completions", chat)  # no `user`: the real router drops it
    assert status == 200 and body["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    assert post(prefill.url + "/v1/chat/completions", chat)[0] == 200
    assert "room=12345" in prefill.text() and "room=12345" in decode.text()
    status, body = post(decode.url + "/generate", {**gen, "bootstrap_room": "12345"})
    assert status == 400 and "bootstrap_room" in str(body["error"])


def test_generate_is_503_while_warming_up(sim: Sim) -> None:
    decode = sim.start("decode", {"SIM_WARMUP_S": "5"})
    assert post(decode.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1}})[0] == 503
