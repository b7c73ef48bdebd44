"""A router that registers workers the inventory does not have (a teammate's server added through
its worker API, a stale registration, an extra `--decode URL` on its command line) would serve part
of the repro with a server orch never started: the trial must not count. The bodies below are
sglang-router 0.3.2's own, captured in front of the simulator's workers (ids and ports as they
came); the real router itself is met in tests/sim/test_real_router.py."""

from __future__ import annotations

import json

import httpx
import pytest

from orchestrator.core.routerworkers import (
    Registered,
    command_workers,
    dp_aware,
    endpoint,
    excess_problem,
    registered_workers,
    strangers,
    strangers_message,
)
from orchestrator.edges.health import HealthCheck, probe_url, wait_all, wait_ready
from orchestrator.edges.registrations import router_strangers
from orchestrator.errors import IdentityError

# GET /workers of a PD router (--prefill http://127.0.0.1:51359 BOOTSTRAP --decode http://127.0.0.1:36793),
# after POST /workers {"url": "http://127.0.0.1:42597", "worker_type": "decode"} (answered 202); its
# /readiness then said {"status":"ready","healthy_workers":3,"total_workers":3}.
PD_WITH_ADDED = (
    '{"workers":[{"id":"a27f418f-6454-4e98-b963-79a48443e786","url":"http://127.0.0.1:51359","model_id":"unknown",'
    '"priority":50,"cost":1.0,"worker_type":"prefill","is_healthy":true,"load":0,"connection_mode":"HTTP",'
    '"bootstrap_port":55643,"metadata":{"dp_size":"1","model_type":"sim-dsv4","disaggregation_mode":"prefill",'
    '"tp_size":"1"},"disable_health_check":false},{"id":"6e097b62-2140-493f-aa5e-05bbcce95eb1",'
    '"url":"http://127.0.0.1:36793","model_id":"unknown","priority":50,"cost":1.0,"worker_type":"decode",'
    '"is_healthy":true,"load":0,"connection_mode":"HTTP","metadata":{"dp_size":"1","disaggregation_mode":"decode",'
    '"tp_size":"1","model_type":"sim-dsv4"},"disable_health_check":false},{"id":"11d0ed69-f3e9-471e-a9c6-fb8f2e7dc524",'
    '"url":"http://127.0.0.1:42597","model_id":"unknown","priority":50,"cost":1.0,"worker_type":"decode",'
    '"is_healthy":true,"load":0,"connection_mode":"HTTP","metadata":{"disaggregation_mode":"decode","tp_size":"1",'
    '"dp_size":"1","model_type":"sim-dsv4"},"disable_health_check":false}],"total":3,'
    '"stats":{"prefill_count":1,"decode_count":2,"regular_count":0}}'
)
PD = {"prefill": ("http://127.0.0.1:51359",), "decode": ("http://127.0.0.1:36793",)}
# GET /workers of a regular router (--worker-urls http://127.0.0.1:60313/ http://localhost:33927): it keeps
# each URL as written, the trailing slash and `localhost` included.
REGULAR = (
    '{"workers":[{"id":"89a1b40d-6746-4728-a784-7603087287b1","url":"http://127.0.0.1:60313/","model_id":"unknown",'
    '"priority":50,"cost":1.0,"worker_type":"regular","is_healthy":true,"load":0,"connection_mode":"HTTP",'
    '"metadata":{"tp_size":"1","disaggregation_mode":"decode","model_type":"sim-dsv4","dp_size":"1"},'
    '"disable_health_check":false},{"id":"9c39a256-e7e6-4a67-b9a0-ca2ed338329b","url":"http://localhost:33927",'
    '"model_id":"unknown","priority":50,"cost":1.0,"worker_type":"regular","is_healthy":true,"load":0,'
    '"connection_mode":"HTTP","metadata":{"tp_size":"1","dp_size":"1","model_type":"sim-dsv4",'
    '"disaggregation_mode":"decode"},"disable_health_check":false}],"total":2,'
    '"stats":{"prefill_count":0,"decode_count":0,"regular_count":2}}'
)


def test_the_real_routers_list_names_the_worker_added_through_its_api() -> None:
    listed = registered_workers(json.loads(PD_WITH_ADDED))
    assert listed == (
        Registered("http://127.0.0.1:51359", "prefill"),
        Registered("http://127.0.0.1:36793", "decode"),
        Registered("http://127.0.0.1:42597", "decode"),
    )
    found = strangers(listed, PD)
    assert found == (Registered("http://127.0.0.1:42597", "decode"),)
    assert strangers_message(found, PD) == (
        "lists decode worker http://127.0.0.1:42597, which is not one of the inventory's instances "
        "(prefill http://127.0.0.1:51359, decode http://127.0.0.1:36793)"
    )
    with_it = {**PD, "decode": (*PD["decode"], "http://localhost:42597/")}  # the inventory has it: no stranger
    assert strangers(listed, with_it) == ()


def test_urls_as_the_router_keeps_them_match_the_inventorys() -> None:
    listed = registered_workers(json.loads(REGULAR))
    assert listed is not None and [w.kind for w in listed] == ["regular", "regular"]
    inventory = {"decode": ("http://localhost:60313", "http://127.0.0.1:33927/")}
    assert strangers(listed, inventory) == ()  # `regular` is no role: compared with every instance
    assert strangers(listed, {"decode": ("http://127.0.0.1:60313",)}) == (listed[1],)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://127.0.0.1:30002", ("loopback", 30002)),
        ("http://localhost:30002/", ("loopback", 30002)),
        ("http://[::1]:30002", ("loopback", 30002)),
        ("http://[::ffff:127.0.0.1]:30002", ("loopback", 30002)),  # core.endpoints: one loopback rule
        ("http://localhost.:30002", ("loopback", 30002)),
        ("HTTP://GPU1.lab:30002", ("gpu1.lab", 30002)),
        ("http://10.0.0.4", ("10.0.0.4", 80)),
        ("https://10.0.0.4/", ("10.0.0.4", 443)),
        ("10.0.0.4:30002", ("10.0.0.4", 30002)),
        ("http://10.0.0.4:30002@3", ("10.0.0.4", 30002)),  # a DP-aware router's worker of rank 3
        ("http://:30002", None),
        ("http://10.0.0.4:99999", None),
    ],
)
def test_endpoints(url: str, key: tuple[str, int] | None) -> None:
    assert endpoint(url) == key


def test_a_name_and_its_address_are_one_host_when_the_caller_resolved_it() -> None:
    listed = (Registered("http://10.0.0.4:30002", "decode"),)
    inventory = {"decode": ("http://gpu1:30002",)}
    assert strangers(listed, inventory) == listed
    assert strangers(listed, inventory, {"gpu1": frozenset({"10.0.0.4"})}) == ()
    assert strangers(listed, inventory, {"gpu1": frozenset({"10.0.0.5"})}) == listed


def test_a_worker_registered_under_another_role_is_a_stranger() -> None:
    listed = (Registered("http://127.0.0.1:36793", "prefill"),)
    assert strangers(listed, PD) == listed


@pytest.mark.parametrize("value", [None, [], {"status": "ready"}, {"workers": [{"id": "x"}]}, {"urls": [1]}])
def test_what_is_no_worker_list(value: object) -> None:
    assert registered_workers(value) is None


def test_the_older_list_workers_shape() -> None:
    assert registered_workers({"urls": ["http://a:1"]}) == (Registered("http://a:1"),)


@pytest.mark.parametrize(
    ("totals", "problem"),
    [
        ({"": 2}, None),
        ({"": 1}, None),  # fewer: the readiness wait's to judge (not ready yet)
        ({"": 3}, "registers 3 workers, the inventory has 2 instances behind it (prefill 1, decode 1)"),
        ({"prefill": 1, "decode": 2}, "registers 2 decode workers, the inventory has 1 decode instances"),
        ({"p": 1, "d": 2}, "registers 3 workers, the inventory has 2 instances behind it (prefill 1, decode 1)"),
        ({}, None),
    ],
)
def test_a_router_that_gives_only_counts(totals: dict[str, int], problem: str | None) -> None:
    assert excess_problem(totals, {"prefill": 1, "decode": 1}) == problem


def test_a_dp_aware_routers_counts_are_ranks_and_not_compared() -> None:
    """--dp-aware registers one worker per DP rank: 4 ranks x (1 prefill + 1 decode) = 8, which
    the count check called a stranger's. Its counts are not compared (the trial record says so)."""
    expected = {"prefill": 1, "decode": 1}
    assert excess_problem({"": 8}, expected) is not None  # as a router that is not DP-aware: too many
    assert excess_problem({"": 8}, expected, dp_ranks=True) is None
    assert excess_problem({"prefill": 4, "decode": 4}, expected, dp_ranks=True) is None


@pytest.mark.parametrize(
    ("commands", "values", "aware"),
    [
        ([["python", "-m", "sglang_router.launch_router", "--dp-aware", "--port", "30001"]], [], True),
        ([["sglang-router"]], ["--pd-disaggregation --dp-aware"], True),  # in a value ExecStart expands
        ([["sglang-router", "--dp-aware=true"]], [], True),
        ([["sglang-router", "--dp-aware-x"]], ["--no-dp-aware", "dp-aware"], False),
        ([], [], False),
    ],
)
def test_a_dp_aware_router_is_known_by_its_command_or_env_file(
    commands: list[list[str]], values: list[str], aware: bool
) -> None:
    assert dp_aware(commands, values) is aware


@pytest.mark.parametrize(
    ("commands", "count"),
    [
        # the real test's router: its prefill (a bootstrap port after it), its decode, a third decode
        (
            [
                [
                    "python", "-m", "sglang_router.launch_router", "--pd-disaggregation", "--prefill",
                    "http://127.0.0.1:51359", "55643", "--decode", "http://127.0.0.1:36793", "--decode",
                    "http://localhost:42597/", "--host", "127.0.0.1", "--port", "30001",
                ]
            ],
            3,
        ),
        ([["sglang-router", "--worker-urls", "http://127.0.0.1:60313/", "http://localhost:33927", "--port", "1"]], 2),
        ([["r", "--decode=http://a:1", "--decode", "http://127.0.0.1:2", "--prefill", "http://localhost:2/"]], 2),
        ([["r", "--prefill", "http://a:1", "--port", "30001"], ["r", "--decode", "http://b:2"]], 2),  # two units
        ([["r", "--decode", "--port", "30001"], ["r", "--worker-urls"]], 0),  # a flag without a URL
        ([["python", "-m", "sglang_router.launch_router", "--service-discovery"]], 0),
        ([], 0),
    ],
)  # fmt: skip
def test_the_workers_a_routers_command_line_gives_it(commands: list[list[str]], count: int) -> None:
    assert command_workers(commands) == count


READINESS = "http://127.0.0.1:30001/readiness"
INSTANCES = (("prefill", PD["prefill"]), ("decode", PD["decode"]))


class Router:
    """A ready router: /readiness answers `readiness`, /workers `workers` (None: 404); logs paths."""

    def __init__(self, readiness: str, workers: str | None) -> None:
        self.readiness, self.workers, self.log = readiness, workers, []  # type: str, str | None, list[str]

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.log.append(path)
        if path == "/readiness":
            return httpx.Response(200, text=self.readiness)
        if path == "/generate":
            return httpx.Response(200, json={"text": "ok"})
        if path == "/workers" and self.workers is not None:
            return httpx.Response(200, text=self.workers)
        return httpx.Response(404)


def _check(timeout: float = 2.0) -> HealthCheck:
    workers = (("prefill", 1), ("decode", 1))
    return HealthCheck("router", READINESS, timeout, probe=probe_url(READINESS), workers=workers, instances=INSTANCES)


THREE = json.dumps({"status": "ready", "healthy_workers": 3, "total_workers": 3})


def test_a_ready_router_with_a_stranger_ends_the_wait_at_once_naming_it() -> None:
    router = Router(THREE, PD_WITH_ADDED)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client, pytest.raises(IdentityError) as info:
        wait_all([_check(timeout=30.0)], client=client)
    message = str(info.value)
    assert message.startswith(
        "router lists decode worker http://127.0.0.1:42597, which is not one of the inventory's instances "
        "(prefill http://127.0.0.1:51359, decode http://127.0.0.1:36793) (the trial is void:"
    ), message
    assert info.value.roles == ("router",) and info.value.kind == "infrastructure" and info.value.exit_code == 1
    assert router.log == ["/readiness", "/workers"]  # no generate, no wait for a timeout


def test_a_router_listing_only_the_inventorys_instances_is_ready() -> None:
    two = json.loads(PD_WITH_ADDED)
    two["workers"] = two["workers"][:2]
    router = Router(json.dumps({"status": "ready", "healthy_workers": 2, "total_workers": 2}), json.dumps(two))
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        wait_ready(_check(), client=client)
    assert router.log == ["/readiness", "/workers", "/generate"]


def test_a_router_without_a_list_is_judged_by_its_counts() -> None:
    router = Router(THREE, None)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client, pytest.raises(IdentityError) as info:
        wait_ready(_check(), client=client)
    assert str(info.value).startswith(
        "router registers 3 workers, the inventory has 2 instances behind it (prefill 1, decode 1) (the trial is void:"
    )
    assert router.log == ["/readiness", "/workers", "/list_workers"]  # the counts: its last readiness answer


def test_a_router_that_says_nothing_of_its_workers_passes() -> None:
    router = Router(json.dumps({"status": "ready"}), None)  # the simulator's stand-in router
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        wait_ready(_check(), client=client)
    assert router.log[-1] == "/generate"


def test_a_stale_stranger_that_keeps_the_router_from_ready_is_named_at_once() -> None:
    """A registration of a server that is gone (on another port): the router says 2/3 healthy and
    would never turn ready; the wait names the stranger at its first look instead of timing out."""
    router = Router(json.dumps({"status": "ready", "healthy_workers": 2, "total_workers": 3}), PD_WITH_ADDED)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client, pytest.raises(IdentityError) as info:
        wait_ready(_check(timeout=1.0), client=client)
    assert str(info.value).startswith("router lists decode worker http://127.0.0.1:42597, which is not one of")
    assert router.log == ["/readiness", "/workers"]


def test_a_held_back_router_has_its_list_read_once_per_answer_not_at_every_poll() -> None:
    """A worker still warming up holds the router at 1/2 healthy for minutes, polled every 10 ms
    around its expected ready time: the list is read when that answer first comes (a stale
    stranger is named at once) and again once it is ready, not beside every poll."""
    two = json.loads(PD_WITH_ADDED)
    two["workers"] = two["workers"][:2]
    held = json.dumps({"status": "ready", "healthy_workers": 1, "total_workers": 2})
    ready = json.dumps({"status": "ready", "healthy_workers": 2, "total_workers": 2})
    router = Router(held, json.dumps(two))
    answers = [held] * 6 + [ready]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readiness":
            router.readiness = answers.pop(0) if len(answers) > 1 else answers[0]
        return router.handler(request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        wait_ready(_check(), client=client, poll_initial_s=0.001, poll_max_s=0.002)
    assert router.log.count("/readiness") == 7
    assert router.log.count("/workers") == 2, router.log  # at the first held-back answer, and at ready


@pytest.mark.parametrize(
    ("router_host", "stranger"),
    [(("10.0.0.4",), False), (("10.0.0.1", "10.0.0.4"), False), ((), True), (("10.0.0.9",), True)],
)
def test_a_worker_on_the_routers_own_loopback_is_the_instance_on_its_machine(
    router_host: tuple[str, ...], stranger: bool
) -> None:
    """The router runs on the decode machine (10.0.0.4) and reaches decode as http://127.0.0.1:30002:
    that is the inventory's http://10.0.0.4:30002, but only on that machine."""
    listed = {"workers": [{"url": "http://127.0.0.1:30002", "worker_type": "decode"}]}
    router = Router(json.dumps({"status": "ready", "healthy_workers": 1, "total_workers": 1}), json.dumps(listed))
    instances = {"decode": ("http://10.0.0.4:30002",)}
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        problem = router_strangers(client, READINESS, instances, {}, router_host)
    assert (problem is not None) == stranger, problem


def test_a_worker_list_orch_cannot_read_fails_the_check_rather_than_fall_back_to_counts() -> None:
    """A router whose list is too large (or too slow) to read proves nothing about who serves: the
    error is raised (the trial fails, naming it), never read as "no list" and judged by counts that
    would pass. A path the router does not have (404) is no list: the next path, then the counts.
    (The red team: a 15,000-worker list failed its trial, as this says; the docstring said None.)"""
    from orchestrator.edges.httpread import MAX_JSON_BYTES, AnswerTooLarge

    huge = json.dumps({"workers": [{"url": "http://10.0.0.9:30002"}]}).encode() + b" " * MAX_JSON_BYTES

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/workers", "/list_workers"):
            return httpx.Response(200, content=huge)
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(AnswerTooLarge):
        router_strangers(client, "http://127.0.0.1:30001/readiness", {"decode": ["http://127.0.0.1:30002"]}, {})
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404))) as client:
        assert (
            router_strangers(client, "http://127.0.0.1:30001/readiness", {"decode": ["http://127.0.0.1:30002"]}, {})
            is None
        )
