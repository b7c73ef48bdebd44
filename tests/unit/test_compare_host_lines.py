"""`orch compare` names which of a role's host facts differed, not the whole host line cut short.

run.json's host lines hold where a role ran (address, transport, env file, dialect, units, health
URL: store.planrecord) and what orch found there (the units' command line, the server's info and
version, the env file's sha256 as the run began: edges.provenance.describe_host). Compare quoted
all of it as one text cut at 160 characters, under "the role ran on": a command line or an env
file's hash that differed read as another host, and was cut off past the 160th character. Now a
role whose host facts differ says which facts, each as it was in A and in B."""

from __future__ import annotations

import pytest
from helpers.manifests import planned

from orchestrator.core.records import RunManifest
from orchestrator.report.unlike import unlike

LONG = "/usr/bin/python -m sglang.launch_server --model-path /models/deepseek-v4 --tp 8 --dp 8 --enable-dp-attention "


def with_host(m: RunManifest, role: str, **facts: str) -> RunManifest:
    hosts = {r: dict(h) for r, h in m.hosts.items()}
    hosts[role].update(facts)
    return m.model_copy(update={"hosts": hosts})


@pytest.fixture(scope="module")
def base() -> RunManifest:
    """An ended run's (a running one has recorded no host fact yet: report.unlike says so once)."""
    return planned()[1].model_copy(update={"status": "completed"})


def host_lines(a: RunManifest, b: RunManifest) -> list[str]:
    return [line for line in unlike(a, b).context if line.startswith("the decode role")]


def test_a_command_line_that_differs_past_the_cut_is_named_with_its_difference(base: RunManifest) -> None:
    """The two command lines differ only at their end (--mem-fraction-static): said whole enough to
    see it, under the fact's name, not as another host."""
    a = with_host(base, "decode", exec_start=LONG + "--mem-fraction-static 0.80")
    b = with_host(base, "decode", exec_start=LONG + "--mem-fraction-static 0.85")
    (line,) = host_lines(a, b)
    assert line.startswith("the decode role's units' command line differed: ")
    assert "0.80" in line and "0.85" in line
    assert "ran on" not in line and "address=" not in line


def test_each_differing_fact_is_named_once_and_alike_facts_are_not(base: RunManifest) -> None:
    a = with_host(base, "decode", address="10.0.0.1", env_sha256_before="a" * 64)
    b = with_host(base, "decode", address="10.0.0.2", env_sha256_before="b" * 64)
    (line,) = host_lines(a, b)
    assert line == (
        "the decode role's address differed: '10.0.0.1' in A, '10.0.0.2' in B; "
        f"its env file as the run began (sha256) differed: '{'a' * 64}' in A, '{'b' * 64}' in B"
    )
    assert "dialect" not in line and "health" not in line  # alike in both


def test_a_fact_one_run_has_not_recorded_is_said_so(base: RunManifest) -> None:
    a = with_host(base, "decode", server_version="0.5.4")
    (line,) = host_lines(a, base)
    assert line == "the decode role's server version differed: '0.5.4' in A, not recorded in B"


def test_same_host_facts_say_nothing(base: RunManifest) -> None:
    assert host_lines(base, base) == []
