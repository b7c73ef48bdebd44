"""The agent repro client for the simulated deployment (EDGE, stdlib only).

    python -m orchestrator.sim.repro --router URL --sessions 40 --rounds 3 --context 300
        --max-tokens 1800 --timeout 240 [--seed S]

Runs N concurrent agent sessions of R tool-call rounds through the router, checks every tool
call (valid JSON, right tool, exactly the asked arguments), classifies each session and prints
the same lines as the real DSV4 repro, plus a throughput line:

    wall=1.9s counts={"done": 39, "no_tool": 1}
    CORRUPTION sessions: 1/40 = 2%  (leak=0 no_tool=1 error=0 ok-ish[done/maxrounds]=39)
    THROUGHPUT req/s=63.1 p50_latency_ms=31.2 p99_latency_ms=80.4

CORRUPTION counts corrupted sessions (leak, no_tool) among the sessions that completed: an
`error` session (an HTTP error, a refused connection, a timeout from the router) measured the
infrastructure, not the model, so it is neither corruption nor part of n. It is reported on its
own line, `ERRORS sessions: e/asked`, and in `error=` (a matrix's `repro.valid` voids such a
trial). Exit code 0 whenever it ran, corruption or not; 3 if the router was unreachable.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import threading
import time
from typing import Literal, NamedTuple
from urllib.parse import urlsplit

from orchestrator.sim import http1, protocol

Verdict = Literal["ok", "leak", "no_tool", "error"]
SessionKind = Literal["done", "maxrounds", "leak", "no_tool", "error"]
EXIT_UNREACHABLE = 3


class Checked(NamedTuple):
    """The verdict on one answer, and the assistant message to carry into the next round."""

    verdict: Verdict
    detail: str = ""
    message: dict[str, object] | None = None
    done: bool = False  # the model marked the task complete


class SessionOutcome:
    """How one session ended (filled in as it runs), and the latency of each answer it got."""

    def __init__(self, kind: SessionKind, latencies_s: list[float] | None = None, detail: str = "") -> None:
        self.kind, self.detail = kind, detail
        self.latencies_s = latencies_s if latencies_s is not None else []


def check_answer(ask: protocol.ToolAsk, status: int, data: bytes) -> Checked:
    """Judge one HTTP answer against what the round asked for."""
    if status != 200:
        return Checked("error", f"HTTP {status}: {data[:200]!r}")
    try:
        message = json.loads(data)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return Checked("error", f"malformed completion: {exc!r}")
    if not isinstance(message, dict):
        return Checked("error", "malformed completion: message is not an object")
    calls = message.get("tool_calls") or []
    if not calls:
        return Checked("no_tool", f"plain answer: {str(message.get('content'))[:120]!r}")
    return _check_call(ask, message, calls)


def _check_call(ask: protocol.ToolAsk, message: dict[str, object], calls: object) -> Checked:
    content = message.get("content")
    if not isinstance(calls, list) or len(calls) != 1:
        return Checked("leak", f"expected one tool call, got {calls!r:.200}")
    function = calls[0].get("function", {}) if isinstance(calls[0], dict) else {}
    name, raw = function.get("name"), function.get("arguments")
    if name != ask.tool:
        return Checked("leak", f"wrong tool {name!r}, asked {ask.tool!r}")
    if not isinstance(raw, str):  # a leaked reply may carry anything here, or nothing
        return Checked("leak", f"arguments are not JSON: {raw!r:.200}")
    try:
        arguments = protocol.canonical_json(json.loads(raw))
    except (TypeError, ValueError):
        return Checked("leak", f"arguments are not JSON: {raw!r:.200}")
    if arguments != ask.arguments_json:
        return Checked("leak", f"wrong arguments {arguments:.200}")
    if isinstance(content, str) and protocol.SPECIAL_TOKEN in content:
        return Checked("leak", "special token in content")
    done = isinstance(content, str) and protocol.DONE_MARKER in content
    return Checked("ok", message=message, done=done)


def classify(checks: list[Checked], rounds: int) -> SessionKind:
    """A session ends at its first bad answer; all good ones end done or (unfinished) maxrounds."""
    for check in checks:
        if check.verdict != "ok":
            return check.verdict
    if len(checks) == rounds and checks[-1].done:
        return "done"
    return "maxrounds"


class Client:
    """One keep-alive connection to the router, owned by one session thread."""

    def __init__(self, router: str, timeout: float) -> None:
        parts = urlsplit(router)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"--router must look like http://HOST:PORT, got {router!r}")
        self.host, self.port, self.timeout = parts.hostname, parts.port or 80, timeout
        self.conn = http1.Connection(self.host, self.port, timeout)

    def post(self, path: str, payload: object) -> tuple[int, bytes]:
        return self.conn.request("POST", path, json.dumps(payload).encode())

    def get(self, path: str) -> int:
        return self.conn.request("GET", path)[0]

    def close(self) -> None:
        self.conn.close()


class Workload(NamedTuple):
    router: str
    rounds: int
    context: int
    max_tokens: int
    timeout: float


def run_session(work: Workload, session: str, rng: random.Random) -> SessionOutcome:
    """One agent session: R rounds, each asking for one tool call and feeding back its result."""
    system: dict[str, object] = {"role": "system", "content": protocol.context_filler(work.context)}
    messages: list[dict[str, object]] = [system]
    outcome, checks = SessionOutcome("error"), []
    client = Client(work.router, work.timeout)
    try:
        for round_ in range(1, work.rounds + 1):
            ask = protocol.make_ask(rng, session, round_, work.rounds)
            messages.append({"role": "user", "content": ask.instruction()})
            check = _one_round(client, work, session, messages, ask, outcome)
            checks.append(check)
            if check.verdict != "ok":
                outcome.detail = check.detail
                break
            messages += [check.message or {}, _tool_result(check)]
    finally:
        client.close()
    outcome.kind = classify(checks, work.rounds)
    return outcome


def _one_round(
    client: Client,
    work: Workload,
    session: str,
    messages: list[dict[str, object]],
    ask: protocol.ToolAsk,
    outcome: SessionOutcome,
) -> Checked:
    payload = {
        "model": protocol.MODEL_NAME,
        "user": session,
        "metadata": {"session_id": session},  # the real PD router drops `user`, keeps `metadata`
        "messages": messages,
        "tools": protocol.tool_specs(),
        "max_tokens": work.max_tokens,
    }
    started = time.perf_counter()
    try:
        status, data = client.post("/v1/chat/completions", payload)
    except OSError as exc:  # refused, reset, timed out, or an answer that cannot be read
        return Checked("error", f"request failed: {exc!r}")
    outcome.latencies_s.append(time.perf_counter() - started)
    return check_answer(ask, status, data)


def _tool_result(check: Checked) -> dict[str, object]:
    calls = (check.message or {}).get("tool_calls") or [{}]
    call_id = calls[0].get("id", "") if isinstance(calls, list) else ""
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(pct / 100 * len(ordered))))
    return ordered[rank - 1]


def summarize(outcomes: list[SessionOutcome], wall_s: float) -> list[str]:
    """The repro's result lines (PURE)."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.kind] = counts.get(o.kind, 0) + 1
    okish = counts.get("done", 0) + counts.get("maxrounds", 0)
    errors = counts.get("error", 0)
    n = len(outcomes) - errors  # completed sessions: an error session is infrastructure, not data
    bad = n - okish
    pct = 100 * bad / n if n else 0.0
    latencies = [s for o in outcomes for s in o.latencies_s]
    rate = len(latencies) / wall_s if wall_s > 0 else 0.0
    return [
        f"wall={wall_s:.1f}s counts={json.dumps(dict(sorted(counts.items())))}",
        f"CORRUPTION sessions: {bad}/{n} = {pct:.0f}%  (leak={counts.get('leak', 0)} "
        f"no_tool={counts.get('no_tool', 0)} error={counts.get('error', 0)} "
        f"ok-ish[done/maxrounds]={okish})",
        f"THROUGHPUT req/s={rate:.1f} p50_latency_ms={percentile(latencies, 50) * 1000:.1f} "
        f"p99_latency_ms={percentile(latencies, 99) * 1000:.1f}",
        f"ERRORS sessions: {errors}/{len(outcomes)} (HTTP errors, refused connections, timeouts: not corruption)",
    ]


def run(work: Workload, sessions: int, seed: int) -> tuple[list[SessionOutcome], float]:
    """All sessions at once, one thread each, like the real repro's concurrent agents."""
    outcomes: list[SessionOutcome] = [SessionOutcome("error", detail="did not finish")] * sessions

    def worker(i: int) -> None:
        name = f"r{seed:x}-{i:03d}"  # the seed is part of the id: it keys the server's draws
        outcomes[i] = run_session(work, name, random.Random(f"{seed}:{i}"))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(sessions)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    deadline = started + work.rounds * work.timeout + 30
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    return outcomes, time.perf_counter() - started


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sim.repro")
    parser.add_argument("--router", required=True, help="e.g. http://127.0.0.1:30001")
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--context", type=int, default=300, help="prompt context, in tokens")
    parser.add_argument("--max-tokens", type=int, default=1800)
    parser.add_argument("--timeout", type=float, default=240.0, help="per request, seconds")
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.rounds < 1 or args.timeout <= 0 or args.context < 0:
        parser.error("--sessions and --rounds must be >= 1, --timeout > 0, --context >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    work = Workload(args.router, args.rounds, args.context, args.max_tokens, args.timeout)
    try:
        probe = Client(args.router, min(args.timeout, 5.0))
        probe.get("/health")
        probe.close()
    except (OSError, ValueError) as exc:
        print(f"repro: router unreachable at {args.router}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(f"repro seed={seed} sessions={args.sessions} rounds={args.rounds} router={args.router}")
    outcomes, wall = run(work, args.sessions, seed)
    for i, o in enumerate(outcomes):
        if o.kind not in ("done", "maxrounds"):
            print(f"session {i}: {o.kind}: {o.detail}", file=sys.stderr)
    print("\n".join(summarize(outcomes, wall)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
