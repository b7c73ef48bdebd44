"""A router in front of several instances of a role (issue 14), on fakes (httpx.MockTransport):
its /readiness must register every instance the inventory puts behind it, not only call the ones
it registered healthy. sglang-router 0.3.2, (re)started while one of 4 workers still warmed up,
answers `{"status":"ready","healthy_workers":3,"total_workers":3}` until its next look at that
worker (measured: up to ~1 s after the worker turned healthy); healthy == total alone took that
for ready. The real router is met in tests/remote/test_router_instances_ssh.py."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fakes import make_matrix, remote_repro
from helpers.multibed import multi_bed
from helpers.ssh_sweep import attempts_of

from orchestrator.core.plan import make_plan
from orchestrator.core.records import TrialRecord
from orchestrator.core.routerworkers import DP_COUNTS_UNCHECKED
from orchestrator.edges import health
from orchestrator.edges.deployment import router_host, router_instances, router_workers
from orchestrator.edges.health import HealthCheck, probe_url, readiness_problem, wait_ready
from orchestrator.edges.preflight import preflight
from orchestrator.errors import HealthTimeout, PreflightError
from orchestrator.sweep.runner import Runner, RunOptions, RunResult

WORKERS = (("prefill", 2), ("decode", 2))
READINESS = "http://10.9.0.9:30001/readiness"


def flat(healthy: int, total: int) -> str:
    return json.dumps({"status": "ready", "healthy_workers": healthy, "total_workers": total})


def per_role(prefill: tuple[int, int], decode: tuple[int, int], names: tuple[str, str] = ("prefill", "decode")) -> str:
    parts = {name: {"healthy": h, "total": t} for name, (h, t) in zip(names, (prefill, decode), strict=True)}
    return json.dumps({"status": "ready", **parts})


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (flat(4, 4), None),
        (flat(5, 5), None),  # more than the inventory knows: not ours to refuse
        (flat(3, 3), "3/4 workers registered (the inventory has prefill 2, decode 2)"),
        (flat(3, 4), "3/4 workers healthy"),  # a registered worker that is down says so first
        (per_role((2, 2), (2, 2)), None),
        (per_role((2, 2), (1, 1)), "decode 1/2 workers registered (the inventory has 2)"),
        (per_role((1, 1), (3, 3)), "prefill 1/2 workers registered (the inventory has 2)"),
        (per_role((2, 2), (1, 2)), "decode 1/2 workers healthy"),
        # roles the router names otherwise than the inventory: the sum still counts
        (per_role((2, 2), (1, 1), ("p", "d")), "3/4 workers registered (the inventory has prefill 2, decode 2)"),
        (per_role((2, 2), (2, 2), ("p", "d")), None),
        (json.dumps({"status": "ready"}), None),  # no counts (the simulator's stand-in router): nothing to compare
    ],
)
def test_a_readiness_body_must_register_every_instance(body: str, problem: str | None) -> None:
    assert readiness_problem(body, WORKERS) == problem


def test_without_expected_instances_healthy_equal_total_is_ready() -> None:
    assert readiness_problem(flat(3, 3)) is None  # what the check did before it knew the inventory


class Router:
    """A router whose /readiness answers from a list (the last repeats); logs every request."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.log = answers, []  # type: list[str], list[str]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.log.append(request.url.path)
        if request.url.path == "/generate":
            return httpx.Response(200, json={"text": "ok"})
        body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return httpx.Response(200, text=body)


@pytest.mark.parametrize(
    "answers",
    [
        [flat(3, 3)] * 4 + [flat(4, 4)],
        [per_role((2, 2), (1, 1))] * 4 + [per_role((2, 2), (2, 2))],
    ],
    ids=["flat", "per-role"],
)
def test_the_wait_and_its_probe_go_on_until_every_instance_is_registered(answers: list[str]) -> None:
    router = Router(answers)
    check = HealthCheck("router", READINESS, 5.0, probe=probe_url(READINESS), workers=WORKERS)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        wait_ready(check, client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert router.log == ["/readiness"] * 5 + ["/generate"]  # no generate before the 4th registered


def test_a_router_that_never_registers_every_instance_times_out_naming_them() -> None:
    router = Router([flat(3, 3)])
    check = HealthCheck("router", READINESS, 0.2, probe=probe_url(READINESS), workers=WORKERS)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client, pytest.raises(HealthTimeout) as info:
        wait_ready(check, client=client, poll_initial_s=0.01, poll_max_s=0.02)
    assert "(last answer: 200 but 3/4 workers registered (the inventory has prefill 2, decode 2):" in str(info.value)
    assert "/generate" not in router.log


INVENTORY = textwrap.dedent("""\
    testbeds:
      wide:
        hosts:
          prefill:
            transport: ssh
            ssh: {user: root, connect_timeout: 5}
            env_file: /etc/sglang/prefill.env
            units: [sglang-prefill]
            health_timeout: 5
            instances:
              - {ssh: {host: 10.9.0.1}}
              - {ssh: {host: 10.9.0.2}}
          decode:
            transport: ssh
            ssh: {user: root, connect_timeout: 5}
            env_file: /etc/sglang/decode.env
            units: [sglang-decode]
            health_timeout: 5
            instances:
              - {ssh: {host: 10.9.0.3}}
              - nodes: [{ssh: {host: 10.9.0.4}}, {ssh: {host: 10.9.0.5}}]
          router:
            transport: ssh
            ssh: {host: 10.9.0.9}
            env_file: /etc/sglang/router.env
            units: [sglang-router]
            url: http://10.9.0.9:30001
            health: http://10.9.0.9:30001/readiness
            health_timeout: 5
            after: [prefill, decode]
    """)
ENVS = {
    "prefill.0": "OVERLAP=1\n",
    "prefill.1": "OVERLAP=1\n",
    "decode.0": "OVERLAP=1\n",
    "decode.1.n0": "OVERLAP=1\nNODE_RANK=0\n",
    "decode.1.n1": "OVERLAP=1\nNODE_RANK=1\n",
    "router": "R=1\n",
}


INSTANCES = {
    "prefill": ("http://10.9.0.1:30000", "http://10.9.0.2:30000"),
    "decode": ("http://10.9.0.3:30002", "http://10.9.0.4:30002"),
}


def test_the_instances_behind_a_router_come_from_the_inventory(tmp_path: Path) -> None:
    b = multi_bed(tmp_path, INVENTORY, ENVS)
    assert sorted(b.deployment.hosts) == sorted(ENVS)
    # a multi-node instance is one worker of the router (its rank 0); a worker role has none behind it
    assert router_workers(b.deployment, b.deployment.hosts["router"]) == WORKERS
    assert router_instances(b.deployment, b.deployment.hosts["router"]) == INSTANCES  # rank 0's url only
    assert router_host(b.deployment.hosts["router"].host) == ("10.9.0.9", "10.9.0.9")  # its url's, its ssh host
    assert router_workers(b.deployment, b.deployment.hosts["prefill.0"]) == ()


def sweep_behind(
    tmp_path: Path,
    router: Callable[[httpx.Request], httpx.Response],
    events: list[str],
    envs: dict[str, str] = ENVS,
    router_exec_start: str = "{ argv[]=/usr/bin/srv ; }",
) -> RunResult:
    """A 2-cell sweep of the wide testbed whose router answers with `router` (the workers answer
    as the multi-node fakes do); the repro runs on the router's host and notes "repro" in `events`.
    `router_exec_start`: what systemd says the router unit's ExecStart is."""
    b = multi_bed(tmp_path, INVENTORY, envs)
    b.transports["router"].script(
        ["systemctl", "show", "-p", "ExecStart", "--value", "sglang-router"], stdout=router_exec_start + "\n"
    )
    workers = b.client

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port != 30001:  # the workers: the multi-node fakes' own health
            answer = workers.send(workers.build_request(request.method, request.url))
            return httpx.Response(answer.status_code, content=answer.content)
        return router(request)

    router_transport = b.transports["router"]
    original_run = router_transport.run

    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        if "fake-repro" in str(args[0]):
            events.append("repro")
        return original_run(*args, **kwargs)

    router_transport.run = run  # type: ignore[method-assign]
    matrix = make_matrix(
        {"overlap": {"env": {"decode": "OVERLAP"}, "levels": ["1", "0"]}}, repro=remote_repro("router")
    )
    plan = make_plan(matrix, b.deployment.testbed, seed=1, order="sequential")
    with httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0) as client:
        options = RunOptions(run_id="wide", retry_backoff_s=0.0)
        return Runner(plan, b.deployment, tmp_path / "run", options, client=client).execute()


def test_a_sweep_starts_no_repro_until_the_router_registers_every_instance(tmp_path: Path) -> None:
    """The router answers 3/3 five times (it has not looked at the 4th instance yet), then 4/4:
    the first repro (on the router's host) runs only after the 4/4 and a generate through it."""
    events: list[str] = []
    partial = [5]

    def router(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            events.append("generate")
            return httpx.Response(200, json={"text": "ok"})
        if request.url.path == "/readiness":
            registered = 3 if partial[0] > 0 else 4
            partial[0] -= 1
            events.append(f"readiness {registered}/{registered}")
            return httpx.Response(200, text=flat(registered, registered))
        return httpx.Response(200, json={"version": "fake-1.0"})

    result = sweep_behind(tmp_path, router, events)
    assert result.completed == 2, result
    first_repro = events.index("repro")
    assert events[:first_repro].count("readiness 3/3") == 5
    assert events[first_repro - 2 : first_repro] == ["readiness 4/4", "generate"]


def test_a_sweep_counts_no_trial_whose_router_lists_a_worker_the_inventory_lacks(tmp_path: Path) -> None:
    """The router registers the 4 instances and a 5th decode (a teammate's server, added through its
    worker API) and calls itself ready 5/5: no repro runs, each attempt fails naming that worker,
    the retry restarts the router, and no trial counts as data."""
    listed = [{"url": url, "worker_type": role} for role, urls in INSTANCES.items() for url in urls]
    listed.append({"url": "http://10.9.0.7:30002", "worker_type": "decode"})
    events: list[str] = []

    def router(request: httpx.Request) -> httpx.Response:
        events.append(request.url.path)
        if request.url.path == "/readiness":
            return httpx.Response(200, text=flat(5, 5))
        if request.url.path == "/workers":
            return httpx.Response(200, json={"workers": listed, "total": 5})
        if request.url.path == "/generate":
            return httpx.Response(200, json={"text": "ok"})
        return httpx.Response(200, json={"version": "fake-1.0"})

    result = sweep_behind(tmp_path, router, events)
    assert result.completed == 0 and result.failed == 2, result
    assert "repro" not in events and "/generate" not in events
    records = attempts_of(tmp_path / "run")
    assert [r.failure.error if r.failure else r.status for r in records] == ["IdentityError"] * 4
    message = records[-1].failure.message if records[-1].failure else ""
    assert message.startswith(
        "router lists decode worker http://10.9.0.7:30002, which is not one of the inventory's instances "
        "(prefill http://10.9.0.1:30000 http://10.9.0.2:30000, decode http://10.9.0.3:30002 http://10.9.0.4:30002)"
    ), message
    assert "router:sglang-router" in records[-1].restarted  # the retry restarted the router


def router_adding_a_stray(registered: Callable[[], bool]) -> Callable[[httpx.Request], httpx.Response]:
    """A router with the inventory's 4 instances (4/4) that also registers a 5th decode, a server
    orch did not start (5/5), whenever `registered()` says so; asked once per request."""
    own = [{"url": url, "worker_type": role} for role, urls in INSTANCES.items() for url in urls]
    stray = {"url": "http://10.9.0.7:30002", "worker_type": "decode"}

    def router(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            return httpx.Response(200, json={"text": "ok"})
        if request.url.path not in ("/readiness", "/workers"):
            return httpx.Response(200, json={"version": "fake-1.0"})
        with_stray = registered()
        if request.url.path == "/readiness":
            return httpx.Response(200, text=flat(5, 5) if with_stray else flat(4, 4))
        return httpx.Response(200, json={"workers": [*own, stray] if with_stray else own})

    return router


def test_a_worker_added_to_the_router_while_the_repro_runs_voids_the_trial(tmp_path: Path) -> None:
    """Ready 4/4 with the inventory's instances before the repro; a 5th decode is added through the
    router's API while it runs: the trial is void (it may have served part of the repro)."""
    events: list[str] = []
    router = router_adding_a_stray(lambda: "repro" in events)  # from the first repro on
    result = sweep_behind(tmp_path, router, events)
    assert result.completed == 0, result
    first = attempts_of(tmp_path / "run")[0]
    assert first.failure is not None and first.failure.error == "IdentityError", first
    assert first.failure.message.startswith(
        "router lists decode worker http://10.9.0.7:30002, which is not one of the inventory's instances (prefill "
        "http://10.9.0.1:30000 http://10.9.0.2:30000, decode http://10.9.0.3:30002 http://10.9.0.4:30002) after "
        "the repro (it may have served part of it) (the trial is void:"
    ), first.failure.message
    assert events.count("repro") == 1  # the retry's readiness already saw the stranger: no second repro


# The wide router's ExecStart with one more decode than the inventory has (a server orch did not start).
EXTRA_DECODE_EXEC_START = (
    "{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang_router.launch_router --pd-disaggregation "
    "--prefill http://10.9.0.1:30000 8998 --prefill http://10.9.0.2:30000 8998 --decode http://10.9.0.3:30002 "
    "--decode http://10.9.0.4:30002 --decode http://10.9.0.7:30002 --host 0.0.0.0 --port 30001 ; }"
)


def test_a_worker_on_the_routers_command_line_it_registers_late_is_named_before_the_repro(tmp_path: Path) -> None:
    """sglang-router 0.3.2 registers its command line's workers one by one and calls itself ready
    once one prefill and one decode are: with a 5th decode on its command line it answered 4/4 (its
    list: the inventory's 4) for ~10 ms, longer on a loaded machine, and the worker list read then
    passed; the 5th served part of the repro (tests/sim/test_real_router.py, once in a loaded run).
    The wait now holds out for the 5 its command line lists: no repro runs, each attempt names it."""
    events: list[str] = []
    looks = [0]
    stray = router_adding_a_stray(lambda: looks[0] >= 3 or "repro" in events)  # from the 4th readiness on

    def router(request: httpx.Request) -> httpx.Response:
        answer = stray(request)
        looks[0] += request.url.path == "/readiness"
        return answer

    result = sweep_behind(tmp_path, router, events, router_exec_start=EXTRA_DECODE_EXEC_START)
    assert result.completed == 0, result
    assert "repro" not in events and "/generate" not in events
    first = attempts_of(tmp_path / "run")[0]
    assert first.failure is not None and first.failure.error == "IdentityError", first
    assert first.failure.message.startswith(
        "router lists decode worker http://10.9.0.7:30002, which is not one of the inventory's instances (prefill "
        "http://10.9.0.1:30000 http://10.9.0.2:30000, decode http://10.9.0.3:30002 http://10.9.0.4:30002) (the "
        "trial is void:"
    ), first.failure.message


def test_a_worker_the_routers_command_line_lists_that_never_registers_holds_the_wait_only_briefly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker listed on the router's command line that is down (or still loading) is never
    registered: the wait holds out for it only CONFIGURED_HOLD_S from the first answer ready but for
    it, then goes on as before (the look after the repro still names one registered later); it does
    not hold every trial to its health timeout (50 minutes on a large model). Before the hold ends,
    the held answer says which count it waits for."""
    monkeypatch.setattr(health, "CONFIGURED_HOLD_S", 0.3)
    router = Router([flat(4, 4)])
    check = HealthCheck("router", READINESS, 5.0, workers=WORKERS, configured=5)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        started = time.monotonic()
        waited = health.wait_ready(check, client=client, poll_initial_s=0.01, poll_max_s=0.02)
        took = time.monotonic() - started
    assert 0.3 <= took < 2.0 and waited >= 0.3, (took, waited)
    short = HealthCheck("router", READINESS, 0.2, workers=WORKERS, configured=5)  # a timeout inside the hold
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client, pytest.raises(HealthTimeout) as info:
        health.wait_ready(short, client=client, poll_initial_s=0.01, poll_max_s=0.02)
    assert "(last answer: 200 but 4/5 workers registered (its command line lists 5):" in str(info.value)


@pytest.mark.parametrize("where", ["env file", "ExecStart"])
def test_a_dp_aware_router_that_gives_only_counts_is_no_stranger_and_the_record_says_so(
    tmp_path: Path, where: str
) -> None:
    """A router started with --dp-aware (through its env file, expanded into its ExecStart, or in
    the unit's ExecStart itself) registers one worker per DP rank: 2 ranks x 4 instances = 8.
    Without a worker list, its counts were compared with the 4 instances and every trial failed,
    "registers 8 workers, the inventory has 4": a stranger's, falsely. Its counts are not compared
    now, and each trial's record says so. The same router without --dp-aware is still refused."""
    envs, exec_start = dict(ENVS), "{ argv[]=/usr/bin/srv ; }"
    if where == "env file":
        envs["router"] = 'R=1\nROUTER_ARGS="--policy cache_aware --dp-aware"\n'
    else:
        exec_start = "{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang_router.launch_router --dp-aware ; }"

    def router(request: httpx.Request) -> httpx.Response:  # no /workers, no /list_workers: counts only
        if request.url.path == "/readiness":
            return httpx.Response(200, text=flat(8, 8))
        if request.url.path == "/generate":
            return httpx.Response(200, json={"text": "ok"})
        return httpx.Response(404) if "workers" in request.url.path else httpx.Response(200, json={"version": "f"})

    for folder in ("dp", "plain"):
        (tmp_path / folder).mkdir()
    result = sweep_behind(tmp_path / "dp", router, [], envs, exec_start)
    assert result.completed == 2 and result.failed == 0, result
    records = attempts_of(tmp_path / "dp" / "run")
    assert [r.status for r in records] == ["completed"] * 2
    for record in records:
        assert record.unchecked == [f"router: {DP_COUNTS_UNCHECKED}"], record.unchecked
    plain = sweep_behind(tmp_path / "plain", router, [])  # R=1 only: not DP-aware
    assert plain.completed == 0 and plain.failed == 2, plain
    refused = attempts_of(tmp_path / "plain" / "run")[-1]
    assert refused.failure is not None and refused.failure.error == "IdentityError"
    assert refused.failure.message.startswith("router registers 8 workers, the inventory has 4 instances behind it")
    assert refused.unchecked == []


def _router_listing(listed: list[dict[str, str]], workers: httpx.Client) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port != 30001:  # the workers: the multi-node fakes' own health
            answer = workers.send(workers.build_request(request.method, request.url))
            return httpx.Response(answer.status_code, content=answer.content)
        if request.url.path == "/workers":
            return httpx.Response(200, json={"workers": listed, "total": len(listed)})
        return httpx.Response(200, text=flat(len(listed), len(listed)))

    return handler


def test_preflight_refuses_a_running_router_that_lists_a_stranger_before_touching_a_host(tmp_path: Path) -> None:
    """A router whose command line or env file names a worker the inventory lacks fails every trial
    (each restart brings it back): preflight, which already asks a running router to answer, reads
    its list too and refuses at once (exit 2, nothing edited, nothing restarted), instead of the
    sweep editing the hosts and restarting the router trial after trial until it stops."""
    b = multi_bed(tmp_path, INVENTORY, ENVS)
    listed = [{"url": url, "worker_type": role} for role, urls in INSTANCES.items() for url in urls]
    matrix = make_matrix({"overlap": {"env": {"decode": "OVERLAP"}, "levels": ["1", "0"]}})
    plan = make_plan(matrix, b.deployment.testbed, seed=1, order="sequential")
    with httpx.Client(transport=httpx.MockTransport(_router_listing(listed, b.client)), timeout=2.0) as client:
        assert preflight(b.deployment, plan, client=client) == []  # the inventory's own workers: fine
    stranger = [*listed, {"url": "http://10.9.0.7:30002", "worker_type": "decode"}]
    with httpx.Client(transport=httpx.MockTransport(_router_listing(stranger, b.client)), timeout=2.0) as client:
        with pytest.raises(PreflightError) as info:
            preflight(b.deployment, plan, client=client)
    assert "router lists decode worker http://10.9.0.7:30002, which is not one of the inventory's" in str(info.value)
    assert all(b.transports[k].files[h.host.env_file] == b.originals[k] for k, h in b.deployment.hosts.items())
    assert not any(m.restarts() for m in b.managers.values())


def test_preflight_does_not_ask_a_router_polled_on_health_for_its_workers(tmp_path: Path) -> None:
    """Only a router polled on /readiness is taken for an SGLang router whose worker list orch
    checks; one on /health (any router, maybe no /workers at all) gets the lint warning alone,
    not a refusal from a list it was never promised to keep."""
    b = multi_bed(tmp_path, INVENTORY.replace("30001/readiness", "30001/health"), ENVS)
    listed = [{"url": url, "worker_type": role} for role, urls in INSTANCES.items() for url in urls]
    stranger = [*listed, {"url": "http://10.9.0.7:30002", "worker_type": "decode"}]
    asked: list[str] = []
    listing = _router_listing(stranger, b.client)

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return listing(request)

    with httpx.Client(transport=httpx.MockTransport(handler), timeout=2.0) as client:
        warnings = preflight(b.deployment, client=client)
    assert len(warnings) == 1 and "answers 200 even with every worker down" in warnings[0]
    assert "/workers" not in asked


def test_a_trial_record_writes_unchecked_only_when_a_check_was_skipped() -> None:
    """An older orch refuses a journal line with a field it does not know (extra="forbid"), so a
    trial whose checks all ran writes no `unchecked` key; one with a skipped check names it."""
    stamp = "2026-01-01T00:00:00Z"
    fields = {"run_id": "r", "trial": 0, "round": 0, "cell": "c", "levels": {}, "testbed": "t", "status": "completed"}
    plain = TrialRecord(**fields, started=stamp, ended=stamp, duration_s=1.0)
    assert "unchecked" not in json.loads(plain.model_dump_json())
    skipped = plain.model_copy(update={"unchecked": [f"router: {DP_COUNTS_UNCHECKED}"]})
    assert json.loads(skipped.model_dump_json())["unchecked"] == [f"router: {DP_COUNTS_UNCHECKED}"]
