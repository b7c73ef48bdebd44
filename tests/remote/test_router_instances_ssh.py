"""Several instances of a role behind the real `sglang-router` under systemd (issue 14): 2 prefill
+ 2 decode instances (prefill/gpu2, decode/gpu2) behind sglang-router-wide, which checks its
workers every 60 s (its default), on the real testbed.

1. Every instance registered: the router starts while decode.0 is down. It registers the 3 workers
   that answer and says `{"status":"ready","healthy_workers":3,"total_workers":3}` (healthy ==
   total: ready, to a check that does not know 4 instances stand behind it). orch's wait, given the
   inventory's instances, is still waiting then; decode.0 starts; the wait ends only once the router
   answers 4/4, and its generate probe comes after that.
2. A restart of ONE instance behind the live router: decode.0 gets its own file (overlap 0; decode.1
   keeps 1), so the sweep's cells restart decode.0 and leave decode.1 alone. The router never
   notices (60 s checks): it calls the dead instance healthy (`ready 4/4`) all along, so it would
   route repro sessions to it. The repro asks the router for /readiness and notes the time as it
   starts; a watcher polls the router and decode.0 all along. From those (not from orch's own
   record): every repro met a router with 4 healthy workers registered, none ran while decode.0 was
   down (though the router said ready then), every session went through, the restarted instance
   served repro requests through the router (its request counter), each instance of both roles
   held the cell's env.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from helpers.ssh_sweep import trials_of
from testbed.fixture import Testbed
from testbed.helpers import http_get, restored, wait_for

from orchestrator.cli.main import main
from orchestrator.edges.health import HealthCheck, probe_url, readiness_problem, wait_ready

pytestmark = pytest.mark.testbed

PREFILL, DECODE, ROUTER = "sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-router-wide"
OVERLAP, INDEX_K = "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", "SGLANG_DSV4_BF16_INDEX_K"
INSTANCES = (("prefill", 2), ("decode", 2))  # what the inventory's dsv4-pd-wide puts behind the router


def live(unit: str, line: str) -> str:
    """A collector command: 1 if the unit's live process holds exactly `line` (summed over the
    role's hosts)."""
    pid = f"$(systemctl show -p MainPID --value {unit})"
    return f"tr '\\0' '\\n' < /proc/{pid}/environ | grep -cx '{line}' || true"


REPRO = (
    "curl -s -m 2 {router_url}/readiness; echo; date +STARTED%s.%N; "
    "{python} -m orchestrator.sim.repro --router {router_url} --sessions 8 --rounds 1 --seed {trial_seed}"
)
MATRIX = f"""\
name: router-instances
factors:
  overlap:
    levels:  # decode.1 holds overlap 1 and prefill's value is both instances' own: no change, but verified
      on: {{decode: {{{OVERLAP}: "1"}}, prefill: {{{INDEX_K}: "1"}}}}
      off: {{prefill: {{{INDEX_K}: "1"}}}}  # decode: each instance's own file (decode.0 overlap 0)
order: sequential
health_timeouts: {{prefill: 30, decode: 30, router: 30}}
repro:
  command: {json.dumps(REPRO)}
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
collect:
  decode_on: {{role: decode, command: {json.dumps(live(DECODE, f"{OVERLAP}=1"))}}}
  decode_off: {{role: decode, command: {json.dumps(live(DECODE, f"{OVERLAP}=0"))}}}
  prefill_k: {{role: prefill, command: {json.dumps(live(PREFILL, f"{INDEX_K}=1"))}}}
metrics:
  endpoints:
    decode: {{role: decode, names: ["sglang:num_requests*"]}}
"""
THREE = {"status": "ready", "healthy_workers": 3, "total_workers": 3}
FOUR = {"status": "ready", "healthy_workers": 4, "total_workers": 4}


@dataclass(frozen=True)
class Look:
    at: float  # epoch seconds (the hosts share the controller's kernel clock), after both asks
    router: str  # "ready H/T", or the status it answered instead
    decode0_up: bool
    asked: float = 0.0  # when decode.0's /health was asked: "down" means down at or after this instant


class Watcher:
    """Polls the router's /readiness and decode.0's /health every 20 ms in a thread."""

    def __init__(self, router: str, decode0: str) -> None:
        self.router, self.decode0, self.looks = router, decode0, []  # type: str, str, list[Look]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="watcher", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            status, body = http_get(self.router + "/readiness", 0.5)
            asked = time.time()
            up = http_get(self.decode0 + "/health", 0.5)[0] == 200
            self.looks.append(Look(time.time(), _router_view(status, body), up, asked))


def _router_view(status: int, body: str) -> str:
    try:
        doc = json.loads(body)
        if status == 200 and isinstance(doc, dict):
            return f"ready {doc.get('healthy_workers')}/{doc.get('total_workers')}"
    except ValueError:
        pass
    return f"{status}"


def readiness(url: str) -> tuple[int, object]:
    status, body = http_get(url + "/readiness", 1.0)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def test_the_real_router_must_register_every_instance_before_each_repro(
    testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    router, decode0 = testbed.url("router", ROUTER), testbed.url("decode", DECODE)
    t0 = time.monotonic()
    try:
        with restored(testbed, "decode", [DECODE], ["/etc/sglang/decode.env"]):
            testbed.ssh(
                "decode", f"systemctl stop {DECODE} && sed -i 's/^{OVERLAP}=.*/{OVERLAP}=0/' /etc/sglang/decode.env"
            )
            testbed.ssh("router", f"systemctl start {ROUTER}")
            registered_late(testbed, router)
            part1 = time.monotonic() - t0
            (tmp_path / "m.yaml").write_text(MATRIX)
            argv = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd-wide"]
            with Watcher(router, decode0) as watcher:
                code = main([*argv, "--out", str(tmp_path / "r"), "--run-id", "wide", "--retries", "0"])
            out = capsys.readouterr()
            assert code == 0, out.out + out.err
    finally:
        testbed.ssh("router", f"systemctl stop {ROUTER}", check=False)
    trials = trials_of(tmp_path / "r" / "wide")
    assert [t.cell for t in trials] == ["overlap=on", "overlap=off"]
    assert all(t.status == "completed" for t in trials), [t.failure for t in trials]
    assert [t.restarted for t in trials] == [["decode.0:sglang-dsv4-decode"]] * 2  # ONE instance, router live
    started = []
    for t in trials:
        assert t.repro is not None and "ERRORS sessions: 0/8" in t.repro.stdout_tail, t.repro
        answer, start = t.repro.stdout_tail.splitlines()[:2]
        assert json.loads(answer) == FOUR, answer  # what the router said as the repro began
        started.append(float(start.removeprefix("STARTED")))
        assert {"prefill.0", "prefill.1", "decode.0", "decode.1", "router"} <= set(t.health_wait_s)
    # every instance holds the cell's env: decode.1 always overlap 1, decode.0 the cell's; prefill's both
    assert [(t.metrics["decode_on"].value, t.metrics["decode_off"].value) for t in trials] == [(2, 0), (1, 1)]
    assert [t.metrics["prefill_k"].value for t in trials] == [2, 2]
    # the restarted instance served repro sessions through the router (its request counter moved)
    for t in trials:
        served = [v.value for k, v in t.metrics.items() if k.startswith("server.decode@decode.0.sglang:num_requests")]
        assert served and all(v for v in served), {k: v.value for k, v in t.metrics.items() if "@decode" in k}
    # the router's own view was stale: while decode.0 was down it said ready 4/4 ...
    down = [look for look in watcher.looks if look.at < started[-1] and not look.decode0_up]
    assert any(look.router == "ready 4/4" for look in down), down[:5]
    # ... yet no repro ran while decode.0 was down: every look asked from each repro's start on saw
    # it up. (A look asked before the start may say down: orch can see decode.0 ready and start the
    # repro within the watcher's 20 ms; a repro started while it was down would meet it down for its
    # whole warm-up, 0.3 s, well inside this window.)
    for t, start in zip(trials, started, strict=True):
        assert t.repro is not None
        during = [look for look in watcher.looks if start <= look.asked <= start + min(0.5, t.repro.duration_s)]
        assert during and all(look.decode0_up for look in during), (t.cell, during)
    with capsys.disabled():
        waits = ", ".join(f"{t.health_wait_s['router']:.2f}" for t in trials)
        print(f"\nwide real router: part 1 {part1:.1f} s, all {time.monotonic() - t0:.1f} s; router waits {waits} s")


def registered_late(testbed: Testbed, router: str) -> None:
    """The router up without decode.0: 3/3 is ready to healthy == total, not to orch's wait, which
    ends (probe included) only after decode.0 is back and the router answers 4/4."""
    wait_for(lambda: readiness(router) == (200, THREE), 30, "the router ready with 3 of 4 workers")
    assert readiness_problem(json.dumps(THREE)) is None  # what the check did before it counted instances
    answers: list[tuple[float, str, str]] = []

    def seen(response: httpx.Response) -> None:
        response.read()
        answers.append((time.time(), response.request.url.path, response.text))

    check = HealthCheck("router", router + "/readiness", 30.0, probe=probe_url(router + "/readiness"),
                        workers=INSTANCES)  # fmt: skip
    done: list[float] = []
    with httpx.Client(event_hooks={"response": [seen]}) as client:
        waiter = threading.Thread(target=lambda: done.append(wait_ready(check, client=client)), name="wait-router")
        waiter.start()
        threes = lambda: sum(json.loads(a[2]) == THREE for a in answers if a[1] == "/readiness")  # noqa: E731
        wait_for(lambda: threes() >= 3 or not waiter.is_alive(), 10, "orch's wait saw 3/3 three times")
        assert waiter.is_alive() and not done, f"orch's wait ended on {answers}"  # 3/3 must not end it
        decode_started = time.time()
        testbed.ssh("decode", f"systemctl start {DECODE}")
        waiter.join(timeout=30)
    assert done and not waiter.is_alive()
    first_four = next(at for at, path, text in answers if path == "/readiness" and json.loads(text) == FOUR)
    probes = [at for at, path, _ in answers if path == "/generate"]
    assert decode_started < first_four and probes and min(probes) >= first_four
    assert readiness(router) == (200, FOUR)
