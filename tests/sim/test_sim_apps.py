"""The simulator's apps answered in-process (no process: its servers in threads on loopback), where
the thirteenth mutation round found them tested only through the real router or not at all: a
route with a query string, an unknown route, a chat the decode cannot read, the worker arguments
orch's DP check and the router read, the stand-in router's forwarding (both workers, a fresh
bootstrap room each time, decode's answer) and its server info, and a port already taken. Then
how a server stops (its stop taken in one place, so "stopping" is the last line it logs)."""

from __future__ import annotations

import io
import json
import socket
import time
from argparse import Namespace
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
    monkeypatch.setattr(
        sim_server.signal, "pthread_sigmask", lambda *a: set()
    )  # the test's own signals stay as they are
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


def _args(role: Role, bootstrap: int | None = None) -> Namespace:
    return sim_server.parse_args(
        ["--role", role, "--port", "0"]
        + ([] if bootstrap is None else ["--disaggregation-bootstrap-port", str(bootstrap)])
    )


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_stop_asked_before_the_serve_loop_still_ends_on_stopping_with_both_ports_closed() -> None:
    """SIGTERM between the start line and the serve loop used to end the process with no
    "stopping" line (the SystemExit its handler raised landed outside the try). Now the stop is
    taken at one place: whenever it came, the servers were serving and are closed after it."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        bootstrap = probe.getsockname()[1]
    log = io.StringIO()
    seen: list[bool] = []

    def stop_at_once() -> None:
        time.sleep(0.1)  # the serve threads are started before the wait: they accept meanwhile
        seen.append(_refused(bootstrap))

    code = sim_server.serve(_args("prefill", bootstrap), Log("prefill", log), stop_at_once, {"SIM_WARMUP_S": "0"})
    lines = log.getvalue().splitlines()
    assert code == 0 and lines[-1].endswith("[prefill] stopping") and "listening on 127.0.0.1:" in lines[0]
    assert seen == [False]  # the bootstrap port was open while it served
    assert _refused(bootstrap) and _refused(int(lines[0].split("listening on 127.0.0.1:")[1].split()[0]))


def test_no_ready_line_comes_after_stopping() -> None:
    """A warm-up timer still to fire is cancelled by the stop (it logged "ready" after "stopping"
    under load: the last line a test or a service manager reads was not the stop)."""
    log = io.StringIO()
    code = sim_server.serve(_args("decode"), Log("decode", log), lambda: None, {"SIM_WARMUP_S": "1"})
    time.sleep(1.3)  # past the warm-up: a timer left running would log now
    assert code == 0 and "ready" not in log.getvalue() and log.getvalue().splitlines()[-1].endswith("stopping")


def test_a_warmup_stopped_while_firing_has_logged_ready_before_stop_returns() -> None:
    log = io.StringIO()
    warmup = sim_server.Warmup(SimConfig("decode", warmup_s=0.0), Log("decode", log))
    warmup.start()
    warmup.stop()  # joins the timer: whatever it logs, it has logged
    assert warmup.ready() == ("ready" in log.getvalue())
    sim_server.Warmup(SimConfig("decode", never_ready=True), Log("decode", log)).stop()  # no timer: nothing to stop


def test_a_bootstrap_port_already_taken_is_named_and_the_role_port_closed_again() -> None:
    """The message named the role's port (`--port`), which had opened fine, and left it open."""
    log = io.StringIO()
    opened: list[SimServer] = []
    real_listen = sim_server.listen

    def listen(host: str, port: int, app: sim_server.App) -> SimServer:
        server = real_listen(host, port, app)
        opened.append(server)
        return server

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sim_server, "listen", listen)
            code = sim_server.serve(_args("prefill", port), Log("prefill", log), lambda: None, {})
    assert code == 1 and f"[prefill] fatal: cannot listen on 127.0.0.1:{port}: " in log.getvalue()
    assert len(opened) == 1 and opened[0].socket.fileno() == -1  # the role's port, closed again
