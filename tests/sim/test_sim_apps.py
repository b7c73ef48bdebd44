"""The simulator's apps answered in-process (no process: its servers in threads on loopback), where
the thirteenth mutation round found them tested only through the real router or not at all: a
route with a query string, an unknown route, a chat the decode cannot read, the worker arguments
orch's DP check and the router read, the stand-in router's forwarding (both workers, a fresh
bootstrap room each time, decode's answer) and its server info, and a port already taken."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from helpers.serving import in_thread

from orchestrator.sim import server as sim_server
from orchestrator.sim.flags import Role, SimConfig
from orchestrator.sim.server import Log, RouterApp, SimServer, WorkerApp, worker_args

READY = 0.0  # warm-up seconds: ready at once


def _worker(role: Role) -> tuple[WorkerApp, io.StringIO]:
    log = io.StringIO()
    app = WorkerApp(SimConfig(role, warmup_s=READY), Log(role, log))
    app.on_listening()
    return app, log


def test_a_route_is_found_without_its_query_and_an_unknown_one_is_404() -> None:
    app, _ = _worker("decode")
    assert app.handle("GET", "/health?probe=1", b"").status == app.handle("GET", "/health", b"").status == 200
    missing = app.handle("GET", "/nope", b"")
    assert missing.status == 404 and json.loads(missing.body) == {"error": "no route GET /nope"}


def test_a_chat_the_decode_cannot_read_is_400_saying_why() -> None:
    app, _ = _worker("decode")
    reply = app.handle("POST", "/v1/chat/completions", json.dumps({"user": "s1", "messages": []}).encode())
    assert reply.status == 400 and "instruction" in json.loads(reply.body)["error"]


def test_the_worker_arguments_say_one_tensor_and_one_data_parallel_rank() -> None:
    """What the router and orch's DP-aware check read (core.routerworkers): one rank each."""
    args = worker_args(SimConfig("decode"), None)
    assert (args["tp_size"], args["dp_size"], args["disaggregation_mode"]) == (1, 1, "decode")


@contextmanager
def served(app: WorkerApp) -> Iterator[str]:
    with in_thread(SimServer(("127.0.0.1", 0), app)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_the_stand_in_router_sends_each_request_to_both_workers_with_a_new_room() -> None:
    (prefill, prefill_log), (decode, decode_log) = _worker("prefill"), _worker("decode")
    with served(prefill) as p_url, served(decode) as d_url:
        router = RouterApp(SimConfig("router", warmup_s=READY), Log("router", io.StringIO()), p_url, d_url)
        try:
            ask = {"text": "hello world", "sampling_params": {"max_new_tokens": 2}}
            first = router.handle("POST", "/generate", json.dumps(ask).encode())
            second = router.handle("POST", "/generate", json.dumps(ask).encode())
            info = router.handle("GET", "/get_server_info", b"")
        finally:
            router.pool.shutdown()
    assert first.status == second.status == 200
    assert json.loads(first.body)["meta_info"]["id"].startswith("d")  # decode's answer
    assert "room=1" in decode_log.getvalue() and "room=2" in decode_log.getvalue()
    assert "room=1" in prefill_log.getvalue() and "room=2" in prefill_log.getvalue()
    shown = json.loads(info.body)
    assert info.status == 200 and (shown["prefill_url"], shown["decode_url"], shown["role"]) == (p_url, d_url, "router")


def test_a_port_already_taken_exits_1_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_server.signal, "signal", lambda *a: None)  # the test's own SIGTERM stays as it is
    log = io.StringIO()
    monkeypatch.setattr(sim_server, "Log", lambda role: Log(role, log))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert sim_server.main(["--role", "decode", "--port", str(port)]) == 1
    assert f"[decode] fatal: cannot listen on 127.0.0.1:{port}: " in log.getvalue()


def test_the_stand_in_router_passes_a_workers_refusal_on_and_logs_it() -> None:
    prefill, _ = _worker("prefill")
    decode_log = io.StringIO()
    cold = WorkerApp(SimConfig("decode", warmup_s=600.0), Log("decode", decode_log))
    cold.on_listening()  # still warming up: it refuses requests
    router_log = io.StringIO()
    with served(prefill) as p_url, served(cold) as d_url:
        router = RouterApp(SimConfig("router", warmup_s=READY), Log("router", router_log), p_url, d_url)
        try:
            reply = router.handle("POST", "/generate", json.dumps({"text": "hi"}).encode())
        finally:
            router.pool.shutdown()
    assert reply.status == 503
    assert "router decode returned 503" in router_log.getvalue()
    assert "router prefill returned" not in router_log.getvalue() and "router req ok" not in router_log.getvalue()
