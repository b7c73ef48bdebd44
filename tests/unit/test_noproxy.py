"""What orch adds to the environment of what it starts here when a proxy is set: the loopback
names in NO_PROXY and no_proxy, nothing else (tests/sim/test_real_router.py runs the real router
behind a proxy that is not there)."""

from __future__ import annotations

import pytest

from orchestrator.core.noproxy import loopback_unproxied

LOOP = "127.0.0.1,localhost,::1"


def test_without_a_proxy_nothing_changes() -> None:
    env = {"PATH": "/bin", "NO_PROXY": "corp.example"}
    assert loopback_unproxied(env) == env and loopback_unproxied({}) == {}
    assert loopback_unproxied({"http_proxy": ""}) == {"http_proxy": ""}  # set but empty: no proxy


@pytest.mark.parametrize("var", ["http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"])
def test_any_proxy_gets_the_loopback_added_under_both_spellings(var: str) -> None:
    env = {var: "http://proxy.corp:3128", "PATH": "/bin"}
    got = loopback_unproxied(env)
    assert got == {**env, "NO_PROXY": LOOP, "no_proxy": LOOP}
    assert env == {var: "http://proxy.corp:3128", "PATH": "/bin"}  # the caller's mapping untouched


def test_names_given_in_either_spelling_are_kept_once_and_first() -> None:
    env = {"HTTPS_PROXY": "http://p:1", "no_proxy": "corp.example, localhost", "NO_PROXY": ".lab,corp.example"}
    got = loopback_unproxied(env)
    assert got["NO_PROXY"] == got["no_proxy"] == "corp.example,localhost,.lab,127.0.0.1,::1"


def test_a_star_already_covers_every_address() -> None:
    env = {"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}
    assert loopback_unproxied(env) == env
