"""Simulated SGLang prefill / decode servers, and a stand-in PD router (EDGE, stdlib only).

    python -m orchestrator.sim.server --role {prefill|decode|router} --port N [--host 127.0.0.1]
        [--disaggregation-bootstrap-port N]      # prefill only (SGLang's flag)
        [--prefill-url URL --decode-url URL]     # router only

Flags come from the environment (see flags.py), as from a unit's EnvironmentFile=. The workers
speak the worker API the real PD router (`sglang-router`, which the embedded default runs in front
of them) calls: /health (503 while warming up), /server_info and /model_info (and the older
/get_server_info, /get_model_info: they answer at once, so gating readiness on them is a bug orch
must not have), /get_load, and /generate and /v1/chat/completions with the bootstrap fields the
router adds (prefill and decode both get the request; the client gets decode's answer). A prefill
given a bootstrap port listens there too, as SGLang's does. The router's HTTP/2 probe on a worker
port gets a 505 and a closed connection, never a hang (HTTP/1.1 is spoken by http1.py). The stand-in router
(`--role router`, for tests that need no real router) forwards the same way; its /health is 200
even with dead workers while /readiness tells the truth. The log goes to stdout, line by line and
unbuffered, for the service manager to capture.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import socketserver
import sys
import threading
import time
from typing import Callable, Mapping, NamedTuple, TextIO
from urllib.parse import urlsplit

from orchestrator.sim import VERSION, http1, model, protocol
from orchestrator.sim.flags import ROLES, Role, SimConfig, SimConfigError, config_from_env
from orchestrator.sim.metrics import WorkerMetrics

ROUTER_UPSTREAM_TIMEOUT_S = 600.0  # the repro bounds each request itself
ROUTER_PREFILL_THREADS = 128  # the stand-in router's prefill calls in flight (sessions run concurrently)
READINESS_PROBE_TIMEOUT_S = 1.0
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
STOP_POLL_S = 0.05  # how soon a stopped server's accept loop notices (socketserver polls)


class Log:
    """Timestamped lines on stdout; one lock so concurrent request lines never interleave."""

    def __init__(self, role: str, stream: TextIO = sys.stdout) -> None:
        self.role, self.stream, self.lock = role, stream, threading.Lock()

    def lines(self, texts: list[str]) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
        block = "".join(f"{stamp} [{self.role}] {t}\n" for t in texts)
        with self.lock:
            self.stream.write(block)
            self.stream.flush()

    def line(self, text: str) -> None:
        self.lines([text])


class Reply(NamedTuple):
    status: int
    body: bytes

    @classmethod
    def json(cls, status: int, value: object) -> Reply:
        return cls(status, json.dumps(value).encode())


Route = Callable[[bytes], Reply]


class App:
    """Routes of one role: (method, path) -> handler of the request body."""

    routes: dict[tuple[str, str], Route]

    def on_listening(self) -> None:
        """Called once the socket is bound and the start line is logged."""

    def on_stop(self) -> None:
        """Called once a stop is asked for, before the "stopping" line."""

    def handle(self, method: str, path: str, body: bytes) -> Reply:
        route = self.routes.get((method, path.split("?", 1)[0]))
        if route is None:
            return Reply.json(404, {"error": f"no route {method} {path}"})
        return route(body)


class Warmup:
    """/health turns 200 only when the (simulated) model is loaded and warmed up.

    Ready is the moment the "ready" line is logged, not a deadline compared on each request: a
    timer that fires late under load must never let /health answer 200 before the log says
    ready (the benchmarks read restart-to-ready from that line)."""

    def __init__(self, cfg: SimConfig, log: Log) -> None:
        self.cfg, self.log = cfg, log
        self._ready = threading.Event()
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        if not self.cfg.never_ready:
            self._timer = threading.Timer(self.cfg.warmup_s, self._become_ready)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        """No "ready" line after "stopping": a timer already firing logs before it, one that has
        not fired never does."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()

    def _become_ready(self) -> None:
        self.log.line("ready")
        self._ready.set()

    def ready(self) -> bool:
        return self._ready.is_set()


# ---- workers --------------------------------------------------------------------------------


class DecodeEngine:
    """Tracks the requests being decoded (the batch) and produces each answer."""

    def __init__(self, cfg: SimConfig, log: Log) -> None:
        self.cfg, self.log = cfg, log
        self.lock = threading.Lock()
        self.running: dict[int, str] = {}  # request number -> its correct arguments JSON
        self.ids = itertools.count()
        limit = cfg.max_running_requests
        self.admission = threading.BoundedSemaphore(limit) if limit else contextlib.nullcontext()

    def generate(self, ask: protocol.ToolAsk) -> dict[str, object]:
        key = f"{ask.session}/{ask.round}"
        rng = model.request_rng(self.cfg.seed, "decode", key, "decode")
        with self.admission:
            rid, batch_start = self._enter(ask.arguments_json)
            latency = model.decode_latency_s(self.cfg, batch_start, rng.random())
            time.sleep(latency)
            batch_end, others = self._leave(rid)
        batch = max(batch_start, batch_end)
        outcome = model.decide_outcome(
            self.cfg, batch, rng.random(), rng.random(), session=ask.session, rounds=ask.rounds
        )
        other = rng.choice(sorted(others)) if others else None
        reply = self._answer(ask, outcome, other, rng.random())
        self._log(ask, key, batch, latency)
        return reply

    def running_count(self) -> int:
        with self.lock:
            return len(self.running)

    def _enter(self, arguments_json: str) -> tuple[int, int]:
        with self.lock:
            rid = next(self.ids)
            self.running[rid] = arguments_json
            return rid, len(self.running)

    def _leave(self, rid: int) -> tuple[int, list[str]]:
        with self.lock:
            batch = len(self.running)
            del self.running[rid]
            return batch, list(self.running.values())

    def _answer(self, ask: protocol.ToolAsk, outcome: model.Outcome, other: str | None, u: float) -> dict[str, object]:
        request_id = f"{ask.session}-{ask.round}"
        if outcome == "no_tool":
            return protocol.completion(protocol.text_message(ask), "stop", request_id)
        arguments = ask.arguments_json
        if outcome == "leak":
            arguments = protocol.leaked_arguments(ask, other, u)
        message = protocol.tool_call_message(ask, arguments, f"call_{request_id}")
        return protocol.completion(message, "tool_calls", request_id)

    def _log(self, ask: protocol.ToolAsk, key: str, batch: int, latency: float) -> None:
        cfg = self.cfg
        n = model.poisson(model.request_rng(cfg.seed, "decode", key, "anomaly"), model.anomaly_mean(cfg))
        dtype = "bf16" if cfg.bf16_index_k else "fp8"
        lines = [
            f"decode req={key} tool={ask.tool} batch={batch} "
            f"graphed={model.graphed(cfg, batch)} latency_ms={latency * 1000:.1f}"
        ]
        lines += [f"ANOMALY canary index_k={dtype} req={key} n={i + 1}" for i in range(n)]
        self.log.lines(lines)


class WorkerApp(App):
    def __init__(self, cfg: SimConfig, log: Log, bootstrap_port: int | None = None) -> None:
        self.cfg, self.log, self.warmup = cfg, log, Warmup(cfg, log)
        self.engine = DecodeEngine(cfg, log)
        self.bootstrap_port = bootstrap_port
        self.requests = itertools.count()
        self.routes = {
            ("GET", "/health"): self.health,
            ("GET", "/server_info"): self.server_info,
            ("GET", "/get_server_info"): self.server_info,  # older SGLang's name
            ("GET", "/model_info"): self.model_info,
            ("GET", "/get_model_info"): self.model_info,  # older SGLang's name
            ("GET", "/get_load"): self.load,
            ("GET", "/v1/models"): self.models,
            ("POST", "/generate"): self.generate,
            ("POST", "/v1/chat/completions"): self.chat,
        }
        self.routes = WorkerMetrics(cfg, self.engine).instrument(self.routes, Reply)  # + GET /metrics

    def on_listening(self) -> None:
        self.warmup.start()

    def on_stop(self) -> None:
        self.warmup.stop()

    def health(self, _body: bytes) -> Reply:
        if self.warmup.ready():
            return Reply.json(200, {"status": "ok"})
        return Reply.json(503, {"status": "warming_up"})

    def server_info(self, _body: bytes) -> Reply:
        # answers before warm-up ends, like SGLang: never a readiness signal
        return Reply.json(200, server_info(self.cfg, **worker_args(self.cfg, self.bootstrap_port)))

    def model_info(self, _body: bytes) -> Reply:
        # no model_path: the real router would try to fetch a tokenizer for it
        return Reply.json(200, protocol.model_info())

    def load(self, _body: bytes) -> Reply:
        return Reply.json(200, [{"dp_rank": 0, "num_reqs": self.engine.running_count(), "num_waiting_reqs": 0}])

    def models(self, _body: bytes) -> Reply:
        return Reply.json(200, {"object": "list", "data": [{"id": protocol.MODEL_NAME}]})

    def _accepted(self, body: bytes) -> dict[str, object] | Reply:
        """The request's JSON object, or the refusal to send instead (generate and chat alike)."""
        payload = _json_object(body)
        refused = self._refuse(payload)
        if refused is not None:
            return refused
        assert isinstance(payload, dict)  # check_bootstrap refuses anything else
        return payload

    def _refuse(self, payload: object) -> Reply | None:
        """503 while warming up, 400 for a body that is not an object or has bad bootstrap fields."""
        if not self.warmup.ready():
            return Reply.json(503, {"error": "server is warming up"})
        try:
            protocol.check_bootstrap(payload)
        except protocol.ProtocolError as exc:
            return Reply.json(400, {"error": str(exc)})
        return None

    def _prefill(self, body: bytes, payload: dict[str, object]) -> int:
        """The prefill half of a PD request: a few ms per prompt, and a log line (the router
        discards prefill's body; decode's is the answer)."""
        tokens = len(body) // 4
        rng = model.request_rng(self.cfg.seed, "prefill", str(len(body)), "latency")
        latency = model.prefill_latency_s(tokens, rng.random())
        time.sleep(latency)
        self.log.line(f"prefill tokens={tokens} room={payload.get('bootstrap_room')} latency_ms={latency * 1000:.1f}")
        return tokens

    def generate(self, body: bytes) -> Reply:
        """SGLang's native /generate (orch's readiness probe sends one 1-token request here)."""
        payload = self._accepted(body)
        if isinstance(payload, Reply):
            return payload
        if self.cfg.role == "prefill":
            prompt_tokens = self._prefill(body, payload)
            return Reply.json(200, protocol.generate_answer(f"p{next(self.requests)}", prompt_tokens, 0))
        tokens = protocol.max_new_tokens(payload)
        time.sleep(model.generate_latency_s(self.cfg, tokens))
        self.log.line(f"decode generate tokens={tokens} room={payload.get('bootstrap_room')}")
        return Reply.json(200, protocol.generate_answer(f"d{next(self.requests)}", len(body) // 4, tokens))

    def chat(self, body: bytes) -> Reply:
        payload = self._accepted(body)
        if isinstance(payload, Reply):
            return payload
        if self.cfg.role == "prefill":
            return Reply.json(200, {"ok": True, "prompt_tokens": self._prefill(body, payload)})
        try:
            ask = protocol.parse_ask(payload)
        except protocol.ProtocolError as exc:
            return Reply.json(400, {"error": str(exc)})
        return Reply.json(200, self.engine.generate(ask))


def _json_object(body: bytes) -> object:
    """The request body as JSON (None when it is not JSON: check_bootstrap then says 400)."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def worker_args(cfg: SimConfig, bootstrap_port: int | None) -> dict[str, object]:
    """Server arguments as SGLang's /server_info names them, for what the router and orch read."""
    return {
        "disaggregation_mode": cfg.role,
        "disaggregation_bootstrap_port": bootstrap_port,
        "disable_cuda_graph": not cfg.cuda_graph,
        "cuda_graph_max_bs": cfg.cuda_graph_max_bs,
        "max_running_requests": cfg.max_running_requests,
        "tp_size": 1,
        "dp_size": 1,
    }


def server_info(cfg: SimConfig, **extra: object) -> dict[str, object]:
    return {
        "role": cfg.role,
        "version": VERSION,
        "pid": os.getpid(),
        "flags": cfg.effective_flags(),
        "warnings": list(cfg.warnings),
        **extra,
    }


class BootstrapApp(App):
    """A prefill's KV bootstrap port (SGLang: --disaggregation-bootstrap-port): decode servers ask
    it where the prefill ranks are. Here it only answers, so the port is really open."""

    def __init__(self, host: str, port: int) -> None:
        info = {"rank_ip": host, "rank_port": port}
        self.routes = {
            ("GET", "/health"): lambda _b: Reply.json(200, {"status": "ok"}),
            ("GET", "/route"): lambda _b: Reply.json(200, info),
        }


# ---- router ---------------------------------------------------------------------------------


class Upstream:
    """HTTP/1.1 keep-alive client to one worker: one connection per router thread, so a
    session's requests reuse their connections and router hops cost well under a millisecond."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise SimConfigError(f"worker URL must look like http://HOST:PORT, got {url!r}")
        self.url, self.host, self.port = url, parts.hostname, parts.port
        self.local = threading.local()

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        conn: http1.Connection | None = getattr(self.local, "conn", None)
        if conn is not None:
            try:
                return conn.request("POST", path, body)
            except ConnectionError:
                pass  # a stale keep-alive connection (closed by now): retry once on a new one
        conn = http1.Connection(self.host, self.port, ROUTER_UPSTREAM_TIMEOUT_S)
        self.local.conn = conn
        return conn.request("POST", path, body)

    def probe(self, path: str) -> int:
        """The worker's status for GET `path`, its body never read (closed after the headers)."""
        return http1.Connection(self.host, self.port, READINESS_PROBE_TIMEOUT_S).status("GET", path)


class RouterApp(App):
    def __init__(self, cfg: SimConfig, log: Log, prefill_url: str, decode_url: str) -> None:
        self.cfg, self.log = cfg, log
        self.prefill, self.decode = Upstream(prefill_url), Upstream(decode_url)
        self.routes = {
            ("GET", "/health"): lambda _b: Reply.json(200, {"status": "ok"}),
            ("GET", "/readiness"): self.readiness,
            ("GET", "/get_server_info"): self.server_info,
            ("POST", "/v1/chat/completions"): lambda body: self.forward("/v1/chat/completions", body),
            ("POST", "/generate"): lambda body: self.forward("/generate", body),
        }
        self.rooms = itertools.count(1)
        # prefill calls run here while the handler's thread calls decode; each pool thread keeps
        # its own keep-alive connection (Upstream is per thread). Imported here: workers start faster.
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=ROUTER_PREFILL_THREADS, thread_name_prefix="prefill")

    def server_info(self, _body: bytes) -> Reply:
        return Reply.json(200, server_info(self.cfg, prefill_url=self.prefill.url, decode_url=self.decode.url))

    def readiness(self, _body: bytes) -> Reply:
        for name, worker in (("prefill", self.prefill), ("decode", self.decode)):
            try:
                status = worker.probe("/health")
            except OSError as exc:
                return Reply.json(503, {"status": "not_ready", "reason": f"{name} unreachable: {exc}"})
            if status != 200:
                reason = f"{name} /health returned {status}"
                return Reply.json(503, {"status": "not_ready", "reason": reason})
        return Reply.json(200, {"status": "ready"})

    def forward(self, path: str, body: bytes) -> Reply:
        """Like the real PD router: both workers get the request at once, with bootstrap fields
        added, and the client gets decode's answer (or the first worker's error)."""
        started = time.perf_counter()
        try:
            payload = json.loads(body)
        except ValueError:
            return Reply.json(400, {"error": "request body is not JSON"})
        if not isinstance(payload, dict):
            return Reply.json(400, {"error": "request body must be a JSON object"})
        prefill = urlsplit(self.prefill.url)
        payload.update(bootstrap_host=prefill.hostname, bootstrap_port=None, bootstrap_room=next(self.rooms))
        body = json.dumps(payload).encode()
        prefilled = self.pool.submit(self._post, "prefill", self.prefill, path, body)
        decoded = self._post("decode", self.decode, path, body)
        for reply in (prefilled.result(), decoded):
            if reply.status != 200:
                return reply
        self.log.line(f"router req ok total_ms={(time.perf_counter() - started) * 1000:.1f}")
        return decoded

    def _post(self, name: str, worker: Upstream, path: str, body: bytes) -> Reply:
        try:
            status, data = worker.post(path, body)
        except OSError as exc:
            self.log.line(f"router {name} unreachable: {exc}")
            return Reply.json(502, {"error": f"{name} unreachable: {exc}"})
        if status != 200:
            self.log.line(f"router {name} returned {status}")
        return Reply(status, data)


# ---- HTTP plumbing --------------------------------------------------------------------------


class Handler(socketserver.StreamRequestHandler):
    """One connection's requests, in turn, until the client closes it or asks to (keep-alive: a
    session reuses one connection). A request that cannot be read is answered and closed."""

    disable_nagle_algorithm = True
    timeout = 300  # idle keep-alive connections are dropped eventually
    server: SimServer

    def handle(self) -> None:
        with contextlib.suppress(OSError):  # a client gone or silent past the timeout: drop it
            while self._serve_one():
                pass

    def _serve_one(self) -> bool:
        try:
            request = http1.read_request(self.rfile, self.wfile)
        except http1.RequestError as exc:
            http1.write_response(self.wfile, exc.status, Reply.json(exc.status, {"error": str(exc)}).body, False)
            return False
        if request is None:
            return False
        if request.method in ("GET", "POST"):
            reply = self.server.app.handle(request.method, request.target, request.body)
        else:
            reply = Reply.json(501, {"error": f"unsupported method {request.method!r}"})
        http1.write_response(self.wfile, reply.status, reply.body, request.keep_alive)
        return request.keep_alive


class SimServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the default 5 drops SYNs under 40+ concurrent sessions

    def __init__(self, address: tuple[str, int], app: App) -> None:
        self.app = app
        super().__init__(address, Handler)


# ---- entry point ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sim.server")
    parser.add_argument("--role", choices=ROLES, required=True)
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--disaggregation-bootstrap-port", type=int, help="prefill: also listen here (KV bootstrap)")
    parser.add_argument("--prefill-url")
    parser.add_argument("--decode-url")
    args = parser.parse_args(argv)
    if args.role == "router" and not (args.prefill_url and args.decode_url):
        parser.error("--role router needs --prefill-url and --decode-url")
    if args.disaggregation_bootstrap_port is not None and args.role != "prefill":
        parser.error("--disaggregation-bootstrap-port is a prefill flag")
    return args


def build_app(role: Role, cfg: SimConfig, log: Log, args: argparse.Namespace) -> App:
    if role == "router":
        return RouterApp(cfg, log, args.prefill_url, args.decode_url)
    return WorkerApp(cfg, log, args.disaggregation_bootstrap_port)


class CannotListen(Exception):
    """A port that cannot be opened; the message names which (a prefill opens two)."""


def listen(host: str, port: int, app: App) -> SimServer:
    try:
        return SimServer((host, port), app)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from exc


def open_servers(args: argparse.Namespace, cfg: SimConfig, log: Log) -> list[SimServer]:
    """The role's port, then a prefill's bootstrap port (the first closed again if the second
    cannot open)."""
    server = listen(args.host, args.port, build_app(args.role, cfg, log, args))
    port = args.disaggregation_bootstrap_port
    if port is None:
        return [server]
    try:
        return [server, listen(args.host, port, BootstrapApp(args.host, port))]
    except CannotListen:
        server.server_close()
        raise


def serve(args: argparse.Namespace, log: Log, wait_for_stop: Callable[[], object], environ: Mapping[str, str]) -> int:
    """Serve until `wait_for_stop` returns, then exit code 0 with "stopping" the main thread's last line."""
    try:
        cfg = config_from_env(args.role, environ)
        if cfg.fail_start:
            log.line("fatal: SIM_FAIL_START is set, the model failed to load")
            return 1
        servers = open_servers(args, cfg, log)
    except SimConfigError as exc:
        log.line(f"error: {exc}")
        return 2
    except CannotListen as exc:
        log.line(f"fatal: {exc}")
        return 1
    app = servers[0].app
    log.lines(
        [
            *cfg.warnings,
            f"{VERSION} {args.role} listening on {shown_address(servers[0])} pid={os.getpid()} {cfg_line(cfg)}",
        ]
    )
    app.on_listening()
    for server in servers:
        threading.Thread(target=server.serve_forever, args=(STOP_POLL_S,), daemon=True).start()
    wait_for_stop()
    app.on_stop()
    log.line("stopping")
    for server in servers:
        server.shutdown()
        server.server_close()
    return 0


def shown_address(server: SimServer) -> str:
    host, port = server.server_address[:2]
    if isinstance(host, bytes):  # socketserver types the address loosely; AF_INET gives text
        host = host.decode()
    return f"{host}:{port}"


def cfg_line(cfg: SimConfig) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.effective_flags().items())


def main(argv: list[str] | None = None) -> int:
    """SIGTERM (systemd stop, orch stop) and SIGINT are blocked from the start, in every thread
    the server makes (threads inherit the mask), and taken by sigwait in the main thread, which
    then stops the servers from one place. A handler that raised SystemExit landed wherever the
    main thread was: between the start line and the serve loop (no "stopping" line), or inside
    socketserver's accept, whose clean-up closed a new connection's socket under its handler
    thread (a traceback on the log). One that only set an event hung once in 1,000 stops: the
    kernel gave the signal to a server thread, and the main thread, blocked on the event, never
    ran the handler."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    args = parse_args(argv)
    return serve(args, Log(args.role), lambda: signal.sigwait(STOP_SIGNALS), os.environ)


if __name__ == "__main__":
    sys.exit(main())
