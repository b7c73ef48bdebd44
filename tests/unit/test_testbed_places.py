"""Testbeds whose units' command lines differ only where they listen are copies (report.hostfacts
_placeless); what else differs is still a caution. The eighth mutation round: a fact other than
the command line read through the place rules, and a container image's tag read as a host:port.
Pure: manifests in memory."""

from __future__ import annotations

import pytest
from helpers.manifests import planned

from orchestrator.core.records import RunManifest
from orchestrator.report.hostfacts import host_fact_findings


@pytest.fixture(scope="module")
def base() -> RunManifest:
    return planned()[1]


def _beds(base: RunManifest, key: str, a: str, b: str) -> RunManifest:
    hosts = {"A": {"decode": {key: a}}, "B": {"decode": {key: b}}}
    return base.model_copy(update={"testbeds": ["A", "B"], "testbed_hosts": hosts})


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("nvcr.io/nvidia/tritonserver:24.05-py3", "nvcr.io/nvidia/tritonserver:25.05-py3"),
        ("registry.local:5000/sglang:7", "registry.local:5000/sglang:8"),
        ("sglang:24", "sglang:25"),  # an image named without a path: no dot, a port below 1024
    ],
)
def test_two_container_images_are_a_difference_not_a_place(base: RunManifest, a: str, b: str) -> None:
    """`IMAGE:24.05` is no host:port: two testbeds running another release of the server were
    called copies (the tag read as a port and taken out with it)."""
    m = _beds(base, "exec_start", f"docker run --rm {a} --port 30000", f"docker run --rm {b} --port 30010")
    [said] = [f.text for f in host_fact_findings(m)]
    assert said.startswith("Testbeds are not copies: the decode role's units' command line differed: ")
    assert a in said and b in said, said


def test_the_command_lines_places_are_still_taken_out_beside_an_image(base: RunManifest) -> None:
    """The same image on both, each listening and finding its peer elsewhere: copies."""
    image = "docker run nvcr.io/nvidia/tritonserver:24.05-py3"
    m = _beds(
        base,
        "exec_start",
        f"{image} --port 30000 --peer 10.0.0.1:5000 --bootstrap http://10.0.0.1:8998/",
        f"{image} --port 30010 --peer 10.0.0.2:5000 --bootstrap http://10.0.0.2:8998/",
    )
    assert host_fact_findings(m) == []


@pytest.mark.parametrize(
    ("a", "b"),
    [("prefill-a:30000", "prefill-b:30000"), ("localhost:8", "localhost:9"), ("node1.lan:22", "node2.lan:22")],
)
def test_a_host_port_is_still_a_place(base: RunManifest, a: str, b: str) -> None:
    """A word that reads as an address (a name with a port of 1024 and above, localhost, a dotted
    name) is where a server finds its peer: two copies differ there by design."""
    m = _beds(base, "exec_start", f"sim-server --peer {a} --mode pd", f"sim-server --peer {b} --mode pd")
    assert host_fact_findings(m) == []


def test_a_fact_other_than_the_command_line_is_compared_as_recorded(base: RunManifest) -> None:
    """Only the units' command line says where a server listens: a server version that reads as a
    URL (or host:port) and differs there is a difference, said as recorded."""
    a, b = "https://example.org/sglang/releases/v0.4.1", "https://example.org/sglang/releases/v0.4.2"
    [said] = [f.text for f in host_fact_findings(_beds(base, "server_version", a, b))]
    assert said.startswith("Testbeds are not copies: the decode role's server version differed: "), said
    assert "releases/v0.4.1' on A" in said and "releases/v0.4.2' on B" in said, said
