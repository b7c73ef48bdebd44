"""edges.registrations: the router's worker list against the inventory when a host is named one way
there and the other way here (a name and its address), the router's own names, a listed URL with
no host, and the count check's default. Name resolution is faked (socket.getaddrinfo replaced, the
module's cache cleared): no lookup leaves the test. Mutation survivors of edges/registrations.py
(bench/README.md, round ten): tests/unit/test_router_workers.py uses IP literals and loopback only,
so nothing there is ever resolved."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.core.routerworkers import MAX_WORKERS
from orchestrator.edges import registrations
from orchestrator.edges.registrations import router_strangers

READINESS = "http://10.0.0.1:30001/readiness"
NAMES = {"decode-host.lan": "10.0.0.4", "router-host.lan": "10.0.0.4", "other.lan": "10.0.0.9"}


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every host looked up; NAMES resolve, anything else does not."""
    asked: list[str] = []

    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        asked.append(host)
        if host not in NAMES:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (NAMES[host], 0))]

    registrations._resolve.cache_clear()
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield asked
    registrations._resolve.cache_clear()


def _listing(*urls: str, kind: str = "decode") -> httpx.Client:
    body = json.dumps({"workers": [{"url": u, "worker_type": kind} for u in urls]})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/workers":
            return httpx.Response(200, text=body)
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("listed", "inventory"),
    [
        ("http://decode-host.lan:30002", "http://10.0.0.4:30002"),
        ("http://10.0.0.4:30002", "http://decode-host.lan:30002"),
    ],
    ids=["router-uses-the-name", "inventory-uses-the-name"],
)
def test_a_name_and_its_address_are_one_worker(lookups: list[str], listed: str, inventory: str) -> None:
    with _listing(listed) as client:
        assert router_strangers(client, READINESS, {"decode": [inventory]}, {}) is None
    assert lookups == ["decode-host.lan"]  # the name only: an address is never looked up


def test_a_name_that_resolves_elsewhere_is_a_stranger(lookups: list[str]) -> None:
    with _listing("http://other.lan:30002") as client:
        problem = router_strangers(client, READINESS, {"decode": ["http://10.0.0.4:30002"]}, {})
    assert problem is not None and problem.startswith("lists decode worker http://other.lan:30002, which is not")
    assert lookups == ["other.lan"]


def test_a_worker_on_loopback_is_the_instance_on_the_router_host_named_by_name(lookups: list[str]) -> None:
    """The router's machine given by its name (router-host.lan, which is 10.0.0.4): a worker the router
    reaches on its loopback is the inventory's 10.0.0.4 instance. Loopback itself is never looked up."""
    with _listing("http://127.0.0.1:30002") as client:
        problem = router_strangers(client, READINESS, {"decode": ["http://10.0.0.4:30002"]}, {}, ("router-host.lan",))
    assert problem is None
    assert lookups == ["router-host.lan"]
    with _listing("http://127.0.0.1:30002") as client:  # another machine's name: a stranger
        assert router_strangers(client, READINESS, {"decode": ["http://10.0.0.4:30002"]}, {}, ("other.lan",))


def test_a_listed_url_naming_no_host_is_a_stranger_not_a_crash(lookups: list[str]) -> None:
    with _listing("http://:30002") as client:
        problem = router_strangers(client, READINESS, {"decode": ["http://127.0.0.1:30002"]}, {})
    assert problem is not None and problem.startswith("lists decode worker http://:30002, which is not")
    assert lookups == []


def test_counts_are_compared_unless_the_caller_says_the_router_is_dp_aware() -> None:
    """A router with no list: its counts against the inventory's; `dp_ranks` defaults to False (a
    caller that says nothing gets the check, not its waiver)."""
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404))) as client:
        problem = router_strangers(client, READINESS, {"decode": ["http://10.0.0.4:30002"]}, {"decode": 2})
        assert problem == "registers 2 decode workers, the inventory has 1 decode instances"
        assert (
            router_strangers(client, READINESS, {"decode": ["http://10.0.0.4:30002"]}, {"decode": 2}, dp_ranks=True)
            is None
        )


@pytest.mark.parametrize("shape", ["workers", "urls"])
def test_a_stranger_past_the_workers_orch_reads_is_not_missed(shape: str) -> None:
    """core.routerworkers reads at most MAX_WORKERS of a list. Before, the rest was dropped unread: a
    list of 4,096 entries of the inventory's own worker and then a teammate's server (well inside the
    1 MiB answer bound: ~120 KB) passed as "no stranger". A list longer than orch reads now proves
    nothing about who serves, as one too large to read: the check fails, naming it. A list of
    exactly MAX_WORKERS is read whole."""
    ours, theirs = "http://10.0.0.4:30002", "http://10.0.0.9:30002"

    def answer(urls: list[str]) -> str:
        if shape == "urls":
            return json.dumps({"urls": urls})
        return json.dumps({"workers": [{"url": u, "worker_type": "decode"} for u in urls]})

    def check(urls: list[str]) -> str | None:
        body = answer(urls)
        path = "/workers" if shape == "workers" else "/list_workers"

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, text=body) if request.url.path == path else httpx.Response(404)

        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            return router_strangers(client, READINESS, {"decode": [ours]}, {})

    assert check([ours] * MAX_WORKERS) is None
    problem = check([ours] * MAX_WORKERS + [theirs])
    assert problem is not None
    assert problem.startswith("lists 4,097 workers or more, more than the 4,096 orch reads")  # README's number
    assert check([ours] * (MAX_WORKERS - 1) + [theirs]) is not None  # inside the bound: named as ever
